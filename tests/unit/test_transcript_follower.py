"""``loopwatch import --follow DIR --gateway URL``: a transcript that grows while followed
reaches a real gateway once, also across a restart of the sidecar; SIGTERM stops it at once,
even in the middle of a publish; ``--interval`` is checked."""

import argparse
import json
import os
import re
import signal
import socket
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
from loopwatch.streams.history.transcript_follower import interval_seconds
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


def test_sigterm_stops_the_sidecar_within_a_second_even_while_it_publishes(tmp_path: Path) -> None:
    folder = tmp_path / "agents" / "ops" / "sessions"
    folder.mkdir(parents=True)
    (folder / "sess.jsonl").write_bytes(SOURCE.read_bytes())
    offsets = tmp_path / "offsets.json"
    with socket.socket() as silent:  # a gateway that takes the request and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        silent.settimeout(60)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        sidecar = spawn(
            "import", "--follow", str(tmp_path / "agents"), "--gateway", url, "--offsets", str(offsets)
        )
        try:
            connection, _ = silent.accept()  # the publish has started and waits for an answer
            sent = time.monotonic()
            sidecar.send_signal(signal.SIGTERM)
            code = sidecar.wait(20)
            took = time.monotonic() - sent
            connection.close()
        finally:
            if sidecar.poll() is None:
                sidecar.kill()
            if sidecar.stderr is not None:
                sidecar.stderr.close()
    assert code == 0
    assert took < 1.0, f"{took:.2f} s"
    state = json.loads(offsets.read_text())  # consistent: the abandoned publish is not counted
    assert state[str(folder / "sess.jsonl")]["published"] == 0


@pytest.mark.parametrize("value", ["nan", "0"])
def test_an_interval_out_of_range_is_refused(tmp_path: Path, value: str) -> None:
    args = ["import", "--follow", str(tmp_path), "--gateway", "http://127.0.0.1:9", "--interval", value]
    done = subprocess.run(
        [sys.executable, "-m", "loopwatch", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--interval: must be a number of seconds from 0.05 to 3600" in done.stderr


def test_the_interval_type_takes_seconds_within_bounds() -> None:
    assert interval_seconds("0.5") == 0.5
    assert interval_seconds("3600") == 3600
    for text in ("-1", "0", "0.001", "nan", "inf", "-inf", "1e9", "soon", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            interval_seconds(text)


def test_an_event_the_gateway_refuses_is_skipped_and_the_rest_arrives(gateway: str, tmp_path: Path) -> None:
    lines = SOURCE.read_bytes().split(b"\n")
    entry = json.loads(lines[5])
    assert entry["message"]["content"][1]["type"] == "toolCall"
    entry["message"]["content"][1]["name"] = ""  # an empty tool name: an invalid event
    broken = [*lines[:5], json.dumps(entry).encode(), *lines[6:]]
    folder = tmp_path / "agents" / "ops" / "sessions"
    folder.mkdir(parents=True)
    (folder / "a.jsonl").write_bytes(b"\n".join(broken))
    (folder / "b.jsonl").write_bytes(b"\n".join(lines))
    good = transcript_events(broken, "ops", "a")[:-1] + transcript_events(lines, "ops", "b")[:-1]
    want = len([e for e in good if getattr(e, "tool", "x")])
    offsets = str(tmp_path / "offsets.json")
    sidecar = spawn(
        "import", "--follow", str(tmp_path / "agents"), "--gateway", gateway, "--offsets", offsets
    )
    try:
        assert sidecar.stderr is not None
        line = wait_for_line(sidecar.stderr, "skipped")
        assert f"{folder / 'a.jsonl'}:6: event a-s831.1 skipped: gateway answered 400: event" in line, line
        wait_for(lambda: events_seen(gateway) == want)
    finally:
        stop(sidecar)


def _import(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loopwatch", "import", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=os.environ,
        timeout=120,
    )


@pytest.mark.parametrize("flag", ["--gateway", "--kafka"])
def test_publishing_flags_without_follow_are_refused_not_ignored(flag: str) -> None:
    done = _import(flag, "http://127.0.0.1:1" if flag == "--gateway" else "127.0.0.1:1", str(SOURCE))
    assert done.returncode == 2
    assert f"{flag} publishes with --follow DIR only" in done.stderr
    assert done.stdout == ""


def test_a_gateway_that_is_no_url_is_refused_at_once(tmp_path: Path) -> None:
    done = _import("--follow", str(tmp_path), "--gateway", "notaurl")
    assert done.returncode == 2
    assert "--gateway 'notaurl': not an http:// or https:// URL" in done.stderr


def test_an_offsets_file_that_cannot_be_read_stops_the_sidecar(tmp_path: Path) -> None:
    """Starting afresh would publish every transcript again: the sidecar says so and stops."""
    folder = tmp_path / "sessions"
    folder.mkdir()
    (folder / SOURCE.name).write_bytes(SOURCE.read_bytes())
    offsets = tmp_path / "offsets.json"
    offsets.write_text("{not json")
    done = _import("--follow", str(folder), "--gateway", "http://127.0.0.1:1", "--offsets", str(offsets))
    assert done.returncode == 2
    assert f"offsets file {offsets}: cannot be read" in done.stderr
    assert "remove it to publish every transcript again" in done.stderr
    assert "Traceback" not in done.stderr
    assert offsets.read_text() == "{not json"


def test_an_unreachable_kafka_is_named_without_a_traceback(tmp_path: Path) -> None:
    done = _import("--follow", str(tmp_path), "--kafka", "127.0.0.1:1")
    assert done.returncode == 2
    assert "loopwatch: Kafka at 127.0.0.1:1 (--kafka): " in done.stderr
    assert "Traceback" not in done.stderr
