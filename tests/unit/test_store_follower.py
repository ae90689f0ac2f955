"""The ``import --follow`` sidecar on OpenClaw's SQLite transcript stores
(``agents/<id>/agent/openclaw-agent.sqlite``), driven scan by scan with an in-memory destination
while a writer commits rows the way OpenClaw does (WAL mode, one transaction per entry).

What is expected always comes from ``loopwatch import``'s own reader of the finished store
(:func:`read_sqlite_store`): per session its events, less the open run's end (held back until a
later run starts, as for JSONL transcripts). A writer whose busy timeout is 0 fails on the first
lock it meets, so "never blocked" is what it did, not a timing."""

from __future__ import annotations

import asyncio
import http.server
import io
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from loopwatch.detectors.events import Event, RunEnd
from loopwatch.streams.history import transcript_follower
from loopwatch.streams.history.transcript_follower import STORE_NAME, Follower
from loopwatch.streams.history.transcripts_sqlite import open_readonly, read_sqlite_store
from loopwatch.streams.history.transcripts_sqlite_tail import session_rows
from tests.helpers import DATA, ROOT, wait_for_line

FIXTURE = DATA / "transcripts-sqlite" / "agents" / "main" / "agent" / "openclaw-agent.sqlite"

# the columns of OpenClaw 2026.9.6's transcript_events and schema_meta, without the CHECKs that
# call octet_length (the SQLite of older Pythons lacks it, so rows could not be written)
SCHEMA = (
    "CREATE TABLE schema_meta (meta_key TEXT NOT NULL PRIMARY KEY, role TEXT NOT NULL, "
    "schema_version INTEGER NOT NULL, agent_id TEXT, app_version TEXT, created_at INTEGER NOT NULL, "
    "updated_at INTEGER NOT NULL);"
    "CREATE TABLE transcript_events (session_id TEXT NOT NULL, seq INTEGER NOT NULL, event_json TEXT, "
    "created_at INTEGER NOT NULL, event_zstd BLOB, event_utf8_bytes INTEGER, navigation_json TEXT, "
    "PRIMARY KEY (session_id, seq));"
)

INSERT = "INSERT INTO transcript_events (session_id, seq, event_json, created_at) VALUES (?, ?, ?, ?)"


class Session:
    """One OpenClaw session's transcript entries, as rows (entry ids ``<session>-<n>``)."""

    def __init__(self, session: str) -> None:
        self.session = session
        self.entries: list[dict[str, Any]] = [{"type": "session", "version": 3, "id": session}]

    def entry(self, **fields: Any) -> Session:
        number = len(self.entries)
        stamp = f"2026-01-01T00:{number // 60 % 60:02d}:{number % 60:02d}Z"
        self.entries.append({"id": f"{self.session}-{number}", "timestamp": stamp, **fields})
        return self

    def prompt(self, text: str) -> Session:
        return self.entry(type="message", message={"role": "user", "content": text})

    def turn(self, tool: str, n: int, text: str = "ENOENT") -> Session:
        """``n`` calls of ``tool``, each answered."""
        for index in range(n):
            call_id = f"{self.session}-c{len(self.entries)}"
            block = {"type": "toolCall", "id": call_id, "name": tool, "arguments": {"i": index}}
            self.entry(
                type="message", message={"role": "assistant", "content": [block], "stopReason": "toolUse"}
            )
            content = [{"type": "text", "text": text}]
            result = {"role": "toolResult", "toolCallId": call_id, "toolName": tool, "content": content}
            self.entry(type="message", message=result)
        return self

    def rows(self) -> list[tuple[str, int, str, int]]:
        return [
            (self.session, seq, json.dumps(entry, separators=(",", ":")), 1_800_000_000_000 + seq)
            for seq, entry in enumerate(self.entries)
        ]


def create_store(path: Path, journal: str = "wal", agent: str = "ops") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute(f"PRAGMA journal_mode = {journal}")
        db.executescript(SCHEMA)
        db.execute("INSERT INTO schema_meta VALUES ('primary', 'agent', 23, ?, '2026.9.6', 0, 0)", (agent,))
    finally:
        db.close()
    return path


def insert(path: Path, rows: list[tuple[str, int, str, int]]) -> None:
    """The rows, one transaction each, with a busy timeout of 0 (a lock met fails at once)."""
    db = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        for row in rows:
            db.execute(INSERT, row)
    finally:
        db.close()


def store_path(root: Path, agent: str = "ops") -> Path:
    return root / "agents" / agent / "agent" / STORE_NAME


class Sink:
    """A destination that keeps what it is given; ``down`` makes it fail like a gateway that is down."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.down = False

    async def __call__(self, events: list[Event]) -> None:
        if self.down:
            raise OSError("gateway answered 503: unavailable")
        self.events.extend(events)


def follower(root: Path, sink: Sink) -> tuple[Follower, io.StringIO]:
    err = io.StringIO()
    return Follower(root / "agents", sink, root / "offsets.json", None, err), err


def scan(follow: Follower) -> int:
    return asyncio.run(follow.poll())


def imported(*stores: Path) -> dict[str, list[Event]]:
    """Per session, the events ``loopwatch import`` gives for the stores' rows now, less the
    open run's end (the sidecar holds it back until a later run starts)."""
    sessions: dict[str, list[Event]] = defaultdict(list)
    for path in stores:
        err = io.StringIO()
        for event in read_sqlite_store(path, None, err) or []:
            sessions[str(event.session_id)].append(event)
        assert err.getvalue() == ""
    for events in sessions.values():
        if events and isinstance(events[-1], RunEnd):
            events.pop()
    return dict(sessions)


def by_session(events: list[Event]) -> dict[str, list[Event]]:
    sessions: dict[str, list[Event]] = defaultdict(list)
    for event in events:
        sessions[str(event.session_id)].append(event)
    return dict(sessions)


# -- a writer appending while the sidecar follows ---------------------------------------------


class Writer(threading.Thread):
    """Commits ``rows`` one per transaction in WAL mode, with a busy timeout of 0 and frequent
    automatic checkpoints, as OpenClaw's writer does; every ``pause`` rows it waits until the
    follower has finished another scan, so scans interleave with its writes."""

    def __init__(self, path: Path, rows: list[tuple[str, int, str, int]], pause: int) -> None:
        super().__init__(daemon=True)
        self.path, self.rows, self.pause = path, rows, pause
        self.errors: list[str] = []
        self.written = 0
        self.scans = 0
        self.changed = threading.Condition()

    def scanned(self) -> None:
        with self.changed:
            self.scans += 1
            self.changed.notify_all()

    def run(self) -> None:
        db = sqlite3.connect(self.path, timeout=0, isolation_level=None)
        try:
            db.execute("PRAGMA wal_autocheckpoint = 4")  # checkpoints while the follower reads
            for index, row in enumerate(self.rows, start=1):
                try:
                    db.execute(INSERT, row)
                except sqlite3.OperationalError as exc:  # SQLITE_BUSY / locked: the writer was blocked
                    self.errors.append(f"row {index}: {exc}")
                self.written = index
                if index % self.pause == 0:
                    with self.changed:
                        wanted = self.scans + 2  # one whole scan after this row
                        if not self.changed.wait_for(lambda: self.scans >= wanted, timeout=120):  # noqa: B023
                            self.errors.append("the follower stopped scanning")
                            return
        finally:
            db.close()


def interleaved(sessions: list[Session]) -> list[tuple[str, int, str, int]]:
    """The sessions' rows in the order a few agents running at once would commit them."""
    pending = [session.rows() for session in sessions]
    rows = []
    while any(pending):
        for queue in pending:
            rows.extend(queue[:3])
            del queue[:3]
    return rows


def test_rows_committed_while_followed_are_published_once_in_order_across_a_restart(tmp_path: Path) -> None:
    path = create_store(store_path(tmp_path))
    sessions = [Session(f"s{n}") for n in range(3)]
    for n, session in enumerate(sessions):
        for run in range(4):
            session.prompt(f"task {run}").turn(("read", "exec", "grep")[n], 6 + run)
    rows = interleaved(sessions)
    writer = Writer(path, rows, pause=20)
    sink = Sink()
    follow, err = follower(tmp_path, sink)
    restarted = False
    writer.start()
    while writer.is_alive():
        scan(follow)
        if not restarted and writer.written >= len(rows) // 2:  # a restart in the middle
            follow, err = follower(tmp_path, sink)
            restarted = True
        writer.scanned()
    writer.join()
    scan(follow)
    assert restarted
    assert writer.errors == []  # never blocked, though its busy timeout is 0
    want = imported(path)
    assert sorted(want) == ["s0", "s1", "s2"]
    assert by_session(sink.events) == want  # each session's events once, in order
    # per session 4 runs of 6 to 9 calls: 2 * (6 + 7 + 8 + 9) events and 4 run ends, the last held back
    assert len(sink.events) == 3 * (2 * 30 + 4 - 1)
    assert err.getvalue() == ""


def _commit_during_a_read(
    root: Path, journal: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[str, Path, Sink]:
    """A store followed while the writer commits one row (busy timeout 0) from inside the
    follower's first read transaction; what the commit gave."""
    path = create_store(store_path(root), journal)
    session = Session("s").prompt("go").turn("read", 2)
    insert(path, session.rows())
    before = len(session.entries)
    late = session.turn("read", 1).rows()[before : before + 1]  # one more call
    outcome: list[str] = []
    real = open_readonly

    def traced(target: Path, timeout_s: float | None = None) -> sqlite3.Connection:
        db = real(target, timeout_s)

        def during(statement: str) -> None:
            if statement.startswith("SELECT MAX(rowid)") and not outcome:  # inside the read
                try:
                    insert(path, late)
                    outcome.append("committed")
                except sqlite3.OperationalError as exc:
                    outcome.append(str(exc))

        db.set_trace_callback(during)
        return db

    monkeypatch.setattr(transcript_follower, "open_readonly", traced)
    sink = Sink()
    follow, _ = follower(root, sink)
    scan(follow)
    monkeypatch.setattr(transcript_follower, "open_readonly", real)
    assert len(sink.events) == 4  # the snapshot the read began with: 2 calls and their results
    scan(follow)
    return outcome[0], path, sink


def test_a_commit_during_a_read_is_not_blocked_and_is_published_at_the_next_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outcome, path, sink = _commit_during_a_read(tmp_path, "wal", monkeypatch)
    assert outcome == "committed"
    assert by_session(sink.events) == imported(path)
    assert sink.events[-1].event_id == "s-s-6.1"


def test_in_rollback_mode_a_read_holds_the_writer_back_for_its_duration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same commit against a store in rollback mode (OpenClaw on a network volume) meets
    the reader's shared lock: the check above can fail. (OpenClaw's busy timeout waits it out.)"""
    outcome, path, sink = _commit_during_a_read(tmp_path, "delete", monkeypatch)
    assert outcome == "database is locked"
    assert by_session(sink.events) == imported(path)


@pytest.mark.parametrize("journal", ["wal", "delete"])
def test_no_lock_and_no_read_transaction_is_held_between_scans(tmp_path: Path, journal: str) -> None:
    """After a scan, OpenClaw's writer (still connected, its rows in the WAL) can checkpoint the
    whole WAL and truncate it, which waits for every reader still reading from the WAL, and take
    an exclusive lock, with a busy timeout of 0."""
    path = create_store(store_path(tmp_path), journal)
    writer = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        writer.execute("PRAGMA wal_autocheckpoint = 0")  # the rows stay in the WAL
        for row in Session("s").prompt("go").turn("read", 3).rows():
            writer.execute(INSERT, row)
        sink = Sink()
        follow, _ = follower(tmp_path, sink)
        scan(follow)
        assert len(sink.events) == 6
        if journal == "wal":
            assert Path(f"{path}-wal").stat().st_size > 0
            busy, *_ = writer.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            assert busy == 0
            assert Path(f"{path}-wal").stat().st_size == 0
        writer.execute("BEGIN EXCLUSIVE")
        writer.execute("COMMIT")
    finally:
        writer.close()


# -- stores appearing, replaced, resumed ------------------------------------------------------


def test_a_store_created_after_the_follower_starts_is_picked_up(tmp_path: Path) -> None:
    (tmp_path / "agents").mkdir()
    sink = Sink()
    follow, err = follower(tmp_path, sink)
    scan(follow)
    path = store_path(tmp_path)
    path.parent.mkdir(parents=True)
    path.touch()  # OpenClaw opening it: no table yet
    scan(follow)
    create_store(path)
    scan(follow)
    first = Session("a").prompt("go").turn("read", 3)
    insert(path, first.rows())
    scan(follow)
    other = create_store(store_path(tmp_path, "coder"), agent="coder")  # another agent, later
    insert(other, Session("b").prompt("go").turn("exec", 2).prompt("next").turn("exec", 1).rows())
    scan(follow)
    assert by_session(sink.events) == imported(path, other)
    assert {(e.session_id, e.agent_id) for e in sink.events} == {("a", "ops"), ("b", "coder")}
    assert err.getvalue() == ""  # nothing said about the store being created


def test_a_restart_resumes_after_the_last_row_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = create_store(store_path(tmp_path))
    quiet, busy = Session("quiet").prompt("go").turn("read", 3), Session("busy").prompt("go").turn("exec", 2)
    insert(path, quiet.rows() + busy.rows())
    sink = Sink()
    scan(follower(tmp_path, sink)[0])
    saved = json.loads((tmp_path / "offsets.json").read_text())[str(path)]
    assert (saved["inode"], saved["rowid"]) == (path.stat().st_ino, len(quiet.entries) + len(busy.entries))
    assert len(saved["row"]) == 32
    assert saved["sessions"]["quiet"] == {"published": 6, "last": "quiet-quiet-7"}
    assert saved["published"] == 6 + 4

    read: list[str] = []
    rows_of = session_rows

    def counted(
        db: sqlite3.Connection, session: str, upto: int, packed: str
    ) -> list[tuple[int, bytes | str]]:
        read.append(session)
        return rows_of(db, session, upto, packed)

    monkeypatch.setattr(transcript_follower, "session_rows", counted)
    again, _ = follower(tmp_path, sink)
    assert asyncio.run(again.poll()) == 0  # restarted with no new row: no session read
    assert read == []
    before = len(busy.entries)
    busy.prompt("next").turn("exec", 1)
    insert(path, busy.rows()[before:])
    scan(again)
    assert read == ["busy"]  # only the session with rows after the mark
    assert by_session(sink.events) == imported(path)
    assert sink.events[-1].event_id == "busy-busy-8"


def test_a_restart_after_a_failed_publish_counts_no_row_twice(tmp_path: Path) -> None:
    path = create_store(store_path(tmp_path))
    insert(path, Session("a").prompt("go").turn("read", 2).rows())
    sink = Sink()
    scan(follower(tmp_path, sink)[0])
    insert(path, Session("b").prompt("go").turn("read", 2).rows())
    sink.down = True
    follow, err = follower(tmp_path, sink)
    scan(follow)
    assert "publishing failed (gateway answered 503: unavailable); retrying" in err.getvalue()
    sink.down = False
    scan(follower(tmp_path, sink)[0])  # restarted with the mark still before b's rows
    assert by_session(sink.events) == imported(path)


def _replacement(path: Path, sessions: list[Session], first: str) -> Path:
    """A new store file holding ``sessions``, ``first``'s rows inserted first (other rowids)."""
    new = create_store(path.with_name("new.sqlite"))
    ordered = sorted(sessions, key=lambda s: s.session != first)
    insert(new, [row for session in ordered for row in session.rows()])
    return new


def test_a_store_replaced_by_another_file_publishes_only_what_is_new(tmp_path: Path) -> None:
    path = create_store(store_path(tmp_path))
    a = Session("a").prompt("go").turn("read", 3)
    insert(path, a.rows())
    sink = Sink()
    follow, err = follower(tmp_path, sink)
    scan(follow)
    copy = path.with_name("copy.sqlite")
    shutil.copyfile(path, copy)
    os.replace(copy, path)  # the same rows in another file: read whole again, nothing new
    scan(follow)
    assert err.getvalue().count(f"{path}: replaced; publishing the events not published before") == 1
    assert by_session(sink.events) == imported(path)
    a.prompt("more").turn("read", 1)
    b = Session("b").prompt("go").turn("exec", 2)
    os.replace(_replacement(path, [a, b], first="b"), path)  # a's rows now after b's: other rowids
    scan(follow)
    assert err.getvalue().count(f"{path}: replaced; publishing the events not published before") == 2
    assert by_session(sink.events) == imported(path)


def test_a_store_replaced_while_the_sidecar_was_down_is_not_resumed_at_the_old_rowid(tmp_path: Path) -> None:
    path = create_store(store_path(tmp_path))
    a = Session("a").prompt("go").turn("read", 6)
    insert(path, a.rows())
    sink = Sink()
    scan(follower(tmp_path, sink)[0])
    # the new file: c's rows first (rowids 1..10, below the old mark, 14), then a's again
    a.prompt("more").turn("read", 1)
    c = Session("c").prompt("go").turn("exec", 4)
    os.replace(_replacement(path, [a, c], first="c"), path)
    scan(follower(tmp_path, sink)[0])
    assert by_session(sink.events) == imported(path)


def test_rows_deleted_and_renumbered_in_place_are_read_again(tmp_path: Path) -> None:
    """The same file, its rows deleted and new ones inserted with the rowids the old ones had
    (a reset rowid sequence): the mark's row is another row, so the store is read whole."""
    path = create_store(store_path(tmp_path))
    insert(path, Session("a").prompt("go").turn("read", 4).rows())
    sink = Sink()
    follow, err = follower(tmp_path, sink)
    scan(follow)
    before = imported(path)
    with sqlite3.connect(path, timeout=0, isolation_level=None) as db:
        db.execute("DELETE FROM transcript_events")
    db.close()
    d = Session("d").prompt("go").turn("grep", 5)
    insert(path, d.rows())
    assert path.stat().st_ino == follow.stores[str(path)].mark.inode  # type: ignore[union-attr]
    scan(follow)
    assert by_session(sink.events) == {**before, **imported(path)}
    assert sorted(imported(path)) == ["d"]
    assert "replaced" in err.getvalue()


# -- what is read, and how --------------------------------------------------------------------


def test_the_real_store_publishes_what_import_gives_and_is_left_as_it_was(tmp_path: Path) -> None:
    path = store_path(tmp_path, "main")
    path.parent.mkdir(parents=True)
    shutil.copyfile(FIXTURE, path)  # written by OpenClaw 2026.9.6 (rollback journal once reduced)
    before = (path.read_bytes(), path.stat().st_mtime_ns)
    sink = Sink()
    follow, err = follower(tmp_path, sink)
    scan(follow)
    scan(follow)
    want = read_sqlite_store(FIXTURE, None, io.StringIO())
    assert want is not None
    assert isinstance(want[-1], RunEnd)
    assert sink.events == want[:-1]  # the same events, ids included; the open run's end held back
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before
    assert sorted(p.name for p in path.parent.iterdir()) == [STORE_NAME]
    assert err.getvalue() == ""


def test_only_openclaw_agent_stores_are_opened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """OpenClaw keeps lock databases beside the store (``….generation-lock.sqlite``): a reader's
    lock on one would stand in its way. A foreign or corrupt ``openclaw-agent.sqlite`` is said
    once."""
    path = create_store(store_path(tmp_path))
    insert(path, Session("a").prompt("go").turn("read", 1).rows())
    for name in ("openclaw-agent.sqlite.generation-lock.sqlite", "openclaw-agent.sqlite.reindex-lock.sqlite"):
        create_store(path.with_name(name))
    foreign = store_path(tmp_path, "foreign")
    foreign.parent.mkdir(parents=True)
    with sqlite3.connect(foreign) as db:
        db.execute("CREATE TABLE notes (text TEXT)")
    db.close()
    corrupt = store_path(tmp_path, "corrupt")
    corrupt.parent.mkdir(parents=True)
    corrupt.write_bytes(b"SQLite format 3\x00" + b"\xff" * 2000)
    opened: list[str] = []
    real = open_readonly

    def recorded(target: Path, timeout_s: float | None = None) -> sqlite3.Connection:
        opened.append(target.name if target.parent == path.parent else str(target.parent.parent.name))
        return real(target, timeout_s)

    monkeypatch.setattr(transcript_follower, "open_readonly", recorded)
    sink = Sink()
    follow, err = follower(tmp_path, sink)
    scan(follow)
    scan(follow)
    assert sorted(set(opened)) == sorted({STORE_NAME, "foreign", "corrupt"})
    assert by_session(sink.events) == imported(path)
    said = err.getvalue()
    assert (
        said.count(f"{foreign}: not an OpenClaw agent database (no transcript_events table); not followed")
        == 1
    )
    assert said.count(f"{corrupt}: not a readable SQLite database") == 1


def test_rows_that_cannot_be_read_are_named_by_session_and_seq_once(tmp_path: Path) -> None:
    path = create_store(store_path(tmp_path))
    session = Session("a").prompt("go").turn("read", 2)
    rows = session.rows()
    rows[3] = (*rows[3][:2], "{not json", rows[3][3])
    insert(path, rows)
    sink = Sink()
    follow, err = follower(tmp_path, sink)
    scan(follow)
    insert(path, Session("a").prompt("go").turn("read", 3).rows()[len(rows) :])
    scan(follow)
    assert err.getvalue().count(f"{path}[session a] seq 3: skipped: not valid JSON") == 1
    assert by_session(sink.events) == imported_quietly(path)


def imported_quietly(path: Path) -> dict[str, list[Event]]:
    err = io.StringIO()
    events = by_session(read_sqlite_store(path, None, err) or [])
    assert err.getvalue()  # the bad row is reported by import too
    return {k: v[:-1] if v and isinstance(v[-1], RunEnd) else v for k, v in events.items()}


# -- the command ------------------------------------------------------------------------------


class Recorder:
    """A gateway stand-in on 127.0.0.1: ``POST /v1/events`` (NDJSON) is kept and accepted."""

    def __init__(self) -> None:
        self.lines: list[bytes] = []
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                owner.lines.extend(line for line in body.split(b"\n") if line)
                answer = json.dumps({"accepted": body.count(b"\n") + 1}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def ids(self) -> list[str]:
        return [json.loads(line)["event_id"] for line in self.lines]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _sidecar(folder: Path, url: str, offsets: Path) -> subprocess.Popen[str]:
    args = [
        "import",
        "--follow",
        str(folder),
        "--gateway",
        url,
        "--offsets",
        str(offsets),
        "--interval",
        "0.1",
    ]
    return subprocess.Popen(
        [sys.executable, "-m", "loopwatch", *args], stderr=subprocess.PIPE, text=True, cwd=ROOT
    )


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    if proc.stderr is not None:
        proc.stderr.close()


def test_import_follow_on_a_folder_of_stores_publishes_and_resumes(tmp_path: Path) -> None:
    path = store_path(tmp_path, "main")
    path.parent.mkdir(parents=True)
    shutil.copyfile(FIXTURE, path)
    want = [e.event_id for e in read_sqlite_store(FIXTURE, None, io.StringIO()) or []][:-1]
    assert len(want) == 6
    gateway = Recorder()
    offsets = tmp_path / "offsets.json"
    try:
        sidecar = _sidecar(tmp_path / "agents", gateway.url, offsets)
        try:
            assert sidecar.stderr is not None
            line = wait_for_line(sidecar.stderr, "first scan")
            assert "first scan: 0 transcripts, 1 SQLite store, 0 events published before, 6 now" in line, line
            assert gateway.ids() == want
        finally:
            _stop(sidecar)
        again = _sidecar(tmp_path / "agents", gateway.url, offsets)
        try:
            assert again.stderr is not None
            line = wait_for_line(again.stderr, "first scan")
            assert "first scan: 0 transcripts, 1 SQLite store, 6 events published before, 0 now" in line, line
        finally:
            _stop(again)
        assert gateway.ids() == want
    finally:
        gateway.close()
