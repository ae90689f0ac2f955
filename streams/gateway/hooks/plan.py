"""What one hook call asks of loopwatch, independent of how it reaches the gateway.

The command hook (``loopwatch hook RUNTIME``, a process per hook call) imports this package,
so it keeps to what starts in a few milliseconds: no dataclasses, pathlib, typing or uuid at
run time, and nothing of the core (:func:`identity_problem` is the core's own check, copied;
``tests/unit/test_hook_startup.py`` holds them equal)."""

from __future__ import annotations

import json
import os
from collections import OrderedDict

TYPE_CHECKING = False  # (typing itself is not imported for it)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, Protocol

    Answer = dict[str, Any]

    class PromptCounter(Protocol):
        """What a hook remembers between calls, per session: the number of the current user
        prompt (a run per prompt), and notes left by one hook call for a later one (a warning
        decided before a call, given to the model with its result where the runtime only
        allows that)."""

        def current(self, session: str) -> int: ...

        def advance(self, session: str) -> int: ...

        def leave_note(self, session: str, key: str, text: str) -> None: ...

        def take_note(self, session: str, key: str) -> str | None: ...


__all__ = [
    "MAX_ID_BYTES",
    "FilePrompts",
    "HookPlan",
    "MemoryPrompts",
    "call_key",
    "identity_problem",
    "session_problem",
    "wire_event",
]

#: The most UTF-8 bytes an id may hold (``detectors.input_limits.MAX_ID_BYTES``).
MAX_ID_BYTES = 512


def _nothing(answer: Answer | None) -> dict[str, Any] | None:
    return None


class HookPlan:
    """Events to record (in order), then at most one proposed call to decide; ``respond``
    turns the decision (None: nothing was decided) into the hook's output (None: print nothing)."""

    __slots__ = ("decide", "events", "respond")

    def __init__(
        self,
        events: list[dict[str, Any]] | None = None,
        decide: dict[str, Any] | None = None,
        respond: Callable[[Answer | None], dict[str, Any] | None] = _nothing,
    ) -> None:
        self.events: list[dict[str, Any]] = [] if events is None else events
        self.decide = decide
        self.respond = respond

    def __repr__(self) -> str:
        return f"HookPlan(events={self.events!r}, decide={self.decide!r})"


def wire_event(kind: str, run_id: str, session: str, agent: str, **fields: Any) -> dict[str, Any]:
    """A wire event with a fresh id (hooks have no ids of their own for most events): ``hook-``
    and the hex of a random UUID (version 4)."""
    return {
        "type": kind,
        "event_id": f"hook-{_uuid4_hex()}",
        "run_id": run_id,
        "session_id": session,
        "agent_id": agent,
        **fields,
    }


def _uuid4_hex() -> str:
    """``uuid.uuid4().hex``, without importing uuid."""
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 4122 variant
    return raw.hex()


def identity_problem(value: str) -> str | None:
    """Why ``value`` cannot be an id (None: it can): the gateway's own check
    (``detectors.input_limits.identity_problem``), here so that a hook imports no core."""
    if value.isascii():
        size = len(value)
    else:
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError:
            return "must be valid Unicode (it holds a lone UTF-16 surrogate)"
    if size > MAX_ID_BYTES:
        return f"holds {size} bytes, more than the limit of {MAX_ID_BYTES}"
    return None


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


def _blake2b_hex(data: bytes) -> str:
    try:  # hashlib's own blake2b, without hashlib's start (OpenSSL's bindings: milliseconds)
        from _blake2 import blake2b
    except ImportError:  # (an interpreter built without it)
        from hashlib import blake2b
    return blake2b(data, digest_size=12).hexdigest()


def call_key(tool: str, params: Any) -> str:
    """A call's key where the runtime gives no call id (its tool and input). Input nested too
    deeply to be written as JSON (which no gateway checks) has a key of its tool alone."""
    try:
        text = json.dumps([tool, params], sort_keys=True, default=str)
    except RecursionError:
        text = json.dumps([tool, "(nested too deeply)"])
    return _blake2b_hex(text.encode("utf-8", "surrogatepass"))


class FilePrompts:
    """Prompt numbers in small files (command hooks: one process per hook call)."""

    def __init__(self, runtime: str, folder: str | os.PathLike[str] | None = None) -> None:
        self.folder = os.fspath(folder) if folder is not None else _state_dir(runtime)

    def _path(self, session: str, suffix: str = ".prompt") -> str:
        name = "".join(c if c.isalnum() or c in "-_" else "_" for c in session)[:200]
        if len(name.encode("utf-8", "surrogatepass")) > 200:  # a file name holds 255 bytes
            digest = _blake2b_hex(session.encode("utf-8", "surrogatepass"))
            name = f"{name.encode('utf-8', 'surrogatepass')[:96].decode('utf-8', 'ignore')}-{digest}"
        return os.path.join(self.folder, name + suffix)

    def _read(self, session: str) -> int:
        try:
            with open(self._path(session)) as file:
                return int(file.read().strip() or "0")
        except (OSError, ValueError):
            return 0

    def current(self, session: str) -> int:
        return max(self._read(session), 1)

    def advance(self, session: str) -> int:
        with _Locked(self._path(session, ".lock")):
            number = self._read(session) + 1
            _replace(self._path(session), str(number))
        return number

    def _notes(self, session: str) -> tuple[str, dict[str, str]]:
        path = self._path(session, ".notes")
        try:
            with open(path) as file:
                notes = json.loads(file.read())
        except (OSError, ValueError):
            notes = {}
        return path, notes if isinstance(notes, dict) else {}

    def leave_note(self, session: str, key: str, text: str) -> None:
        with _Locked(self._path(session, ".lock")):
            path, notes = self._notes(session)
            notes[key] = text
            _replace(path, json.dumps(dict(list(notes.items())[-64:])))

    def take_note(self, session: str, key: str) -> str | None:
        with _Locked(self._path(session, ".lock")):
            path, notes = self._notes(session)
            text = notes.pop(key, None)
            if text is not None:
                _replace(path, json.dumps(notes))
        return text if isinstance(text, str) else None


class _Locked:
    """A session's files to one hook process at a time (a runtime may run hooks of parallel
    tool calls at once: two notes read, changed and written back lost one): an exclusive
    ``flock`` on the session's lock file (not POSIX: unlocked)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.file: Any = None

    def __enter__(self) -> None:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self.file = open(self.path, "a")  # (closed by __exit__)
        try:
            import fcntl
        except ImportError:  # not POSIX: unlocked, as before
            return
        try:
            fcntl.flock(self.file.fileno(), fcntl.LOCK_EX)
        except BaseException:
            self.file.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.file.close()  # (closing the file releases its lock)


def _replace(path: str, text: str) -> None:
    """``path`` holds ``text``, whole: a reader never sees it half written."""
    folder, name = os.path.split(path)
    temporary = os.path.join(folder, f".{name}.{os.getpid()}")
    with open(temporary, "w") as file:
        file.write(text)
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


def _state_dir(runtime: str) -> str:
    base = os.environ.get("LOOPWATCH_HOOK_STATE_DIR") or os.path.join(
        os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state"), "loopwatch"
    )
    return os.path.join(base, runtime)
