"""The ``import --follow`` sidecar's :class:`Follower`, driven scan by scan with in-memory
destinations: bad events, oversized batches, failing destinations, rewritten and replaced
transcripts, non-regular files, deep nesting."""

from __future__ import annotations

import asyncio
import http.server
import io
import json
import os
import socket
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka.errors import MessageSizeTooLargeError

from loopwatch.detectors.decoding import decode_event
from loopwatch.detectors.events import Event, InvalidEvent, RunEnd, encode_event
from loopwatch.streams.history.transcript_follower import (
    Follower,
    Rejected,
    publish_to_gateway,
    publish_to_kafka,
)
from loopwatch.streams.history.transcripts import transcript_events
from tests.helpers import ROOT


class Transcript:
    """An OpenClaw transcript built entry by entry (entry ids ``<session><n>``)."""

    def __init__(self, session: str = "s1") -> None:
        self.session = session
        self.entries: list[dict[str, Any]] = [{"type": "session", "version": 3, "id": session}]

    def entry(self, **fields: Any) -> Transcript:
        number = len(self.entries)
        self.entries.append(
            {"id": f"{self.session}{number}", "timestamp": f"2026-01-01T00:00:{number % 60:02d}Z", **fields}
        )
        return self

    def prompt(self, text: str) -> Transcript:
        return self.entry(type="message", message={"role": "user", "content": text})

    def call(self, tool: str, params: Any, call_id: str) -> Transcript:
        block = {"type": "toolCall", "id": call_id, "name": tool, "arguments": params}
        message = {"role": "assistant", "content": [block], "stopReason": "toolUse"}
        return self.entry(type="message", message=message)

    def result(self, tool: str, call_id: str, text: str) -> Transcript:
        content = [{"type": "text", "text": text}]
        message = {"role": "toolResult", "toolCallId": call_id, "toolName": tool, "content": content}
        return self.entry(type="message", message=message)

    def turn(self, tool: str, n: int, text: str = "ok") -> Transcript:
        """``n`` calls of ``tool``, each answered."""
        for index in range(n):
            call_id = f"{self.session}-c{len(self.entries)}"
            self.call(tool, {"i": index}, call_id).result(tool, call_id, text)
        return self

    def lines(self, compact: bool = True) -> list[bytes]:
        separators = (",", ":") if compact else (", ", ": ")
        return [json.dumps(e, separators=separators).encode() for e in self.entries]

    def data(self, compact: bool = True) -> bytes:
        return b"".join(line + b"\n" for line in self.lines(compact))


class Sink:
    """A destination that keeps what it is given; ``refuse`` / ``down`` make it fail."""

    def __init__(self) -> None:
        self.batches: list[list[Event]] = []
        self.refuse_invalid = False  # answer like the gateway: 400 naming the invalid event
        self.down_for: set[str] = set()  # session ids whose events fail as if the gateway were down

    @property
    def events(self) -> list[Event]:
        return [e for batch in self.batches for e in batch]

    async def __call__(self, events: list[Event]) -> None:
        if any(e.session_id in self.down_for for e in events):
            raise OSError("gateway answered 503: unavailable")
        if self.refuse_invalid:
            for index, event in enumerate(events):
                try:
                    decode_event(encode_event(event))
                except InvalidEvent as exc:
                    raise Rejected(f"gateway answered 400: event {index}: {exc.reason}", index) from exc
        self.batches.append(events)


def expected(lines: list[bytes], agent: str, stem: str) -> list[Event]:
    events = transcript_events(lines, agent, stem)
    return events[:-1] if events and isinstance(events[-1], RunEnd) else events


def follower(root: Path, sink: Any, **options: Any) -> tuple[Follower, io.StringIO]:
    err = io.StringIO()
    return Follower(root / "agents", sink, root / "offsets.json", None, err, **options), err


def sessions(root: Path, agent: str = "ops") -> Path:
    folder = root / "agents" / agent / "sessions"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def scan(follow: Follower) -> int:
    return asyncio.run(follow.poll())


# -- 1. bad events, oversized batches, failing destinations ---------------------------------


def test_a_bad_event_is_skipped_and_reported_and_holds_back_no_file(tmp_path: Path) -> None:
    folder = sessions(tmp_path)
    bad = Transcript("a").prompt("go").turn("read", 2).call("", {}, "x").result("", "x", "?").turn("read", 2)
    (folder / "a.jsonl").write_bytes(bad.data())
    good = Transcript("b").prompt("go").turn("exec", 3)
    (folder / "b.jsonl").write_bytes(good.data())
    sink = Sink()
    sink.refuse_invalid = True
    follow, err = follower(tmp_path, sink)
    scan(follow)
    published = {e.event_id for e in sink.events}
    want_a = {e.event_id for e in expected(bad.lines(), "ops", "a") if getattr(e, "tool", "x")}
    assert published == want_a | {e.event_id for e in expected(good.lines(), "ops", "b")}
    assert follow.skipped == 2  # the call with no tool name, and its result
    assert f"{folder / 'a.jsonl'}:7: event a-a6.1 skipped: gateway answered 400: event" in err.getvalue()
    assert f"{folder / 'a.jsonl'}:8: event a-a7 skipped" in err.getvalue()
    before = len(sink.batches)
    assert scan(follow) == 0  # never retried
    assert len(sink.batches) == before
    assert Counter(e.event_id for e in sink.events).most_common(1)[0][1] == 1


def test_a_refusal_that_names_no_event_is_narrowed_down(tmp_path: Path) -> None:
    folder = sessions(tmp_path)
    bad = Transcript("a").prompt("go").turn("read", 5).call("", {}, "x").turn("read", 5)
    (folder / "a.jsonl").write_bytes(bad.data())
    batches: list[list[Event]] = []

    async def gateway(events: list[Event]) -> None:
        if any(getattr(e, "tool", "x") == "" for e in events):
            raise Rejected("gateway answered 413: too large")
        batches.append(events)

    follow, err = follower(tmp_path, gateway)
    scan(follow)
    want = [e for e in expected(bad.lines(), "ops", "a") if getattr(e, "tool", "x")]
    assert sorted(e.event_id for b in batches for e in b) == sorted(e.event_id for e in want)
    assert follow.skipped == 1
    assert "event a-a12.1 skipped: gateway answered 413" in err.getvalue()


def test_batches_stay_under_max_event_bytes_and_a_larger_event_is_skipped(tmp_path: Path) -> None:
    folder = sessions(tmp_path)
    transcript = Transcript("a").prompt("go").turn("read", 20, text="x" * 300)
    transcript.call("write", {"text": "y" * 5000}, "big").turn("read", 3)
    (folder / "a.jsonl").write_bytes(transcript.data())
    sink = Sink()
    follow, err = follower(tmp_path, sink, max_event_bytes=2000)
    scan(follow)
    assert len(sink.batches) > 5
    for batch in sink.batches:
        assert len(b"\n".join(encode_event(e) for e in batch)) <= 2000
    want = [e for e in expected(transcript.lines(), "ops", "a") if e.event_id != "a-a42.1"]
    assert sink.events == want
    assert follow.skipped == 1
    assert "event a-a42.1 skipped: " in err.getvalue()
    assert "exceed maxEventBytes (2000)" in err.getvalue()


def test_a_failing_destination_holds_back_the_other_files_one_scan_at_most(tmp_path: Path) -> None:
    folder = sessions(tmp_path)
    for name in ("a", "b", "c"):
        (folder / f"{name}.jsonl").write_bytes(Transcript(name).prompt("go").turn("read", 2).data())
    sink = Sink()
    sink.down_for = {"a"}  # a's events always fail, as if they broke the gateway
    follow, err = follower(tmp_path, sink)
    scan(follow)  # a fails first: the scan stops there
    assert "publishing failed (gateway answered 503: unavailable); retrying" in err.getvalue()
    scan(follow)  # starts after a
    assert {e.session_id for e in sink.events} == {"b", "c"}
    assert not follow.complete
    sink.down_for = set()  # the gateway is back: nothing was lost
    scan(follow)
    assert follow.complete
    assert sorted(e.event_id for e in sink.events) == sorted(
        e.event_id
        for name in "abc"
        for e in expected(Transcript(name).prompt("go").turn("read", 2).lines(), "ops", name)
    )


def test_kafka_publishes_invalid_events_for_the_dead_letter_topic_and_skips_what_it_cannot_take(
    tmp_path: Path,
) -> None:
    class Producer:
        def __init__(self) -> None:
            self.sent: list[bytes] = []

        async def send(self, topic: str, value: bytes, key: bytes) -> asyncio.Future[None]:
            if len(value) > 3000:
                raise MessageSizeTooLargeError("too large")
            self.sent.append(value)
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return done

    folder = sessions(tmp_path)
    transcript = Transcript("a").prompt("go").turn("read", 2).call("", {}, "x")
    transcript.call("write", {"text": "y" * 5000}, "big").turn("read", 2)
    (folder / "a.jsonl").write_bytes(transcript.data())
    producer = Producer()
    follow, err = follower(tmp_path, publish_to_kafka(producer, "events"))
    scan(follow)
    sent = [json.loads(value)["event_id"] for value in producer.sent]
    want = [e.event_id for e in expected(transcript.lines(), "ops", "a")]
    assert "a-a6.1" in sent  # the call with no tool name: the worker dead-letters it
    assert sent == [i for i in want if i != "a-a7.1"]
    assert "a-a7.1 skipped: Kafka refused the record" in err.getvalue()


@pytest.fixture
def stub_gateway() -> Iterator[tuple[str, list[tuple[int, bytes]]]]:
    """An HTTP server answering ``POST /v1/events`` with the queued (status, body) answers."""
    answers: list[tuple[int, bytes]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            status, body = answers.pop(0) if answers else (202, b'{"accepted": 1}')
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", answers
    server.shutdown()
    server.server_close()


def test_the_gateway_publisher_tells_refused_events_from_failures(
    stub_gateway: tuple[str, list[tuple[int, bytes]]],
) -> None:
    url, answers = stub_gateway
    events = expected(Transcript("a").prompt("go").turn("read", 2).lines(), "ops", "a")

    async def publish(events: list[Event]) -> None:
        await publish_to_gateway(url, None)(events)

    answers.append((400, b'{"error": "event 2: tool: must be a non-empty string"}'))
    with pytest.raises(Rejected) as refused:
        asyncio.run(publish(events))
    assert (refused.value.index, refused.value.sent) == (2, 0)
    answers.append((413, b'{"error": "the body exceeds maxEventBytes (10 bytes)"}'))
    with pytest.raises(Rejected) as refused:
        asyncio.run(publish(events))
    assert refused.value.index is None
    for status in (401, 408, 500, 503):
        answers.append((status, b'{"error": "later"}'))
        with pytest.raises(OSError, match=f"gateway answered {status}: later"):
            asyncio.run(publish(events))
    asyncio.run(publish(events))


# -- 2. resume: rewritten, replaced, rotated files -------------------------------------------


def test_a_same_size_rewrite_in_place_is_seen(tmp_path: Path) -> None:
    folder = sessions(tmp_path)
    path = folder / "a.jsonl"
    first = Transcript("a").prompt("go").turn("read", 3).prompt("more").turn("read", 1)
    second = Transcript("b").prompt("go").turn("exec", 3).prompt("more").turn("exec", 1)
    assert len(first.data()) == len(second.data())
    path.write_bytes(first.data())
    written = path.stat()
    sink = Sink()
    follow, _ = follower(tmp_path, sink)
    scan(follow)
    with path.open("r+b") as stream:  # same inode and size
        stream.write(second.data())
    os.utime(path, ns=(written.st_atime_ns, written.st_mtime_ns))  # a coarse clock: same mtime
    scan(follow)
    assert sink.events == expected(first.lines(), "ops", "a") + expected(second.lines(), "ops", "a")
    os.utime(path, ns=(0, written.st_mtime_ns - 2_000_000_000))  # then written long before a scan
    scan(follow)
    assert str(path) in follow.read_as  # so it is not read again until it changes


def test_a_copy_truncate_rotation_publishes_the_new_transcript_from_its_start(tmp_path: Path) -> None:
    folder = sessions(tmp_path)
    path = folder / "a.jsonl"
    old = Transcript("old").prompt("go").turn("read", 3)
    path.write_bytes(old.data())
    sink = Sink()
    follow, _ = follower(tmp_path, sink)
    scan(follow)
    (folder / "a.jsonl.1").write_bytes(path.read_bytes())  # logrotate copytruncate
    inode = path.stat().st_ino
    with path.open("r+b") as stream:
        stream.truncate(0)
    new = Transcript("new").prompt("go").turn("exec", 6)
    with path.open("ab") as stream:
        stream.write(new.data())
    assert path.stat().st_ino == inode
    scan(follow)
    assert sink.events == expected(old.lines(), "ops", "a") + expected(new.lines(), "ops", "a")


def test_a_restart_resumes_where_the_prefix_still_matches(tmp_path: Path) -> None:
    folder = sessions(tmp_path)
    path = folder / "a.jsonl"
    transcript = Transcript("a").prompt("go").turn("read", 3)
    path.write_bytes(transcript.data())
    sink = Sink()
    scan(follower(tmp_path, sink)[0])
    saved = json.loads((tmp_path / "offsets.json").read_text())[str(path)]
    assert saved["size"] == len(transcript.data())
    assert len(saved["hash"]) == 32
    assert saved["published"] == len(expected(transcript.lines(), "ops", "a"))
    transcript.turn("read", 2).prompt("next").turn("read", 1)
    with path.open("ab") as stream:
        stream.write(transcript.data()[len(path.read_bytes()) :])
    again = Sink()
    scan(follower(tmp_path, again)[0])  # restarted: only what is new
    want = expected(transcript.lines(), "ops", "a")
    assert again.events == want[saved["published"] :]


def test_a_reused_inode_with_other_content_is_a_new_transcript(tmp_path: Path) -> None:
    folder = sessions(tmp_path)
    path = folder / "a.jsonl"
    first = Transcript("a").prompt("go").turn("read", 3)
    path.write_bytes(first.data())
    scan(follower(tmp_path, Sink())[0])
    path.unlink()
    second = Transcript("b").prompt("go").turn("exec", 5)
    path.write_bytes(second.data())  # the file system may give it the same inode
    offsets = json.loads((tmp_path / "offsets.json").read_text())
    offsets[str(path)]["inode"] = path.stat().st_ino
    (tmp_path / "offsets.json").write_text(json.dumps(offsets))
    sink = Sink()
    scan(follower(tmp_path, sink)[0])
    assert sink.events == expected(second.lines(), "ops", "a")


def test_a_restart_after_a_rewrite_republishes_nothing_published_before(tmp_path: Path) -> None:
    folder = sessions(tmp_path)
    path = folder / "a.jsonl"
    transcript = Transcript("a").prompt("go").turn("read", 150)  # 300 events, past 256 ids
    path.write_bytes(transcript.data())
    sink = Sink()
    scan(follower(tmp_path, sink)[0])
    assert len(sink.events) == 300
    transcript.turn("read", 1)
    replacement = path.with_name("tmp")
    replacement.write_bytes(transcript.data(compact=False))  # rewritten: other bytes, same entries
    os.replace(replacement, path)
    again = Sink()
    scan(follower(tmp_path, again)[0])
    assert [e.event_id for e in again.events] == ["a-a302.1", "a-a303"]


# -- 3. event ids from the entries ------------------------------------------------------------


def test_a_rewritten_transcript_republished_whole_gives_the_same_ids(tmp_path: Path) -> None:
    folder = sessions(tmp_path)
    path = folder / "a.jsonl"
    transcript = Transcript("a").prompt("go").turn("read", 2)
    path.write_bytes(transcript.data())
    sink = Sink()
    follow, err = follower(tmp_path, sink)
    scan(follow)
    transcript.entries.insert(1, {"type": "model_change", "id": "m", "provider": "p", "modelId": "x"})
    path.write_bytes(transcript.data(compact=False))  # rewritten in place, lines shifted
    scan(follow)
    assert len(sink.events) == 4  # nothing published twice
    assert "rewritten" in err.getvalue()
    ids = [e.event_id for e in expected(transcript.lines(), "ops", "a")]
    assert ids == [e.event_id for e in sink.events]


# -- 4. non-regular files ---------------------------------------------------------------------


def test_fifos_sockets_and_folders_named_jsonl_are_skipped(tmp_path: Path) -> None:
    folder = sessions(tmp_path)
    os.mkfifo(folder / "fifo.jsonl")
    (folder / "dir.jsonl").mkdir()
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(str(folder / "sock.jsonl"))
    (folder / "ok.jsonl").write_bytes(Transcript("ok").prompt("go").turn("read", 1).data())
    sink = Sink()
    follow, err = follower(tmp_path, sink)
    done = threading.Event()

    def work() -> None:  # in a thread: a blocking open must not hang the test itself
        scan(follow)
        scan(follow)
        done.set()

    threading.Thread(target=work, daemon=True).start()
    try:
        assert done.wait(10), "the scan blocked"
    finally:
        unix.close()
    assert [e.session_id for e in sink.events] == ["ok", "ok"]
    for name in ("fifo", "dir", "sock"):
        assert err.getvalue().count(f"{folder / name}.jsonl: not a regular file, skipped") == 1


# -- 6. deeply nested lines -------------------------------------------------------------------


def test_a_deeply_nested_line_is_skipped_and_reported(tmp_path: Path) -> None:
    folder = sessions(tmp_path)
    transcript = Transcript("a").prompt("go").turn("read", 1)
    lines = transcript.lines()
    deep = b"[" * 3000 + b"]" * 3000
    nested_object = b'{"type":"message","id":"d","message":' + b"[" * 3000 + b"]" * 3000 + b"}"
    data = b"\n".join([*lines[:2], deep, nested_object, *lines[2:]]) + b"\n"
    (folder / "a.jsonl").write_bytes(data)
    skipped: list[tuple[int, str]] = []
    events = transcript_events(data.split(b"\n"), "ops", "a", skipped)
    assert skipped == [(3, "not valid JSON: nested too deeply"), (4, "not valid JSON: nested too deeply")]
    assert [e.event_id for e in events] == [e.event_id for e in transcript_events(lines, "ops", "a")]
    sink = Sink()
    follow, err = follower(tmp_path, sink)
    scan(follow)
    assert sink.events == events[:-1]
    assert f"{folder / 'a.jsonl'}:3: skipped: not valid JSON: nested too deeply" in err.getvalue()
    (folder / "b.jsonl").write_bytes(deep + b"\n")  # not even a header
    scan(follow)
    scan(follow)
    assert err.getvalue().count("a.jsonl:3: skipped") == 1  # reported once


def test_import_skips_a_deeply_nested_line_and_names_it(tmp_path: Path) -> None:
    lines = Transcript("a").prompt("go").turn("read", 1).lines()
    path = tmp_path / "a.jsonl"
    path.write_bytes(b"\n".join([*lines[:2], b"[" * 3000 + b"]" * 3000, *lines[2:]]) + b"\n")
    done = subprocess.run(
        [sys.executable, "-m", "loopwatch", "import", str(path)], capture_output=True, timeout=120, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert f"{path}:3: skipped: not valid JSON: nested too deeply" in done.stderr.decode()
    assert len(done.stdout.splitlines()) == 3


def test_a_folder_that_vanishes_for_a_while_is_not_forgotten(tmp_path: Path) -> None:
    folder = sessions(tmp_path)
    (folder / "a.jsonl").write_bytes(Transcript("a").prompt("go").turn("read", 2).data())
    sink = Sink()
    follow, err = follower(tmp_path, sink)
    scan(follow)
    (tmp_path / "agents").rename(tmp_path / "away")  # unmounted, say
    scan(follow)
    assert "not a folder" in err.getvalue()
    (tmp_path / "away").rename(tmp_path / "agents")
    scan(follow)
    assert len(sink.events) == 4  # nothing published again


def test_a_pre_compaction_copy_beside_its_transcript_is_not_published_again(tmp_path: Path) -> None:
    """Older OpenClaw releases left ``<session>.checkpoint.<uuid>.jsonl`` beside the transcript,
    repeating its entries: read too, every call of it would count twice."""
    folder = sessions(tmp_path)
    live = Transcript("s1").prompt("go").turn("read", 6, "ENOENT")
    (folder / "s1.jsonl").write_bytes(live.data())
    (folder / "s1.checkpoint.0b6c2d1e-4f5a-4b7c-9d8e-1f2a3b4c5d6e.jsonl").write_bytes(live.data())
    sink = Sink()
    follow, err = follower(tmp_path, sink)
    scan(follow)
    assert sink.events == expected(live.lines(), "ops", "s1")
    assert err.getvalue() == ""
    done = subprocess.run(
        [sys.executable, "-m", "loopwatch", "import", str(folder)], capture_output=True, timeout=120, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    imported = [decode_event(line) for line in done.stdout.splitlines()]
    assert imported == transcript_events(live.lines(), "ops", "s1")
