"""The worker's record path without a broker: offsets, redeliveries, tombstones, outbox, faults."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

import msgspec

from loopwatch.config.fleet import FleetConfig
from loopwatch.detectors.engine import Engine
from loopwatch.detectors.events import (
    EXPIRY_EVENT_PREFIX,
    Event,
    RunEnd,
    encode_event,
    encode_output,
    run_scope,
)
from loopwatch.streams.fleet_view.metrics import WorkerMetrics
from loopwatch.streams.kafka.run_processor import RunProcessor
from loopwatch.streams.kafka.run_table import ENDED, LIVE, unpack
from tests.helpers import Trace

TOPICS = {"verdicts": "v", "dead_letter": "dl", "changelog": "cl"}


@dataclass
class Record:
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None


@dataclass(frozen=True, order=True)
class TP:
    topic: str
    partition: int


class Broker:
    """Sends recorded in order; confirmations held back until ``confirm()``."""

    def __init__(self, confirm_at_once: bool = True) -> None:
        self.sent: list[tuple[str, bytes | None, bytes | None, int | None]] = []
        self.pending: list[asyncio.Future[Any]] = []
        self.confirm_at_once = confirm_at_once
        self.seeks: list[tuple[int, int]] = []
        self.flushes: list[int] = []  # how many sends there were at each flush

    async def send(self, topic: str, key: bytes | None, value: bytes | None, partition: int | None) -> Any:
        self.sent.append((topic, key, value, partition))
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self.confirm_at_once:
            future.set_result(None)
        else:
            self.pending.append(future)
        return future

    async def flush(self) -> None:
        self.flushes.append(len(self.sent))
        self.confirm()

    def confirm(self) -> None:
        for future in self.pending:
            if not future.done():
                future.set_result(None)
        self.pending.clear()

    async def seek(self, partition: int, offset: int) -> None:
        self.seeks.append((partition, offset))

    def on(self, topic: str) -> list[bytes]:
        return [value for t, _, value, _ in self.sent if t == topic and value is not None]


def records(events: list[Event], start: int = 0) -> list[Record]:
    return [
        Record("in", 0, start + i, 1_000 + i, run_scope(e).encode(), encode_event(e))
        for i, e in enumerate(events)
    ]


def processor(broker: Broker, data: dict[bytes, bytes] | None = None, **kwargs: Any) -> RunProcessor:
    config = FleetConfig.enabled_default()
    return RunProcessor(
        {} if data is None else data,
        broker.send,
        broker.flush,
        broker.seek,
        lambda: config,
        WorkerMetrics(),
        TOPICS,
        **kwargs,
    )


def loop_trace(calls: int = 25, run_id: str = "run-1") -> Trace:
    trace = Trace(run_id)
    for _ in range(calls):
        trace.both("read", {"path": "/missing"}, error="ENOENT")
    return trace


def expected(events: list[Event]) -> list[bytes]:
    engine = Engine(FleetConfig.enabled_default())
    return [encode_output(out) for e in events for out in engine.process(e)]


async def feed(proc: RunProcessor, batch: list[Record]) -> None:
    await proc.process({TP("in", 0): batch})


def test_records_give_the_core_verdicts_and_one_state_write_per_run_and_batch() -> None:
    async def go() -> None:
        broker = Broker()
        proc = processor(broker)
        proc.cursors.start(0, 0)
        events = loop_trace().events + loop_trace(run_id="run-2").events
        batch = records(events)
        await feed(proc, batch[:30])
        await feed(proc, batch[30:])
        assert broker.on("v") == expected(events)
        assert len(broker.on("cl")) == 2 + 1  # run-1 in both batches, run-2 only in the second
        assert proc.cursors.positions() == {0: len(events)}

    asyncio.run(go())


def test_a_redelivered_record_republishes_only_unconfirmed_verdicts() -> None:
    async def go() -> None:
        broker = Broker(confirm_at_once=False)
        data: dict[bytes, bytes] = {}
        proc = processor(broker, data)
        proc.cursors.start(0, 0)
        events = loop_trace().events
        await feed(proc, records(events))
        first = broker.on("v")
        assert first == expected(events)
        # a new owner, from the changelog's state, reads everything again (nothing confirmed)
        again_broker = Broker()
        again = processor(again_broker, data)
        again.cursors.start(0, 0)
        await feed(again, records(events))
        assert sorted(again_broker.on("v")) == sorted(first)  # the same verdicts, the same ids
        assert again.metrics.redelivered == len(events)
        # once the broker confirmed them, a redelivery publishes nothing
        broker.confirm()
        await asyncio.sleep(0)  # the confirmation callbacks run
        proc.cursors.start(0, 0)
        await feed(proc, records(events))
        assert broker.on("v") == first
        assert proc.metrics.redelivered == len(events)

    asyncio.run(go())


def test_an_ended_run_turns_away_its_redelivered_and_republished_records() -> None:
    async def go() -> None:
        broker = Broker()
        data: dict[bytes, bytes] = {}
        proc = processor(broker, data)
        proc.cursors.start(0, 0)
        trace = loop_trace()
        trace.end()
        n = len(trace.events)
        await feed(proc, records(trace.events))
        published = len(broker.on("v"))
        assert unpack(data[b"run-1"]).kind == ENDED
        after = processor(broker, data)  # the next owner of the partition reads the tail again
        after.cursors.start(0, n - 20)
        await feed(after, records(trace.events[-20:], start=n - 20))
        republished = trace.events[:30]  # published again after the run ended, at new offsets
        await feed(after, records(republished, start=n))
        assert len(broker.on("v")) == published
        assert after.metrics.ended_run_events == 20 + 30
        newcomer = loop_trace(1).events[:1]  # an event the run never had: a new run, same id
        newcomer = [msgspec.structs.replace(newcomer[0], event_id="brand-new")]
        await feed(after, records(newcomer, start=n + 30))
        assert after.metrics.ended_run_events == 50
        assert unpack(data[b"run-1"]).kind == LIVE

    asyncio.run(go())


def test_a_batch_past_the_cursor_is_sought_back_and_not_applied() -> None:
    async def go() -> None:
        broker = Broker()
        proc = processor(broker)
        proc.cursors.start(0, 0)
        events = loop_trace().events
        await feed(proc, records(events[10:], start=10))
        assert broker.seeks == [(0, 0)]
        assert broker.sent == []
        await feed(proc, records(events))
        assert broker.on("v") == expected(events)

    asyncio.run(go())


def test_an_exception_in_one_event_dead_letters_it_and_spares_the_others() -> None:
    async def go() -> None:
        broker = Broker()
        events = loop_trace().events + loop_trace(run_id="run-2").events
        failing = events[7].event_id

        def hook(event: Event) -> None:
            if event.event_id == failing:
                raise RuntimeError("boom")

        proc = processor(broker, fault_hook=hook)
        proc.cursors.start(0, 0)
        await feed(proc, records(events))
        assert broker.on("v") == expected([e for e in events if e.event_id != failing])
        [letter] = [json.loads(v) for v in broker.on("dl")]
        assert letter["reason"] == "processing failed: RuntimeError: boom"
        assert letter["offset"] == 7

    asyncio.run(go())


def test_an_unreadable_table_value_is_replaced_by_a_fresh_state() -> None:
    async def go() -> None:
        broker = Broker()
        proc = processor(broker, {b"run-1": b"\x07garbage"})
        proc.cursors.start(0, 0)
        events = loop_trace().events
        await feed(proc, records(events))
        assert broker.on("v") == expected(events)

    asyncio.run(go())


def test_an_ending_run_has_its_verdicts_confirmed_before_its_tombstone_is_written() -> None:
    async def go() -> None:
        broker = Broker(confirm_at_once=False)
        proc = processor(broker)
        proc.cursors.start(0, 0)
        trace = loop_trace()
        trace.end()
        await feed(proc, records(trace.events))  # verdicts and run_end in one batch
        [(tombstone_at, _)] = [(i, v) for i, (t, _, v, _) in enumerate(broker.sent) if t == "cl"]
        verdicts_sent = [i for i, (t, _, _, _) in enumerate(broker.sent) if t == "v"]
        assert verdicts_sent
        assert any(max(verdicts_sent) < at <= tombstone_at for at in broker.flushes)

    asyncio.run(go())


def test_a_tombstone_replaced_by_a_new_run_after_the_expiry_scan_is_not_dropped() -> None:
    """The scan picks tombstones past their grace, then waits for the lock; a batch that starts
    a new run under the ended run's id in between must keep the new run's state."""

    async def go() -> None:
        broker = Broker()
        data: dict[bytes, bytes] = {}
        proc = processor(broker, data)
        proc.cursors.start(0, 0)
        trace = loop_trace(3)
        trace.end()
        n = len(trace.events)
        await feed(proc, records(trace.events))
        ended = data[b"run-1"]
        assert unpack(ended).kind == ENDED
        due = {b"run-1": (0, ended)}  # what the scan saw
        newcomer = [msgspec.structs.replace(loop_trace(1).events[0], event_id="brand-new")]
        await feed(proc, records(newcomer, start=n))  # the batch that held the lock meanwhile
        async with proc.lock:
            await proc.drop_ended(due)
        assert unpack(data[b"run-1"]).kind == LIVE
        data[b"run-2"] = ended
        async with proc.lock:  # a tombstone still as seen is dropped, with its changelog delete
            await proc.drop_ended({b"run-2": (0, ended)})
        assert b"run-2" not in data
        assert b"run-1" in data
        assert ("cl", b"run-2", None, 0) in broker.sent

    asyncio.run(go())


def _scanned(data: dict[bytes, bytes]) -> tuple[int, int, int]:
    """What a full read of the table gives: (live runs, tombstones, bytes)."""
    ended = sum(1 for blob in data.values() if blob[0] == ENDED)
    return len(data) - ended, ended, sum(len(blob) for blob in data.values())


def test_the_inventory_matches_a_full_read_of_the_table_after_every_batch() -> None:
    async def go() -> None:
        broker = Broker()
        data: dict[bytes, bytes] = {}
        proc = processor(broker, data, parsed_runs_max=3)
        proc.cursors.start(0, 0)
        proc.inventory.start(0)
        traces = [loop_trace(6, run_id=f"run-{i}") for i in range(6)]
        for trace in traces[:3]:
            trace.end()  # three runs end: tombstones
        events = [e for t in traces for e in t.events]
        events.append(msgspec.structs.replace(loop_trace(1, "run-0").events[0], event_id="again"))
        batch = records(events)
        for start in range(0, len(batch), 7):
            await feed(proc, batch[start : start + 7])
            assert proc.inventory.totals() == _scanned(data)
        assert set(proc.inventory.ended[0]) == {b"run-1", b"run-2"}  # run-0 began again
        assert set(proc.inventory.seen[0]) == {b"run-0", b"run-3", b"run-4", b"run-5"}
        tombstone = data[b"run-1"]
        async with proc.lock:
            await proc.drop_ended({b"run-1": (0, tombstone)})
        assert proc.inventory.totals() == _scanned(data)
        assert set(proc.inventory.ended[0]) == {b"run-2"}

    asyncio.run(go())


def test_an_inventory_taken_from_the_table_gives_the_same_figures_and_times() -> None:
    async def go() -> None:
        broker = Broker()
        data: dict[bytes, bytes] = {}
        proc = processor(broker, data)
        proc.cursors.start(0, 0)
        ended = loop_trace(2, run_id="ended")
        ended.end()
        await feed(proc, records(loop_trace(3).events + ended.events))
        taken = processor(Broker(), data)  # a new owner of the partition
        taken.inventory.start(0)
        for key, blob in list(data.items()):
            taken.inventory.found(0, key, blob, 500.0)
        assert taken.inventory.totals() == _scanned(data)
        assert taken.inventory.seen[0] == {b"run-1": 500.0}  # active from the take on
        assert taken.inventory.ended[0] == {b"ended": unpack(data[b"ended"]).ended_ms}

    asyncio.run(go())


def test_a_revocation_forgets_the_partition_s_inventory() -> None:
    """Should the partition come back, a stale activity time would expire a run that was
    active on another worker meanwhile."""
    proc = processor(Broker())
    proc.inventory.start(3)
    proc.inventory.touched(3, b"run-a", 100.0)
    proc.inventory.touched(4, b"run-b", 100.0)
    proc.forget_partitions({3})
    assert 3 not in proc.inventory.seen
    assert 3 not in proc.inventory.tallies
    assert proc.inventory.seen[4] == {b"run-b": 100.0}


def test_a_partition_the_same_rebalance_gives_back_keeps_its_idle_clocks() -> None:
    """Nobody else owned it meanwhile: its runs stay as idle as they were (runs that never end
    still expire one TTL after their last event however often workers join and leave)."""
    proc = processor(Broker())
    for partition in (3, 4, 5):
        proc.inventory.start(partition)
        proc.inventory.touched(partition, f"run-{partition}".encode(), 100.0)
    proc.inventory.written(3, b"run-3", None, b"\x01state", 0)
    proc.forget_partitions({3, 4, 5}, kept={3, 4}, rebalance=7)  # 5's cursor never ran
    assert proc.inventory.seen == {}
    assert proc.inventory.totals() == (0, 0, 0)
    assert proc.inventory.resume(3, 7)
    assert proc.inventory.seen[3] == {b"run-3": 100.0}
    assert proc.inventory.totals()[2] == len(b"\x01state")
    assert not proc.inventory.resume(5, 7)  # incomplete: forgotten, its table is read again
    assert not proc.inventory.resume(3, 7)  # taken up once


def test_a_partition_back_after_another_rebalance_is_read_again() -> None:
    """Another revocation came in between: another worker may have owned the partition."""
    proc = processor(Broker())
    proc.inventory.start(3)
    proc.inventory.start(4)
    proc.inventory.touched(3, b"run-3", 100.0)
    proc.forget_partitions({3, 4}, kept={3, 4}, rebalance=7)
    assert not proc.inventory.resume(3, 8)
    proc.forget_partitions(set(), kept=set(), rebalance=8)  # the next revocation drops the rest
    assert not proc.inventory.resume(4, 7)
    assert 3 not in proc.inventory.seen


def interleaved(runs: int, calls: int) -> list[Event]:
    """Looping runs taking turns, one call and its result at a time."""
    traces = [loop_trace(calls, run_id=f"run-{i}").events for i in range(runs)]
    return [event for step in range(0, 2 * calls, 2) for t in traces for event in t[step : step + 2]]


def test_runs_parsed_again_after_eviction_give_the_core_verdicts() -> None:
    async def go() -> None:
        broker = Broker()
        proc = processor(broker, parsed_runs_max=2)
        proc.cursors.start(0, 0)
        events = interleaved(5, 25)
        batch = records(events)
        for start in range(0, len(batch), 6):  # three runs' call and result per batch
            await feed(proc, batch[start : start + 6])
            busy = [run for run in proc._runs.values() if run.state is not None and run.state.outbox]
            assert len(proc._runs) <= 2 + len(busy)  # the limit, plus runs awaiting confirmations
        assert broker.on("v") == expected(events)
        assert proc.metrics.parsed_evictions >= 40  # runs were parsed again, many times

    asyncio.run(go())


def test_runs_idle_for_parsed_idle_s_keep_only_their_bytes_and_give_the_core_verdicts() -> None:
    """Three runs taking turns, a call and its result per batch, 5 s apart: after each batch the
    run last active 10 s before (idle for ``parsed_idle_s``) is no longer parsed unless its
    verdicts await the broker, the two others are; each is parsed again at its next turn, and
    the verdicts are the core's."""

    async def go() -> None:
        now = [0.0]
        broker = Broker()
        proc = processor(broker, parsed_idle_s=10.0, clock=lambda: now[0])
        proc.cursors.start(0, 0)
        events = interleaved(3, 12)
        batch = records(events)
        for turn, start in enumerate(range(0, len(batch), 2)):
            now[0] = 5.0 * turn
            await feed(proc, batch[start : start + 2])
            kept = {key.decode() for key in proc._runs}
            recent = {f"run-{(turn - back) % 3}" for back in range(min(turn + 1, 2))}
            busy = {key.decode() for key, run in proc._runs.items() if run.state and run.state.outbox}
            assert recent <= kept
            assert kept - recent <= busy  # (verdicts awaiting the broker's confirmation: kept)
        assert broker.on("v") == expected(events)
        assert proc.metrics.parsed_evictions >= 20  # of 34 turns after the first two

    asyncio.run(go())


def test_a_run_awaiting_confirmations_stays_parsed_and_is_stored_again_before_it_goes() -> None:
    async def go() -> None:
        broker = Broker(confirm_at_once=False)
        data: dict[bytes, bytes] = {}
        proc = processor(broker, data, parsed_runs_max=1)
        proc.cursors.start(0, 0)
        looping = loop_trace(12, run_id="looping").events  # verdicts from its 5th call on
        await feed(proc, records(looping))
        unconfirmed = len(broker.on("v"))
        assert unconfirmed > 0
        other = loop_trace(1, run_id="other").events
        await feed(proc, records(other, start=len(looping)))
        assert b"looping" in proc._runs  # its verdicts await the broker: kept
        broker.confirm()
        await asyncio.sleep(0)
        changelog_before = len(broker.on("cl"))
        third = loop_trace(1, run_id="third").events
        await feed(proc, records(third, start=len(looping) + 2))
        assert b"looping" not in proc._runs
        # written again with its outbox emptied, so parsing it later brings back no verdict
        assert len(broker.on("cl")) == changelog_before + 2  # "third", and "looping" again
        again = processor(broker, data)  # a new owner reads everything again
        again.cursors.start(0, 0)
        await feed(again, records(looping))
        assert len(broker.on("v")) == unconfirmed  # nothing re-published: all were confirmed

    asyncio.run(go())


def test_a_batch_of_more_runs_than_the_limit_with_expiries_and_ends_goes_through() -> None:
    """The runs evicted after a batch may include runs the batch ended or expired."""

    async def go() -> None:
        broker = Broker()
        data: dict[bytes, bytes] = {}
        proc = processor(broker, data, parsed_runs_max=1)
        proc.cursors.start(0, 0)
        events: list[Event] = []
        for index in range(6):
            trace = loop_trace(2, run_id=f"run-{index}")
            events += trace.events
        for index in range(6):
            expiry = f"{EXPIRY_EVENT_PREFIX}run-{index}:1" if index % 2 else f"end-{index}"
            events.append(RunEnd(event_id=expiry, run_id=f"run-{index}"))
        await feed(proc, records(events))
        assert proc.metrics.invalid == 0
        assert sorted(data) == [b"run-0", b"run-2", b"run-4"]  # tombstones; the expired are gone
        assert all(unpack(blob).kind == ENDED for blob in data.values())

    asyncio.run(go())


def _expiry_worker(inventory: Any, cursors: Any, send: Any) -> Any:
    """What ``LoopwatchWorker._expire_idle_runs`` reads of its worker, without Kafka."""
    from types import SimpleNamespace

    async def nothing(*_: Any) -> None:
        return None

    return SimpleNamespace(
        processor=SimpleNamespace(
            inventory=inventory, cursors=cursors, lock=asyncio.Lock(), drop_ended=nothing
        ),
        settings=SimpleNamespace(ended_run_grace_s=3600, state_ttl_s=3600),
        runs_data={},
        _send=send,
        topic="events",
        fleet_processor=SimpleNamespace(lock=asyncio.Lock(), drop_expired_chains=nothing),
        _owned_fact_partition=lambda key: None,
    )


def test_the_expiry_timer_spares_a_run_that_became_active_while_it_waited_on_a_send() -> None:
    """A send may wait (the producer's batch is full) while a batch applies an event of a
    run the pass found idle: its state must not be ended."""
    import time

    from loopwatch.streams.kafka.input_cursors import InputCursors
    from loopwatch.streams.kafka.run_inventory import RunInventory
    from loopwatch.streams.kafka.worker import LoopwatchWorker

    async def go() -> None:
        inventory = RunInventory()
        inventory.start(0)
        idle = time.time() - 10_000
        inventory.seen[0].update({b"run-a": idle, b"run-b": idle, b"run-c": idle})
        cursors = InputCursors()
        cursors.start(0, 0)
        sent: list[bytes] = []

        async def send(topic: str, key: bytes, value: bytes, partition: int) -> None:
            sent.append(key)
            if key == b"run-a":
                await asyncio.sleep(0)
                inventory.touched(0, b"run-b", time.time())  # a batch applied meanwhile

        await LoopwatchWorker._expire_idle_runs(_expiry_worker(inventory, cursors, send))
        assert sent == [b"run-a", b"run-c"]
        sent.clear()
        await LoopwatchWorker._expire_idle_runs(_expiry_worker(inventory, cursors, send))
        assert sent == []  # not sent again before their run_end is applied

    asyncio.run(go())


def _rebalancing_worker(proc: RunProcessor) -> Any:
    """The parts of a LoopwatchWorker that on_ready and _on_revoked use, around ``proc``."""
    from types import SimpleNamespace

    from loopwatch.streams.kafka.worker import LoopwatchWorker

    worker: Any = SimpleNamespace(
        topic="in", processor=proc, _revocations=0, _committed={}, view_handoff=None
    )
    worker._processors = lambda: [("in", proc)]
    worker._resume_inventory = lambda p, r: LoopwatchWorker._resume_inventory(worker, p, r)
    return worker


def test_partitions_revoked_while_their_inventory_is_taken_get_no_cursor() -> None:
    from loopwatch.streams.kafka.worker import LoopwatchWorker

    async def go() -> None:
        proc = processor(Broker())
        worker = _rebalancing_worker(proc)

        async def inventory(partitions: set[int]) -> None:
            worker._revocations += 1  # the group rebalanced meanwhile: a revocation began

        worker._take_inventory = inventory
        await LoopwatchWorker.on_ready(worker, {TP("in", 0): 5, TP("in", 1): 7})
        assert proc.cursors.ready() == set()
        assert worker._committed == {}

    asyncio.run(go())


def test_the_worker_reads_only_partitions_that_did_not_come_straight_back() -> None:
    from types import SimpleNamespace

    from loopwatch.streams.kafka.worker import LoopwatchWorker

    async def go() -> None:
        proc = processor(Broker())
        worker = _rebalancing_worker(proc)
        read: list[set[int]] = []

        async def inventory(partitions: set[int]) -> None:
            read.append(partitions)
            for partition in partitions:
                proc.inventory.start(partition)

        async def commit(stopped: dict[Any, int]) -> None:
            return None

        worker._take_inventory = inventory
        worker._commit = commit
        worker.bulk_topics = {"in"}
        worker._local = {}
        worker._replayed = Counter()
        worker._standby_read = Counter()
        worker.settings = SimpleNamespace(store="memory")
        worker.app = SimpleNamespace(assignor=SimpleNamespace(assigned_standbys=set))
        await LoopwatchWorker.on_ready(worker, {TP("in", 0): 0, TP("in", 1): 0})
        assert read == [{0, 1}]
        proc.inventory.touched(0, b"run-0", 100.0)
        proc.inventory.touched(1, b"run-1", 100.0)
        await LoopwatchWorker._on_revoked(worker, None, {TP("in", 0), TP("in", 1)}, signal=None)
        await LoopwatchWorker.on_ready(worker, {TP("in", 0): 0, TP("in", 2): 0})  # the same rebalance
        assert read[1] == {2}
        assert proc.inventory.seen[0] == {b"run-0": 100.0}  # its clock goes on
        await LoopwatchWorker._on_revoked(worker, None, {TP("in", 0), TP("in", 2)}, signal=None)
        await LoopwatchWorker._on_revoked(worker, None, set(), signal=None)  # another rebalance
        await LoopwatchWorker.on_ready(worker, {TP("in", 0): 0, TP("in", 1): 0})
        assert read[2] == {0, 1}  # owned by somebody else meanwhile, maybe: read again
        assert 1 not in proc.inventory.seen or b"run-1" not in proc.inventory.seen[1]

    asyncio.run(go())


def test_an_expiry_decided_before_the_run_went_on_changes_nothing() -> None:
    """The timer decides at the run's last offset; a run_end that arrives after another
    event of the run is stale: applied, it would end a run that is active."""
    from loopwatch.detectors.run_engine import expiry_position

    assert expiry_position(f"{EXPIRY_EVENT_PREFIX}run-1:1700000000@41") == 41
    assert expiry_position(f"{EXPIRY_EVENT_PREFIX}session:a@b:1700000000") is None  # before offsets
    assert expiry_position("run-end-7@3") is None  # not an expiry
    for odd in ("--5", "²", "-", "", "1_000", " 7", "٣"):  # digits int() refuses, or not ASCII
        assert expiry_position(f"{EXPIRY_EVENT_PREFIX}r:1@{odd}") is None, odd
    assert expiry_position(f"{EXPIRY_EVENT_PREFIX}r:1@-1") == -1

    async def go() -> None:
        broker = Broker()
        data: dict[bytes, bytes] = {}
        proc = processor(broker, data)
        proc.cursors.start(0, 0)
        events = loop_trace(3).events  # offsets 0-5
        await feed(proc, records(events))
        decided = RunEnd(event_id=f"{EXPIRY_EVENT_PREFIX}run-1:1@5", run_id="run-1")
        went_on = msgspec.structs.replace(loop_trace(1).events[0], event_id="later")
        await feed(proc, records([went_on, decided], start=6))
        assert proc.metrics.stale_expiries == 1
        assert unpack(data[b"run-1"]).kind == LIVE  # still there, with its history
        assert unpack(data[b"run-1"]).offset == 6
        current = RunEnd(event_id=f"{EXPIRY_EVENT_PREFIX}run-1:2@6", run_id="run-1")
        await feed(proc, records([current], start=8))
        assert b"run-1" not in data  # decided at the run's last offset: expired

    asyncio.run(go())


def test_a_record_not_keyed_by_its_run_scope_is_dead_lettered_and_the_run_goes_on() -> None:
    """A run's events must share one partition, in order: a keyless record (many producers'
    default) or one keyed otherwise would be taken for a redelivery and dropped in silence."""

    async def go() -> None:
        broker = Broker()
        events = loop_trace().events
        wire = records(events)
        run = events[0].run_id
        wire[5] = Record("in", 0, 5, 1_005, None, wire[5].value)
        wire[6] = Record("in", 0, 6, 1_006, b"another-run", wire[6].value)
        proc = processor(broker)
        proc.cursors.start(0, 0)
        await feed(proc, wire)
        letters = [json.loads(v) for v in broker.on("dl")]
        assert [letter["offset"] for letter in letters] == [5, 6]
        assert (
            f"the record's key must be its run scope {run!r} (run_id, or session:<session_id>), not no key"
            in (letters[0]["reason"])
        )
        assert "not the key 'another-run'" in letters[1]["reason"]
        assert broker.on("v") == expected([e for n, e in enumerate(events) if n not in (5, 6)])
        assert proc.metrics.redelivered == 0

    asyncio.run(go())


def test_an_empty_value_and_a_tombstone_are_told_apart_in_their_letters() -> None:
    async def go() -> None:
        broker = Broker()
        events = loop_trace().events[:2]
        wire = records(events)
        key = wire[0].key
        wire += [Record("in", 0, 2, 1_002, key, None), Record("in", 0, 3, 1_003, key, b"")]
        proc = processor(broker)
        proc.cursors.start(0, 0)
        await feed(proc, wire)
        reasons = [json.loads(v)["reason"] for v in broker.on("dl")]
        assert reasons == [
            "the record has no value (a tombstone): not an event",
            "the record has an empty value: not an event",
        ]

    asyncio.run(go())
