"""faust's Kafka consumer with a bulk path for the input topic (and the fleet facts topic).

faust-streaming stays the framework: group membership, partition assignment, the ``runs``
table with its changelog and recovery, timers and the web server. What changes is how input
records reach the core. faust's fetcher (``Consumer._drain_messages``) hands every record to
the agents' queues one by one (four tasks per record) and decides what to commit from its
own read offsets, which a rebalance can move past records that were never processed
(faust-streaming 0.15: ``Recovery.on_recovery_completed`` resumes the input partitions
before it seeks them, a pre-fetched batch raises ``_read_offset`` again, and every re-read
record below it is dropped as "DROPPED MESSAGE ROFF" while the commit moves past it).

:class:`BulkConsumer` replaces that loop, and runs faust's consumer "thread" on the worker's
own event loop (:class:`BulkConsumerThread`). Records of changelog topics (recovery, standbys)
still go through faust's conductor exactly as before. Records of the bulk topics (the input,
and the fleet facts re-keyed by tool and agent) are handed, a whole fetch at a time, to the
app's :class:`BulkSink`, which applies them against its own cursors
(:mod:`streams.kafka.input_cursors`) and commits only what it applied. Everything below holds for
each bulk topic alike.

Why this is correct across a rebalance (aiokafka's protocol is eager: every partition is
revoked before any is assigned):

* **Revocation.** faust stops the flow (no more fetches return records), then sends
  ``on_partitions_revoked``; the sink waits for the batch being applied, stops its cursors,
  flushes the producer (changelog writes and verdicts on the broker) and commits the cursors.
  Records fetched but not applied are simply not committed: the next owner reads them.
* **Assignment.** Input partitions are fetched only once the sink has a cursor for them,
  which it gets in :meth:`BulkConsumer.perform_seek`: faust calls it after the table's
  changelog has been recovered, and the cursor starts at the group's committed offset.
  Whatever the consumer then returns for the partition is checked against the cursor, so a
  stale pre-fetch, a batch from before the seek or a position moved past unprocessed records
  cannot make a record be skipped or applied twice.
* **A fetch across a rebalance.** A fetch that was waiting when the rebalance began can
  return after it, holding records of partitions that faust sought meanwhile (a recovery
  reading a changelog from its start). faust drops such records, which leaves the position
  past them: the recovery then waits forever for records that never come (seen here after a
  ``kill -9``). They are put back instead: sought to their first offset, unless the
  partition was sought elsewhere since (:meth:`BulkConsumer._unfetch`).
* **Crash.** Nothing is committed that was not applied and flushed. Records after the
  committed offset come again; the run's table value remembers the last offset applied to
  it, so they change nothing and only re-publish unconfirmed verdicts.
* **Shutdown.** The batch in progress finishes (it is shielded from the fetcher's
  cancellation), then the sink stops, flushes and commits before faust closes the consumer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import faust
import structlog
from aiokafka import TopicPartition
from faust.transport.drivers import aiokafka as faust_aiokafka
from mode import Service
from mode.utils.futures import maybe_async

__all__ = ["BulkConsumer", "BulkSink", "BulkTransport", "IdempotentProducer", "LoopwatchApp"]

_log = structlog.get_logger("loopwatch.worker")

#: How long one fetch waits for records (the loop also notices new partitions to read this often).
FETCH_WAIT_S = 0.25
#: How long the broker may hold a fetch request without data (faust fixes it at 1500 ms).
#: aiokafka sends one fetch at a time to a broker, and only for partitions with no records
#: waiting to be taken: while a batch is applied, the next request can hold only partitions
#: without traffic (the fleet facts, a quiet input partition), and the broker holds it for
#: this long while records pile up on the busy ones. Measured with the facts topic beside
#: the input: 1500 ms cost a third of the throughput.
FETCH_MAX_WAIT_MS = 20


class BulkSink(Protocol):
    """Where the bulk topics' records go (the worker): its input and its fleet facts."""

    bulk_topics: frozenset[str]

    def ready_partitions(self) -> set[Any]: ...

    async def process(self, fetched: dict[Any, list[Any]]) -> None: ...

    async def on_ready(self, offsets: dict[Any, int]) -> None: ...

    async def on_stop(self) -> None: ...


class LoopwatchApp(faust.App):
    """faust's app whose Kafka consumer is a :class:`BulkConsumer` feeding ``bulk_sink``."""

    bulk_sink: BulkSink | None = None

    def _new_transport(self) -> Any:
        return BulkTransport(self.conf.broker_consumer, self)


class BulkConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    """faust's consumer "thread", run on the worker's own event loop, its aiokafka consumer
    with a short fetch wait.

    faust runs the consumer in a thread of its own with a second event loop: every fetch is a
    round trip between the loops (a self-pipe write each way) and the two threads take turns
    at the GIL. Here the service runs as a task of the main loop and ``call_thread`` is a plain
    call, so a fetch is an ``await`` on aiokafka; rebalance callbacks still go through the
    consumer's method queue, as faust sends them. aiokafka's heartbeats share the loop too: a
    batch never holds it for long (a fetch holds at most the worker's MAX_POLL_RECORDS), far
    from the session timeout.
    """

    def __init__(self, consumer: Any, *, loop: Any = None, **kwargs: Any) -> None:
        main = loop or asyncio.get_event_loop_policy().get_event_loop()
        super().__init__(consumer, loop=main, thread_loop=main, **kwargs)  # (not closed on stop)

    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        consumer._fetch_max_wait_ms = FETCH_MAX_WAIT_MS  # read by the fetcher created at start
        return consumer

    async def start(self) -> None:
        """Start the service as a task of this loop (mode starts a thread that runs it)."""
        assert not self._thread_started.is_set()
        self._thread_started.set()
        self._thread_running = self.parent_loop.create_future()
        self._serving = asyncio.ensure_future(self._serve())
        self._serving.add_done_callback(_retrieved)  # (its error reaches start() or the crash log)
        try:
            if not self.should_stop:
                await self._thread_running  # set once started, or to the error that stopped it
        finally:
            self._thread_running = None

    async def stop(self) -> None:
        if self._started.is_set():
            await Service.stop(self)  # (mode's also stops the thread, of which there is none)

    async def _gather_remaining_tasks(self) -> None:
        """Nothing: mode cancels every task left on the thread's loop, here the worker's own."""

    async def call_thread(self, fun: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await maybe_async(fun(*args, **kwargs))


def _retrieved(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


class BulkConsumer(faust_aiokafka.Consumer):
    _paused_unread: frozenset[Any] = frozenset()
    _paused_generation = -1

    def _new_consumer_thread(self) -> Any:
        return BulkConsumerThread(self, loop=self.loop, beacon=self.beacon)

    def _sink(self) -> BulkSink:
        sink: BulkSink | None = getattr(self.app, "bulk_sink", None)
        assert sink is not None, "LoopwatchApp.bulk_sink is not set"
        return sink

    async def perform_seek(self) -> None:
        """faust's seek to the committed offsets; then the bulk topics' partitions are ready."""
        await super().perform_seek()
        sink = self._sink()
        mine = [tp for tp in self.assignment() if tp.topic in sink.bulk_topics]
        committed = {tp: self._committed_offset.get(tp) for tp in mine}
        unknown = [tp for tp, offset in committed.items() if offset is None]
        earliest = await self.earliest_offsets(*unknown) if unknown else {}
        offsets: dict[Any, int] = {}
        for tp in mine:
            offset = committed[tp]
            offsets[tp] = int((earliest.get(tp) or 0) if offset is None else offset)
        await sink.on_ready(offsets)

    async def seek_input(self, topic: str, partition: int, offset: int) -> None:
        """Seek a bulk topic's partition through the consumer "thread" (ordered with its fetches)."""
        tp = faust.types.TP(topic, partition)
        consumer = self._thread._ensure_consumer()
        await self._thread.call_thread(self._seek_on_thread, consumer, tp, offset)

    @staticmethod
    async def _seek_on_thread(consumer: Any, tp: Any, offset: int) -> None:
        consumer.seek(tp, offset)

    async def _pause_unread(self, reading: set[Any], generation: int) -> None:
        """Pause, in aiokafka itself, every assigned partition this loop does not read.

        faust pauses partitions only in its own bookkeeping, so aiokafka keeps fetching them
        (the changelog partitions this worker writes, input partitions still recovering).
        Their fetched records are never taken, and aiokafka holds back every further fetch
        to the broker for ``prefetch_backoff`` (100 ms) while such a result is new: with a
        changelog written all the time, every fetch waited ~100 ms (p99 latency 100-150 ms
        at any load). Paused, they are not fetched at all.
        """
        unread = frozenset(self.assignment()) - reading
        if generation == self._paused_generation and unread == self._paused_unread:
            return
        consumer = self._thread._ensure_consumer()
        await self._thread.call_thread(self._pause_on_thread, consumer, unread)
        self._paused_unread, self._paused_generation = unread, generation

    @staticmethod
    async def _pause_on_thread(consumer: Any, unread: frozenset[Any]) -> None:
        assigned = consumer.assignment()
        consumer.resume(*[tp for tp in consumer.paused() if tp in assigned and tp not in unread])
        consumer.pause(*[TopicPartition(tp.topic, tp.partition) for tp in unread if tp in assigned])

    async def _unfetch(self, records: Mapping[Any, list[Any]]) -> None:
        """Put back records fetched across a rebalance, so that they are fetched again.

        A fetch that was waiting when a rebalance began can return after it, with records of
        partitions that faust sought in the meantime (the changelog partitions a recovery
        reads from the start). Dropping them would leave the consumer's position past them
        and the recovery waiting forever for records it will never see; so each partition
        whose position is still just past the dropped records is sought back to the first of
        them. A partition sought elsewhere since keeps its new position.
        """
        spans = {tp: (batch[0].offset, batch[-1].offset + 1) for tp, batch in records.items() if batch}
        if spans:
            consumer = self._thread._ensure_consumer()
            put_back = await self._thread.call_thread(self._unfetch_on_thread, consumer, spans)
            if put_back:
                _log.info("records fetched across a rebalance put back", partitions=put_back)

    @staticmethod
    async def _unfetch_on_thread(consumer: Any, spans: dict[Any, tuple[int, int]]) -> list[str]:
        put_back: list[str] = []
        assigned = consumer.assignment()
        for tp, (first, after) in spans.items():
            if tp not in assigned:
                continue
            try:  # a position being reset is not one this fetch left
                position = await asyncio.wait_for(consumer.position(tp), timeout=1.0)
            except Exception:  # noqa: BLE001 - revoked meanwhile, or a reset pending: leave it
                continue
            if position == after:
                consumer.seek(tp, first)
                put_back.append(f"{tp.topic}[{tp.partition}]@{first}")
        return put_back

    async def on_stop(self) -> None:
        await self._sink().on_stop()
        await super().on_stop()

    async def _drain_messages(self, fetcher: Any) -> None:  # noqa: C901 - faust's loop, reshaped
        """The fetch loop: changelog records to faust's conductor, bulk topics' records in bulk."""
        sink = self._sink()
        topics = sink.bulk_topics
        app = self.app
        callback = self.callback
        read_offset = self._read_offset
        consumer_stopped = self._stopped.is_set
        fetcher_stopped = fetcher._stopped.is_set
        try:
            while not (consumer_stopped() or fetcher_stopped()):
                if not self.flow_active:
                    await self.wait(self.can_resume_flow)  # type: ignore[arg-type]  # as faust does
                    continue
                generation = app.consumer_generation_id
                partitions = {tp for tp in self._get_active_partitions() if tp.topic not in topics}
                partitions |= sink.ready_partitions()
                if not partitions:
                    await self.sleep(0.1)
                    continue
                await self._pause_unread(partitions, generation)
                records = await self._getmany(active_partitions=partitions, timeout=FETCH_WAIT_S)
                if not records or self.should_stop:
                    continue
                if not self.flow_active or app.consumer_generation_id != generation:
                    await self._unfetch(records)  # a rebalance began during the fetch
                    continue
                bulk: dict[Any, list[Any]] = {}
                for tp, batch in records.items():
                    if tp.topic in topics:
                        bulk[tp] = batch
                        continue
                    for record in batch:  # changelog (recovery, standby): faust's own path
                        r_offset = read_offset[tp]
                        if r_offset is None or record.offset >= r_offset:
                            message = self._to_message(tp, record)
                            await self.wait_first(callback(message), self.suspend_flow.wait())
                            read_offset[tp] = record.offset
                if bulk:
                    # shielded: a cancellation (shutdown) never leaves a batch half applied
                    await asyncio.shield(asyncio.ensure_future(sink.process(bulk)))
        except self.consumer_stopped_errors:
            if self.transport.app.should_stop:
                return
            raise
        except asyncio.CancelledError:
            if self.transport.app.should_stop:
                return
            raise


class IdempotentProducer(faust_aiokafka.Producer):
    """faust's producer (acks from ``producer_acks``: all), idempotent: a send retried after a
    leader moved or a connection dropped is written once (faust sets that only in transactions)."""

    def _settings_extra(self) -> Mapping[str, Any]:
        return {**super()._settings_extra(), "enable_idempotence": True}


class BulkTransport(faust_aiokafka.Transport):
    Consumer = BulkConsumer
    Producer = IdempotentProducer
