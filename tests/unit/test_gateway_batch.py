"""``POST /v1/decide`` with a batch (a JSON array of calls): one model turn's calls admitted or
refused together (docs/openclaw-rules.md §7.6), on the embedded runtime. Expected answers come
from the in-process core fed the same calls."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from loopwatch.config import FleetConfig
from loopwatch.detectors.batch_admission import SIBLING_MESSAGE, BatchOutcome
from loopwatch.detectors.engine import Engine
from loopwatch.detectors.events import Event, Output, ToolCall, ToolResult
from loopwatch.streams.embedded.runtime import EmbeddedRuntime
from loopwatch.streams.fleet_view.view import FleetView
from loopwatch.streams.gateway.otlp_export import ExportingBackend
from loopwatch.streams.gateway.server import (
    MAX_BATCH_CALLS,
    EmbeddedBackend,
    gateway_app,
)

Client = TestClient[Any, Any]
SAME = {"content": [{"type": "text", "text": "same"}]}


def step_batch(engine: Engine, calls: list[ToolCall], ts: int | None = None) -> BatchOutcome:
    """What the engine's step of one batch did to its calls."""
    outcome = engine.step_batch(calls, ts).batch
    assert outcome is not None
    return outcome


@asynccontextmanager
async def gateway(
    backend_of: Callable[[EmbeddedRuntime], Any] = EmbeddedBackend,
) -> AsyncIterator[tuple[Client, EmbeddedRuntime]]:
    view = FleetView("test gateway")
    async with EmbeddedRuntime(FleetConfig.enabled_default(), view=view) as runtime:
        app = gateway_app(backend_of(runtime), view, frozenset(), 1_048_576)
        client = TestClient(TestServer(app), headers={"Content-Type": "application/json"})
        await client.start_server()
        try:
            yield client, runtime
        finally:
            await client.close()


def run(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(scenario())


def read(call_id: str, run_id: str = "r", **fields: Any) -> dict[str, Any]:
    return {"run_id": run_id, "tool": "read", "params": {"path": "a.txt"}, "tool_call_id": call_id, **fields}


def ls(call_id: str, run_id: str = "r", **fields: Any) -> dict[str, Any]:
    return {"run_id": run_id, "tool": "ls", "params": {"dir": "."}, "tool_call_id": call_id, **fields}


async def history(client: Client, events: list[Event], times: int, run_id: str = "r") -> None:
    """``times`` reads, each decided and its outcome reported; the same events into ``events``."""
    for index in range(times):
        call = read(f"h{index}", run_id, event_id=f"{run_id}-call-{index}")
        assert (await client.post("/v1/decide", json=call)).status == 200
        outcome: dict[str, Any] = {
            "type": "tool_result",
            "event_id": f"{run_id}-result-{index}",
            "run_id": run_id,
            "tool": "read",
            "params": {"path": "a.txt"},
            "tool_call_id": f"h{index}",
            "result": SAME,
        }
        assert (await client.post("/v1/events", json=outcome)).status == 200
        events.append(
            ToolCall(
                event_id=call["event_id"],
                run_id=run_id,
                tool="read",
                params={"path": "a.txt"},
                tool_call_id=f"h{index}",
            )
        )
        events.append(
            ToolResult(
                event_id=outcome["event_id"],
                run_id=run_id,
                tool="read",
                params={"path": "a.txt"},
                tool_call_id=f"h{index}",
                result=SAME,
            )
        )


def core_answers(events: list[Event], batch: list[dict[str, Any]], answer: dict[str, Any]) -> list[Output]:
    """What the in-process core gives the same history and the same batch (its event ids and
    batch id as the gateway gave them)."""
    engine = Engine(FleetConfig.enabled_default())
    for event in events:
        engine.process(event)
    calls = [
        ToolCall(
            event_id=decision["event_id"],
            run_id=item["run_id"],
            tool=item["tool"],
            params=item["params"],
            tool_call_id=item["tool_call_id"],
            batch_id=answer["batch_id"],
        )
        for item, decision in zip(batch, answer["decisions"], strict=True)
    ]
    return step_batch(engine, calls).all_outputs()


def test_a_batch_is_refused_atomically_by_its_third_call() -> None:
    async def scenario() -> None:
        async with gateway() as (client, _):
            events: list[Event] = []
            await history(client, events, 19)
            batch = [read("b1"), ls("b2"), read("b3")]
            # as the OpenClaw plugin asks: OpenClaw's own sentences (other clients: loopwatch's words)
            answer = await client.post("/v1/decide", json=batch, headers={"X-Loopwatch-Texts": "openclaw"})
            assert answer.status == 200
            body = await answer.json()
            assert body["refused"] is True
            assert body["refused_by"] == 2
            assert body["batch_id"].startswith("gateway-batch-")
            decisions = body["decisions"]
            assert [d["decision"] for d in decisions] == ["block", "block", "block"]
            trigger = decisions[2]
            assert trigger["reason"] == "generic_repeat"
            assert [(v["action"], v["count"]) for v in trigger["verdicts"]] == [("block", 20)]
            assert "refused_by" not in trigger
            for sibling in decisions[:2]:
                assert sibling["message"] == SIBLING_MESSAGE
                assert sibling["reason"] == "generic_repeat"
                assert sibling["refused_by"] == trigger["event_id"]
            published = [v for d in decisions for v in d["verdicts"]]
            expected = core_answers(events, batch, body)
            assert [v["verdict_id"] for v in published] == [o.verdict_id for o in expected]
            # the two reads left veto records: the next read counts 19 + 2 and, the run's second
            # critical, ends the run (E1)
            later = await (await client.post("/v1/decide", json=read("c1"))).json()
            assert later["decision"] == "abort"
            first = later["verdicts"][0]
            assert (first["action"], first["count"]) == ("block", 21)

    run(scenario)


def test_an_admitted_batch_answers_each_call_and_keeps_its_batch_id() -> None:
    async def scenario() -> None:
        async with gateway() as (client, runtime):
            events: list[Event] = []
            await history(client, events, 9)
            batch = [read("b1", batch_id="turn-7"), ls("b2"), read("b3")]
            body = await (await client.post("/v1/decide", json=batch)).json()
            assert (body["batch_id"], body["refused"], body["refused_by"]) == ("turn-7", False, None)
            # 9 reads + none before: allow; ls; the third read sees the first projected: 10, a warning
            assert [d["decision"] for d in body["decisions"]] == ["allow", "allow", "warn"]
            published = [v for d in body["decisions"] for v in d["verdicts"]]
            assert [v["verdict_id"] for v in published] == [
                o.verdict_id for o in core_answers(events, batch, body)
            ]
            state = runtime.engines[0].states.get("r") or next(
                e.states["r"] for e in runtime.engines if "r" in e.states
            )
            assert [r.tool_call_id for r in list(state.history.records)[-3:]] == ["b1", "b2", "b3"]

    run(scenario)


def test_the_single_object_form_is_unchanged() -> None:
    async def scenario() -> None:
        async with gateway() as (client, _):
            body = await (await client.post("/v1/decide", json=read("c0", batch_id="t"))).json()
            assert set(body) == {"decision", "message", "event_id", "verdicts"}
            assert body["decision"] == "allow"

    run(scenario)


@pytest.mark.parametrize(
    ("body", "index", "reason"),
    [
        ([read("a"), 5], 1, "call 1: must be a JSON object"),
        ([read("a"), {"run_id": "r", "tool": "read"}], 1, "call 1: params / args_digest"),
        ([read("a"), read("b"), ls("c", run_id="other")], 2, "call 2: a batch's calls share one run"),
        ([read("a", batch_id="t1"), read("b"), read("c", batch_id="t2")], 2, "call 2: batch_id 't2' differs"),
        ([read("a", event_id="x"), read("b", event_id="x")], 1, "call 1: event_id 'x' is also call 0's"),
        ([read("a"), read("b", batch_id="")], 1, "call 1: batch_id: must be a non-empty string"),
        ([read("a"), read("b", batch_id=7)], 1, "call 1: invalid event"),
        ([read("a"), read("b", usage={"usd": 1})], 1, "call 1: invalid event"),
    ],
)
def test_a_malformed_call_answers_400_with_its_index_and_nothing_is_applied(
    body: list[Any], index: int, reason: str
) -> None:
    async def scenario() -> None:
        async with gateway() as (client, runtime):
            answer = await client.post("/v1/decide", data=json.dumps(body))
            assert answer.status == 400
            error = await answer.json()
            assert error["index"] == index
            assert error["error"].startswith(reason), error
            assert all(not engine.states for engine in runtime.engines)  # nothing of it applied

    run(scenario)


def test_empty_and_oversized_batches_answer_400() -> None:
    async def scenario() -> None:
        async with gateway() as (client, runtime):
            empty = await client.post("/v1/decide", data=b"[]")
            assert empty.status == 400
            assert "non-empty JSON array" in (await empty.json())["error"]
            many = [read(f"c{n}") for n in range(MAX_BATCH_CALLS + 1)]
            big = await client.post("/v1/decide", data=json.dumps(many))
            assert big.status == 400
            assert f"at most {MAX_BATCH_CALLS} calls" in (await big.json())["error"]
            assert all(not engine.states for engine in runtime.engines)

    run(scenario)


def test_the_exporting_backend_exports_a_batchs_verdicts() -> None:
    exported: list[Output] = []

    class Exporter:
        def export(self, outputs: list[Output]) -> None:
            exported.extend(outputs)

    async def scenario() -> None:
        def backend(runtime: EmbeddedRuntime) -> Any:
            return ExportingBackend(EmbeddedBackend(runtime), Exporter())  # type: ignore[arg-type]

        async with gateway(backend) as (client, _):
            await history(client, [], 19)
            exported.clear()
            body = await (await client.post("/v1/decide", json=[read("b1"), read("b2")])).json()
            assert body["refused"] is True
            assert [o.verdict_id for o in exported] == [
                v["verdict_id"] for d in body["decisions"] for v in d["verdicts"]
            ]
            assert exported

    run(scenario)
