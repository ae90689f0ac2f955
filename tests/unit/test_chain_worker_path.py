"""F6 on the worker's path without a broker: the runs of a chain on two partitions send their
facts re-keyed by the chain's root, the fleet processor gives the in-process alerts (also when
the facts come twice), and a worker that knows the alerts blocks its own runs' calls."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from loopwatch.config import parse_config_text
from loopwatch.config.fleet import FleetConfig
from loopwatch.detectors.events import Event, encode_event, encode_output, run_scope
from loopwatch.detectors.fleet.alerts import decode_alert, encode_alert
from loopwatch.detectors.fleet.facts import ChainResultFact, ChainRunFact, decode_facts, encode_facts
from loopwatch.streams.fleet_view.metrics import WorkerMetrics
from loopwatch.streams.kafka.fleet_processor import FleetProcessor
from loopwatch.streams.kafka.run_processor import RunProcessor
from tests.unit.test_chain_rules import ON, SEC, T0, both, fan_out, reads, sequential
from tests.unit.test_run_processor import TP, Broker, Record

TOPICS = {"verdicts": "v", "dead_letter": "dl", "changelog": "cl", "facts": "facts", "replies": "replies"}


def chain_config(**extra: Any) -> FleetConfig:
    document = {
        "tools": {"loopDetection": {"enabled": True}},
        "loopwatch": {"detectors": {"delegation": {**ON, **extra}}},
    }
    return parse_config_text(json.dumps(document))


def partition_of(event: Event) -> int:
    return 0 if run_scope(event).endswith(("1", "3", "5", "a")) else 1


def as_applied(events: list[Event]) -> list[Event]:
    """The events in the order a worker applies one fetch of both partitions: partition 0's, then 1's."""
    return [e for e in events if partition_of(e) == 0] + [e for e in events if partition_of(e) == 1]


def on_partitions(events: list[Event], start: dict[int, int]) -> dict[TP, list[Record]]:
    """The events on two input partitions (a run's events on one), offsets from ``start``."""
    fetched: dict[TP, list[Record]] = {}
    for event in events:
        partition = partition_of(event)
        batch = fetched.setdefault(TP("in", partition), [])
        offset = start[partition] + len(batch)
        batch.append(Record("in", partition, offset, 0, run_scope(event).encode(), encode_event(event)))
    return fetched


def test_a_chain_on_two_partitions_gives_the_in_process_alerts_and_blocks() -> None:
    config = chain_config(block=True)
    history = reads(["root-1", "root-1/a", "root-1/b"], 3) + fan_out("root-1", 4, start=T0 + 20 * SEC)
    # the chain's facts are applied in the order the worker applied its runs' events
    _, expected = sequential(as_applied(history), config)
    assert sorted(a.kind for a in expected) == ["chain_repeat", "chain_repeat", "chain_runaway"]

    async def scenario() -> None:
        broker = Broker()
        runs = RunProcessor(
            {}, broker.send, broker.flush, broker.seek, lambda: config, WorkerMetrics(), TOPICS
        )
        runs.cursors.start(0, 0)
        runs.cursors.start(1, 0)
        fetched = on_partitions(history, {0: 0, 1: 0})
        assert len(fetched) == 2
        await runs.process(fetched)
        facts = [(key, value) for topic, key, value, _ in broker.sent if topic == "facts"]
        chain = [decode_facts(value or b"") for key, value in facts if key == b"chain:root-1"]
        assert len(chain) == 1  # one record for the chain's subject, whichever partition its runs are on
        (chain_facts,) = chain
        run_facts = [f for f in chain_facts if isinstance(f, ChainRunFact)]
        assert len(run_facts) == len({run_scope(e) for e in history})  # a run's events collapse to one
        assert len([f for f in chain_facts if isinstance(f, ChainResultFact)]) == len(history) // 2

        table: dict[bytes, bytes] = {}
        fleet_broker = Broker()
        fleet = FleetProcessor(
            table, fleet_broker.send, fleet_broker.seek, lambda: config, {"alerts": "a", "changelog": "fc"}
        )
        fleet.cursors.start(0, 0)
        records = [Record("facts", 0, i, 0, key, value) for i, (key, value) in enumerate(facts)]
        await fleet.process({TP("facts", 0): records})
        published = [decode_alert(value or b"") for topic, _, value, _ in fleet_broker.sent if topic == "a"]
        got = [alert for alert in published if alert.kind != "chain_active"]
        assert sorted(encode_alert(a) for a in got) == sorted(encode_alert(a) for a in expected)
        assert b"chain:root-1" in table
        # the same facts again on a later offset (a run processor's redelivery): nothing new
        again = [Record("facts", 0, len(records) + i, 0, r.key, r.value) for i, r in enumerate(records)]
        await fleet.process({TP("facts", 0): again})
        assert len([1 for topic, *_ in fleet_broker.sent if topic == "a"]) == len(published)

        # the worker learns the alerts (its follower of the alerts topic) and blocks its runs
        for alert in got:
            runs.facts.chains.add(alert)
        before = len(broker.on("v"))
        later = both("root-1/a", T0 + 40 * SEC, "root-1", {"path": "/spec.md"})
        later += both("root-1/new", T0 + 41 * SEC, "root-1", {"path": "/fresh.md"})
        await runs.process(on_partitions(later, {0: len(fetched[TP("in", 0)]), 1: len(fetched[TP("in", 1)])}))
        verdicts = [json.loads(v) for v in broker.on("v")[before:]]
        assert [(v["run_id"], v["detector"]) for v in verdicts] == [
            ("root-1/a", "chain_repeat"),
            ("root-1/new", "chain_runaway"),
        ]
        # the same blocks in-process (where the history's own calls after the critical are
        # blocked too: alerts reach a worker's runs only once its follower read them)
        outputs, _ = sequential(as_applied(history) + later, config)
        ids = {event.event_id for event in later}
        assert [json.loads(encode_output(o)) for o in outputs if o.trigger_event_id in ids] == verdicts

    asyncio.run(scenario())


def test_delegation_off_sends_no_chain_facts() -> None:
    async def scenario() -> None:
        broker = Broker()
        config = chain_config(enabled=False)
        runs = RunProcessor(
            {}, broker.send, broker.flush, broker.seek, lambda: config, WorkerMetrics(), TOPICS
        )
        runs.cursors.start(0, 0)
        runs.cursors.start(1, 0)
        await runs.process(on_partitions(reads(["root-1", "root-1/a", "root-1/b"], 3), {0: 0, 1: 0}))
        keys = {key for topic, key, _, _ in broker.sent if topic == "facts"}
        assert keys
        assert not [key for key in keys if key is not None and key.startswith(b"chain:")]

    asyncio.run(scenario())


def test_expired_chains_leave_the_fleet_table() -> None:
    config = chain_config(chainTtlS=60)

    async def scenario() -> None:
        broker = Broker()
        table: dict[bytes, bytes] = {}
        fleet = FleetProcessor(
            table, broker.send, broker.seek, lambda: config, {"alerts": "a", "changelog": "fc"}
        )
        fleet.cursors.start(0, 0)
        old = ChainRunFact("old-root", "old-root", "a", T0, T0 + 5 * SEC)
        young = ChainRunFact("young-root", "young-root", "a", T0 + 60 * SEC, T0 + 65 * SEC)
        records = [
            Record("facts", 0, 0, 0, b"chain:old-root", encode_facts([old])),
            Record("facts", 0, 1, 0, b"chain:young-root", encode_facts([young])),
        ]
        await fleet.process({TP("facts", 0): records})
        assert set(table) == {b"chain:old-root", b"chain:young-root"}
        assert await fleet.drop_expired_chains(lambda key: None) == 0  # not this worker's partition
        async with fleet.lock:
            assert await fleet.drop_expired_chains(lambda key: 0) == 1
        assert set(table) == {b"chain:young-root"}  # its last event 60 s before the newest fact
        assert ("fc", b"chain:old-root", None, 0) in broker.sent  # deleted on the changelog too
        late = ChainRunFact("young-root", "young-root", "a", T0 + 126 * SEC, T0 + 126 * SEC)
        await fleet.process(
            {TP("facts", 0): [Record("facts", 0, 2, 0, b"chain:young-root", encode_facts([late]))]}
        )
        async with fleet.lock:
            assert await fleet.drop_expired_chains(lambda key: 0) == 0  # alive again: kept

    asyncio.run(scenario())
