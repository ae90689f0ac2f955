"""OpenClaw's SQLite transcript store (2026.8+) → loopwatch events, through the JSONL rules.

OpenClaw 2026.9 writes no ``<sessionId>.jsonl`` any more: every transcript entry is a row of
``transcript_events`` in ``~/.openclaw/agents/<agentId>/agent/openclaw-agent.sqlite``::

    transcript_events(session_id TEXT, seq INTEGER,          -- PRIMARY KEY (session_id, seq)
                      event_json TEXT,                       -- the JSONL line, or NULL when
                      event_zstd BLOB, event_utf8_bytes INTEGER,  -- stored zstd-compressed
                      navigation_json TEXT, created_at INTEGER)

``seq`` counts from 0 (the ``session`` header) in append order, so the rows of a session, in
``seq`` order, are the lines of the JSONL transcript it replaces: each session is turned back
into those lines and read by :func:`~loopwatch.streams.history.transcripts.transcript_events`,
with the session id as the event id prefix (the JSONL file's stem). Assistant and tool-result
entries carry their run as ``message.__openclaw.runId``, which names the run (the JSONL rules).

A compressed row (OpenClaw compresses an entry of 1 KiB or more that zstd shrinks by 10%) is
decoded with the ``zstandard`` package when it is installed, else reported and skipped.

The database is opened read-only (``mode=ro``): nothing is written or locked. A file that is
not an SQLite database, not an OpenClaw agent database, or locked, is reported and skipped.
``import --follow`` reads the rows as they are committed through the same functions
(:mod:`~loopwatch.streams.history.transcripts_sqlite_tail`).
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import quote

from loopwatch.detectors.events import Event
from loopwatch.streams.history.transcripts import transcript_events_by_line, valid_events

__all__ = [
    "StoreError",
    "agent_from_store_path",
    "check_store",
    "has_header",
    "is_sqlite",
    "open_readonly",
    "packed_columns",
    "read_sqlite_store",
    "row_line",
    "session_lines",
    "store_rows",
    "stored_agent",
]

_MAGIC = b"SQLite format 3\x00"
_NEEDED = {"session_id", "seq", "event_json"}
_BUSY_TIMEOUT_S = 2.0


def is_sqlite(path: Path) -> bool:
    """Whether the file starts with SQLite's header (it may still be corrupt)."""
    try:
        with path.open("rb") as stream:
            return stream.read(len(_MAGIC)) == _MAGIC
    except OSError:
        return False


def agent_from_store_path(path: str) -> str | None:
    """The agent id of OpenClaw's layout ``…/agents/<agentId>/agent/<file>.sqlite``."""
    parts = path.replace("\\", "/").split("/")
    for index in range(len(parts) - 2):
        if parts[index] == "agents" and parts[index + 2] == "agent":
            return parts[index + 1]
    return None


class StoreError(Exception):
    """A store that cannot be read as an OpenClaw agent database."""


def _decompress(blob: bytes, size: int | None) -> bytes:
    try:
        import zstandard
    except ImportError:
        raise StoreError("compressed (zstd) entry: install the zstandard package to read it") from None
    try:
        data: bytes = zstandard.ZstdDecompressor().decompress(blob, max_output_size=size or 4194304)
    except zstandard.ZstdError as exc:
        raise StoreError(f"compressed entry not decodable: {exc}") from None
    return data


def row_line(event_json: Any, event_zstd: Any = None, size: Any = None) -> bytes:
    """A row's JSONL line (``event_json``, or ``event_zstd`` decompressed); raises
    :class:`StoreError` when it holds neither or cannot be decoded."""
    if isinstance(event_json, str):
        return event_json.encode("utf-8", "surrogatepass")
    if isinstance(event_json, bytes):
        return event_json
    if isinstance(event_zstd, bytes) and event_zstd:
        return _decompress(event_zstd, size if isinstance(size, int) and size > 0 else None)
    raise StoreError("no event_json and no event_zstd")


def open_readonly(path: Path, timeout_s: float | None = None) -> sqlite3.Connection:
    """A read-only connection (``mode=ro``) in autocommit mode: no transaction is open until a
    caller begins one; ``timeout_s`` is how long a read waits for a lock (SQLite's busy
    timeout). Raises :class:`sqlite3.Error` when the file cannot be opened."""
    uri = f"file:{quote(str(path.resolve()))}?mode=ro"
    wait = _BUSY_TIMEOUT_S if timeout_s is None else timeout_s
    db = sqlite3.connect(uri, uri=True, timeout=wait, isolation_level=None)
    try:
        db.execute("PRAGMA query_only = ON")
    except sqlite3.Error:
        db.close()
        raise
    return db


def check_store(db: sqlite3.Connection) -> tuple[set[str], set[str]] | None:
    """The store's tables and ``transcript_events``' columns; ``None`` for a database without
    any table (being created). Raises :class:`StoreError` for a database that is not an
    OpenClaw agent database."""
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not tables:
        return None
    if "transcript_events" not in tables:
        raise StoreError("not an OpenClaw agent database (no transcript_events table)")
    columns = {row[1] for row in db.execute("PRAGMA table_info(transcript_events)")}
    if not columns >= _NEEDED:
        raise StoreError(f"transcript_events lacks {', '.join(sorted(_NEEDED - columns))}")
    return tables, columns


def stored_agent(db: sqlite3.Connection, tables: set[str]) -> str | None:
    """The agent id the store records in ``schema_meta``, if any."""
    if "schema_meta" not in tables:
        return None
    found = db.execute(
        "SELECT agent_id FROM schema_meta WHERE role = 'agent' AND agent_id IS NOT NULL LIMIT 1"
    ).fetchone()
    return found[0] if found and isinstance(found[0], str) and found[0] else None


def packed_columns(columns: set[str]) -> str:
    """The compressed-row columns to select after ``event_json`` (none in a store without them)."""
    return ", event_zstd, event_utf8_bytes" if {"event_zstd", "event_utf8_bytes"} <= columns else ""


def store_rows(path: Path) -> tuple[str | None, dict[str, list[tuple[int, bytes | str]]]]:
    """The store's agent id (``schema_meta``, if recorded) and, per session in order of first
    write, its ``(seq, line)`` rows in ``seq`` order; ``line`` is the JSONL line, or why the
    row could not be read (a ``str``). Raises :class:`StoreError` for an unreadable store."""
    try:
        with closing(open_readonly(path)) as db:
            found = check_store(db)
            if found is None:
                raise StoreError("not an OpenClaw agent database (no transcript_events table)")
            tables, columns = found
            agent = stored_agent(db, tables)
            zstd = packed_columns(columns)
            order = "MIN(created_at), " if "created_at" in columns else ""
            sessions: dict[str, list[tuple[int, bytes | str]]] = {
                str(row[0]): []
                for row in db.execute(
                    f"SELECT session_id FROM transcript_events GROUP BY session_id ORDER BY {order}session_id"
                )
            }
            query = (
                f"SELECT session_id, seq, event_json{zstd} FROM transcript_events ORDER BY session_id, seq"
            )
            for session, seq, event_json, *packed in db.execute(query):
                try:
                    line: bytes | str = row_line(event_json, *packed)
                except StoreError as exc:
                    line = str(exc)
                sessions[str(session)].append((int(seq), line))
            return agent, sessions
    except sqlite3.OperationalError as exc:
        raise StoreError(f"cannot read ({exc})") from None
    except sqlite3.DatabaseError as exc:  # "file is not a database", "database disk image is malformed"
        raise StoreError(f"not a readable SQLite database ({exc})") from None


def session_lines(rows: list[tuple[int, bytes | str]]) -> tuple[list[bytes], list[tuple[int, str]]]:
    """A session's rows (``(seq, line)`` in ``seq`` order) as the lines of the JSONL transcript
    they replace (line n is the n-th row; a row that could not be read is an empty line), and
    the ``(seq, reason)`` of those rows."""
    lines: list[bytes] = []
    unreadable: list[tuple[int, str]] = []
    for seq, line in rows:
        if isinstance(line, str):
            unreadable.append((seq, line))
            lines.append(b"")  # keeps positions: line n is the n-th row
        else:
            lines.append(line)
    return lines, unreadable


def read_sqlite_store(path: Path, agent_id: str | None, err: TextIO) -> list[Event] | None:
    """The events of every session of an OpenClaw SQLite store (each session as its JSONL
    transcript would give them), or ``None`` if the store was reported on ``err`` and skipped.
    Each row that is skipped is reported with its session and ``seq``."""
    try:
        stored_agent, sessions = store_rows(path)
    except StoreError as exc:
        print(f"loopwatch: {path}: {exc}; skipped", file=err)
        return None
    agent = agent_id or agent_from_store_path(str(path)) or stored_agent or "main"
    events: list[Event] = []
    for session, rows in sessions.items():
        where = f"{path}[session {session}]"
        lines, unreadable = session_lines(rows)
        for seq, reason in unreadable:
            print(f"loopwatch: {where} seq {seq}: skipped: {reason}", file=err)
        skipped: list[tuple[int, str]] = []
        found = transcript_events_by_line(lines, agent, session, skipped)
        checked = valid_events(found, skipped)
        for number, reason in sorted(skipped, key=lambda item: item[0]):
            print(f"loopwatch: {where} seq {rows[number - 1][0]}: skipped: {reason}", file=err)
        if not found and not has_header(lines):
            print(f"loopwatch: {where}: no session header; skipped", file=err)
        events.extend(checked)
    return events


def has_header(lines: list[bytes]) -> bool:
    """Whether a session's first line is a transcript's session header."""
    from loopwatch.streams.history.transcripts import is_transcript

    return bool(lines) and is_transcript(lines[0])
