"""Fleet-wide rules through the worker on the real broker: the same alerts as in-process,
a worker killed mid-outage, and fail-fast blocks on another worker's runs."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from loopwatch.config import parse_config_text
from loopwatch.config.stream_settings import parse_stream_settings
from loopwatch.detectors.events import Event, ToolCall, ToolResult
from loopwatch.detectors.fleet.alerts import FleetAlert
from loopwatch.detectors.stable_json import from_python
from loopwatch.streams.client.kafka_client import LoopwatchClient
from loopwatch.streams.embedded.runtime import EmbeddedRuntime
from tests.integration.harness import Names, WorkerProcess, consume, event_records, produce, run
from tests.integration.test_worker import scrape, start_worker

pytestmark = pytest.mark.integration

SMALL_LOOPS = (
    "{tools: {loopDetection: {enabled: true}}, loopwatch: {detectors: {systemicLoop: {minRuns: 3}}}}"
)
FAIL_FAST = "{tools: {loopDetection: {enabled: true}}, loopwatch: {detectors: {toolOutage: {block: true}}}}"


def _call(run_id: str, n: int, ts: int, tool: str = "search", params: Any = None) -> ToolCall:
    return ToolCall(
        event_id=f"{run_id}-c{n}",
        run_id=run_id,
        agent_id="coder",
        ts=ts,
        tool=tool,
        params=from_python(params if params is not None else {"q": f"{run_id}-{n}"}),
    )


def _result(call: ToolCall, error: str | None = None) -> ToolResult:
    ok = {"content": [{"type": "text", "text": f"ok {call.event_id}"}]}
    return ToolResult(
        event_id=call.event_id.replace("-c", "-r"),
        run_id=call.run_id,
        agent_id=call.agent_id,
        ts=(call.ts or 0) + 50,
        tool=call.tool,
        params=call.params,
        result=msgspec.UNSET if error else from_python(ok),
        error=error if error else msgspec.UNSET,
    )


def outage(prefix: str, runs: range, t0: int) -> list[Event]:
    """Runs whose ``search`` fails with the same error (ports and ids vary), different arguments."""
    events: list[Event] = []
    for i in runs:
        call = _call(f"{prefix}{i}", 0, t0 + i * 500, params={"q": i % 4})
        events += [call, _result(call, f"connect ECONNREFUSED 10.0.{i}.1:{5000 + i} (req {i:016x})")]
    return events


def recovery(prefix: str, t: int) -> list[Event]:
    call = _call(f"{prefix}ok", 0, t)
    return [call, _result(call)]


def looping(t0: int) -> list[Event]:
    """12 runs of ``coder``: 4 repeat one read 12 times (generic_repeat warnings), 8 are healthy."""
    events: list[Event] = []
    for r in range(12):
        run_id = f"loop-{r}"
        for n in range(12):
            params = {"path": "/same"} if r < 4 else {"path": f"/f{n}"}
            call = _call(run_id, n, t0 + r * 100 + n * 2000, tool="read", params=params)
            events += [call, _result(call)]
    return events


def in_process(events: list[Event], config_text: str) -> list[FleetAlert]:
    async def go() -> list[FleetAlert]:
        async with EmbeddedRuntime(parse_config_text(config_text)) as runtime:
            async for _ in runtime.run(events):
                pass
            return runtime.alerts

    return asyncio.run(go())


def alerts_of(got: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Alerts by id, each once (a re-published alert has the same id), in first-seen order."""
    seen: dict[str, dict[str, Any]] = {}
    for alert in got:
        seen.setdefault(alert["alert_id"], alert)
    return list(seen.values())


def wait_alerts(bootstrap: str, names: Names, count: int, timeout: float = 90) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        got = alerts_of(run(consume(bootstrap, names.alerts, until=count, timeout=5)))
        if len(got) >= count or time.monotonic() > deadline:
            return got


async def _facts_committed(bootstrap: str, names: Names) -> bool:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        partitions = [TopicPartition(names.facts, p) for p in range(4)]
        ends = await consumer.end_offsets(partitions)
    finally:
        await consumer.stop()
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(names.app_id, partitions=partitions)
    finally:
        await admin.close()
    return all(
        ends[tp] == 0 or (offsets.get(tp) is not None and offsets[tp].offset >= ends[tp]) for tp in partitions
    )


def wait_facts_committed(bootstrap: str, names: Names, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not run(_facts_committed(bootstrap, names)):
        assert time.monotonic() < deadline, "the facts topic was not committed to its end"
        time.sleep(0.25)


def test_the_worker_gives_the_in_process_alerts(
    kafka_bootstrap: str, names: Names, tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    t0 = (int(time.time()) // 60) * 60_000 - 30 * 60_000
    failing = outage("out-", range(7), t0)
    healed = recovery("out-", t0 + 3 * 60_000)
    loops = looping(t0)
    before = sorted(failing + loops, key=lambda e: e.ts or 0)  # as agents publish: in time order
    expected = in_process(before + healed, SMALL_LOOPS)
    assert [a.kind for a in expected] == ["tool_outage", "systemic_loop", "tool_recovered"]
    # the history is on the broker before the worker starts, as after a backlog: one batch
    # holds it, in event-time order (live, facts of other partitions may come a batch later)
    run(produce(kafka_bootstrap, names.events, event_records(before)))
    start_worker(names, kafka_bootstrap, tmp_path, workers, "w1", config=SMALL_LOOPS)
    assert len(wait_alerts(kafka_bootstrap, names, 2)) == 2  # the recovery comes after the outage
    run(produce(kafka_bootstrap, names.events, event_records(healed)))
    got = wait_alerts(kafka_bootstrap, names, 3)
    want = [json.loads(msgspec.json.encode(a)) for a in expected]
    assert sorted(got, key=lambda a: a["alert_id"]) == sorted(want, key=lambda a: a["alert_id"])


def test_a_worker_killed_mid_outage_neither_reopens_nor_loses_it(
    kafka_bootstrap: str, names: Names, tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    t0 = int(time.time() * 1000) - 60_000
    first = start_worker(names, kafka_bootstrap, tmp_path, workers, "w1")
    run(produce(kafka_bootstrap, names.events, event_records(outage("a-", range(6), t0))))
    opened = wait_alerts(kafka_bootstrap, names, 1)
    assert [a["kind"] for a in opened] == ["tool_outage"]
    wait_facts_committed(kafka_bootstrap, names)  # the open outage is in the table, nothing to replay
    first.kill()
    start_worker(names, kafka_bootstrap, tmp_path, workers, "w2")
    more = outage("b-", range(3), t0 + 10_000)  # three more failing runs: not enough to open alone
    run(produce(kafka_bootstrap, names.events, event_records(more + recovery("b-", t0 + 40_000))))
    got = wait_alerts(kafka_bootstrap, names, 2)
    assert [a["kind"] for a in got] == ["tool_outage", "tool_recovered"]
    assert got[1]["runs"] == 9  # the six before the crash and the three after
    assert got[1]["alert_id"] == opened[0]["alert_id"].replace("tool_outage", "tool_recovered")
    time.sleep(2)
    assert len(wait_alerts(kafka_bootstrap, names, 3, timeout=3)) == 2  # no second outage


def test_fail_fast_blocks_reach_every_worker_s_runs(
    kafka_bootstrap: str, names: Names, tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    t0 = int(time.time() * 1000) - 20_000
    w1 = start_worker(names, kafka_bootstrap, tmp_path, workers, "w1", config=FAIL_FAST)
    w2 = start_worker(names, kafka_bootstrap, tmp_path, workers, "w2", config=FAIL_FAST)
    run(produce(kafka_bootstrap, names.events, event_records(outage("f-", range(6), t0))))
    assert [a["kind"] for a in wait_alerts(kafka_bootstrap, names, 1)] == ["tool_outage"]
    for worker in (w1, w2):
        deadline = time.monotonic() + 30
        while scrape(worker).get('loopwatch_tool_outage_open{tool="search"}') != 1:
            assert time.monotonic() < deadline, worker.tail()
            time.sleep(0.2)
    probes = [_call(f"probe-{i}", 0, t0 + 10_000) for i in range(16)]  # runs on all four partitions
    run(produce(kafka_bootstrap, names.events, event_records(probes)))
    got = run(consume(kafka_bootstrap, names.verdicts, until=len(probes), timeout=60, settle=1))
    blocked = {v["run_id"] for v in got if v["detector"] == "tool_outage" and v["action"] == "block"}
    assert blocked == {p.run_id for p in probes}
    assert all(v["count"] == 5 for v in got if v["detector"] == "tool_outage")  # as its alert said
    for worker in (w1, w2):  # each worker blocked calls of its own runs
        key = 'loopwatch_verdicts_total{action="block",detector="tool_outage",level="critical"}'
        assert scrape(worker).get(key, 0) > 0, worker.tail()
    run(client_sees_the_outage(names, kafka_bootstrap))


async def client_sees_the_outage(names: Names, bootstrap: str) -> None:
    """An orchestrator's client: the tool is unavailable, and its gate blocks a call at once."""
    settings = parse_stream_settings(names.env(bootstrap))
    async with LoopwatchClient(settings, "coder", fail_fast=True, follow_verdicts=False) as client:
        deadline = time.monotonic() + 30
        while client.tool_available("search"):
            assert time.monotonic() < deadline, "the client never saw the outage"
            await asyncio.sleep(0.1)
        assert client.tool_available("read")
        await client.tool_result("client-run", "search", {"q": "x"}, error="connect ECONNREFUSED")
        call = await client.tool_call("client-run", "search", {"q": "y"})
        decision = await client.gate(call)
        assert (decision.action, decision.detector) == ("block", "tool_outage")
        assert decision.message is not None
        assert decision.message.startswith("CRITICAL: search is failing for the whole fleet")
        other = await client.tool_call("client-run", "read", {"path": "a"})
        assert (await client.gate(other, timeout=0.05)).action == "allow"
