"""``loopwatch import --follow DIR``: the zero-code sidecar for OpenClaw fleets.

Follows the OpenClaw session transcripts under a folder (``~/.openclaw/agents``: new files,
appended lines, a file rewritten, replaced, truncated or rotated), and the SQLite transcript
stores of OpenClaw 2026.8+ (``agents/<id>/agent/openclaw-agent.sqlite``: rows as they are
committed, a store appearing or replaced), and publishes their events to a gateway
(``--gateway URL``) or straight to Kafka (``--kafka BOOTSTRAP``). An unmodified OpenClaw
deployment so gets fleet-wide verdicts and alerts, in observe mode (nothing blocks its calls).

Rules:

* Only regular ``*.jsonl`` files whose first line is a session header are read (a FIFO, a
  socket or a folder with that name is skipped, never opened for blocking reads). Only whole
  lines count: a last line without its newline waits until it parses.
* A transcript's events are computed from the whole file each time it changes (see
  :mod:`streams.history.transcripts`); their ids come from the entries, so the same entry
  always gives the same event id. The ``run_end`` that closes the file's last run is held
  back until a later run starts.
* Per file, the follower remembers the ids it has handled (published, or skipped as bad), and
  publishes the events whose ids it has not handled yet: appended lines, and whatever a
  rewrite, a replacement (new inode, reused inode) or a copy-truncate rotation brought.
  Nothing is published twice while it runs. A file that disappears is forgotten (if it comes
  back, its events are published again, under the same ids); a folder that cannot be listed
  forgets nothing.
* The offsets file keeps, per file, the length and BLAKE2b hash of the prefix whose events
  were handled, how many they were and the last one's id; it is rewritten atomically after
  each publish. A restart resumes there when the prefix is unchanged; when it changed while
  the sidecar was down, the events up to that last id count as handled (all are published
  again if that id is gone). A crash between a publish and the offsets write re-publishes at
  most one batch (same ids, which loopwatch de-duplicates).
* Publishing: batches of at most ``BATCH_EVENTS`` events and ``max_event_bytes`` encoded bytes
  (NDJSON). An event larger than that, or one the destination refuses (:class:`Rejected`: HTTP
  400/413, a record Kafka cannot take), is skipped and reported with its file and line; the
  rest of its batch is published. On Kafka, invalid events are published anyway: the worker
  sends them to the dead-letter topic. Any other failure (gateway unreachable, 5xx, broker
  down) ends the scan; the next scan retries it, starting with the file after the one that
  failed, so no file holds the others back longer than one scan.
* SQLite stores (only files named ``openclaw-agent.sqlite``: OpenClaw keeps lock databases
  beside them): read read-only, one short read transaction at a time, never one held between
  reads, so OpenClaw's writer is never blocked (see
  :mod:`streams.history.transcripts_sqlite_tail`). A store is opened when its file or its WAL
  changed; the rows committed since its mark (file, rowid, that row's fingerprint) name the
  sessions that changed, and each such session is read whole up to the same rowid and turned
  into events as ``import`` turns it (the session id as the id prefix: the same event ids),
  the open run's end held back. Per session the ids handled are remembered as for a file. The
  mark moves once every changed session is handled. A store replaced (another file) or whose
  rowids were reset is read whole again: only the events not handled yet are published. The
  offsets file keeps, per store, its mark and, per session, how many events were handled and
  the last one's id: a restart reads the rows after the mark (all of them if the mark no
  longer holds), and counts a session's first ``published`` events as handled while the last
  of them is still that many in, else those up to its last id. A store without tables yet
  (being created) waits; one that is not an OpenClaw agent database is said once and read
  again when it changes.
* ``stop`` ends :meth:`Follower.run` within a second, even in the middle of a publish (the
  publish is abandoned and retried after a restart). ``--interval`` must be a number of
  seconds from ``MIN_INTERVAL_S`` to ``MAX_INTERVAL_S``.

Limit: events of a run still open are published under the run id known then; OpenClaw may
write the run's real id (``openclaw:bootstrap-context:full``) later, and ``loopwatch import``
of the finished file then gives them that id.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import hashlib
import json
import math
import os
import re
import sqlite3
import stat
import threading
import time
from collections.abc import Awaitable, Callable
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TextIO, TypeVar

import msgspec

from loopwatch.config.errors import LoopwatchError
from loopwatch.config.settings import DetectorSettings
from loopwatch.detectors.events import Event, RunEnd, encode_event
from loopwatch.streams.history.transcripts import (
    agent_from_path,
    id_stem,
    is_checkpoint_copy,
    is_transcript,
    transcript_events_by_line,
)
from loopwatch.streams.history.transcripts_sqlite import (
    StoreError,
    agent_from_store_path,
    has_header,
    open_readonly,
    session_lines,
)
from loopwatch.streams.history.transcripts_sqlite_tail import Mark, changes, session_rows

__all__ = [
    "BATCH_EVENTS",
    "MAX_INTERVAL_S",
    "MIN_INTERVAL_S",
    "STORE_NAME",
    "Follower",
    "InvalidInterval",
    "Rejected",
    "interval_seconds",
    "publish_to_gateway",
    "publish_to_kafka",
]

Publish = Callable[[list[Event]], Awaitable[None]]
Locate = Callable[[int], str]  # an event's line → where it is, for reports
_T = TypeVar("_T")

#: Events per publish, below loopwatch's 256-id de-duplication window: a batch published
#: again after a crash is recognised whole.
BATCH_EVENTS: Final = 200
MIN_INTERVAL_S: Final = 0.05
MAX_INTERVAL_S: Final = 3600.0
#: A file modified this recently before it was read is read again at the next scan: its size
#: and mtime may not show a rewrite within the file system's timestamp granularity.
_RACY_NS: Final = 1_000_000_000
_GATEWAY_EVENT = re.compile(r"^event (\d+): ")
#: OpenClaw 2026.8+'s transcript store, ``agents/<agentId>/agent/openclaw-agent.sqlite``: the
#: only SQLite file the sidecar opens (OpenClaw keeps lock databases beside it, which a reader
#: must not touch).
STORE_NAME: Final = "openclaw-agent.sqlite"
#: How long a read of a store waits for a lock (rollback mode: OpenClaw committing) before
#: the store is left to the next scan.
_STORE_BUSY_S: Final = 0.2


class Rejected(Exception):
    """The destination refused events themselves (retrying cannot help).

    ``index``: the event of the batch at fault, ``None`` when the batch as a whole was refused
    (too large); the first ``sent`` events of the batch were published all the same.
    """

    def __init__(self, reason: str, index: int | None = None, sent: int = 0) -> None:
        super().__init__(reason)
        self.reason = reason
        self.index = index
        self.sent = sent


class InvalidInterval(LoopwatchError):
    """``--interval`` out of range (the CLI prints it and exits with 2)."""


class UnreadableOffsets(LoopwatchError):
    """The offsets file exists but cannot be read (the CLI prints it and exits with 2)."""


def _interval_problem(value: float) -> str | None:
    if math.isfinite(value) and MIN_INTERVAL_S <= value <= MAX_INTERVAL_S:
        return None
    return f"must be a number of seconds from {MIN_INTERVAL_S:g} to {MAX_INTERVAL_S:g}, got {value:g}"


def interval_seconds(text: str) -> float:
    """argparse type of ``--interval``: seconds between scans, within the bounds above."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    problem = _interval_problem(value)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return value


def _digest(data: bytes | memoryview) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _whole_lines(data: bytes) -> bytes:
    """``data`` up to its last newline, and the line after it once it parses (a writer may be
    in the middle of it)."""
    end = data.rfind(b"\n") + 1
    if data[end:].strip():
        try:
            if isinstance(msgspec.json.decode(data[end:]), dict):
                return data
        except (msgspec.DecodeError, RecursionError):
            pass
    return data[:end]


def _read_regular(path: Path) -> tuple[os.stat_result, bytes] | None:
    """The file's stat and bytes; ``None`` if it is not a regular file (never blocks on a FIFO)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as stream:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            return None
        return status, stream.read()


@dataclass
class _Store:
    """What the follower knows of a SQLite store while it runs."""

    mark: Mark | None = None  # where it was read up to (every event of those rows handled)
    handled: dict[str, set[str]] = field(default_factory=dict)  # per session: ids handled
    reported: dict[str, int] = field(default_factory=dict)  # per session: last seq whose skips were said


def _store_signature(path: Path, status: os.stat_result) -> tuple[int, ...]:
    """The store's file and its WAL, as stat sees them (a commit changes one of them)."""
    try:
        wal = os.stat(f"{path}-wal")
        tail = (wal.st_ino, wal.st_size, wal.st_mtime_ns)
    except OSError:
        tail = (0, -1, 0)
    return (status.st_ino, status.st_size, status.st_mtime_ns, *tail)


def _saved_mark(known: dict[str, Any] | None) -> Mark | None:
    """The mark an offsets record keeps, if it keeps a whole one."""
    if known is None:
        return None
    inode, rowid, row = known.get("inode"), known.get("rowid"), known.get("row")
    if isinstance(inode, int) and isinstance(rowid, int) and isinstance(row, str):
        return Mark(inode, rowid, row)
    return None


def _resumed_session(known: Any, ids: list[str]) -> set[str]:
    """After a restart, the ids of a session's events handled before (from its record): the
    first ``published`` while the last of them is still that many in, else up to ``last``."""
    if not isinstance(known, dict):
        return set()
    count, last = known.get("published"), known.get("last")
    if isinstance(count, int) and 0 < count <= len(ids) and ids[count - 1] == last:
        return set(ids[:count])
    return set(ids[: ids.index(last) + 1]) if last in ids else set()


class Follower:
    """Publishes the events of the transcripts under ``folder`` (see the module rules).

    Memory: the ids handled per followed file. State on disk: a few fields per file.
    """

    def __init__(
        self,
        folder: Path,
        publish: Publish,
        offsets: Path,
        agent_id: str | None,
        err: TextIO,
        *,
        max_event_bytes: int = DetectorSettings().max_event_bytes,
    ) -> None:
        self.folder = folder
        self.publish = publish
        self.offsets_path = offsets
        self.agent_id = agent_id
        self.err = err
        self.max_event_bytes = max_event_bytes
        self.offsets: dict[str, dict[str, Any]] = self._load()
        self.handled: dict[str, set[str]] = {}  # per file: the event ids published or skipped
        self.read_as: dict[str, tuple[int, ...]] = {}  # per file: (inode, size, mtime…) read
        self.published = 0
        self.skipped = 0  # events refused (too large, or by the destination)
        self.transcripts: set[str] = set()  # the files seen that are transcripts
        self.stores: dict[str, _Store] = {}  # the SQLite stores seen
        self.complete = False  # whether the last scan looked at every file
        self._reported: set[str] = set()  # files reported as unreadable, once each
        self._lines_seen: dict[str, int] = {}  # per file: lines whose skips were reported
        self._resume_after: str | None = None  # the file whose publish failed last
        self._last_failure = ""

    # -- the offsets file ------------------------------------------------------------------

    def _load(self) -> dict[str, dict[str, Any]]:
        """The offsets file's records; none before the first start. A file that cannot be read
        stops the sidecar: starting afresh would publish every transcript again."""
        try:
            value = json.loads(self.offsets_path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise UnreadableOffsets(
                f"offsets file {self.offsets_path}: cannot be read ({exc}); mend it, or remove it "
                "to publish every transcript again"
            ) from exc
        if not isinstance(value, dict):
            raise UnreadableOffsets(
                f"offsets file {self.offsets_path}: not an object of files; mend it, or remove it "
                "to publish every transcript again"
            )
        return {k: v for k, v in value.items() if isinstance(v, dict)}

    def _save(self) -> None:
        temporary = self.offsets_path.with_name(self.offsets_path.name + ".tmp")
        try:
            self.offsets_path.parent.mkdir(parents=True, exist_ok=True)
            temporary.write_text(json.dumps(self.offsets, indent=1, sort_keys=True))
            os.replace(temporary, self.offsets_path)
        except OSError as exc:  # the ids handled stay in memory; a restart may publish again
            self._say(f"cannot write {self.offsets_path} ({exc})", once=True)

    def _say(self, text: str, once: bool = False) -> None:
        if once:
            if text in self._reported:
                return
            self._reported.add(text)
        print(f"loopwatch: {text}", file=self.err, flush=True)

    # -- scanning --------------------------------------------------------------------------

    async def poll(self) -> int:
        """One pass over the folder; the number of events published.

        A failure to publish ends the pass (reported); the next pass retries it.
        """
        try:
            if not self.folder.is_dir():
                raise NotADirectoryError("not a folder (any more)")
            keys = sorted(
                [str(p) for p in self.folder.rglob("*.jsonl") if not is_checkpoint_copy(p.name)]
                + [str(p) for p in self.folder.rglob(STORE_NAME)]
            )
        except OSError as exc:  # unmounted, gone or unreadable: forget nothing
            self._say(f"cannot list {self.folder} ({exc})", once=True)
            self.complete = False
            return 0
        self._forget(set(keys))
        if self._resume_after is not None:  # the files after the one that failed go first
            split = next((i for i, key in enumerate(keys) if key > self._resume_after), 0)
            keys = keys[split:] + keys[:split]
        published = 0
        for key in keys:
            try:
                published += await (self._store(key) if Path(key).name == STORE_NAME else self._file(key))
            except Exception as exc:  # noqa: BLE001 - the destination is down or failing: retry next scan
                self._resume_after = key
                self.complete = False
                message = f"publishing failed ({exc}); retrying"
                if message != self._last_failure:
                    self._say(message)
                self._last_failure = message
                return published
        self._resume_after = None
        self._last_failure = ""
        self.complete = True
        return published

    def _forget(self, present: set[str]) -> None:
        """Drops what is known of the files that are gone (one that comes back is new)."""
        saved = [key for key in self.offsets if key not in present]
        for key in {*saved, *self.handled, *self.read_as, *self.stores} - present:
            self.offsets.pop(key, None)
            self.stores.pop(key, None)
            self.handled.pop(key, None)
            self.read_as.pop(key, None)
            self._lines_seen.pop(key, None)
            self.transcripts.discard(key)
        if saved:
            self._save()

    async def _file(self, key: str) -> int:
        path = Path(key)
        try:
            status = path.stat()
            if self.read_as.get(key) == (status.st_ino, status.st_size, status.st_mtime_ns):
                return 0  # unchanged since it was read
            if not stat.S_ISREG(status.st_mode):
                self._say(f"{key}: not a regular file, skipped", once=True)
                return 0
            before = time.time_ns()
            read = _read_regular(path)
        except OSError as exc:  # gone meanwhile, or unreadable
            if path.exists():
                self._say(f"{key}: cannot read ({exc.strerror or exc})", once=True)
            return 0
        if read is None:
            self._say(f"{key}: not a regular file, skipped", once=True)
            return 0
        status, data = read
        signature = (status.st_ino, status.st_size, status.st_mtime_ns)
        newline = data.find(b"\n")
        if not is_transcript(data if newline < 0 else data[:newline]):
            self.transcripts.discard(key)
            fresh = 0
        else:
            self.transcripts.add(key)
            fresh = await self._transcript(key, path, status.st_ino, _whole_lines(data))
        if status.st_mtime_ns < before - _RACY_NS:  # else it may change unseen: read it again
            self.read_as[key] = signature
        else:
            self.read_as.pop(key, None)
        return fresh

    def _events(self, key: str, path: Path, data: bytes, same: bool) -> list[tuple[int, Event]]:
        """The file's events with their line numbers (the open run's end held back); skipped
        lines are reported, past those reported before if the file only grew (``same``)."""
        skipped: list[tuple[int, str]] = []
        agent = self.agent_id or agent_from_path(key) or "main"
        lines = data.split(b"\n")
        events = transcript_events_by_line(lines, agent, id_stem(path), skipped)
        if events and isinstance(events[-1][1], RunEnd):
            events.pop()  # the last run may go on: its end waits for a later run
        reported = self._lines_seen.get(key, 0) if same else 0
        for number, reason in skipped:
            if number > reported:
                self._say(f"{key}:{number}: skipped: {reason}")
        self._lines_seen[key] = data.count(b"\n")
        return events

    def _resumed(self, known: dict[str, Any] | None, inode: int, data: bytes, ids: list[str]) -> set[str]:
        """After a restart, the ids of the file's events handled before (from its offsets)."""
        if known is None:
            return set()
        if _matches(known, inode, data):
            count = known.get("published", 0)
            return set(ids[: count if isinstance(count, int) else 0])
        last = known.get("last")
        return set(ids[: ids.index(last) + 1]) if last in ids else set()

    async def _transcript(self, key: str, path: Path, inode: int, data: bytes) -> int:
        known = self.offsets.get(key)
        same = known is not None and _matches(known, inode, data)
        events = self._events(key, path, data, same)
        ids = [event.event_id for _, event in events]
        handled = self.handled.get(key)
        if handled is None:
            handled = self.handled[key] = self._resumed(known, inode, data, ids)
        elif known is not None and not same:
            self._say(f"{key}: rewritten; publishing the events not published before")
        fresh = [(line, event) for line, event in events if event.event_id not in handled]
        if not fresh and same:
            return 0
        leading = 0  # events[:leading] are all handled
        digest = _digest(data)

        def record() -> None:
            nonlocal leading
            while leading < len(ids) and ids[leading] in handled:
                leading += 1
            self.offsets[key] = {
                "inode": inode,
                "size": len(data),
                "hash": digest,
                "published": leading,
                "last": ids[leading - 1] if leading else None,
            }
            self._save()

        try:
            return await self._publish(lambda line: f"{key}:{line}", fresh, handled, record)
        finally:  # also when stopped or failed midway: what was handled so far
            record()

    # -- SQLite stores ---------------------------------------------------------------------

    async def _store(self, key: str) -> int:
        """Publishes the events of the rows a store gained since it was read (all of them the
        first time, or when it was replaced); the mark moves once they are all handled."""
        path = Path(key)
        signature = self._store_signature(key, path)
        if signature is None or self.read_as.get(key) == signature:
            return 0  # not a regular file, gone, or unchanged since it was read
        before = time.time_ns()
        state = self.stores.setdefault(key, _Store())
        mark = state.mark or _saved_mark(self.offsets.get(key))
        published = 0
        try:
            with closing(open_readonly(path, _STORE_BUSY_S)) as db:
                found = changes(db, signature[0], mark)
                if found is None:  # no table yet: OpenClaw is creating it
                    return 0
                if found.whole:
                    if state.mark is not None:
                        self._say(f"{key}: replaced; publishing the events not published before")
                    self._drop_sessions(key, state, set(found.sessions))
                agent = self.agent_id or agent_from_store_path(key) or found.agent or "main"
                for session in found.sessions:
                    rows = session_rows(db, session, found.top.rowid, found.packed)
                    published += await self._session(key, state, session, rows, agent)
        except StoreError as exc:
            self._say(f"{key}: {exc}; not followed", once=True)
        except sqlite3.OperationalError as exc:  # locked, or cannot be opened now: the next scan
            self._say(f"{key}: cannot read ({exc}); retrying", once=True)
            return published
        except sqlite3.DatabaseError as exc:  # not a database, or a damaged one
            self._say(f"{key}: not a readable SQLite database ({exc}); not followed", once=True)
        else:
            if state.mark != found.top:
                state.mark = found.top
                record = self.offsets.setdefault(key, {})
                record.update(inode=found.top.inode, rowid=found.top.rowid, row=found.top.row)
                record.setdefault("sessions", {})
                self._save()
        newest = max(signature[2], signature[5])  # the database's and the WAL's mtimes
        if newest < before - _RACY_NS:  # else it may change unseen: read it again
            self.read_as[key] = signature
        else:
            self.read_as.pop(key, None)
        return published

    def _store_signature(self, key: str, path: Path) -> tuple[int, ...] | None:
        """The store's signature; ``None`` (said once) for what is not a regular file."""
        try:
            status = path.stat()
            if stat.S_ISREG(status.st_mode):
                return _store_signature(path, status)
            self._say(f"{key}: not a regular file, skipped", once=True)
        except OSError as exc:  # gone meanwhile, or unreadable
            if path.exists():
                self._say(f"{key}: cannot read ({exc.strerror or exc})", once=True)
        return None

    def _drop_sessions(self, key: str, state: _Store, present: set[str]) -> None:
        """Forgets the sessions a store no longer holds (one that comes back is new)."""
        for session in {*state.handled, *state.reported} - present:
            state.handled.pop(session, None)
            state.reported.pop(session, None)
        record = self.offsets.get(key)
        saved = record.get("sessions") if record is not None else None
        if isinstance(saved, dict) and set(saved) - present:
            for session in set(saved) - present:
                del saved[session]
            self._record_total(key)
            self._save()

    def _record_total(self, key: str) -> None:
        record = self.offsets[key]
        saved = record.get("sessions")
        record["published"] = sum(
            n
            for known in (saved.values() if isinstance(saved, dict) else ())
            if isinstance(known, dict) and isinstance(n := known.get("published"), int)
        )

    async def _session(
        self, key: str, state: _Store, session: str, rows: list[tuple[int, bytes | str]], agent: str
    ) -> int:
        """Publishes the events of a session's rows not handled yet (as ``import`` gives them,
        the open run's end held back); rows skipped are reported once, by ``seq``."""
        where = f"{key}[session {session}]"
        lines, unreadable = session_lines(rows)
        skipped: list[tuple[int, str]] = []
        events = transcript_events_by_line(lines, agent, session, skipped)
        seqs = [seq for seq, _ in rows]
        reported = state.reported.get(session, -1)
        for seq, reason in sorted([*unreadable, *((seqs[n - 1], why) for n, why in skipped)]):
            if seq > reported:
                self._say(f"{where} seq {seq}: skipped: {reason}")
        if seqs:
            state.reported[session] = max(reported, seqs[-1])
        if not events and not has_header(lines):
            self._say(f"{where}: no session header; skipped", once=True)
        if events and isinstance(events[-1][1], RunEnd):
            events.pop()  # the last run may go on: its end waits for a later run
        ids = [event.event_id for _, event in events]
        handled = state.handled.get(session)
        if handled is None:
            stored = self.offsets.get(key, {}).get("sessions")
            known = stored.get(session) if isinstance(stored, dict) else None
            handled = state.handled[session] = _resumed_session(known, ids)
        fresh = [(line, event) for line, event in events if event.event_id not in handled]
        if not fresh:
            return 0
        leading = 0  # events[:leading] are all handled

        def record() -> None:
            nonlocal leading
            while leading < len(ids) and ids[leading] in handled:
                leading += 1
            saved = self.offsets.setdefault(key, {}).setdefault("sessions", {})
            saved[session] = {"published": leading, "last": ids[leading - 1] if leading else None}
            self._record_total(key)
            self._save()

        def locate(line: int) -> str:
            return f"{where} seq {seqs[line - 1]}"

        try:
            return await self._publish(locate, fresh, handled, record)
        finally:  # also when stopped or failed midway: what was handled so far
            record()

    # -- publishing ------------------------------------------------------------------------

    def _skip(self, locate: Locate, line: int, event: Event, handled: set[str], reason: str) -> None:
        handled.add(event.event_id)
        self.skipped += 1
        self._say(f"{locate(line)}: event {event.event_id} skipped: {reason}")

    def _batches(
        self, locate: Locate, fresh: list[tuple[int, Event]], handled: set[str]
    ) -> list[list[tuple[int, Event]]]:
        """``fresh`` cut in batches of at most ``BATCH_EVENTS`` events and ``max_event_bytes``;
        an event that cannot be encoded or is larger than that is skipped."""
        batches: list[list[tuple[int, Event]]] = [[]]
        size = 0
        for line, event in fresh:
            try:
                length = len(encode_event(event)) + 1  # NDJSON: a newline each
            except (msgspec.EncodeError, RecursionError, TypeError, ValueError) as exc:
                self._skip(locate, line, event, handled, f"cannot be encoded ({exc})")
                continue
            if length - 1 > self.max_event_bytes:
                limit = self.max_event_bytes
                self._skip(locate, line, event, handled, f"{length - 1} bytes exceed maxEventBytes ({limit})")
                continue
            if len(batches[-1]) == BATCH_EVENTS or size + length > self.max_event_bytes:
                batches.append([])
                size = 0
            batches[-1].append((line, event))
            size += length
        return [batch for batch in batches if batch]

    async def _publish(
        self, locate: Locate, fresh: list[tuple[int, Event]], handled: set[str], record: Callable[[], None]
    ) -> int:
        """Publishes ``fresh`` (a refused event is skipped, reported where ``locate`` of its line
        says); ``record()`` after each batch."""
        published = 0
        batches = self._batches(locate, fresh, handled)
        while batches:
            batch = batches.pop(0)
            try:
                await self.publish([event for _, event in batch])
                sent = len(batch)
            except Rejected as exc:
                sent = max(0, min(exc.sent, len(batch)))
                rest = batch[sent:]
                if exc.index is not None and sent <= exc.index < len(batch):
                    line, event = rest.pop(exc.index - sent)
                    self._skip(locate, line, event, handled, exc.reason)
                    batches[:0] = [rest] if rest else []
                elif len(rest) == 1:
                    self._skip(locate, *rest[0], handled, exc.reason)
                elif rest:  # the refused event is not named: halve the batch until it is alone
                    batches[:0] = [rest[: len(rest) // 2], rest[len(rest) // 2 :]]
            if sent:
                handled.update(event.event_id for _, event in batch[:sent])
                published += sent
                self.published += sent
                record()
        return published

    async def run(self, interval_s: float, stop: asyncio.Event) -> None:
        """Scans every ``interval_s`` seconds until ``stop`` is set (see the module rules)."""
        problem = _interval_problem(interval_s)
        if problem:
            raise InvalidInterval(f"--interval: {problem}")
        resumed = sum(n for known in self.offsets.values() if isinstance(n := known.get("published"), int))
        first = True
        while not stop.is_set():
            scan = asyncio.ensure_future(self.poll())
            stopping = asyncio.ensure_future(stop.wait())
            await asyncio.wait({scan, stopping}, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            if not scan.done():  # stopped in the middle of a publish: abandoned, not recorded
                scan.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await scan
                return
            count = scan.result()
            if first and self.complete:  # where a restart resumed, once every file was looked at
                first = False
                files = len(self.transcripts)
                stores = sum(1 for state in self.stores.values() if state.mark is not None)
                also = f", {stores} SQLite store{'' if stores == 1 else 's'}" if stores else ""
                self._say(
                    f"first scan: {files} transcript{'' if files == 1 else 's'}{also}, "
                    f"{resumed} events published before, {count} now"
                )
                count = 0
            if count:
                self._say(f"published {count} events ({self.published} in all)")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval_s)


def _matches(known: dict[str, Any], inode: int, data: bytes) -> bool:
    """Whether ``data`` still starts with the prefix whose events were handled."""
    size = known.get("size")
    if not isinstance(size, int) or size > len(data):
        return False
    if "hash" not in known:  # an offsets file of an earlier version: the inode only
        return bool(known.get("inode") == inode)
    return bool(known["hash"] == _digest(memoryview(data)[:size]))


async def _in_daemon_thread(work: Callable[[], _T]) -> _T:
    """``work()`` in a daemon thread: cancelling the wait abandons it (it holds up no exit)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[_T] = loop.create_future()

    def deliver(settle: Callable[[], None]) -> None:
        def guarded() -> None:
            if not future.done():  # not cancelled meanwhile
                settle()

        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(guarded)

    def body() -> None:
        try:
            result = work()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting task
            deliver(functools.partial(future.set_exception, exc))
        else:
            deliver(functools.partial(future.set_result, result))

    threading.Thread(target=body, name="loopwatch-publish", daemon=True).start()
    return await future


def publish_to_gateway(url: str, token: str | None, timeout_s: float = 30.0) -> Publish:
    """Events to ``POST {url}/v1/events`` as NDJSON, one request per call.

    400 and 413 answers raise :class:`Rejected` (with the event's index when the gateway names
    it); any other answer or failure raises (:class:`OSError` mostly), to be retried.
    """
    import urllib.error
    import urllib.request

    def send(events: list[Event]) -> None:
        body = b"\n".join(encode_event(e) for e in events)
        headers = {"Content-Type": "application/x-ndjson"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        request = urllib.request.Request(url.rstrip("/") + "/v1/events", data=body, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as answer:
                answer.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:2000]
            reason = _gateway_reason(detail)
            if exc.code in (400, 413):
                found = _GATEWAY_EVENT.match(reason) if exc.code == 400 else None
                index = int(found.group(1)) if found else None
                raise Rejected(f"gateway answered {exc.code}: {reason}", index) from exc
            raise OSError(f"gateway answered {exc.code}: {reason}") from exc

    async def publish(events: list[Event]) -> None:
        await _in_daemon_thread(lambda: send(events))

    return publish


def _gateway_reason(body: bytes) -> str:
    try:
        value = json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace")[:300]
    error = value.get("error") if isinstance(value, dict) else None
    return str(error)[:300] if error is not None else body.decode("utf-8", "replace")[:300]


def publish_to_kafka(producer: Any, topic: str) -> Publish:
    """Events to the input topic, keyed by run scope (a started aiokafka producer); returns once
    the broker has them all. A record too large for the producer raises :class:`Rejected`."""
    from aiokafka.errors import MessageSizeTooLargeError

    from loopwatch.detectors.events import run_scope

    async def publish(events: list[Event]) -> None:
        delivered = []
        for index, event in enumerate(events):
            try:
                delivered.append(
                    await producer.send(topic, encode_event(event), key=run_scope(event).encode())
                )
            except MessageSizeTooLargeError as exc:
                await asyncio.gather(*delivered)
                raise Rejected(f"Kafka refused the record: {exc}", index, sent=index) from exc
        await asyncio.gather(*delivered)

    return publish
