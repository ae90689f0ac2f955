"""F6's chain state stays small and its verdicts do not depend on where a runtime stands:
the bounds of a chain's state, the fleet processor's guard on what it stores, counts past
every cap, blocks that end the same way on every runtime, blocks keyed by the full args hash,
and alerts independent of how the facts were batched."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import msgspec
import pytest
from aiokafka.errors import MessageSizeTooLargeError

from loopwatch.config import parse_config_text
from loopwatch.config.errors import ConfigError
from loopwatch.config.fleet_rules import fleet_rules
from loopwatch.detectors.engine import Engine
from loopwatch.detectors.events import Event, ToolCall, ToolResult, Verdict, encode_event, run_scope
from loopwatch.detectors.fleet import chains
from loopwatch.detectors.fleet.alerts import FleetAlert, decode_alert
from loopwatch.detectors.fleet.chain_blocks import ChainBlocks
from loopwatch.detectors.fleet.chains import chain_key
from loopwatch.detectors.fleet.fact_batch import FactBatch
from loopwatch.detectors.fleet.facts import ChainResultFact, ChainRunFact, Fact, encode_facts
from loopwatch.detectors.fleet.watch import FleetWatch, WatchHooks, apply_fact
from loopwatch.streams.fleet_view.alert_board import chain_root
from loopwatch.streams.fleet_view.metrics import WorkerMetrics
from loopwatch.streams.kafka import fleet_processor as fleet_module
from loopwatch.streams.kafka.fleet_processor import FleetProcessor
from loopwatch.streams.kafka.run_processor import RunProcessor
from tests.unit.test_chain_rules import DIGESTER, SEC, T0, call, config, fan_out, result_of, sequential
from tests.unit.test_run_processor import TP, Broker, Record

KB64 = 64 * 1024
TOPICS = {"verdicts": "v", "dead_letter": "dl", "changelog": "cl", "facts": "facts", "replies": "replies"}


def long_id(prefix: str, n: int) -> str:
    """An id of the largest size the doors let in (512 bytes)."""
    head = f"{prefix}-{n}-"
    return head + "x" * (512 - len(head))


class Rec:
    def __init__(self, key: bytes, value: bytes, offset: int) -> None:
        self.key, self.value, self.offset, self.partition, self.topic = key, value, offset, 0, "facts"
        self.timestamp = T0


def storm_facts(root: str, runs: int, files: int, long: bool) -> list[list[Fact]]:
    """A subagent storm: per run, its run fact and ``files`` reads, each with the same result."""
    records: list[list[Fact]] = []
    tool = long_id("tool", 0) if long else "read"
    for n in range(runs):
        run = root if n == 0 else (long_id("run", n) if long else f"{root}/sub-{n}")
        facts: list[Fact] = [
            ChainRunFact(root, run, long_id("agent", n % 7) if long else "a", T0 + n, T0 + n)
        ]
        for f in range(files):
            args = long_id(f"args{f}", 0) if long else f"read:{f:032x}"
            result = long_id(f"result{f}", 0) if long else f"{f + 1:032x}"
            event = long_id(f"ev{f}", n) if long else f"ev-{n}-{f}"
            facts.append(
                ChainResultFact(root, run, event, tool, args, result, T0 + n, n % 300, n * files + f)
            )
        records.append(facts)
    return records


# -- 1. a chain's state is small by construction ---------------------------------------------


@pytest.mark.parametrize(
    ("runs", "files", "long", "repeated"),
    [(3000, 30, True, 30), (2000, 300, True, 0), (1000, 40, False, 40)],
)
def test_a_chain_state_stays_under_64_kb_in_any_storm(
    runs: int, files: int, long: bool, repeated: int
) -> None:
    """Every id at the 512-byte limit, or short ones; as many files as the chain keeps triples
    for (each file's repeats alert, warning and critical), or far more (they churn: no alert)."""
    rule = fleet_rules(config(enabled=True, maxRuns=1000).global_rules).delegation
    root = long_id("root", 0) if long else "root-1"
    state = chains.ChainState(root)
    largest = 0
    alerts: list[FleetAlert] = []
    for n, facts in enumerate(storm_facts(root, runs, files, long)):
        for fact in facts:
            alerts += chains.step(state, fact, rule)  # type: ignore[arg-type]
        if n % 97 == 0 or n == runs - 1:
            largest = max(largest, len(msgspec.msgpack.encode(state)))
    assert largest <= KB64, largest
    # the counts went on: a runaway at 1000 and again at 2000 runs, repeats of the storm's reads
    runaway = [a.runs for a in alerts if a.kind == "chain_runaway"]
    assert runaway == [1000 * k for k in range(1, runs // 1000 + 1) if k & (k - 1) == 0]
    repeats = [(a.args_hash, a.count) for a in alerts if a.kind == "chain_repeat"]
    assert len(repeats) == len(set(repeats)) == 2 * repeated
    assert {count for _, count in repeats} <= {10, 20}


def test_the_reviewers_storm_goes_through_the_fleet_processor() -> None:
    """240 runs reading the same 30 files once made a 1,003,806-byte changelog record."""
    cfg = config(enabled=True)
    written: list[int] = []

    async def send(topic: str, key: bytes | None, value: bytes | None, partition: int | None) -> Any:
        if value is not None and len(value) > 1_000_000:
            raise MessageSizeTooLargeError(f"The message is {len(value)} bytes when serialized")
        if topic == "cl":
            written.append(len(value or b""))
        future = asyncio.get_running_loop().create_future()
        future.set_result(None)
        return future

    async def seek(partition: int, offset: int) -> None:
        return None

    async def scenario() -> None:
        fleet = FleetProcessor({}, send, seek, lambda: cfg, {"alerts": "a", "changelog": "cl"})
        fleet.cursors.start(0, 0)
        for offset, facts in enumerate(storm_facts("run-storm", 1000, 30, False)):
            await fleet.process({TP("facts", 0): [Rec(b"chain:run-storm", encode_facts(facts), offset)]})
            await asyncio.sleep(0)  # the broker's confirmations of the alerts
        assert fleet.cursors.positions() == {0: 1000}
        assert fleet.unstorable == 0

    asyncio.run(scenario())
    assert max(written) <= KB64, max(written)


def test_a_state_that_cannot_be_stored_starts_afresh_and_the_worker_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cfg = config(enabled=True, maxRuns=2)
    broker = Broker()
    refused: list[int] = []
    limit = [10**9]

    async def send(topic: str, key: bytes | None, value: bytes | None, partition: int | None) -> Any:
        if topic == "cl" and value is not None and len(value) > limit[0]:
            refused.append(len(value))
            raise MessageSizeTooLargeError("too large")
        return await broker.send(topic, key, value, partition)

    async def scenario() -> FleetProcessor:
        table: dict[bytes, bytes] = {}
        fleet = FleetProcessor(table, send, broker.seek, lambda: cfg, {"alerts": "a", "changelog": "cl"})
        fleet.cursors.start(0, 0)
        records = [
            Rec(b"chain:r", encode_facts(facts), n) for n, facts in enumerate(storm_facts("r", 3, 4, False))
        ]
        limit[0] = 200  # the broker refuses what the state has grown to
        await fleet.process({TP("facts", 0): records[:2]})
        assert refused
        assert fleet.unstorable == 1
        assert fleet.cursors.positions() == {0: 2}  # the records are applied: the worker goes on
        stored = fleet_module._DECODER.decode(table[b"chain:r"])
        assert stored.offset == 1
        assert stored.chains == {}  # the chain starts afresh
        limit[0] = 10**9
        monkeypatch.setattr(fleet_module, "MAX_VALUE_BYTES", 150)  # too large to write at all
        await fleet.process({TP("facts", 0): records[2:]})
        assert fleet.unstorable == 2
        assert fleet.cursors.positions() == {0: 3}
        assert len(table[b"chain:r"]) <= 150
        return fleet

    fleet = asyncio.run(scenario())
    metrics = WorkerMetrics()
    metrics.note_fleet(fleet.applied, fleet.unstorable)  # as the worker's metrics_text does
    text = metrics.render(0, 0, 0, {}, None, T0)
    assert "loopwatch_fleet_states_unstorable_total 2.0" in text
    assert "loopwatch_fleet_fact_records_total 3.0" in text


def test_a_state_too_large_with_its_unconfirmed_alerts_is_stored_without_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cfg = config(enabled=True, maxRuns=2)
    record = Rec(
        b"chain:r", encode_facts(storm_facts("r", 2, 0, False)[0] + storm_facts("r", 2, 0, False)[1]), 0
    )

    async def scenario(limit: int) -> tuple[FleetProcessor, dict[bytes, bytes]]:
        broker = Broker()
        table: dict[bytes, bytes] = {}
        monkeypatch.setattr(fleet_module, "MAX_VALUE_BYTES", limit)
        fleet = FleetProcessor(
            table, broker.send, broker.seek, lambda: cfg, {"alerts": "a", "changelog": "cl"}
        )
        fleet.cursors.start(0, 0)
        await fleet.process({TP("facts", 0): [record]})  # the runaway alert, not yet confirmed
        return fleet, table

    _, whole = asyncio.run(scenario(10**9))
    stored = fleet_module._DECODER.decode(whole[b"chain:r"])
    assert stored.outbox  # its alert awaits the broker's confirmation
    bare = len(msgspec.msgpack.encode(msgspec.structs.replace(stored, outbox=[])))
    fleet, table = asyncio.run(scenario(bare))
    kept = fleet_module._DECODER.decode(table[b"chain:r"])
    assert fleet.unstorable == 1
    assert kept.outbox == []
    assert kept.chains == stored.chains  # the chain goes on


def test_a_redelivered_result_counts_once_however_many_came_since() -> None:
    rule = fleet_rules(
        config(enabled=True, minRuns=2, chainWarningThreshold=3, chainCriticalThreshold=4).global_rules
    )
    state: dict[str, chains.ChainState] = {}
    facts = [
        ChainResultFact("r", f"r/{n % 2}", f"e{n}", "read", "read:a", "x", T0 + n, 0, n) for n in range(600)
    ]
    alerts = [a for f in facts[:2] for a in apply_fact(f, rule, {}, {}, state)]
    for fact in facts[2:]:  # past the latest results remembered
        apply_fact(fact, rule, {}, {}, state)
    work = next(iter(state["r"].repeats.work.values()))
    assert work.count == 600
    for fact in facts:  # the whole partition redelivered
        alerts += apply_fact(fact, rule, {}, {}, state)
    assert work.count == 600
    assert not alerts


# -- 4. thresholds past every cap -----------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "limit"),
    [("maxRuns", 1025, "at most 1024"), ("minRuns", 33, "at most 32")],
)
def test_thresholds_no_count_can_reach_are_refused_with_their_path(key: str, value: int, limit: str) -> None:
    document = {"loopwatch": {"detectors": {"delegation": {"enabled": True, key: value}}}}
    with pytest.raises(ConfigError) as raised:
        parse_config_text(json.dumps(document))
    assert f"loopwatch.detectors.delegation.{key}" in str(raised.value)
    assert limit in str(raised.value)


def test_the_runaway_alerts_again_without_end() -> None:
    rules = fleet_rules(config(enabled=True, maxRuns=2).global_rules)
    state: dict[str, chains.ChainState] = {}
    alerts: list[FleetAlert] = []
    for n in range(17_500):
        alerts += apply_fact(ChainRunFact("r", f"r/{n}", "a", T0 + n, T0 + n), rules, {}, {}, state)
    thresholds = [a.runs for a in alerts if a.kind == "chain_runaway"]
    assert thresholds == [2**k for k in range(1, 15)]  # 2 … 16384: past the 6400 of before
    assert [a.alert_id for a in alerts if a.kind == "chain_runaway"][-1] == "chain_runaway:chain:r:16384"


def test_repeats_count_past_a_thousand_calls() -> None:
    cfg = config(enabled=True, minRuns=3, chainWarningThreshold=1001, chainCriticalThreshold=1002)
    rules = fleet_rules(cfg.global_rules)
    state: dict[str, chains.ChainState] = {}
    alerts: list[FleetAlert] = []
    for n in range(1002):
        fact = ChainResultFact("r", f"r/{n % 3}", f"e{n}", "read", "read:a", "x", T0 + n)
        alerts += apply_fact(fact, rules, {}, {}, state)
    assert [(a.count, a.runs) for a in alerts if a.kind == "chain_repeat"] == [(1001, 3), (1002, 3)]


# -- 2. and 3. blocks end the same way on every runtime ------------------------------------


def test_an_expired_runaway_block_does_not_come_back() -> None:
    cfg = config(enabled=True, block=True, maxRuns=3, chainTtlS=60)
    slow = call("root", T0 + 500, root="root", args={"job": "long"})
    events: list[Event] = [slow, *fan_out("root", 3)[1:]]  # 3 runs: the alert at T0 + 2 s
    events.append(msgspec.structs.replace(result_of(slow), ts=T0 + 10 * 60 * SEC))  # 10 min later
    fresh = call("root/sub-new", T0 + 10 * 60 * SEC + SEC, root="root")
    outputs, alerts = sequential([*events, fresh], cfg)
    assert [a.alert_id for a in alerts if a.kind == "chain_runaway"] == ["chain_runaway:chain:root:3"]
    assert [o for o in outputs if isinstance(o, Verdict) and o.trigger_event_id == fresh.event_id] == []
    # the board alone: a record 60 s past the alert closes the chain before moving time on
    board = ChainBlocks(60)
    (runaway,) = [a for a in alerts if a.kind == "chain_runaway"]
    board.add(runaway)
    later = runaway.ts + 60 * SEC
    board.add(
        FleetAlert(
            alert_id="x",
            kind="chain_active",
            subject="chain:root",
            runs=0,
            sample_run_ids=[],
            since_ts=later,
            ts=later,
            message="m",
        )
    )
    rule = fleet_rules(cfg.global_rules).delegation
    probe = call("root/sub-9", later + 1, root="root")
    assert board.block("root/sub-9", "root", later + 1, probe, "read:x", later + 1, rule, False) is None
    board.add(runaway)  # re-published after the expiry: of the expired episode
    assert board.block("root/sub-9", "root", later + 1, probe, "read:x", later + 1, rule, False) is None


def on_partition(events: list[Event], partition: int, start: int) -> dict[TP, list[Record]]:
    return {
        TP("in", partition): [
            Record("in", partition, start + n, 0, run_scope(e).encode(), encode_event(e))
            for n, e in enumerate(events)
        ]
    }


def test_a_worker_blocks_a_late_subagent_as_the_embedded_runtime_does() -> None:
    cfg = config(enabled=True, block=True, maxRuns=3, chainTtlS=60)
    events = fan_out("root", 3)  # the runaway alert at T0 + 2 s
    for k in range(1, 11):  # the root keeps working, a call every 30 s
        c = call("root", T0 + k * 30 * SEC, root="root", args={"k": k})
        events += [c, result_of(c)]
    late = call("root/sub-late", T0 + 5 * 60 * SEC + SEC, root="root")
    outputs, _ = sequential([*events, late], cfg)
    embedded = [o.detector for o in outputs if isinstance(o, Verdict) and o.trigger_event_id == late.event_id]
    assert embedded == ["chain_runaway"]

    async def scenario() -> list[str]:
        broker_a, broker_b, fleet_broker = Broker(), Broker(), Broker()
        worker_a = RunProcessor(
            {}, broker_a.send, broker_a.flush, broker_a.seek, lambda: cfg, WorkerMetrics(), TOPICS
        )
        worker_b = RunProcessor(
            {}, broker_b.send, broker_b.flush, broker_b.seek, lambda: cfg, WorkerMetrics(), TOPICS
        )
        fleet = FleetProcessor(
            {}, fleet_broker.send, fleet_broker.seek, lambda: cfg, {"alerts": "a", "changelog": "fc"}
        )
        for processor in (worker_a, worker_b):
            processor.cursors.start(0, 0)
        fleet.cursors.start(0, 0)
        for offset, event in enumerate(events):  # worker A applies the chain's runs, one batch per event
            await worker_a.process(on_partition([event], 0, offset))
        facts = [(k, v) for topic, k, v, _ in broker_a.sent if topic == "facts" and k == b"chain:root"]
        records = [Record("facts", 0, n, 0, k, v) for n, (k, v) in enumerate(facts)]
        await fleet.process({TP("facts", 0): records})
        for topic, _, value, _ in fleet_broker.sent:  # worker B follows the alerts topic
            if topic == "a":
                worker_b.facts.chains.add(decode_alert(value or b""))
        await worker_b.process(on_partition([late], 0, 0))
        return [json.loads(v)["detector"] for v in broker_b.on("v")]

    assert asyncio.run(scenario()) == embedded


# -- 5. repeat blocks by the full args hash ------------------------------------------------


def test_repeat_blocks_and_ids_follow_the_full_args_hash() -> None:
    cfg = config(enabled=True, block=True, minRuns=3, chainWarningThreshold=3, chainCriticalThreshold=4)
    chained: dict[str, Any] = {"parent_run_id": "root", "root_run_id": "root", "depth": 1}
    a, b, c = ("sha256:aaaaa" + d * 59 for d in "123")  # one h12, three argument sets
    events: list[Event] = []
    for digest in (a, b):
        for n, run in enumerate(["root", "s1", "s2", "s3"]):
            extra: dict[str, Any] = {} if run == "root" else chained
            eid = f"{digest[-1]}{n}"
            events.append(
                ToolCall(event_id=f"c{eid}", run_id=run, ts=T0 + n, tool="read", args_digest=digest, **extra)
            )
            events.append(
                ToolResult(
                    event_id=f"r{eid}",
                    run_id=run,
                    ts=T0 + n,
                    tool="read",
                    args_digest=digest,
                    result_digest="f" * 32,
                    **extra,
                )
            )
    probes: list[Event] = [
        ToolCall(event_id=f"p{d[-1]}", run_id="s1", ts=T0 + 10 * SEC, tool="read", args_digest=d, **chained)
        for d in (a, b, c)
    ]
    outputs, alerts = sequential(events + probes, cfg)
    repeat = [a for a in alerts if a.kind == "chain_repeat"]
    assert len({a.alert_id for a in repeat}) == len(repeat) == 4  # warning and critical of each
    assert {a.args_hash for a in repeat} == {f"read:{a}", f"read:{b}"}
    assert len({a.subject for a in repeat}) == 1  # the subject as the spec defines it
    blocked = [o.trigger_event_id for o in outputs if isinstance(o, Verdict) and o.detector == "chain_repeat"]
    assert blocked == [f"p{a[-1]}", f"p{b[-1]}"]  # never the args no run repeated


def test_a_root_is_read_from_a_subject_whose_digest_holds_the_tool() -> None:
    alert = FleetAlert(
        alert_id="i",
        kind="chain_repeat",
        subject="chain:r:x:ab:x:cdefghi",
        tool="x",
        args_hash="x:ab:x:cdefghijkl",
        runs=3,
        count=8,
        sample_run_ids=[],
        since_ts=T0,
        ts=T0,
        message="m",
    )
    assert chain_root(alert) == "r"
    board = ChainBlocks()
    board.add(alert)
    rule = fleet_rules(
        config(enabled=True, block=True, chainWarningThreshold=5, chainCriticalThreshold=8).global_rules
    ).delegation
    probe = ToolCall(event_id="p", run_id="r/1", ts=T0, tool="x", args_digest="ab:x:cdefghijkl")
    found = board.block("r/1", "r", T0, probe, "x:ab:x:cdefghijkl", T0, rule, False)
    assert found is not None
    assert found.detector == "chain_repeat"


def alerts_by_scope(events: list[Event], cfg: Any) -> list[FleetAlert]:
    """``sequential`` for events that may have no run id (their run scope keys their state)."""
    watch = FleetWatch(fleet_rules(cfg.global_rules), DIGESTER)
    engine = Engine(cfg, fleet=WatchHooks(watch))
    for event in events:
        assert event.ts is not None
        scope = run_scope(event)
        stepped = engine.step(event, event.ts)
        state = engine.states.get(scope)
        root = chain_key(state) if state is not None and stepped.kind == "applied" else None
        watch.observe(event, scope, event.ts, stepped.prepared, stepped.outputs, root)
    return watch.alerts


def test_a_root_named_with_spaces_is_the_root_run_scope() -> None:
    cfg = config(enabled=True, maxRuns=3)
    root = call("root-1", T0, root="root-1")
    subs = [
        ToolCall(
            event_id=f"s{n}",
            run_id=f"root-1/s{n}",
            ts=T0 + n,
            tool="read",
            params={"n": n},
            parent_run_id="root-1",
            root_run_id=" root-1 ",
            depth=1,
        )
        for n in (1, 2)
    ]
    _, alerts = sequential([root, *subs], cfg)
    assert [a.alert_id for a in alerts] == ["chain_runaway:chain:root-1:3"]
    session_root = ToolCall(event_id="q0", session_id="s-1", ts=T0, tool="read", params={"n": 0})
    session_subs = [
        ToolCall(
            event_id=f"q{n}",
            run_id=f"s-1/{n}",
            ts=T0 + n,
            tool="read",
            params={"n": n},
            parent_run_id="session:s-1",
            root_run_id=" session: s-1 ",
            depth=1,
        )
        for n in (1, 2)
    ]
    watch_alerts = alerts_by_scope([session_root, *session_subs], cfg)
    assert [a.alert_id for a in watch_alerts] == ["chain_runaway:chain:session:s-1:3"]


# -- 6. alerts independent of the batching ----------------------------------------------------


def test_late_facts_give_the_same_alerts_in_one_batch_or_one_by_one() -> None:
    cfg = config(enabled=True, maxRuns=3, chainTtlS=3600)
    hour = 3600 * SEC
    events = [
        call("root", T0, root="root"),
        call("root/b", T0 + 2 * hour, root="root"),
        call("root/c", T0 + hour // 2, root="root"),  # from another partition, late
        call("root/d", T0 + 2 * hour + SEC, root="root"),
    ]
    _, embedded = sequential(list(events), cfg)
    rules = fleet_rules(cfg.global_rules)

    def worker(batches: list[list[ToolCall]]) -> list[str]:
        states: dict[str, chains.ChainState] = {}
        out: list[FleetAlert] = []
        for batch in batches:
            facts = FactBatch(chain_ttl_s=3600)
            for e in batch:
                facts.chain_run("root", e.run_id or "", e.agent_id, e.ts or 0)
            for items in facts.drain().values():
                for fact in items:
                    out += apply_fact(fact, rules, {}, {}, states)
        return [a.alert_id for a in out if a.kind != "chain_active"]

    expected = [a.alert_id for a in embedded]
    assert expected == ["chain_runaway:chain:root:3"]
    assert worker([events]) == expected
    assert worker([[e] for e in events]) == expected
