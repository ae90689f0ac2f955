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
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.integration.runtimes.process import Finished, install, run_bounded

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
        result["hooks"] = {
            event: [
                {
                    "matcher": ".*",
                    "hooks": [
                        {"type": "command", "command": command, "timeout": timeout_ms} for command in commands
                    ],
                }
            ]
            for event, commands in hooks.items()
        }
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


@dataclass
class GeminiRun:
    """One ``gemini -p -o stream-json`` run: the process and its JSONL events."""

    finished: Finished
    home: Path

    @property
    def events(self) -> list[dict[str, Any]]:
        events = []
        for line in self.finished.stdout.splitlines():
            if line.startswith("{"):
                event = json.loads(line)
                if isinstance(event, dict):
                    events.append(event)
        return events

    def of_type(self, event_type: str) -> list[dict[str, Any]]:
        """The events of a type (``tool_use``, ``tool_result``, ``message``, ``error``, ``result``)."""
        return [event for event in self.events if event.get("type") == event_type]


@dataclass
class Gemini:
    node: str
    entry: str

    @classmethod
    def install(cls) -> Gemini:
        """Install the pinned Gemini CLI and its Node.js once (``gemini.sh``)."""
        node, entry = install(HERE / "gemini.sh")[-2:]
        return cls(node, entry)

    def run(
        self,
        *,
        home: Path,
        workdir: Path,
        base_url: str,
        prompt: str,
        hooks: Mapping[str, Sequence[str]] | None = None,
        extra_settings: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
        extra_args: Sequence[str] = (),
        timeout: float = 120.0,
    ) -> GeminiRun:
        """``gemini -p`` with ``home`` as ``HOME``, run in ``workdir``, the model at ``base_url``;
        ``extra_settings`` are merged into ``settings.json`` (objects key by key)."""
        gemini_dir = home / ".gemini"
        gemini_dir.mkdir(parents=True, exist_ok=True)
        workdir.mkdir(parents=True, exist_ok=True)
        (gemini_dir / "settings.json").write_text(
            json.dumps(_merged(settings(hooks), extra_settings or {}), indent=2)
        )
        child_env = {
            key: value for key, value in os.environ.items() if not key.startswith(("GEMINI_", "GOOGLE_"))
        }
        child_env.update(
            HOME=str(home),
            GEMINI_API_KEY="fake-key",
            GOOGLE_GEMINI_BASE_URL=base_url,
            NO_COLOR="1",
        )
        child_env.update(env or {})
        args = [
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
        return GeminiRun(run_bounded(args, env=child_env, cwd=workdir, timeout=timeout), gemini_dir)
