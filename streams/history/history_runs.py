"""What the agent-history readers share: their entries, the events of a run, ids and times.

Rules every reader keeps (each reader's docstring adds its format's own):

* Entries: a JSONL line that is not a JSON object (invalid, or nested too deeply to decode), or
  an entry that lacks what its format requires, is skipped and reported with where it is:
  ``file:line`` for a JSONL line, ``file:<path in the document>`` (``messages[3]``) for an
  element of a JSON document, as the OpenClaw reader reports its lines.
* A result carries its call's params. A result whose call the history does not hold (a file
  cut short, a session resumed elsewhere) is skipped and reported: its tool is not known.
* Event ids: ``<prefix>-<key>``, the key taken from the entry (its call id, or its own id), never
  from a position where the format has ids; a key already given in the file gets ``~2``,
  ``~3``, ... (ids stay unique per file). The prefix is the file's stem (a folder's name for a
  folder of events).
* Timestamps (``ts``): milliseconds since the epoch, from the entries (an ISO time without a
  zone is UTC; its microseconds cut to the millisecond). An event whose entry has none takes
  the time of the event before it in its run (0 for the first): times never go back where the
  history gives none. Formats without any
  time make their own, monotone (their readers say how).
* Every run with events ends with a ``run_end`` at the time of its last entry (never before
  one of its events).
* Events that break the wire's limits are skipped and reported, as a gateway would refuse them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

import msgspec
from msgspec import UNSET

from loopwatch.detectors.decoding import validate_event
from loopwatch.detectors.events import CompactionRetry, Event, InvalidEvent, RunEnd, ToolCall, ToolResult
from loopwatch.detectors.stable_json import WIRE_DECODER, loads_with_surrogates

__all__ = [
    "RunLog",
    "Skips",
    "checked",
    "finish_runs",
    "iso_ms",
    "json_document",
    "jsonl_entries",
    "report",
    "stem_of",
    "text_of",
]


@dataclass
class Skips:
    """What a reader skipped: ``(where, why)`` in the order found."""

    items: list[tuple[str, str]] = field(default_factory=list)

    def add(self, where: str, reason: str) -> None:
        self.items.append((where, reason))


def _decode(raw: bytes) -> Any:
    """One JSON text; a lone UTF-16 surrogate escape (a tool output cut inside an emoji) is
    read as JavaScript reads it."""
    try:
        return WIRE_DECODER.decode(raw)
    except msgspec.DecodeError as exc:
        try:
            return loads_with_surrogates(raw)
        except ValueError:
            raise exc from None


def jsonl_entries(lines: Iterable[bytes], path: str, skips: Skips) -> list[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` of every JSONL line that is a JSON object; the others are
    reported in ``skips`` (blank lines are not entries)."""
    entries = []
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            entry = _decode(raw)
        except msgspec.DecodeError as exc:
            skips.add(f"{path}:{number}", f"not valid JSON: {exc}")
            continue
        except RecursionError:  # msgspec refuses nesting deeper than Python's recursion limit
            skips.add(f"{path}:{number}", "not valid JSON: nested too deeply")
            continue
        if isinstance(entry, dict):
            entries.append((number, entry))
        else:
            skips.add(f"{path}:{number}", f"not a JSON object but {type(entry).__name__}")
    return entries


def json_document(data: bytes) -> Any:
    """A whole JSON document, or ``None`` when it is not valid JSON."""
    try:
        return _decode(data)
    except (msgspec.DecodeError, RecursionError):
        return None


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def iso_ms(stamp: object) -> int | None:
    """Milliseconds since the epoch of an ISO time (UTC when it names no zone; microseconds cut)."""
    if not isinstance(stamp, str):
        return None
    try:
        moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // timedelta(milliseconds=1)  # exact, no float in between


def text_of(content: object) -> str | None:
    """The text of a string, or of a list of ``{"type": "text", "text": ...}`` blocks (joined by
    newlines, other blocks left out); ``None`` for anything else."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [
            block["text"]
            for block in content
            if isinstance(block, dict) and isinstance(block.get("text"), str)
        ]
        return "\n".join(texts)
    return None


@dataclass
class RunLog:
    """The events of one run in history order; the calls it made, by call id, for the params and
    tool of their results."""

    run_id: str
    session_id: str | None = None
    parent: str | None = None  # the run that started this one (a subagent's)
    root: str | None = None
    depth: int | None = None
    # (time, where, key, event) in history order
    events: list[tuple[int | None, str, str, Event]] = field(default_factory=list)
    calls: dict[str, tuple[str, Any]] = field(default_factory=dict)
    last_at: int | None = None  # the time of the last entry of the run
    end_key: str = "end"

    def saw(self, at: int | None) -> None:
        """An entry of the run (with or without an event) at ``at``."""
        if at is not None:
            self.last_at = at

    def call(
        self,
        where: str,
        key: str,
        at: int | None,
        tool: str,
        params: Any,
        call_id: str | None,
        batch_id: str | None = None,
    ) -> None:
        if call_id is not None:
            self.calls[call_id] = (tool, params)
        event = ToolCall(
            event_id="",
            run_id="",
            tool=tool,
            params=params,
            tool_call_id=call_id,
            batch_id=UNSET if batch_id is None else batch_id,
        )
        self.events.append((at, where, key, event))
        self.saw(at)

    def outcome(
        self,
        where: str,
        key: str,
        at: int | None,
        call_id: str | None,
        skips: Skips,
        *,
        result: Any = UNSET,
        error: Any = UNSET,
        tool: str | None = None,
    ) -> None:
        """A result (``result``) or a failure (``error``) of the call ``call_id``."""
        known = self.calls.get(call_id) if call_id is not None else None
        if known is None and tool is None:
            skips.add(where, f"result of call {call_id!r}, which the history does not hold")
            return
        name, params = known if known is not None else (str(tool), {})
        event = ToolResult(
            event_id="", run_id="", tool=name, params=params, result=result, error=error, tool_call_id=call_id
        )
        self.events.append((at, where, key, event))
        self.saw(at)

    def compaction(self, where: str, key: str, at: int | None) -> None:
        self.events.append((at, where, key, CompactionRetry(event_id="", run_id="")))
        self.saw(at)


def _unique(key: str, used: set[str]) -> str:
    unique, copy = key, 1
    while unique in used:
        copy += 1
        unique = f"{key}~{copy}"
    used.add(unique)
    return unique


def finish_runs(runs: Iterable[RunLog], prefix: str, agent_id: str) -> list[tuple[str, Event]]:
    """``(where, event)`` of every run with events, each run ended by its ``run_end``, with ids,
    times, session, agent and the run's chain filled in (see the module rules)."""
    used: set[str] = set()
    found: list[tuple[str, Event]] = []
    for run in runs:
        if not run.events:
            continue
        chain: dict[str, Any] = {}
        if run.parent:
            chain = {
                "parent_run_id": run.parent,
                "root_run_id": run.root or run.parent,
                "depth": run.depth or 1,
            }
        last_where = run.events[-1][1]
        times = [at for at, *_ in run.events if at is not None]
        end_at = max([*times, run.last_at]) if run.last_at is not None else max(times, default=None)
        ended = (end_at, last_where, run.end_key, RunEnd(event_id="", run_id=""))
        previous = 0
        for at, where, key, event in [*run.events, ended]:
            ts = previous if at is None else at
            previous = ts
            stamped = msgspec.structs.replace(
                event,
                event_id=f"{prefix}-{_unique(key, used)}",
                run_id=run.run_id,
                session_id=run.session_id,
                agent_id=agent_id,
                ts=ts,
                **chain,
            )
            found.append((where, stamped))
    return found


def checked(found: list[tuple[str, Event]], skips: Skips) -> list[Event]:
    """The events that pass the wire's checks; the others are reported in ``skips``."""
    kept = []
    for where, event in found:
        try:
            validate_event(event)
        except InvalidEvent as exc:
            skips.add(where, f"event {event.event_id}: {exc.reason}")
            continue
        kept.append(event)
    return kept


def report(skips: Skips, err: TextIO) -> None:
    """Every skipped entry on ``err``, as ``loopwatch: <where>: skipped: <why>``."""
    for where, reason in skips.items:
        print(f"loopwatch: {where}: skipped: {reason}", file=err)


def stem_of(path: Path) -> str:
    """A file's name without its history suffixes (``.jsonl``, ``.json``, ``.traj``,
    ``.traj.json``), as its events' ids carry it."""
    from loopwatch.streams.history.transcripts import id_stem

    name = path.name
    for suffix in (".traj.json", ".jsonl", ".json", ".traj"):
        if name.endswith(suffix) and len(name) > len(suffix):
            return id_stem(path.with_name(name[: -len(suffix)] + ".x"))
    return id_stem(path)
