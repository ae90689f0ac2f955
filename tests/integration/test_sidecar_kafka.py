"""``loopwatch import --follow DIR --kafka``: a growing OpenClaw transcript reaches a real worker
through the real broker, once, also across a restart of the sidecar."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from loopwatch.detectors.events import RunEnd
from loopwatch.streams.history.transcripts import transcript_events
from tests.helpers import DATA, ROOT, wait_for_line
from tests.integration.harness import Names, WorkerProcess, consume, expected_outputs, per_run, run
from tests.integration.test_worker import start_worker

pytestmark = pytest.mark.integration

SOURCE = DATA / "transcripts" / "openclaw-process-poll-loop.session.jsonl"


def sidecar(names: Names, bootstrap: str, folder: Path, offsets: Path) -> subprocess.Popen[str]:
    args = [
        "import",
        "--follow",
        str(folder),
        "--kafka",
        bootstrap,
        "--offsets",
        str(offsets),
        "--interval",
        "0.1",
    ]
    return subprocess.Popen(
        [sys.executable, "-m", "loopwatch", *args],
        env=names.env(bootstrap),
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )


def stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    if proc.stderr is not None:
        proc.stderr.read()  # drained, so the process is never stuck writing to it
    assert proc.wait(20) == 0
    if proc.stderr is not None:
        proc.stderr.close()


def test_a_growing_transcript_reaches_the_worker_once(
    kafka_bootstrap: str, names: Names, tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    lines = SOURCE.read_bytes().split(b"\n")
    folder = tmp_path / "agents" / "ops" / "sessions"
    folder.mkdir(parents=True)
    transcript = folder / "sess.jsonl"
    half = len(lines) // 2
    transcript.write_bytes(b"\n".join(lines[:half]) + b"\n")
    offsets = tmp_path / "offsets.json"
    expected = transcript_events(lines, "ops", "sess")
    assert isinstance(expected[-1], RunEnd)
    expected = expected[:-1]  # the open run's end is held back
    start_worker(names, kafka_bootstrap, tmp_path, workers, "w1")
    first = sidecar(names, kafka_bootstrap, tmp_path / "agents", offsets)
    try:
        first_part = transcript_events(lines[:half], "ops", "sess")[:-1]
        run(consume(kafka_bootstrap, names.events, until=len(first_part), timeout=60))
        with transcript.open("ab") as stream:  # the session goes on
            stream.write(b"\n".join(lines[half:]))
        published = run(consume(kafka_bootstrap, names.events, until=len(expected), timeout=60))
        assert len(published) == len(expected)
    finally:
        stop(first)
    again = sidecar(names, kafka_bootstrap, tmp_path / "agents", offsets)  # resumes: nothing twice
    try:
        assert again.stderr is not None
        line = wait_for_line(again.stderr, "first scan")
        assert f"1 transcript, {len(expected)} events published before, 0 now" in line, line
    finally:
        stop(again)
    published = run(consume(kafka_bootstrap, names.events, until=len(expected) + 1, timeout=5))
    assert sorted(e["event_id"] for e in published) == sorted(e.event_id for e in expected)  # each once
    want = expected_outputs(expected)
    assert want  # the poll loop is warned
    got = run(consume(kafka_bootstrap, names.verdicts, until=len(want), timeout=60, settle=1))
    assert per_run(got) == per_run(want)
