"""Several Kafka gateways share what the workers answer: every gateway reads every reply, so
each knows a run's abort (and its end) and the first answer to a call its client named,
whichever gateway asked; and the workers name the run in each reply, send a run's replies to
one partition, and announce the end of an aborted run unasked."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from loopwatch.config import FleetConfig
from loopwatch.config.stream_settings import parse_stream_settings
from loopwatch.detectors.engine import Engine
from loopwatch.detectors.events import Output, RunEnd, ToolCall, ToolResult, encode_output
from loopwatch.detectors.facade import decision_of
from loopwatch.detectors.stable_json import from_python
from loopwatch.streams.fleet_view.metrics import WorkerMetrics
from loopwatch.streams.gateway.kafka_backend import KafkaBackend
from loopwatch.streams.kafka.run_processor import REPLY_HEADER, RunProcessor
from tests.unit.test_fleet_processor import TOPICS, run_batch
from tests.unit.test_run_processor import Broker

MISSING = {"path": "/missing"}


def _reply(
    event_id: str, scope: str | None, outputs: list[Output] | None = None, aborted: Any = None
) -> bytes:
    """A reply as the workers send it (``scope`` None: as a worker of an earlier release)."""
    reply: dict[str, Any] = {
        "event_id": event_id,
        "outputs": [json.loads(encode_output(o)) for o in outputs or []],
    }
    if scope is not None:
        reply["scope"] = scope
    if aborted is not None:
        reply["aborted"] = list(aborted)
    return json.dumps(reply).encode()


class _Producer:
    """What a gateway sends; each call's event id answered by ``answer`` once sent (None:
    never, the workers are down)."""

    def __init__(self, answer: Callable[[str], None] | None = None) -> None:
        self.answer = answer
        self.calls = 0

    async def send(self, topic: str, value: bytes, key: bytes, headers: Any) -> asyncio.Future[None]:
        """Appended: the broker's ack (at once), and the workers' answer soon after."""
        self.calls += 1
        loop = asyncio.get_running_loop()
        if self.answer is not None:
            loop.call_soon(self.answer, json.loads(value)["event_id"])
        delivered: asyncio.Future[None] = loop.create_future()
        delivered.set_result(None)
        return delivered


def _gateways(timeout_s: float = 1.0) -> tuple[KafkaBackend, KafkaBackend]:
    settings = parse_stream_settings({})
    return KafkaBackend(settings, timeout_s, 1_048_576), KafkaBackend(settings, timeout_s, 1_048_576)


def _core_outputs() -> tuple[list[list[Output]], tuple[str, str]]:
    """The outputs of each call of a run that reads a missing file until it is aborted, and
    its abort (reason, message)."""
    engine = Engine(FleetConfig.enabled_default())
    per_call: list[list[Output]] = []
    for n in range(22):
        call = ToolCall(event_id=f"c{n}", run_id="r", tool="read", params=from_python(MISSING))
        per_call.append(engine.process(call))
        engine.process(
            ToolResult(event_id=f"r{n}", run_id="r", tool="read", params=call.params, error="ENOENT")
        )
    aborted = engine.aborted("r")
    assert aborted is not None
    return per_call, aborted


def test_a_gateway_knows_the_aborts_another_gateway_was_answered_and_their_end() -> None:
    _, aborted = _core_outputs()

    async def scenario() -> None:
        a, b = _gateways(timeout_s=0.05)
        both = (a, b)
        b._producer = _Producer()  # B's questions get no answer (the workers are slow)

        def worker(event_id: str) -> None:  # what the replies topic brings every gateway
            for gateway in both:
                gateway._take(_reply(event_id, "r", aborted=aborted))

        a._producer = _Producer(worker)
        a.decide_timeout_s = 5
        asked = await a.decide(ToolCall(event_id="x", run_id="r", tool="write", params=from_python({})))
        assert asked == (decision_of([], aborted), False)
        refused, timed_out = await b.decide(
            ToolCall(event_id="y", run_id="r", tool="write", params=from_python({}))
        )
        assert (refused.action, refused.message, refused.sticky, timed_out) == (
            "abort",
            aborted[1],
            True,
            True,
        )
        other, _ = await b.decide(
            ToolCall(event_id="z", run_id="other", tool="write", params=from_python({}))
        )
        assert other.action == "allow"
        for gateway in both:  # the run's end, announced by the worker (sent through neither)
            gateway._take(_reply("the-end", "r"))
        fresh, timed_out = await b.decide(
            ToolCall(event_id="w", run_id="r", tool="write", params=from_python({}))
        )
        assert (fresh.action, timed_out) == ("allow", True)

    asyncio.run(scenario())


def test_a_named_call_asked_again_through_another_gateway_gets_its_first_answer() -> None:
    per_call, _ = _core_outputs()
    blocked = next(outputs for outputs in per_call if decision_of(outputs).action == "block")

    async def scenario() -> None:
        a, b = _gateways()
        both = (a, b)
        answers = {"call-7": blocked}

        def worker(event_id: str) -> None:
            outputs = answers.pop(event_id, [])  # asked again: the worker ignores a seen id
            for gateway in both:
                gateway._take(_reply(event_id, "r", outputs))

        a._producer = _Producer(worker)
        b._producer = asked_b = _Producer(worker)
        call = ToolCall(event_id="call-7", run_id="r", tool="read", params=from_python(MISSING))
        first, _ = await a.decide(call)
        assert first.action == "block"
        again = await b.decide(call)
        assert again == (first, False)
        assert asked_b.calls == 0  # not asked again: the workers would answer "allow"
        elsewhere = ToolCall(event_id="call-7", run_id="other", tool="read", params=from_python(MISSING))
        assert (await b.decide(elsewhere))[0].action == "allow"  # another run's call of that id

    asyncio.run(scenario())


def test_calls_of_two_runs_waiting_for_the_same_event_id_each_get_their_run_s_answer() -> None:
    per_call, _ = _core_outputs()
    blocked = next(outputs for outputs in per_call if decision_of(outputs).action == "block")

    async def scenario() -> None:
        (gateway, _) = _gateways()
        asked: list[str] = []

        def worker(event_id: str) -> None:
            asked.append(event_id)
            if len(asked) == 2:  # both wait: the answers come, run "s" first
                gateway._take(_reply("call-1", "s", []))
                gateway._take(_reply("call-1", "r", blocked))

        gateway._producer = _Producer(worker)
        r = ToolCall(event_id="call-1", run_id="r", tool="read", params=from_python(MISSING))
        s = ToolCall(event_id="call-1", run_id="s", tool="read", params=from_python(MISSING))
        (of_r, _), (of_s, _) = await asyncio.gather(gateway.decide(r), gateway.decide(s))
        assert (of_r.action, of_s.action) == ("block", "allow")
        assert gateway._waiting == {}

    asyncio.run(scenario())


def test_the_worker_names_the_run_in_its_replies_and_announces_the_end_of_an_aborted_run() -> None:
    async def scenario() -> None:
        broker = Broker()
        config = FleetConfig.enabled_default()
        runs = RunProcessor(
            {}, broker.send, broker.flush, broker.seek, lambda: config, WorkerMetrics(), TOPICS
        )
        sent: list[tuple[bytes, bytes, bytes]] = []

        async def send_reply(topic: str, key: bytes, value: bytes, scope: bytes) -> None:
            sent.append((key, value, scope))

        runs.send_reply = send_reply
        runs.cursors.start(0, 0)
        events: list[Any] = []
        for n in range(22):
            params = from_python(MISSING)
            events.append(ToolCall(event_id=f"c{n}", run_id="r", tool="read", params=params))
            events.append(
                ToolResult(event_id=f"r{n}", run_id="r", tool="read", params=params, error="ENOENT")
            )
        events += [ToolCall(event_id="q", run_id="quiet", tool="read", params=from_python({}))]
        await run_batch(runs, events)
        assert sent == []  # nobody asked
        ask = ToolCall(event_id="ask", run_id="r", tool="write", params=from_python({}))
        await run_batch(runs, [ask], len(events), headers=[(REPLY_HEADER, b"1")])
        [(key, value, scope)] = sent
        reply = json.loads(value)
        assert (key, scope, reply["scope"], reply["event_id"]) == (b"ask", b"r", "r", "ask")
        assert reply["aborted"][0] == "tool_loop_recovery_exhausted"
        sent.clear()
        ends: list[Any] = [RunEnd(event_id="quiet-end", run_id="quiet"), RunEnd(event_id="end", run_id="r")]
        await run_batch(runs, ends, len(events) + 1)  # unasked: only the aborted run's is answered
        assert [(key, json.loads(value), scope) for key, value, scope in sent] == [
            (b"end", {"event_id": "end", "scope": "r", "outputs": []}, b"r")
        ]

    asyncio.run(scenario())
