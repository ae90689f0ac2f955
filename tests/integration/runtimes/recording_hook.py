"""A command hook for any CLI that records its input: ``RecordingHook(directory)`` writes a small
Python script there; each call appends the hook's stdin JSON as one line to ``calls.jsonl``, then
answers what ``answers`` says for its ``hook_event_name`` (nothing by default):
``{"PreToolUse": {"stdout": {...}, "stderr": "...", "exit": 2}}``.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["RecordingHook"]

SCRIPT = """\
import json, sys
raw = sys.stdin.read()
with open(sys.argv[1], "a", encoding="utf-8") as log:
    log.write(json.dumps(json.loads(raw)) + "\\n")
with open(sys.argv[2], encoding="utf-8") as answers_file:
    answer = json.load(answers_file).get(json.loads(raw).get("hook_event_name"), {})
if "stdout" in answer:
    print(json.dumps(answer["stdout"]))
if "stderr" in answer:
    print(answer["stderr"], file=sys.stderr)
sys.exit(answer.get("exit", 0))
"""


class RecordingHook:
    def __init__(self, directory: Path, answers: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.script = directory / "recording_hook.py"
        self.log = directory / "calls.jsonl"
        self.answers_path = directory / "answers.json"
        self.script.write_text(SCRIPT)
        self.answer(answers or {})

    def answer(self, answers: Mapping[str, Mapping[str, Any]]) -> None:
        """What the hook answers from now on, per event name."""
        self.answers_path.write_text(json.dumps(answers))

    @property
    def command(self) -> str:
        return shlex.join([sys.executable, str(self.script), str(self.log), str(self.answers_path)])

    def calls(self, event: str | None = None) -> list[dict[str, Any]]:
        """The recorded hook inputs, in call order (of one event, if given)."""
        if not self.log.exists():
            return []
        calls = [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]
        return [call for call in calls if event is None or call.get("hook_event_name") == event]
