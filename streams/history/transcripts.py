"""OpenClaw session transcripts (JSONL) → loopwatch events.

Rules (the importer notes, A.6–A.8):

* Runs: a ``user`` message starts a run, except the retry of a failed prompt (same text,
  after an assistant ``error`` or an ``openclaw:prompt-error``, with no reply that ended
  normally) and a message that arrives while calls of the run are unanswered (steering).
  Injected assistant messages (``provider: "openclaw"``) are ignored. A run's id is the
  ``data.runId`` of an ``openclaw:prompt-error`` / ``openclaw:bootstrap-context:full``
  entry written inside it, or the ``message.__openclaw.runId`` of an assistant / tool-result
  entry (OpenClaw 2026.9+), whichever comes first, else ``<session>#<n>`` with n counting
  every run found.
* Calls: every ``toolCall``/``toolUse``/``functionCall`` block of an assistant message
  (R1). Results: ``isError`` → ``error`` = the text blocks joined (R4); an early-2026 adapter
  error ``details == {status: "error", tool, error}`` → ``error`` (R3); otherwise ``result`` =
  ``{content, details}`` (R2). A result carries its call's params (``{}`` if none, R8).
  OpenClaw 2026.9+ appends a ``[System note: Tool-loop warning after N repeated calls. …]``
  text block to a warned call's result *after* hashing it: that block is removed first, so
  ``import``, ``replay`` and ``--follow`` hash what OpenClaw hashed.
* A ``compaction`` right after an attempt that failed on context overflow is a
  ``compaction_retry`` (R9); other compactions produce nothing (R10). Every run with events
  ends with ``run_end`` at the time of its last entry (R11).
* ``ts`` is milliseconds since the first event, from entry timestamps.
* Event ids come from the entries, never from positions, so the same entry gives the same id
  however the file was written, rewritten or re-imported: ``<prefix>-<entry id>`` for a tool
  result or a ``compaction_retry``, ``<prefix>-<entry id>.<k>`` for the k-th call (from 1) of
  an assistant message, ``<prefix>-<entry id>.end`` for the ``run_end`` of the run that
  entry's user message started. An entry without an ``id`` is named ``L<line>``; an id
  already given in the file gets ``~2``, ``~3``, … (ids stay unique per file).
* A line that is not a JSON object (invalid, or nested too deeply to decode) is skipped.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

import msgspec
from msgspec import UNSET

from loopwatch.detectors.decoding import validate_event
from loopwatch.detectors.events import CompactionRetry, Event, InvalidEvent, RunEnd, ToolCall, ToolResult
from loopwatch.detectors.stable_json import WIRE_DECODER, loads_with_surrogates
from loopwatch.streams.inputs.compressed import read_input

__all__ = [
    "agent_from_path",
    "is_transcript",
    "read_transcript",
    "transcript_events",
    "transcript_events_by_line",
]

_OVERFLOW = re.compile(
    r"prompt too long|context length|context window|context_window|maximum context|"
    r"input length|too many tokens|context_length_exceeded",
    re.IGNORECASE,
)
_RUN_ID_ENTRIES = ("openclaw:prompt-error", "openclaw:bootstrap-context:full")
_CALL_BLOCKS = ("toolcall", "tooluse", "functioncall")
_DECODER = WIRE_DECODER  # numbers with their JavaScript value, as the wire decoder gives them


#: ``<sessionId>.checkpoint.<uuid>.jsonl``: a pre-compaction copy older OpenClaw releases left
#: beside the live transcript, repeating its entries (read, it would publish them twice).
_CHECKPOINT_COPY = re.compile(r"\.checkpoint\.[^./]+\.jsonl\Z")


def id_stem(path: Path) -> str:
    """The file's stem as its events' ids carry it: valid Unicode whatever bytes the name holds
    (a byte that is not UTF-8 is written as ``\\xNN``, so two names never give one stem)."""
    return os.fsencode(path.stem).decode("utf-8", "backslashreplace")


def is_checkpoint_copy(name: str) -> bool:
    """Whether a file name is a transcript's pre-compaction copy (left out of folder walks)."""
    return _CHECKPOINT_COPY.search(name) is not None


def is_transcript(first_line: bytes) -> bool:
    """Whether a JSONL file starts with an OpenClaw/pi session header."""
    try:
        head = _DECODER.decode(first_line)
    except (msgspec.DecodeError, RecursionError):  # msgspec refuses deep nesting this way
        return False
    return isinstance(head, dict) and head.get("type") == "session" and isinstance(head.get("id"), str)


def agent_from_path(path: str) -> str | None:
    """The agent id of OpenClaw's layout ``…/agents/<agentId>/sessions/<file>``."""
    parts = path.replace("\\", "/").split("/")
    for index in range(len(parts) - 2):
        if parts[index] == "agents" and parts[index + 2] == "sessions":
            return parts[index + 1]
    return None


def _ms(stamp: object) -> int | None:
    if not isinstance(stamp, str):
        return None
    try:
        return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return None


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            block["text"]
            for block in content
            if isinstance(block, dict) and isinstance(block.get("text"), str)
        )
    return ""


@dataclass(frozen=True)
class _Origin:
    """Where an event comes from: the entry's line (from 1) and its id (``L<line>`` if none)."""

    line: int
    key: str


@dataclass
class _Run:
    number: int
    prompt: str
    start: _Origin  # the user message that started the run
    run_id: str | None = None
    # (time, origin, id suffix, event) in append order
    events: list[tuple[int | None, _Origin, str, Event]] = field(default_factory=list)
    calls: dict[str, Any] = field(default_factory=dict)  # tool call id -> params
    pending: set[str] = field(default_factory=set)
    failed: bool = False  # an attempt failed, and no reply ended the turn since
    overflowed: bool = False  # the latest failed attempt was a context overflow
    last_entry_ms: int | None = None
    last_line: int = 0


def _injected(message: dict[str, Any]) -> bool:
    return message.get("provider") == "openclaw"


def _entry(raw: bytes) -> Any:
    """One line's JSON; a lone UTF-16 surrogate escape (a tool output cut inside an emoji: Node
    writes it) is read as JavaScript reads it, not skipped with the result it carries."""
    try:
        return _DECODER.decode(raw)
    except msgspec.DecodeError as exc:
        try:
            return loads_with_surrogates(raw)
        except ValueError:
            raise exc from None


def _entries(
    lines: Iterable[bytes], skipped: list[tuple[int, str]] | None
) -> list[tuple[int, dict[str, Any]]]:
    entries = []
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            entry = _entry(raw)
        except msgspec.DecodeError as exc:  # OpenClaw itself skips malformed lines
            if skipped is not None:
                skipped.append((number, f"not valid JSON: {exc}"))
            continue
        except RecursionError:  # msgspec refuses nesting deeper than Python's recursion limit
            if skipped is not None:
                skipped.append((number, "not valid JSON: nested too deeply"))
            continue
        if isinstance(entry, dict):
            entries.append((number, entry))
        elif skipped is not None:
            skipped.append((number, f"not a JSON object but {type(entry).__name__}"))
    return entries


class _Segmenter:
    """Walks the entries in append order, splitting them into runs."""

    def __init__(self) -> None:
        self.runs: list[_Run] = []
        self.run: _Run | None = None

    def _touch(self, at: int | None, origin: _Origin) -> _Run | None:
        if self.run is not None:
            self.run.last_entry_ms = at
            self.run.last_line = origin.line
        return self.run

    def message(self, message: dict[str, Any], at: int | None, origin: _Origin) -> None:
        run = self.run
        role = message.get("role")
        if role == "user":
            text = _text(message.get("content"))
            retry = run is not None and run.failed and text == run.prompt
            steering = run is not None and bool(run.pending)
            if run is None or not (retry or steering):
                self.run = _Run(len(self.runs) + 1, text, origin)
                self.runs.append(self.run)
            self._touch(at, origin)
            return
        run = self._touch(at, origin)
        if run is None:
            return
        owner = message.get("__openclaw")  # OpenClaw 2026.9+: the run that wrote the entry
        if run.run_id is None and role in ("assistant", "toolResult") and isinstance(owner, dict):
            run.run_id = owner["runId"] if isinstance(owner.get("runId"), str) and owner["runId"] else None
        if role == "assistant" and not _injected(message):
            _assistant(run, message, at, origin)
        elif role == "toolResult":
            _tool_result(run, message, at, origin)

    def compaction(self, at: int | None, origin: _Origin) -> None:
        run = self._touch(at, origin)
        if run is not None and run.failed and run.overflowed:
            run.events.append((at, origin, origin.key, CompactionRetry(event_id="", run_id="")))
            run.overflowed = False

    def run_id_entry(self, kind: str, data: dict[str, Any], at: int | None, origin: _Origin) -> None:
        run = self._touch(at, origin)
        if run is None:
            return
        if run.run_id is None and isinstance(data.get("runId"), str):
            run.run_id = data["runId"]
        if kind == "openclaw:prompt-error":
            run.failed = True
            run.overflowed = bool(_OVERFLOW.search(str(data.get("error") or "")))


def transcript_events(
    lines: Iterable[bytes], agent_id: str, id_prefix: str, skipped: list[tuple[int, str]] | None = None
) -> list[Event]:
    """The events of one transcript file (see the module rules).

    Lines that are not JSON objects are skipped, as OpenClaw does; ``skipped`` receives their
    line numbers (from 1) and why.
    """
    return [event for _, event in transcript_events_by_line(lines, agent_id, id_prefix, skipped)]


def transcript_events_by_line(
    lines: Iterable[bytes], agent_id: str, id_prefix: str, skipped: list[tuple[int, str]] | None = None
) -> list[tuple[int, Event]]:
    """:func:`transcript_events`, each event with the line number of the entry it comes from
    (a ``run_end``: the run's last entry)."""
    entries = _entries(lines, skipped)
    if not entries or entries[0][1].get("type") != "session":
        return []
    segmenter = _Segmenter()
    keys: set[str] = set()
    for line, entry in entries[1:]:
        origin = _Origin(line, _key(entry, line, keys))
        kind = entry.get("type")
        at = _ms(entry.get("timestamp"))
        if kind == "message" and isinstance(entry.get("message"), dict):
            segmenter.message(entry["message"], at, origin)
        elif kind == "compaction":
            segmenter.compaction(at, origin)
        elif kind == "custom" and entry.get("customType") in _RUN_ID_ENTRIES:
            data = entry.get("data")
            segmenter.run_id_entry(
                str(entry["customType"]), data if isinstance(data, dict) else {}, at, origin
            )
    return _finish(segmenter.runs, str(entries[0][1]["id"]), agent_id, id_prefix)


def _key(entry: dict[str, Any], line: int, used: set[str]) -> str:
    """The entry's id (``L<line>`` without one), made unique in the file with ``~2``, ``~3``…"""
    given = entry.get("id")
    key = given if isinstance(given, str) and given else f"L{line}"
    unique, copy = key, 1
    while unique in used:
        copy += 1
        unique = f"{key}~{copy}"
    used.add(unique)
    return unique


def _assistant(run: _Run, message: dict[str, Any], at: int | None, origin: _Origin) -> None:
    stop = message.get("stopReason")
    if stop == "error":
        run.failed = True
        run.overflowed = bool(_OVERFLOW.search(str(message.get("errorMessage") or "")))
    elif stop in ("stop", "length"):
        run.failed = False
    content = message.get("content")
    calls = 0
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict) or str(block.get("type", "")).lower() not in _CALL_BLOCKS:
            continue
        params: Any = next((block[k] for k in ("arguments", "input", "parameters") if k in block), {})
        call_id = block.get("id") if isinstance(block.get("id"), str) else None
        if call_id is not None:
            run.calls[call_id] = params
            run.pending.add(call_id)
        calls += 1
        call = ToolCall(
            event_id="", run_id="", tool=str(block.get("name")), params=params, tool_call_id=call_id
        )
        run.events.append((at, origin, f"{origin.key}.{calls}", call))


#: OpenClaw 2026.9 appends this block to a warned call's result after hashing its outcome
#: (``appendToolLoopWarning``); it is feedback to the model, not part of the outcome.
LOOP_NOTE = re.compile(
    r"\[System note: Tool-loop warning after \d+ repeated calls\. "
    r"Change your approach or stop if you are not making progress\.\]"
)


def without_loop_note(message: dict[str, Any]) -> dict[str, Any]:
    """The tool result as OpenClaw hashed it: its trailing loop-warning note removed."""
    content = message.get("content")
    if not isinstance(content, list) or not content:
        return message
    last = content[-1]
    if isinstance(last, dict) and last.get("type") == "text" and LOOP_NOTE.fullmatch(str(last.get("text"))):
        return {**message, "content": content[:-1]}
    return message


def _tool_result(run: _Run, message: dict[str, Any], at: int | None, origin: _Origin) -> None:
    message = without_loop_note(message)
    call_id = message.get("toolCallId") if isinstance(message.get("toolCallId"), str) else None
    params = run.calls.get(call_id, {}) if call_id is not None else {}
    if call_id is not None:
        run.pending.discard(call_id)
    details = message.get("details")
    result: Any = UNSET
    error: Any = UNSET
    if message.get("isError") is True:
        error = _text(message.get("content"))
    elif (
        isinstance(details, dict)
        and set(details) == {"status", "tool", "error"}
        and details["status"] == "error"
        and isinstance(details["error"], str)
    ):
        error = details["error"]
    else:
        result = {"content": message.get("content")}
        if "details" in message:
            result["details"] = details
    outcome = ToolResult(
        event_id="",
        run_id="",
        tool=str(message.get("toolName")),
        params=params,
        result=result,
        error=error,
        tool_call_id=call_id,
    )
    run.events.append((at, origin, origin.key, outcome))


def _finish(runs: list[_Run], session: str, agent_id: str, id_prefix: str) -> list[tuple[int, Event]]:
    stamped: list[tuple[int | None, int, str, Event]] = []
    for run in runs:
        if not run.events:
            continue
        run_id = run.run_id or f"{session}#{run.number}"
        for at, origin, suffix, event in run.events:
            stamped.append((at, origin.line, suffix, msgspec.structs.replace(event, run_id=run_id)))
        end = RunEnd(event_id="", run_id=run_id)
        stamped.append((run.last_entry_ms, run.last_line, f"{run.start.key}.end", end))
    first_ms = next((at for at, *_ in stamped if at is not None), 0)
    return [
        (
            line,
            msgspec.structs.replace(
                event,
                event_id=f"{id_prefix}-{suffix}",
                session_id=session,
                agent_id=agent_id,
                ts=None if at is None else at - first_ms,
            ),
        )
        for at, line, suffix, event in stamped
    ]


def valid_events(found: list[tuple[int, Event]], skipped: list[tuple[int, str]]) -> list[Event]:
    """The events that pass the wire's checks (input limits, required fields); the others go to
    ``skipped`` with their line. A transcript's events reach the engine directly in ``replay``:
    checked here, they are refused as a gateway or a worker would refuse them."""
    kept = []
    for line, event in found:
        try:
            validate_event(event)
        except InvalidEvent as exc:
            skipped.append((line, f"event {event.event_id}: {exc.reason}"))
            continue
        kept.append(event)
    return kept


def read_transcript(path: Path, agent_id: str, err: TextIO) -> list[Event]:
    """The events of a transcript file; each skipped line is reported on ``err`` with its number."""
    skipped: list[tuple[int, str]] = []
    found = transcript_events_by_line(read_input(path).split(b"\n"), agent_id, id_stem(path), skipped)
    events = valid_events(found, skipped)
    for number, reason in sorted(skipped, key=lambda item: item[0]):
        print(f"loopwatch: {path}:{number}: skipped: {reason}", file=err)
    return events
