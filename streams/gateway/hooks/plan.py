"""What one hook call asks of loopwatch, independent of how it reaches the gateway."""

from __future__ import annotations

import os
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

__all__ = ["FilePrompts", "HookPlan", "MemoryPrompts", "PromptCounter", "wire_event"]

Answer = dict[str, Any]


@dataclass
class HookPlan:
    """Events to record (in order), then at most one proposed call to decide; ``respond``
    turns the decision (None: nothing was decided) into the hook's output (None: print nothing)."""

    events: list[dict[str, Any]] = field(default_factory=list)
    decide: dict[str, Any] | None = None
    respond: Callable[[Answer | None], dict[str, Any] | None] = lambda answer: None


def wire_event(kind: str, run_id: str, session: str, agent: str, **fields: Any) -> dict[str, Any]:
    """A wire event with a fresh id (hooks have no ids of their own for most events)."""
    return {
        "type": kind,
        "event_id": f"hook-{uuid.uuid4().hex}",
        "run_id": run_id,
        "session_id": session,
        "agent_id": agent,
        **fields,
    }


class PromptCounter(Protocol):
    """The number of the current user prompt of each session (a run per prompt)."""

    def current(self, session: str) -> int: ...

    def advance(self, session: str) -> int: ...


class FilePrompts:
    """Prompt numbers in small files (command hooks: one process per hook call)."""

    def __init__(self, runtime: str, folder: Path | None = None) -> None:
        self.folder = folder if folder is not None else _state_dir(runtime)

    def _path(self, session: str) -> Path:
        name = "".join(c if c.isalnum() or c in "-_" else "_" for c in session)[:200]
        return self.folder / f"{name}.prompt"

    def _read(self, session: str) -> int:
        try:
            return int(self._path(session).read_text().strip() or "0")
        except (OSError, ValueError):
            return 0

    def current(self, session: str) -> int:
        return max(self._read(session), 1)

    def advance(self, session: str) -> int:
        number = self._read(session) + 1
        path = self._path(session)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(str(number))
        return number


class MemoryPrompts:
    """Prompt numbers in memory (the gateway's HTTP hooks), for the latest ``limit`` sessions."""

    def __init__(self, limit: int = 100_000) -> None:
        self.limit = limit
        self.numbers: OrderedDict[str, int] = OrderedDict()

    def current(self, session: str) -> int:
        return max(self.numbers.get(session, 0), 1)

    def advance(self, session: str) -> int:
        number = self.numbers.pop(session, 0) + 1
        self.numbers[session] = number
        while len(self.numbers) > self.limit:
            self.numbers.popitem(last=False)
        return number


def _state_dir(runtime: str) -> Path:
    base = os.environ.get("LOOPWATCH_HOOK_STATE_DIR") or os.path.join(
        os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state"), "loopwatch"
    )
    return Path(base) / runtime
