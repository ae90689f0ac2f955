"""An aborted run stays aborted: every later decision of the run answers its first abort, in
every shell (facade, embedded gateway, the worker's replies, the client's gate), while the
verdict stream stays exactly the core's (no verdict is invented for the sticky answers)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from loopwatch import LoopDetector
from loopwatch.config import FleetConfig
from loopwatch.detectors.engine import Engine
from loopwatch.detectors.events import Abort, ToolCall, ToolResult
from loopwatch.detectors.stable_json import from_python
from loopwatch.detectors.state import RunState
from loopwatch.streams.embedded.runtime import EmbeddedRuntime
from loopwatch.streams.fleet_view.metrics import WorkerMetrics
from loopwatch.streams.fleet_view.view import FleetView
from loopwatch.streams.gateway.server import EmbeddedBackend, gateway_app
from loopwatch.streams.kafka.run_processor import REPLY_HEADER, RunProcessor
from tests.unit.test_fleet_processor import TOPICS, run_batch
from tests.unit.test_run_processor import Broker

MISSING = {"path": "/missing"}
RECOVERY = "tool_loop_recovery_exhausted"


def test_the_facade_answers_the_first_abort_for_every_later_call_until_the_run_ends() -> None:
    detector = LoopDetector()
    decisions = []
    for _ in range(22):
        decision = detector.before_tool_call("r", "read", MISSING)
        decisions.append(decision)
        if decision.proceed:
            detector.after_tool_call("r", "read", MISSING, error="ENOENT")
    first = decisions[-1]
    assert (first.action, first.reason, first.sticky) == ("abort", RECOVERY, False)
    for tool, params in (("write", {"path": "x"}), ("exec", {"cmd": "ls"}), ("read", MISSING)):
        later = detector.before_tool_call("r", tool, params)
        assert (later.action, later.reason, later.message, later.sticky) == (
            "abort",
            RECOVERY,
            first.message,
            True,
        )
    assert detector.before_tool_call("other-run", "write", {"path": "x"}).action == "allow"
    detector.end_run("r")
    assert detector.before_tool_call("r", "write", {"path": "x"}).action == "allow"


def _shape(output: Any) -> tuple[Any, ...]:
    if isinstance(output, Abort):
        return ("abort", output.reason, output.count)
    return (output.action, output.detector, output.count)


def test_sticky_decisions_invent_no_verdicts() -> None:
    """The outputs of the same calls are the core's, aborted or not (conformance unchanged)."""
    detector, engine = LoopDetector(), Engine(FleetConfig.enabled_default(), ended_limit=0)
    sticky = 0
    for n in range(30):
        params = from_python(MISSING)
        decision = detector.before_tool_call("r", "read", MISSING)
        core = engine.process(ToolCall(event_id=f"c{n}", run_id="r", tool="read", params=params))
        assert [_shape(o) for o in decision.outputs] == [_shape(o) for o in core]
        sticky += decision.sticky
        detector.after_tool_call("r", "read", MISSING, error="ENOENT")
        engine.process(ToolResult(event_id=f"r{n}", run_id="r", tool="read", params=params, error="ENOENT"))
    assert sticky == 30 - 22  # calls 23..30 answered the abort of call 22


def test_an_old_snapshot_without_the_abort_still_loads() -> None:
    state = RunState("r")
    state.aborted = (RECOVERY, "stopped")
    again = RunState.from_bytes(state.to_bytes())
    assert again.aborted == (RECOVERY, "stopped")
    # a snapshot written before the field existed: the array one element shorter
    import msgspec

    fields = msgspec.msgpack.decode(RunState("r").to_bytes())
    older = msgspec.msgpack.encode(fields[:-1])
    assert RunState.from_bytes(older).aborted is None


def test_the_embedded_gateway_keeps_an_aborted_run_aborted() -> None:
    async def scenario() -> None:
        view = FleetView("test")
        async with EmbeddedRuntime(FleetConfig.enabled_default(), view=view) as runtime:
            app = gateway_app(EmbeddedBackend(runtime), view, frozenset(), 1_048_576)
            client: TestClient[Any, Any] = TestClient(
                TestServer(app), headers={"Content-Type": "application/json"}
            )
            await client.start_server()
            try:
                answers = []
                for n in range(22):
                    call = {"run_id": "r", "tool": "read", "params": MISSING, "tool_call_id": f"t{n}"}
                    answer = await (await client.post("/v1/decide", json=call)).json()
                    answers.append(answer)
                    result: dict[str, Any] = {"type": "tool_result", "event_id": f"res{n}", "run_id": "r"}
                    result.update(tool="read", params=MISSING, error="ENOENT", tool_call_id=f"t{n}")
                    if answer["decision"] in ("allow", "warn"):
                        assert (await client.post("/v1/events", json=result)).status == 200
                assert answers[-1]["decision"] == "abort"
                assert answers[-1]["reason"] == RECOVERY
                later = await (
                    await client.post("/v1/decide", json={"run_id": "r", "tool": "write", "params": {}})
                ).json()
                assert later["decision"] == "abort"
                assert later["sticky"] is True
                assert later["message"] == answers[-1]["message"]
                assert later["verdicts"] == []
                end = {"type": "run_end", "event_id": "end", "run_id": "r"}
                assert (await client.post("/v1/events", json=end)).status == 200
                fresh = await (
                    await client.post("/v1/decide", json={"run_id": "r", "tool": "write", "params": {}})
                ).json()
                assert fresh["decision"] == "allow"
            finally:
                await client.close()

    asyncio.run(scenario())


def test_the_worker_answers_a_decision_of_an_aborted_run_with_its_abort() -> None:
    async def scenario() -> None:
        broker = Broker()
        config = FleetConfig.enabled_default()
        runs = RunProcessor(
            {}, broker.send, broker.flush, broker.seek, lambda: config, WorkerMetrics(), TOPICS
        )
        runs.cursors.start(0, 0)
        events: list[Any] = []
        for n in range(22):
            params = from_python(MISSING)
            events.append(ToolCall(event_id=f"c{n}", run_id="r", tool="read", params=params))
            events.append(
                ToolResult(event_id=f"r{n}", run_id="r", tool="read", params=params, error="ENOENT")
            )
        await run_batch(runs, events)
        aborts = [json.loads(v or b"") for t, _, v, _ in broker.sent if t == "v" and b'"abort"' in (v or b"")]
        assert [a["reason"] for a in aborts] == [RECOVERY]
        ask = ToolCall(event_id="ask", run_id="r", tool="write", params=from_python({}))
        await run_batch(runs, [ask], len(events), headers=[(REPLY_HEADER, b"1")])
        [reply] = [json.loads(v or b"") for t, _, v, _ in broker.sent if t == "replies"]
        assert reply["event_id"] == "ask"
        assert reply["aborted"] == [RECOVERY, aborts[0]["message"]]
        published = [v for t, _, v, _ in broker.sent if t == "v"]
        assert len(published) == len([o for o in _core([*events, ask]) if o])

    asyncio.run(scenario())


def _core(events: list[Any]) -> list[Any]:
    engine = Engine(FleetConfig.enabled_default())
    return [out for event in events for out in engine.process(event)]


def test_decisions_of_outputs_with_an_abort_name_its_reason() -> None:
    from loopwatch.detectors.facade import decision_of

    abort = Abort(
        verdict_id="v",
        run_id="r",
        agent_id="a",
        session_id=None,
        trigger_event_id="e",
        reason=RECOVERY,
        tool="read",
        count=None,
        message="stop",
        ts=None,
    )
    assert decision_of([abort]).reason == RECOVERY
    assert decision_of([], None).action == "allow"
    assert decision_of([], (RECOVERY, "stop")).sticky
