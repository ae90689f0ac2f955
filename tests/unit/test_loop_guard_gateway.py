"""The Python integrations' gateway client (:class:`LoopGuard`) fails open, within its timeout,
whatever the URL it was given answers: the agent's tool call never raises because of it."""

from __future__ import annotations

import datetime
import re
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from loopwatch.integrations import Call, LoopGuard, _json_value

ANSWERS = {
    "not HTTP": b"SSH-2.0-OpenSSH_9.6\r\n\r\n",
    "cut short": b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"decision":',
    "verdicts not a list": b'HTTP/1.1 200 OK\r\nContent-Length: 33\r\n\r\n{"decision":"warn","verdicts":5}',
    "a header too long": b"HTTP/1.1 200 OK\r\nX: " + b"a" * 70_000 + b"\r\n\r\n",
    "a list": b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\n[1, 2]",
}


class Peer:
    """A TCP server that answers each request with ``self.answer`` (``drip``: a byte at a time)."""

    def __init__(self) -> None:
        self.answer = b""
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, name="peer", daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), name="peer-answer", daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            _read_request(conn)  # whole: answering before the body arrived could reset it
            try:
                if self.answer == b"drip":
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n")
                    for _ in range(90):  # a byte every 0.1 s for 9 s: no read ever times out
                        conn.sendall(b" ")
                        time.sleep(0.1)
                else:
                    conn.sendall(self.answer)
            except OSError:
                return


def _read_request(conn: socket.socket) -> None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        ),
        0,
    )
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return
        body += chunk


@pytest.fixture
def peer() -> Iterator[Peer]:
    server = Peer()
    yield server
    server.sock.close()


@pytest.mark.parametrize("kind", sorted(ANSWERS))
def test_an_answer_that_is_not_a_gateway_s_fails_open(peer: Peer, kind: str) -> None:
    peer.answer = ANSWERS[kind]
    guard = LoopGuard(gateway_url=peer.url, timeout_s=5)
    call = Call("r", "read", {"path": "a"}, "c1")
    if kind == "verdicts not a list":  # a gateway's object: its decision stands, its text is ours
        ruling = guard.before(call)
        assert ruling.action == "warn"
        assert (ruling.text or "").startswith("loopwatch warning")
        assert guard.failures == []
        return
    assert guard.before(call).action == "allow"
    assert guard.after(call, result="x").action == "allow"
    assert len(guard.failures) == 2


def test_the_timeout_bounds_the_whole_request(peer: Peer) -> None:
    peer.answer = b"drip"
    guard = LoopGuard(gateway_url=peer.url, timeout_s=0.5)
    assert guard.before(Call("r", "read", {"path": "a"}, "c1")).action == "allow"
    assert "slower than" in guard.failures[0]


def test_values_json_cannot_hold_are_sent_as_their_text() -> None:
    cycle: list[Any] = [1]
    cycle.append(cycle)
    value = {datetime.date(2024, 1, 1): 3, "nan": float("nan"), "cycle": cycle, "set": {1}}
    assert _json_value(value) == {"2024-01-01": 3, "nan": None, "cycle": [1, "[Circular]"], "set": [1]}


def test_a_request_past_its_timeout_leaves_no_thread_behind(peer: Peer) -> None:
    """The request's thread is woken at the deadline (its socket shut), not left reading a
    dripping answer: a long-lived agent would collect them."""
    peer.answer = b"drip"  # for 9 s
    guard = LoopGuard(gateway_url=peer.url, timeout_s=0.3)
    mine = set(threading.enumerate())
    for n in range(3):
        assert guard.before(Call("r", "read", {"path": "a"}, f"c{n}")).action == "allow"

    def left_behind() -> list[threading.Thread]:  # (the peer's own threads are not the guard's)
        return [t for t in threading.enumerate() if t not in mine and not t.name.startswith("peer")]

    for _ in range(60):  # 3 s
        if not left_behind():
            break
        time.sleep(0.05)
    assert left_behind() == []


class Opaque:
    """No text of its own (str() is its address)."""


def test_the_in_process_guard_never_raises_into_the_host_and_keeps_detecting() -> None:
    """Whatever a framework hands the guard (objects, cycles, nesting without end, an id that is
    none), the host's tool call goes on; a call loopwatch cannot take is a kept failure."""
    guard = LoopGuard()
    cyclic: dict[str, Any] = {"a": 1}
    cyclic["self"] = cyclic
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    for params in ({"o": Opaque()}, cyclic, deep, {"f": print}, {"nan": float("nan")}):
        call = Call("r", "read", params, "c1")
        assert guard.before(call).action == "allow"
        assert guard.after(call, result=params).action == "allow"
    assert guard.failures == []  # each was taken, as JSON carries it
    assert guard.before(Call(None, "read", {}, "c2")).action == "allow"  # type: ignore[arg-type]
    assert guard.after(Call("r", "t" * 600, {}, "c3"), error="boom").action == "allow"
    guard.end(5)  # type: ignore[arg-type]
    assert [failure.split(":")[0] for failure in guard.failures] == ["run_id or session_id", "tool", "run_id"]
    decisions = []
    for n in range(11):  # and it still detects
        call = Call("loop", "read", {"path": "/x", "at": datetime.date(2026, 12, 5)}, f"l{n}")
        decisions.append(guard.before(call).action)
        guard.after(call, error="ENOENT")
    assert decisions == ["allow"] * 10 + ["warn"]


ODD = {
    "no decision": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}",
    "decision null": b'HTTP/1.1 200 OK\r\nContent-Length: 17\r\n\r\n{"decision":null}',
    "unknown decision": b'HTTP/1.1 200 OK\r\nContent-Length: 19\r\n\r\n{"decision":"deny"}',
}


@pytest.mark.parametrize("kind", sorted(ODD))
def test_an_answer_without_a_decision_is_a_failure_and_fail_closed_refuses(peer: Peer, kind: str) -> None:
    peer.answer = ODD[kind]
    call = Call("r", "read", {"path": "a"}, "c1")
    opened = LoopGuard(gateway_url=peer.url, timeout_s=5)
    assert opened.before(call).action == "allow"
    assert "answered no decision" in opened.failures[0]
    closed = LoopGuard(gateway_url=peer.url, timeout_s=5, fail_open=False)
    ruling = closed.before(call)
    assert (ruling.action, ruling.reason) == ("block", "unavailable")
    assert (ruling.text or "").startswith("loopwatch could not check this call, so it was not run")


def test_a_gateway_that_cannot_be_asked_is_logged_once_a_minute_and_kept_bounded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from loopwatch.integrations import FAILURES_KEPT

    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{unused.getsockname()[1]}"  # (nothing listens: refused)
    guard = LoopGuard(gateway_url=url, timeout_s=2)
    with caplog.at_level("WARNING", logger="loopwatch.integrations"):
        for n in range(FAILURES_KEPT + 20):
            assert guard.before(Call("r", "read", {"n": n}, f"c{n}")).action == "allow"
    warnings = [r.getMessage() for r in caplog.records if r.name == "loopwatch.integrations"]
    assert len(warnings) == 1
    assert url in warnings[0]
    assert "the call goes on (fail open)" in warnings[0]
    assert len(guard.failures) == FAILURES_KEPT
    assert guard.failure_count == FAILURES_KEPT + 20
    closed = LoopGuard(gateway_url=url, timeout_s=2, fail_open=False)
    assert closed.before(Call("r", "read", {}, "c")).action == "block"
    assert closed.after(Call("r", "read", {}, "c"), result="x").action == "allow"  # (it ran already)


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"gateway_url": ""}, "gateway_url '': an http:// or https:// URL with a host"),
        ({"gateway_url": "localhost:6070"}, "gateway_url 'localhost:6070': an http:// or https:// URL"),
        ({"gateway_url": "http://h:port"}, "gateway_url 'http://h:port' is not a URL"),
        ({"timeout_s": None}, "timeout_s must be a number of seconds above 0, not None"),
        ({"timeout_s": "2"}, "timeout_s must be a number of seconds above 0, not '2'"),
        ({"timeout_s": 0}, "timeout_s must be a number of seconds above 0, not 0"),
        ({"fail_open": "false"}, "fail_open must be True or False, not 'false'"),
    ],
)
def test_a_guard_s_options_are_checked_when_it_is_made(options: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValueError, match=re.escape(problem)):
        LoopGuard(**options)


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no text")

    __repr__ = __str__


def test_an_argument_whose_text_fails_is_sent_as_what_it_is() -> None:
    assert _json_value({"x": Unprintable()}) == {"x": "<Unprintable: str() failed: RuntimeError>"}
    assert LoopGuard().before(Call("r", "read", {"x": Unprintable()}, "c")).action == "allow"
