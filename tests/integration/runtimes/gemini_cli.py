"""The real Gemini CLI (``@google/gemini-cli``, installed with its Node.js by ``gemini.sh``), run
headless against a fake model: ``gemini -p PROMPT --approval-mode yolo --skip-trust -o
stream-json`` with a throwaway ``HOME`` whose ``.gemini/settings.json`` holds

* ``security.auth.selectedType = "gemini-api-key"`` (with ``GEMINI_API_KEY`` set). The model is
  found through ``GOOGLE_GEMINI_BASE_URL``; that variable alone would select the "gateway" auth
  type, which headless start-up refuses ("Invalid auth method selected.", exit 41);
* ``hooks``: ``{"BeforeTool": [{"matcher": ".*", "hooks": [{"type": "command", "command": ...,
  "timeout": milliseconds}]}], "AfterTool": [...]}``;
* ``model.disableLoopDetection = true``: Gemini CLI's own loop detection stops a turn at the 5th
  identical tool call ("Loop detected, stopping execution"), which would hide loopwatch's;
* telemetry, usage statistics and update checks off.

Hooks only run in a trusted folder (``--skip-trust`` or ``GEMINI_CLI_TRUST_WORKSPACE=true``);
headless in an untrusted folder exits 55.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.integration.runtimes.process import Cli, CliRun, Finished, command_hooks, install

__all__ = ["Gemini", "GeminiRun", "settings"]

HERE = Path(__file__).resolve().parent
MODEL = "gemini-2.5-flash"


def settings(hooks: Mapping[str, Sequence[str]] | None = None, timeout_ms: int = 60_000) -> dict[str, Any]:
    """``settings.json``: event name (``BeforeTool``, ...) to the commands it runs, and quiet defaults."""
    result: dict[str, Any] = {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "model": {"disableLoopDetection": True},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
    }
    if hooks:
        result["hooks"] = command_hooks(hooks, matcher=".*", timeout=timeout_ms)
    return result


def _merged(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``extra`` merged in, objects merged key by key."""
    merged = dict(base)
    for key, value in extra.items():
        old = merged.get(key)
        merged[key] = (
            _merged(old, value) if isinstance(old, Mapping) and isinstance(value, Mapping) else value
        )
    return merged


class GeminiRun(CliRun):
    """One ``gemini -p -o stream-json`` run: the process and its JSONL events."""

    def of_type(self, event_type: str) -> list[dict[str, Any]]:
        """The events of a type (``tool_use``, ``tool_result``, ``message``, ``error``, ``result``)."""
        return [event for event in self.events if event.get("type") == event_type]


@dataclass
class Gemini(Cli[GeminiRun]):
    """``gemini -p`` with ``home`` as ``HOME``; ``extra_settings`` are merged into ``settings.json``
    (objects key by key)."""

    node: str
    entry: str
    extra_settings: Mapping[str, Any] = field(default_factory=dict)
    own_env_prefixes = ("GEMINI_", "GOOGLE_")

    @classmethod
    def install(cls) -> Gemini:
        """Install the pinned Gemini CLI and its Node.js once (``gemini.sh``)."""
        node, entry = install(HERE / "gemini.sh")[-2:]
        return cls(node, entry)

    def configure(self, home: Path, base_url: str, hooks: Mapping[str, Sequence[str]] | None) -> Path:
        gemini_dir = home / ".gemini"
        gemini_dir.mkdir(parents=True, exist_ok=True)
        (gemini_dir / "settings.json").write_text(
            json.dumps(_merged(settings(hooks), self.extra_settings), indent=2)
        )
        return gemini_dir

    def environment(self, home: Path, cli_home: Path, base_url: str) -> dict[str, str]:
        return {
            "HOME": str(home),
            "GEMINI_API_KEY": "fake-key",
            "GOOGLE_GEMINI_BASE_URL": base_url,
            "NO_COLOR": "1",
        }

    def arguments(self, workdir: Path, prompt: str, extra_args: Sequence[str]) -> list[str]:
        return [
            self.node,
            self.entry,
            "-p",
            prompt,
            "-m",
            MODEL,
            "--approval-mode",
            "yolo",
            "--skip-trust",
            "-o",
            "stream-json",
            *extra_args,
        ]

    def finished_run(self, finished: Finished, cli_home: Path) -> GeminiRun:
        return GeminiRun(finished, cli_home)
