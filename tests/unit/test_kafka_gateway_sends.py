"""The Kafka gateway's sends, on asyncio's event loop and on uvloop's (the gateway's own where
it is installed): a call or an event is appended to the producer at once, and only a send that
has to wait for the producer (the topic's metadata, a full batch) goes on in a task; either way
the answer is the same: the workers' answer, the deadline's timed-out allow, or the broker's
refusal as the caller's error. And the gateway's event loop is uvloop's unless told otherwise."""

from __future__ import annotations

import asyncio
import gc
import json
import sys
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from loopwatch.config.stream_settings import parse_stream_settings
from loopwatch.detectors.events import RunEnd, ToolCall, ToolResult
from loopwatch.detectors.stable_json import from_python
from loopwatch.streams.gateway import kafka_backend, server
from loopwatch.streams.gateway.backend import BackendUnavailable
from loopwatch.streams.gateway.kafka_backend import KafkaBackend

uvloop = pytest.importorskip("uvloop")  # a dependency of loopwatch (not on Windows)

LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
}


def _run(loop: str, scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """``scenario`` on ``loop``; fails on anything the loop reports (a refusal nobody read:
    "Future exception was never retrieved")."""
    reported: list[dict[str, Any]] = []
    with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
        runner.get_loop().set_exception_handler(lambda _, context: reported.append(context))
        runner.run(scenario())
        gc.collect()  # (a future is reported when it is collected)
    assert reported == []


class Refused(Exception):
    """What the broker says when it will not take a record."""


class _Producer:
    """A producer whose ``send`` waits first (``waits``: the metadata, a full batch) or not,
    then refuses the record (``refuse``), or returns its delivery: failed (``fail``), never
    done (``hang``), or acked; each call's event id is answered by ``answer`` once sent."""

    def __init__(
        self,
        waits: bool = False,
        refuse: bool = False,
        fail: set[int] | None = None,
        hang: bool = False,
        answer: Callable[[str], None] | None = None,
    ) -> None:
        self.waits, self.refuse, self.fail, self.hang, self.answer = (
            waits,
            refuse,
            fail or set(),
            hang,
            answer,
        )
        self.sent: list[str] = []
        self.hung: list[asyncio.Future[None]] = []

    async def acked_at_last(self) -> None:
        """The deliveries left hanging, acked (the sends that waited for them end)."""
        for delivery in self.hung:
            delivery.set_result(None)
        await asyncio.sleep(0.02)

    async def send(self, topic: str, value: bytes, key: bytes, headers: Any = None) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        if self.waits:
            await asyncio.sleep(0.01)
        if self.refuse:
            raise Refused("not taken")
        index = len(self.sent)
        self.sent.append(json.loads(value)["event_id"])
        delivery: asyncio.Future[None] = loop.create_future()
        if index in self.fail:
            loop.call_soon(delivery.set_exception, Refused(f"record {index} refused"))
        elif not self.hang:
            loop.call_soon(delivery.set_result, None)
        else:
            self.hung.append(delivery)
        if self.answer is not None:
            loop.call_soon(self.answer, self.sent[-1])
        return delivery


def _backend(producer: _Producer, timeout_s: float = 5.0) -> KafkaBackend:
    backend = KafkaBackend(parse_stream_settings({}), timeout_s, 1_048_576)
    backend._producer = producer
    return backend


def _answering(backend_of: Callable[[], KafkaBackend]) -> Callable[[str], None]:
    """The workers: every call answered with no output, its run named."""

    def answer(event_id: str) -> None:
        backend_of()._take(json.dumps({"event_id": event_id, "outputs": [], "scope": "r"}).encode())

    return answer


def _call(event_id: str = "c1") -> ToolCall:
    return ToolCall(event_id=event_id, run_id="r", tool="read", params=from_python({"path": "a"}))


def _result(event_id: str) -> ToolResult:
    return ToolResult(event_id=event_id, run_id="r", tool="read", params=from_python({"path": "a"}))


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("waits", [False, True], ids=["at-once", "send-waits"])
def test_a_call_is_answered_by_the_workers_whether_its_send_waits_or_not(loop: str, waits: bool) -> None:
    async def scenario() -> None:
        backend: KafkaBackend | None = None
        producer = _Producer(waits=waits, answer=_answering(lambda: backend))  # type: ignore[arg-type,return-value]
        backend = _backend(producer)
        deciding = asyncio.ensure_future(backend.decide(_call()))
        await asyncio.sleep(0)  # (the decision waits for its answer)
        assert len(backend._sending) == waits  # a task for the send only when the send waits
        decision, timed_out = await deciding
        assert (decision.action, timed_out) == ("allow", False)
        assert producer.sent == ["c1"]
        assert not backend._waiting
        await asyncio.sleep(0)
        assert not backend._sending  # (a send that waited: its task done and let go)

    _run(loop, scenario)


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("waits", [False, True], ids=["at-once", "send-waits"])
def test_the_broker_s_refusal_of_a_call_is_the_caller_s_error(loop: str, waits: bool) -> None:
    async def scenario() -> None:
        refused = _backend(_Producer(waits=waits, refuse=True))
        with pytest.raises(Refused, match="not taken"):
            await refused.decide(_call())
        failed = _backend(_Producer(waits=waits, fail={0}))
        with pytest.raises(Refused, match="record 0 refused"):
            await failed.decide(_call())
        assert not refused._waiting
        assert not failed._waiting

    _run(loop, scenario)


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("waits", [False, True], ids=["at-once", "send-waits"])
def test_a_call_nobody_answers_is_allowed_at_its_deadline_and_a_later_refusal_is_nobody_s(
    loop: str, waits: bool
) -> None:
    async def scenario() -> None:
        producer = _Producer(waits=waits, hang=True)
        backend = _backend(producer, timeout_s=0.05)
        started = asyncio.get_running_loop().time()
        decision, timed_out = await backend.decide(_call())
        assert (decision.action, timed_out) == ("allow", True)
        assert asyncio.get_running_loop().time() - started < 2
        assert producer.sent == ["c1"]  # (the send went on)
        await producer.acked_at_last()
        late = _backend(_Producer(waits=waits, fail={0}), timeout_s=0.0)  # refused after its deadline
        assert (await late.decide(_call()))[1] is True
        await asyncio.sleep(0.05)  # (the refusal comes and is read: no "never retrieved" error)

    _run(loop, scenario)


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("waits", [False, True], ids=["at-once", "send-waits"])
def test_events_are_taken_once_the_broker_has_all_of_them_or_refused_with_the_first_refusal(
    loop: str, waits: bool
) -> None:
    async def scenario() -> None:
        producer = _Producer(waits=waits)
        backend = _backend(producer)
        assert await backend.events([_result("e1")]) is None
        assert await backend.events([_result("e2"), _result("e3"), RunEnd(event_id="e4", run_id="r")]) is None
        assert producer.sent == ["e1", "e2", "e3", "e4"]
        failing = _backend(_Producer(waits=waits, fail={1, 2}))
        with pytest.raises(Refused, match="record 1 refused"):  # the first in the events' order
            await failing.events([_result("e1"), _result("e2"), _result("e3")])
        with pytest.raises(Refused, match="not taken"):
            await _backend(_Producer(waits=waits, refuse=True)).events([_result("e1")])
        stuck = _Producer(waits=waits, fail={0}, hang=True)  # the first refused, the second never acked
        with pytest.raises(Refused, match="record 0 refused"):  # (at once: not the deadline's 503)
            await asyncio.wait_for(_backend(stuck).events([_result("e1"), _result("e2")]), 2)
        await stuck.acked_at_last()
        assert backend._refused_since is None

    _run(loop, scenario)


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("waits", [False, True], ids=["at-once", "send-waits"])
def test_events_the_broker_does_not_take_in_time_answer_unavailable(
    loop: str, waits: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kafka_backend, "EVENTS_TIMEOUT_S", 0.05)

    async def scenario() -> None:
        producer = _Producer(waits=waits, hang=True)
        backend = _backend(producer)
        with pytest.raises(BackendUnavailable, match=r"within 0\.05 s"):
            await backend.events([_result("e1")])
        assert backend._refused_since is not None
        await producer.acked_at_last()
        producer.hang = False
        assert await backend.events([_result("e2")]) is None  # the broker back: taken

    _run(loop, scenario)


def test_the_gateway_runs_on_uvloop_unless_told_to_use_asyncio_s_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(server.EVENT_LOOP_ENV, raising=False)
    assert server.event_loop_factory() is uvloop.new_event_loop
    monkeypatch.setenv(server.EVENT_LOOP_ENV, "asyncio")
    assert server.event_loop_factory() is None
    monkeypatch.delenv(server.EVENT_LOOP_ENV)
    monkeypatch.setitem(sys.modules, "uvloop", None)  # not installed (Windows): asyncio's
    assert server.event_loop_factory() is None
