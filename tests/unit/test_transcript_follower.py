"""``loopwatch import --follow DIR --gateway URL``: a transcript that grows while followed
reaches a real gateway once, also across a restart of the sidecar."""

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from loopwatch.config import FleetConfig
from loopwatch.detectors.engine import Engine
from loopwatch.detectors.events import RunEnd
from loopwatch.streams.history.transcripts import transcript_events
from tests.helpers import DATA, ROOT, wait_for_line

SOURCE = DATA / "transcripts" / "openclaw-process-poll-loop.session.jsonl"


def spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "loopwatch", *args], stderr=subprocess.PIPE, text=True, cwd=ROOT
    )


def stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == 0
    if proc.stderr is not None:
        proc.stderr.close()


@pytest.fixture
def gateway() -> Iterator[str]:
    proc = spawn("gateway", "--listen", "127.0.0.1:0")
    assert proc.stderr is not None
    found = re.search(r"gateway at (http://\S+)", proc.stderr.readline())
    assert found
    yield found.group(1)
    stop(proc)


def metrics(url: str) -> Counter[str]:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as answer:
        text = answer.read().decode()
    counts: Counter[str] = Counter()
    for line in text.splitlines():
        if line.startswith(("loopwatch_events_total", "loopwatch_verdicts_total")):
            name, value = line.rsplit(" ", 1)
            counts[name] += int(float(value))
    return counts


def events_seen(url: str) -> int:
    return sum(v for k, v in metrics(url).items() if k.startswith("loopwatch_events_total"))


def wait_for(condition: object, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.1)
    assert condition(), "condition not met in time"  # type: ignore[operator]


def test_a_growing_transcript_reaches_the_gateway_once(gateway: str, tmp_path: Path) -> None:
    lines = SOURCE.read_bytes().split(b"\n")
    folder = tmp_path / "agents" / "ops" / "sessions"
    folder.mkdir(parents=True)
    transcript = folder / "sess.jsonl"
    half = len(lines) // 2
    transcript.write_bytes(b"\n".join(lines[:half]) + b"\n")
    offsets = tmp_path / "offsets.json"
    args = ["import", "--follow", str(tmp_path / "agents"), "--gateway", gateway, "--offsets", str(offsets)]
    args += ["--interval", "0.1"]

    expected = transcript_events(lines, "ops", "sess")
    assert isinstance(expected[-1], RunEnd)
    expected = expected[:-1]  # the open run's end is held back
    sidecar = spawn(*args)
    try:
        first_part = transcript_events(lines[:half], "ops", "sess")[:-1]
        wait_for(lambda: events_seen(gateway) == len(first_part))
        with transcript.open("ab") as stream:  # the session goes on
            stream.write(b"\n".join(lines[half:]))
        wait_for(lambda: events_seen(gateway) == len(expected))
    finally:
        stop(sidecar)
    assert json.loads(offsets.read_text())[str(transcript)]["published"] == len(expected)
    again = spawn(*args)  # a restart resumes: nothing is published twice
    try:
        assert again.stderr is not None
        line = wait_for_line(again.stderr, "first scan")
        assert f"1 transcript, {len(expected)} events published before, 0 now" in line, line
        assert events_seen(gateway) == len(expected)
    finally:
        stop(again)
    engine = Engine(FleetConfig.enabled_default())
    want = Counter(
        getattr(o, "detector", None) or getattr(o, "reason", "") for e in expected for o in engine.process(e)
    )
    got = metrics(gateway)
    verdicts = sum(v for k, v in got.items() if k.startswith("loopwatch_verdicts_total"))
    assert verdicts == sum(want.values()) > 0


def test_follow_needs_a_destination_and_a_folder(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "loopwatch", "import", "--follow", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=os.environ,
    )
    assert done.returncode == 2
    assert "--gateway URL or --kafka BOOTSTRAP" in done.stderr
