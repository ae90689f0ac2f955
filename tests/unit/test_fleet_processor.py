"""The worker's fleet path without a broker: facts sent per batch, subject states applied once
per offset, alerts kept until confirmed and re-published on redelivery, replies to decisions."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from loopwatch.config import parse_config_text
from loopwatch.config.fleet import FleetConfig
from loopwatch.detectors.events import Event, ToolCall, ToolResult, encode_event, run_scope
from loopwatch.detectors.fleet.facts import decode_facts
from loopwatch.detectors.stable_json import from_python
from loopwatch.streams.fleet_view.metrics import WorkerMetrics
from loopwatch.streams.kafka.fleet_processor import FleetProcessor
from loopwatch.streams.kafka.run_processor import REPLY_HEADER, RunProcessor
from tests.unit.test_run_processor import TP, Broker, Record

T0 = 1_780_000_020_000
TOPICS = {"verdicts": "v", "dead_letter": "dl", "changelog": "cl", "facts": "facts", "replies": "replies"}


def failing(run: str, n: int) -> list[Event]:
    params = from_python({"q": n % 3})
    call = ToolCall(event_id=f"{run}-c", run_id=run, ts=T0 + n, tool="search", params=params)
    error = f"connect ECONNREFUSED 10.0.0.{n}:443"
    return [
        call,
        ToolResult(event_id=f"{run}-r", run_id=run, ts=T0 + n, tool="search", params=params, error=error),
    ]


async def run_batch(processor: RunProcessor, events: list[Event], start: int = 0, headers: Any = ()) -> None:
    records = [
        Record("in", 0, start + i, 0, run_scope(e).encode(), encode_event(e)) for i, e in enumerate(events)
    ]
    for record in records:
        record.headers = headers  # type: ignore[attr-defined]
    await processor.process({TP("in", 0): records})


def test_facts_reach_the_fleet_processor_and_alerts_survive_a_redelivery() -> None:
    async def scenario() -> None:
        broker = Broker(confirm_at_once=True)
        config = FleetConfig.enabled_default()
        runs = RunProcessor(
            {}, broker.send, broker.flush, broker.seek, lambda: config, WorkerMetrics(), TOPICS
        )
        runs.cursors.start(0, 0)
        events = [e for n in range(5) for e in failing(f"r{n}", n)]
        await run_batch(runs, events)
        facts = [(key, value) for topic, key, value, _ in broker.sent if topic == "facts"]
        assert [key for key, _ in facts] == [b"agent:default", b"tool:search"]  # one record per subject
        tool_facts = decode_facts(facts[1][1] or b"")
        assert len(tool_facts) == 5  # every failure: none is compacted away

        fleet_broker = Broker(confirm_at_once=False)
        table: dict[bytes, bytes] = {}
        fleet = FleetProcessor(
            table, fleet_broker.send, fleet_broker.seek, lambda: config, {"alerts": "a", "changelog": "fc"}
        )
        fleet.cursors.start(0, 0)
        records = [Record("facts", 0, i, 0, key, value) for i, (key, value) in enumerate(facts)]
        await fleet.process({TP("facts", 0): records})
        alerts = [json.loads(value or b"") for topic, _, value, _ in fleet_broker.sent if topic == "a"]
        assert [a["kind"] for a in alerts] == ["tool_outage"]
        assert b"tool:search" in table  # the state and its outbox, on the changelog too
        assert any(topic == "fc" and key == b"tool:search" for topic, key, _, _ in fleet_broker.sent)

        # a crash before the alert was confirmed: a new processor on the recovered table
        again_broker = Broker(confirm_at_once=True)
        again = FleetProcessor(
            table, again_broker.send, again_broker.seek, lambda: config, {"alerts": "a", "changelog": "fc"}
        )
        again.cursors.start(0, 0)
        await again.process({TP("facts", 0): records})  # redelivered: applied before
        republished = [json.loads(value or b"") for topic, _, value, _ in again_broker.sent if topic == "a"]
        assert [a["alert_id"] for a in republished] == [alerts[0]["alert_id"]]  # the same alert, once more
        assert again.applied == 0  # nothing stepped twice
        await again.process({TP("facts", 0): [Record("facts", 0, 2, 0, b"tool:search", facts[1][1])]})
        assert [v for t, _, v, _ in again_broker.sent if t == "a"] == [
            again_broker.sent[0][2]
        ]  # no second outage

    asyncio.run(scenario())


def test_rules_off_send_no_facts() -> None:
    async def scenario() -> None:
        broker = Broker()
        config = parse_config_text(
            "{tools: {loopDetection: {enabled: true}}, "
            "loopwatch: {detectors: {toolOutage: {enabled: false}, systemicLoop: {enabled: false}}}}"
        )
        runs = RunProcessor(
            {}, broker.send, broker.flush, broker.seek, lambda: config, WorkerMetrics(), TOPICS
        )
        runs.cursors.start(0, 0)
        await run_batch(runs, [e for n in range(5) for e in failing(f"r{n}", n)])
        assert not [topic for topic, *_ in broker.sent if topic == "facts"]

    asyncio.run(scenario())


def test_a_decision_asked_for_is_answered_also_without_verdicts() -> None:
    async def scenario() -> None:
        broker = Broker()
        config = FleetConfig.enabled_default()
        runs = RunProcessor(
            {}, broker.send, broker.flush, broker.seek, lambda: config, WorkerMetrics(), TOPICS
        )
        runs.cursors.start(0, 0)
        call = ToolCall(event_id="ask-1", run_id="r", tool="read", params=from_python({}))
        await run_batch(runs, [call], headers=[(REPLY_HEADER, b"1")])
        await run_batch(
            runs, [ToolCall(event_id="plain", run_id="r", tool="read", params=from_python({"a": 1}))], 1
        )
        replies = [
            (key, json.loads(value or b"")) for topic, key, value, _ in broker.sent if topic == "replies"
        ]
        # only the one that asked
        assert replies == [(b"ask-1", {"event_id": "ask-1", "scope": "r", "outputs": []})]

    asyncio.run(scenario())
