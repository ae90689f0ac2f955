"""What one hook call asks of loopwatch, independent of how it reaches the gateway."""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from loopwatch.detectors.input_limits import identity_problem

__all__ = [
    "FilePrompts",
    "HookPlan",
    "MemoryPrompts",
    "PromptCounter",
    "call_key",
    "session_problem",
    "wire_event",
]

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
    """What a hook remembers between calls, per session: the number of the current user prompt
    (a run per prompt), and notes left by one hook call for a later one (a warning decided
    before a call, given to the model with its result where the runtime only allows that)."""

    def current(self, session: str) -> int: ...

    def advance(self, session: str) -> int: ...

    def leave_note(self, session: str, key: str, text: str) -> None: ...

    def take_note(self, session: str, key: str) -> str | None: ...


def session_problem(hook: dict[str, Any], agent: str = "default") -> str | None:
    """Why the hook's ``session_id`` cannot name runs, or ``agent`` an agent (None: they can):
    every runtime keys its runs and its prompt numbers by the session, and a plan's events
    carry the agent, so both are checked before a prompt number is kept for the session."""
    session = str(hook.get("session_id") or "unknown-session")
    problem = identity_problem(f"{session}#{2**63}")  # the longest run id it gives
    if problem is not None:
        if problem.startswith("holds "):  # the size of the longest run id, not of the session id
            problem = "gives run ids of " + problem.removeprefix("holds ")
        return f"session_id: {problem}"
    problem = identity_problem(agent)
    return None if problem is None else f"agent_id: {problem}"


def call_key(tool: str, params: Any) -> str:
    """A call's key where the runtime gives no call id (its tool and input)."""
    text = json.dumps([tool, params], sort_keys=True, default=str)
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()


class FilePrompts:
    """Prompt numbers in small files (command hooks: one process per hook call)."""

    def __init__(self, runtime: str, folder: Path | None = None) -> None:
        self.folder = folder if folder is not None else _state_dir(runtime)

    def _path(self, session: str) -> Path:
        name = "".join(c if c.isalnum() or c in "-_" else "_" for c in session)[:200]
        if len(name.encode("utf-8", "surrogatepass")) > 200:  # a file name holds 255 bytes
            digest = hashlib.blake2b(session.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()
            name = f"{name.encode('utf-8', 'surrogatepass')[:96].decode('utf-8', 'ignore')}-{digest}"
        return self.folder / f"{name}.prompt"

    def _read(self, session: str) -> int:
        try:
            return int(self._path(session).read_text().strip() or "0")
        except (OSError, ValueError):
            return 0

    def current(self, session: str) -> int:
        return max(self._read(session), 1)

    @contextmanager
    def _locked(self, session: str) -> Iterator[None]:
        """The session's files to one hook process at a time (a runtime may run hooks of
        parallel tool calls at once: two notes read, changed and written back lost one)."""
        path = self._path(session).with_suffix(".lock")
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as lock:
            try:
                import fcntl
            except ImportError:  # not POSIX: unlocked, as before
                yield
                return
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def advance(self, session: str) -> int:
        with self._locked(session):
            number = self._read(session) + 1
            _replace(self._path(session), str(number))
        return number

    def _notes(self, session: str) -> tuple[Path, dict[str, str]]:
        path = self._path(session).with_suffix(".notes")
        try:
            notes = json.loads(path.read_text())
        except (OSError, ValueError):
            notes = {}
        return path, notes if isinstance(notes, dict) else {}

    def leave_note(self, session: str, key: str, text: str) -> None:
        with self._locked(session):
            path, notes = self._notes(session)
            notes[key] = text
            _replace(path, json.dumps(dict(list(notes.items())[-64:])))

    def take_note(self, session: str, key: str) -> str | None:
        with self._locked(session):
            path, notes = self._notes(session)
            text = notes.pop(key, None)
            if text is not None:
                _replace(path, json.dumps(notes))
        return text if isinstance(text, str) else None


def _replace(path: Path, text: str) -> None:
    """``path`` holds ``text``, whole: a reader never sees it half written."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_text(text)
    os.replace(temporary, path)


class MemoryPrompts:
    """Prompt numbers in memory (the gateway's HTTP hooks), for the latest ``limit`` sessions."""

    def __init__(self, limit: int = 100_000) -> None:
        self.limit = limit
        self.numbers: OrderedDict[str, int] = OrderedDict()
        self.notes: OrderedDict[tuple[str, str], str] = OrderedDict()

    def leave_note(self, session: str, key: str, text: str) -> None:
        self.notes[(session, key)] = text
        while len(self.notes) > self.limit:
            self.notes.popitem(last=False)

    def take_note(self, session: str, key: str) -> str | None:
        return self.notes.pop((session, key), None)

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
