"""The rows an OpenClaw SQLite transcript store gained since it was last read (for the sidecar).

Rules:

* Read-only: the store is opened with ``mode=ro`` and ``query_only``; nothing is written to
  the database, nothing is checkpointed, no file is deleted or replaced. (In WAL mode SQLite's
  reader opens the ``-wal`` and ``-shm`` files every connection shares, creating them empty
  when OpenClaw left none, as any reader does.)
* Short read transactions: every read is one ``BEGIN`` … ``COMMIT`` whose rows are all fetched
  before it ends; between reads no transaction is open. In WAL mode (OpenClaw's journal on a
  local disk) a reader never blocks OpenClaw's writer, and holds back a checkpoint only while
  a read runs; in rollback mode (OpenClaw on a network volume) a read holds SQLite's shared
  lock for its own few milliseconds, which OpenClaw's busy timeout waits out.
* A :class:`Mark` says where a store was read up to: its file (inode), the newest ``rowid``
  read, and a fingerprint of that row (session, ``seq``, ``created_at``, content). Rows are
  appended with rising rowids, so the rows after the mark are the rows added since. The mark
  holds only for the same file whose row at that rowid is still the same row: a store
  replaced by another file, or whose rows were deleted and renumbered (a reset rowid
  sequence), is read again whole.
* A session's rows are read whole, up to the newest rowid of the same :func:`changes` read,
  in ``seq`` order: the lines of the JSONL transcript they replace, as ``import`` reads them.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from loopwatch.streams.history.transcripts_sqlite import (
    StoreError,
    check_store,
    packed_columns,
    row_line,
    stored_agent,
)

__all__ = ["Changes", "Mark", "changes", "session_rows"]


@dataclass(frozen=True)
class Mark:
    """Where a store was read up to: its file's inode, the newest rowid read (0: none) and
    that row's fingerprint."""

    inode: int
    rowid: int
    row: str


@dataclass(frozen=True)
class Changes:
    """What a store gained since a mark."""

    agent: str | None  #: the agent id ``schema_meta`` records
    top: Mark  #: the store's newest row now (the mark to keep once these changes are handled)
    sessions: list[str]  #: the sessions with rows after the mark, in order of their first such row
    whole: bool  #: the mark did not hold: ``sessions`` are all the store's sessions
    packed: str  #: the compressed-row columns the store has (for :func:`session_rows`)


@contextmanager
def _read(db: sqlite3.Connection) -> Iterator[None]:
    """One read transaction (a consistent snapshot), ended however the block ends."""
    db.execute("BEGIN")
    try:
        yield
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")  # a read transaction: ends it, writes nothing


def _fingerprint(db: sqlite3.Connection, rowid: int, columns: set[str]) -> str | None:
    """The row's fingerprint, ``None`` if there is no row with that rowid."""
    created = "created_at" if "created_at" in columns else "NULL"
    packed = "event_zstd" if "event_zstd" in columns else "NULL"
    row = db.execute(
        f"SELECT session_id, seq, {created}, event_json, {packed} FROM transcript_events WHERE rowid = ?",
        (rowid,),
    ).fetchone()
    if row is None:
        return None
    digest = hashlib.blake2b(digest_size=16)
    for value in row:
        data = value if isinstance(value, bytes) else repr(value).encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(8, "little") + data)
    return digest.hexdigest()


def changes(db: sqlite3.Connection, inode: int, mark: Mark | None) -> Changes | None:
    """The sessions of the store (``inode``: its file's) that gained rows after ``mark``, or all
    of them when the mark does not hold (or is ``None``); one read transaction. ``None`` for a
    database without tables (being created). Raises :class:`StoreError` for a database that is
    not an OpenClaw agent database, :class:`sqlite3.Error` when it cannot be read."""
    with _read(db):
        found = check_store(db)
        if found is None:
            return None
        tables, columns = found
        agent = stored_agent(db, tables)
        newest = db.execute("SELECT MAX(rowid) FROM transcript_events").fetchone()[0]
        top = int(newest) if isinstance(newest, int) else 0
        holds = (
            mark is not None
            and mark.inode == inode
            and mark.rowid <= top
            and (mark.rowid == 0 or _fingerprint(db, mark.rowid, columns) == mark.row)
        )
        since = mark.rowid if holds and mark is not None else 0
        sessions = [
            str(row[0])
            for row in db.execute(
                "SELECT session_id FROM transcript_events WHERE rowid > ? AND rowid <= ? "
                "GROUP BY session_id ORDER BY MIN(rowid)",
                (since, top),
            ).fetchall()
        ]
        row = (_fingerprint(db, top, columns) or "") if top else ""
    return Changes(agent, Mark(inode, top, row), sessions, not holds, packed_columns(columns))


def session_rows(
    db: sqlite3.Connection, session: str, upto: int, packed: str
) -> list[tuple[int, bytes | str]]:
    """The session's ``(seq, line)`` rows with a rowid up to ``upto``, in ``seq`` order (``line``:
    the JSONL line, or why the row cannot be read); one read transaction."""
    with _read(db):
        found: list[Any] = db.execute(
            f"SELECT seq, event_json{packed} FROM transcript_events "
            "WHERE session_id = ? AND rowid <= ? ORDER BY seq",
            (session, upto),
        ).fetchall()
    rows: list[tuple[int, bytes | str]] = []
    for seq, event_json, *rest in found:
        try:
            line: bytes | str = row_line(event_json, *rest)
        except StoreError as exc:
            line = str(exc)
        rows.append((int(seq), line))
    return rows
