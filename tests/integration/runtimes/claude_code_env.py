"""The environment an offline run of the real Claude Code gets in the tests: a home, a project
and a temporary folder of its own under the test's folder, the fake model as its API, and every
kind of traffic but the model's turned off."""

from __future__ import annotations

from pathlib import Path

__all__ = ["offline_claude_env"]


def offline_claude_env(workdir: Path, model_url: str) -> tuple[dict[str, str], Path]:
    """The variables of an offline Claude Code run under ``workdir``, and its project folder."""
    home, project, tmp = workdir / "home", workdir / "project", workdir / "tmp"
    for folder in (home, project, tmp):
        folder.mkdir(parents=True, exist_ok=True)
    env = {
        "HOME": str(home),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "TMPDIR": str(tmp),
        "CLAUDE_CODE_TMPDIR": str(tmp),
        "ANTHROPIC_BASE_URL": model_url,
        "ANTHROPIC_API_KEY": "offline-test-key",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
        "NO_COLOR": "1",
    }
    return env, project
