"""The real Codex CLI (``@openai/codex``, installed by ``codex.sh``), run headless against a fake
model: ``codex exec`` with a throwaway ``CODEX_HOME`` that holds

* ``config.toml``: a ``[model_providers.fake]`` entry (``base_url`` = the fake model's ``/v1``,
  ``wire_api = "responses"``, the key read from ``env_key``), selected by ``model_provider``;
* ``hooks.json``: command hooks, ``{"hooks": {"PreToolUse": [{"matcher": "*", "hooks":
  [{"type": "command", "command": ..., "timeout": seconds}]}], ...}}``.

Hooks from the user's config layer only run once their hash is trusted (``[hooks.state]`` in
``config.toml``, written when the user reviews them in the TUI); ``codex exec`` skips untrusted
hooks without a word. The runs here pass ``--dangerously-bypass-hook-trust`` instead, and
``--dangerously-bypass-approvals-and-sandbox`` so shell commands run without prompts or sandbox.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.integration.runtimes.process import Cli, CliRun, Finished, command_hooks, install

__all__ = ["Codex", "CodexRun", "hooks_file"]

HERE = Path(__file__).resolve().parent
API_KEY_ENV = "LOOPWATCH_FAKE_OPENAI_KEY"


def hooks_file(hooks: Mapping[str, Sequence[str]], timeout_s: int = 60) -> dict[str, Any]:
    """``hooks.json`` for command hooks: event name (``PreToolUse``, ...) to the commands it runs."""
    return {"hooks": command_hooks(hooks, matcher="*", timeout=timeout_s)}


def config_toml(base_url: str, model: str = "fake-model") -> str:
    return (
        f'model = "{model}"\n'
        'model_provider = "fake"\n'
        "\n"
        "[model_providers.fake]\n"
        'name = "fake model on localhost"\n'
        f'base_url = "{base_url}"\n'
        f'env_key = "{API_KEY_ENV}"\n'
        'wire_api = "responses"\n'
    )


class CodexRun(CliRun):
    """One ``codex exec --json`` run: the process and its JSONL events."""

    def items(self, item_type: str) -> list[dict[str, Any]]:
        """The completed items of a type (``command_execution``, ``agent_message``, ``error``)."""
        return [
            event["item"]
            for event in self.events
            if event.get("type") == "item.completed" and event.get("item", {}).get("type") == item_type
        ]


@dataclass
class Codex(Cli[CodexRun]):
    """``codex exec`` with ``home/.codex`` as ``CODEX_HOME`` (and ``home`` as ``HOME``)."""

    binary: str
    own_env_prefixes = ("CODEX_", "OPENAI_")
    own_env_names = ("RUST_LOG",)

    @classmethod
    def install(cls) -> Codex:
        """Install the pinned Codex CLI once (``codex.sh``)."""
        return cls(install(HERE / "codex.sh")[-1])

    def configure(self, home: Path, base_url: str, hooks: Mapping[str, Sequence[str]] | None) -> Path:
        codex_home = home / ".codex"
        codex_home.mkdir(parents=True, exist_ok=True)
        (codex_home / "config.toml").write_text(config_toml(base_url))
        if hooks:
            (codex_home / "hooks.json").write_text(json.dumps(hooks_file(hooks), indent=2))
        return codex_home

    def environment(self, home: Path, cli_home: Path, base_url: str) -> dict[str, str]:
        return {"HOME": str(home), "CODEX_HOME": str(cli_home), "NO_COLOR": "1", API_KEY_ENV: "fake-key"}

    def arguments(self, workdir: Path, prompt: str, extra_args: Sequence[str]) -> list[str]:
        return [
            self.binary,
            "exec",
            "--json",
            "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox",
            "--dangerously-bypass-hook-trust",
            "--color",
            "never",
            "-C",
            str(workdir),
            *extra_args,
            prompt,
        ]

    def finished_run(self, finished: Finished, cli_home: Path) -> CodexRun:
        return CodexRun(finished, cli_home)
