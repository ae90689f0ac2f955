"""replay and import on a folder: its event streams and histories read, the other files named once."""

from __future__ import annotations

import json
from pathlib import Path

from loopwatch.detectors.events import encode_event
from tests.helpers import Trace
from tests.unit.test_cli import loopwatch


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
