"""replay and import on a folder: its event streams and histories read, the other files named once."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from loopwatch.detectors.events import encode_event
from tests.helpers import ROOT, Trace
from tests.unit.test_cli import loopwatch

HISTORIES = ROOT / "tests" / "data" / "agent-histories"


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "history"
    (folder / "more").mkdir(parents=True)
    trace = Trace("r1")
    for _ in range(12):
        trace.both("read", {"path": "/missing"}, error="ENOENT")
    (folder / "events.jsonl").write_bytes(b"".join(encode_event(e) + b"\n" for e in trace.events))
    vectors = [{"name": f"case {n}", "steps": []} for n in range(40)]
    (folder / "vectors.jsonl").write_text("".join(json.dumps(v) + "\n" for v in vectors))
    (folder / "more" / "manifest.json").write_text(json.dumps({"runs": 3}))
    return folder


def test_replay_reads_a_folders_event_streams_and_names_the_other_files_once(tmp_path: Path) -> None:
    done = loopwatch("replay", "--json", str(_folder(tmp_path)))
    assert done.returncode == 0, done.stderr
    err = done.stderr.decode()
    assert "skipped invalid event" not in err
    assert err.count("left out 2 file(s)") == 1
    assert "vectors.jsonl" in err
    assert "manifest.json" in err
    runs = json.loads(done.stdout)["runs"]
    assert [(run["run"], run["calls"]) for run in runs] == [("r1", 12)]


def test_a_file_named_alone_is_still_read_line_by_line(tmp_path: Path) -> None:
    done = loopwatch("replay", "--json", str(_folder(tmp_path) / "vectors.jsonl"))
    err = done.stderr.decode()
    assert err.count("skipped invalid event") == 40
    assert "left out" not in err


def test_import_names_a_folders_other_files_once(tmp_path: Path) -> None:
    done = loopwatch("import", str(_folder(tmp_path)))
    err = done.stderr.decode()
    assert err.count("left out 3 file(s)") == 1
    assert "not agent histories loopwatch reads" in err


def test_gzip_compressed_event_streams_and_histories_replay_as_their_content(tmp_path: Path) -> None:
    """``events.jsonl.gz`` (the corpus's own form) and a compressed agent history, alone or in a
    folder, give what their content gives uncompressed."""
    plain = _folder(tmp_path)
    (plain / "vectors.jsonl").unlink()
    (plain / "more" / "manifest.json").unlink()
    session = next((HISTORIES / "claude-code").rglob("*.jsonl"))
    (plain / "more" / session.name).write_bytes(session.read_bytes())
    packed = tmp_path / "packed"
    for path in [p for p in plain.rglob("*") if p.is_file()]:
        target = packed / path.relative_to(plain).parent / (path.name + ".gz")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(gzip.compress(path.read_bytes()))

    def runs(source: Path) -> list[tuple[str, int, int]]:
        done = loopwatch("replay", "--json", str(source))
        assert done.returncode == 0, done.stderr
        assert "left out" not in done.stderr.decode()
        return sorted((r["run"], r["calls"], r["verdicts"]) for r in json.loads(done.stdout)["runs"])

    expected = runs(plain)
    assert len(expected) == 2  # the event stream's run and the Claude Code session's
    assert runs(packed) == expected
    assert runs(packed / "events.jsonl.gz") == runs(plain / "events.jsonl")
