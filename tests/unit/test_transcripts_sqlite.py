"""OpenClaw 2026.8+ SQLite transcript stores (``agents/<id>/agent/openclaw-agent.sqlite``).

The fixture is a real store written by OpenClaw 2026.9.6 (``openclaw agent --local`` against a
scripted model, two prompts in one session: three failing ``read`` calls, then a turn without
tools), reduced to the tables the importer reads; the ``.jsonl`` next to it holds the same rows'
``event_json``, one per line: the JSONL transcript they replace."""

from __future__ import annotations

import argparse
import io
import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from loopwatch.detectors.events import RunEnd, ToolCall, ToolResult
from loopwatch.streams.cli.commands.transcripts import cmd_import
from loopwatch.streams.history import transcripts_sqlite
from loopwatch.streams.history.transcripts import transcript_events
from loopwatch.streams.history.transcripts_sqlite import (
    agent_from_store_path,
    is_sqlite,
    read_sqlite_store,
)
from tests.helpers import DATA

HERE = DATA / "transcripts-sqlite"
AGENTS = HERE / "agents"
STORE = AGENTS / "main" / "agent" / "openclaw-agent.sqlite"
SESSION = "1000f574-a63f-492e-b887-d0b4e656650b"
JSONL = HERE / f"{SESSION}.jsonl"
RUN = "f4501d11-a0d6-4329-a9b7-2ba498235c14"  # OpenClaw's runId of the first prompt


def _import(*paths: Path, agent_id: str | None = None) -> tuple[int, list[dict[str, object]], str]:
    out, err = io.BytesIO(), io.StringIO()
    args = argparse.Namespace(paths=[str(p) for p in paths], agent_id=agent_id, follow=None)
    code = cmd_import(args, out, err)
    return code, [json.loads(line) for line in out.getvalue().splitlines()], err.getvalue()


def _plain_copy(tmp_path: Path, name: str = "store.sqlite") -> Path:
    """The fixture's rows in a store with the same columns but without OpenClaw's CHECKs (they
    call ``octet_length``, which the SQLite of older Pythons lacks, so rows cannot be written)."""
    path = tmp_path / name
    with sqlite3.connect(STORE) as src, sqlite3.connect(path) as dst:
        dst.execute(
            "CREATE TABLE transcript_events (session_id TEXT NOT NULL, seq INTEGER NOT NULL, "
            "event_json TEXT, created_at INTEGER NOT NULL, event_zstd BLOB, event_utf8_bytes INTEGER, "
            "navigation_json TEXT, PRIMARY KEY (session_id, seq))"
        )
        dst.execute(
            "CREATE TABLE schema_meta (meta_key TEXT, role TEXT, schema_version INTEGER, agent_id TEXT, "
            "app_version TEXT, created_at INTEGER, updated_at INTEGER)"
        )
        dst.executemany(
            "INSERT INTO schema_meta VALUES (?,?,?,?,?,?,?)", src.execute("SELECT * FROM schema_meta")
        )
        dst.executemany(
            "INSERT INTO transcript_events VALUES (?,?,?,?,?,?,?)",
            src.execute("SELECT * FROM transcript_events"),
        )
    src.close()
    dst.close()
    return path


def test_the_store_imports_to_the_events_of_its_jsonl_transcript() -> None:
    err = io.StringIO()
    got = read_sqlite_store(STORE, None, err)
    want = transcript_events(JSONL.read_bytes().splitlines(), "main", SESSION)
    assert got == want
    assert err.getvalue() == ""
    # and, derived from the rows by hand: three read calls that failed, one run, OpenClaw's runId
    assert [type(e) for e in got] == [ToolCall, ToolResult] * 3 + [RunEnd]
    assert {(e.run_id, e.session_id, e.agent_id) for e in got} == {(RUN, SESSION, "main")}
    calls = [e for e in got if isinstance(e, ToolCall)]
    assert [(c.tool, c.params, c.tool_call_id) for c in calls] == [
        ("read", {"path": "MISSING.md"}, f"call_{n}") for n in range(3)
    ]
    results = [e for e in got if isinstance(e, ToolResult)]
    assert all(isinstance(r.error, str) and "File not found" in r.error for r in results)
    assert got[0].event_id == f"{SESSION}-1730dc81-8e9b-4e87-90b9-e743ae88820c.1"
    assert got[-1].event_id == f"{SESSION}-13a45457-3f53-41f8-b52d-3de1d7f334b6.end"


def test_import_command_on_the_file_and_on_the_agents_folder_matches_the_jsonl() -> None:
    code, from_jsonl, _ = _import(JSONL, agent_id="main")
    assert code == 0
    assert len(from_jsonl) == 7
    for source in (STORE, AGENTS):
        code, events, err = _import(source)
        assert (code, events, err) == (0, from_jsonl, "")


def test_detection_and_layout(tmp_path: Path) -> None:
    assert is_sqlite(STORE)
    assert not is_sqlite(JSONL)
    assert not is_sqlite(tmp_path / "missing.sqlite")
    assert agent_from_store_path("/home/u/.openclaw/agents/coder/agent/openclaw-agent.sqlite") == "coder"
    assert agent_from_store_path("/tmp/openclaw-agent.sqlite") is None


def test_run_ids_come_from_the_rows_and_the_agent_from_the_store(tmp_path: Path) -> None:
    """Without the ``openclaw:bootstrap-context:full`` entries the run is still named by the
    ``__openclaw.runId`` of its assistant/tool-result rows; outside the agents/<id>/agent layout
    the agent id is the store's own (``schema_meta``), unless --agent-id is given."""
    path = _plain_copy(tmp_path)
    with sqlite3.connect(path) as db:
        db.execute("DELETE FROM transcript_events WHERE event_json LIKE '%openclaw:bootstrap-context%'")
    db.close()
    events = read_sqlite_store(path, None, io.StringIO())
    assert events
    assert {(e.run_id, e.agent_id) for e in events} == {(RUN, "main")}
    assert {e.agent_id for e in read_sqlite_store(path, "coder", io.StringIO()) or []} == {"coder"}


def test_compressed_rows_are_decoded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    zstandard = pytest.importorskip("zstandard")
    path = _plain_copy(tmp_path)
    with sqlite3.connect(path) as db:
        rows = db.execute(
            "SELECT seq, event_json FROM transcript_events WHERE event_json LIKE ?",
            ('%"role":"toolResult"%',),
        )
        for seq, text in rows.fetchall():
            raw = text.encode()
            packed = zstandard.ZstdCompressor(level=1).compress(raw)
            db.execute(
                "UPDATE transcript_events SET event_json = NULL, event_zstd = ?, event_utf8_bytes = ?, "
                "navigation_json = '{}' WHERE seq = ?",
                (packed, len(raw), seq),
            )
    db.close()
    err = io.StringIO()
    assert read_sqlite_store(path, "main", err) == read_sqlite_store(STORE, "main", io.StringIO())
    assert err.getvalue() == ""

    # without the zstandard package: each compressed row is named and skipped
    monkeypatch.setitem(sys.modules, "zstandard", None)
    err = io.StringIO()
    events = read_sqlite_store(path, "main", err)
    assert events is not None
    assert not any(isinstance(e, ToolResult) for e in events)
    lines = err.getvalue().splitlines()
    assert [line.split(" seq ")[1].split(":")[0] for line in lines] == ["6", "9", "12"]
    assert all("install the zstandard package" in line for line in lines)


def test_bad_rows_are_named_by_session_and_seq(tmp_path: Path) -> None:
    path = _plain_copy(tmp_path)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE transcript_events SET event_json = '{not json' WHERE seq = 2")
        db.execute(
            "INSERT INTO transcript_events VALUES ('other', 0, '{\"type\":\"message\"}', 0, NULL, NULL, NULL)"
        )
    db.close()
    err = io.StringIO()
    events = read_sqlite_store(path, "main", err)
    assert events == read_sqlite_store(STORE, "main", io.StringIO())
    assert f"{path}[session {SESSION}] seq 2: skipped: not valid JSON" in err.getvalue()
    assert f"{path}[session other]: no session header; skipped" in err.getvalue()


def _locked(tmp_path: Path) -> tuple[Path, sqlite3.Connection]:
    path = tmp_path / "locked.sqlite"
    shutil.copyfile(STORE, path)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("PRAGMA journal_mode=DELETE")
    holder.execute("BEGIN EXCLUSIVE")
    return path, holder


def test_corrupt_foreign_and_locked_files_are_reported_and_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transcripts_sqlite, "_BUSY_TIMEOUT_S", 0.05)
    corrupt = tmp_path / "corrupt.sqlite"
    corrupt.write_bytes(b"SQLite format 3\x00" + b"\xff" * 2000)
    foreign = tmp_path / "foreign.sqlite"
    with sqlite3.connect(foreign) as db:
        db.execute("CREATE TABLE notes (text TEXT)")
    db.close()
    locked, holder = _locked(tmp_path)
    try:
        code, events, err = _import(corrupt, foreign, locked, STORE)
    finally:
        holder.close()
    assert code == 0  # the good store is still imported
    assert len(events) == 7
    assert f"{corrupt}: not a readable SQLite database" in err
    assert f"{foreign}: not an OpenClaw agent database (no transcript_events table); skipped" in err
    assert f"{locked}: cannot read (database is locked); skipped" in err
    assert "Traceback" not in err

    code, events, err = _import(foreign)
    assert (code, events) == (1, [])
    assert "no transcript imported" in err


def test_reading_writes_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "agents" / "main" / "agent"
    folder.mkdir(parents=True)
    path = folder / "openclaw-agent.sqlite"
    shutil.copyfile(STORE, path)
    before = (path.read_bytes(), path.stat().st_mtime_ns)
    assert _import(tmp_path / "agents")[0] == 0
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before
    assert sorted(p.name for p in folder.iterdir()) == ["openclaw-agent.sqlite"]


def test_replay_reads_the_store_as_its_jsonl_transcript() -> None:
    def replay(source: Path, *extra: str) -> dict[str, object]:
        done = subprocess.run(
            [sys.executable, "-m", "loopwatch", "replay", str(source), "--json", *extra],
            capture_output=True,
            check=True,
            timeout=120,
        )
        assert done.stderr == b""
        report: dict[str, object] = json.loads(done.stdout)
        return report

    from_store = replay(STORE)
    assert from_store == replay(JSONL, "--agent-id", "main")
    assert from_store["events"] == 7
    assert [(r["run"], r["agent"], r["calls"]) for r in from_store["runs"]] == [(RUN, "main", 3)]  # type: ignore[attr-defined]
