"""The Kafka worker: a faust-streaming app built from settings (DESIGN §5).

faust provides the group membership, the ``runs`` table (run scope → :mod:`streams.kafka.run_table`
value) with its changelog co-partitioned with the input, recovery, timers and the web server.
Input records reach the core in bulk (:mod:`streams.kafka.bulk_consumer`), are applied by
:class:`streams.kafka.run_processor.RunProcessor` exactly once per offset, and are committed only
once applied and flushed; why that holds through rebalances, crashes and redeliveries is
written down in :mod:`streams.kafka.bulk_consumer`.

* Verdicts are sent without waiting; until the broker confirms them they are also kept in
  the run's state (its outbox), which the changelog records: a crash at any point either
  replays the event from scratch or finds it applied and re-publishes its unconfirmed
  verdicts — the same verdict ids, never a lost verdict.
* Invalid records go to the dead-letter topic with the reason and their origin.
* ``run_end`` leaves a small tombstone for ``LOOPWATCH_ENDED_RUN_GRACE_S``: redelivered or
  republished events of an ended run are counted, not detected again. Runs idle longer than
  the state TTL get a synthetic ``run_end`` on their own partition, which deletes the state.
* Config overrides are followed on the compacted config topic and apply to the next event.
* The tables live in memory (``LOOPWATCH_STORE=memory``: recovered from their changelogs at
  every start) or in RocksDB under ``LOOPWATCH_DATA_DIR`` (``rocksdb``: a restarted worker
  reads only the changelog records past what its database holds, and
  ``LOOPWATCH_STANDBY_REPLICAS`` workers keep a warm copy of each partition for a failover);
  :mod:`streams.kafka.local_state` says when a value reaches the disk.
* The fleet-wide rules (spec BEYOND-OPENCLAW F1, F2): run processors send the facts of
  their events and verdicts to the facts topic keyed by tool or agent; the fleet processor
  (:mod:`streams.kafka.fleet_processor`), fed in bulk like the input, keeps each subject's rolling
  window in the ``fleet`` table (changelog, recovery) and publishes ``fleet_alert`` records on
  the alerts topic. Every worker follows the alerts topic from its start (alerts are few) for
  F1's fail-fast blocks and F6's chain blocks on its own runs, for the dashboard and for the
  metrics. Delegation chains (F6) are a subject too: facts re-keyed by the chain's root.
"""

from __future__ import annotations

import asyncio
import fcntl
import functools
import importlib.util
import os
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

import faust
import structlog
from aiokafka import AIOKafkaProducer

from loopwatch.config.errors import LoopwatchError
from loopwatch.config.fleet import FleetConfig
from loopwatch.config.stream_settings import StreamSettings
from loopwatch.detectors.events import Event, encode_event
from loopwatch.detectors.fleet.alerts import FleetAlert
from loopwatch.detectors.run_engine import expiry_event
from loopwatch.streams.fleet_view.alert_board import AlertBoard
from loopwatch.streams.fleet_view.dashboard import Dashboard, register_faust_pages
from loopwatch.streams.fleet_view.metrics import WorkerMetrics
from loopwatch.streams.fleet_view.view import FleetView
from loopwatch.streams.kafka.bulk_consumer import LoopwatchApp
from loopwatch.streams.kafka.config_topic import apply_config_record, apply_logged, read_config_overrides
from loopwatch.streams.kafka.connect import aiokafka_auth, faust_credentials, replication_configs
from loopwatch.streams.kafka.fleet_processor import FleetProcessor
from loopwatch.streams.kafka.local_state import LocalState
from loopwatch.streams.kafka.redis_cache import DecisionCache
from loopwatch.streams.kafka.run_processor import RunProcessor
from loopwatch.streams.kafka.run_table import live_offset_of
from loopwatch.streams.kafka.topic_followers import follow_alerts, follow_config, follow_fleet, show_event
from loopwatch.streams.kafka.view_handoff import ViewHandoff
from loopwatch.streams.otlp_verdicts import verdict_exporter_from_env
from loopwatch.streams.partitions import key_partition

__all__ = ["FAULT_ENV", "LoopwatchWorker", "apply_config_record", "read_config_overrides"]

#: Applied offsets are committed this often (and on every revocation and at shutdown).
COMMIT_INTERVAL_S: Final = 1.0
#: At most this many records per fetch, all applied as one batch.
MAX_POLL_RECORDS: Final = 1000
#: The producer sends what a batch produced as soon as the batch is applied: the batch is the
#: batching (its verdicts and changelog records are all in the accumulator by then), and with
#: one request in flight per broker, records produced meanwhile go out together with the next.
#: A linger (5 ms before) only delayed every verdict, more where partitions' batches lingered
#: out of step: at half load it was 2-3 ms of the median event-to-verdict latency.
PRODUCER_LINGER_S: Final = 0.0
#: Turns of the event loop a batch that replied gives the reply producer (``_replies_out``).
REPLY_TURNS: Final = 3
#: The runs table's inventory gives the event loop a turn after this many values.
INVENTORY_SLICE: Final = 10_000
#: A testing aid: processing an event whose id is listed here (comma-separated) raises.
FAULT_ENV: Final = "LOOPWATCH_FAULT_EVENT_IDS"

_log = structlog.get_logger("loopwatch.worker")


class InjectedFault(RuntimeError):
    """Raised for the event ids of :data:`FAULT_ENV`."""


class LocalStateUnavailable(LoopwatchError):
    """The rocksdb store cannot be used: rocksdict is missing, or the data directory is taken."""


def _open_data_dir(settings: StreamSettings) -> int | None:
    """Create the data directory (with its parents: faust creates only the last level) and,
    for the rocksdb store, hold its lock: two workers on one database would corrupt it."""
    data_dir = Path(settings.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    if settings.store != "rocksdb":
        return None
    if importlib.util.find_spec("rocksdict") is None:
        raise LocalStateUnavailable(
            "LOOPWATCH_STORE=rocksdb needs the rocksdict package: pip install 'loopwatch[rocksdb]'"
        )
    fd = os.open(data_dir / "loopwatch.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        raise LocalStateUnavailable(
            f"LOOPWATCH_DATA_DIR {data_dir.resolve()} is in use by another worker: "
            "each worker on the rocksdb store needs a data directory of its own"
        ) from exc
    return fd


def _fault_hook() -> Any:
    ids = {part.strip() for part in os.environ.get(FAULT_ENV, "").split(",") if part.strip()}
    if not ids:
        return None

    def hook(event: Event) -> None:
        if event.event_id in ids:
            raise InjectedFault(f"injected fault for event {event.event_id}")

    return hook


class LoopwatchWorker:
    """Owns the faust app, its topics and table, and the shell state around the core."""

    def __init__(
        self,
        settings: StreamSettings,
        config: FleetConfig,
        config_offset: int = 0,
        cache: DecisionCache | None = None,
    ) -> None:
        self.settings = settings
        self.config = config
        self._config_offset = config_offset
        self.cache = cache
        self.topic = settings.topic_events
        self.facts_topic = settings.topic_fleet_facts
        self.bulk_topics = frozenset({self.topic, self.facts_topic})
        self.metrics = WorkerMetrics()
        self.verdict_export = verdict_exporter_from_env("loopwatch-worker")  # OTLP out: off by default
        self.alerts = AlertBoard()
        self.fleet = FleetView(
            f"worker {settings.app_id}",
            horizon_s=settings.fleet_horizon_s,
            failing_runs=settings.fleet_failing_runs,
            previews=settings.dashboard_previews,
            enabled=settings.fleet_view,
        )
        self.fleet.alerts = self.alerts
        rocksdb = settings.store == "rocksdb"
        self._data_dir_lock = _open_data_dir(settings)  # held as long as the process lives
        app = LoopwatchApp(
            settings.app_id,
            broker=[f"kafka://{host.strip()}" for host in settings.kafka_bootstrap.split(",")],
            broker_credentials=faust_credentials(settings),
            store="rocksdb://" if rocksdb else "memory://",
            table_standby_replicas=settings.standby_replicas,
            topic_partitions=settings.partitions,
            topic_replication_factor=settings.replication_factor,
            topic_disable_leader=True,
            processing_guarantee="at_least_once",
            consumer_auto_offset_reset="earliest",
            broker_session_timeout=settings.kafka_session_timeout_s,
            broker_heartbeat_interval=min(3.0, settings.kafka_session_timeout_s / 3),
            broker_max_poll_records=MAX_POLL_RECORDS,
            producer_acks=-1,
            producer_linger=PRODUCER_LINGER_S,
            web_enabled=settings.web_enabled,
            web_host=settings.web_host,
            web_bind=settings.web_host,  # (faust binds web_bind, 0.0.0.0 by default; web_host names it)
            web_port=settings.web_port,
            datadir=settings.data_dir,
        )
        self.app = app
        events_topic = app.topic(
            settings.topic_events,
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
            partitions=settings.partitions,
        )
        self.events_topic = events_topic
        # bytes keys and values: faust derives the "raw" codec for the table and its changelog
        # changelogs replicated like loopwatch's own topics (topic_replication_factor above)
        replicated = replication_configs(settings)
        #: changelog records faust read per table partition since the last "partitions ready"
        self._replayed: Counter[tuple[str, int]] = Counter()
        self._standby_read: Counter[tuple[str, int]] = Counter()
        self.runs = app.Table(
            "runs",
            default=None,
            key_type=bytes,
            value_type=bytes,
            partitions=settings.partitions,
            extra_topic_configs=replicated,
            options={"driver": "rocksdict"} if rocksdb else None,
            on_changelog_event=self._on_changelog_event,
        )
        facts_topic = app.topic(
            settings.topic_fleet_facts,
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
            partitions=settings.partitions,
        )
        # subject (tool:..., agent:...) -> its rule's rolling window, partitioned like the facts
        self.fleet_table = app.Table(
            "fleet",
            default=None,
            key_type=bytes,
            value_type=bytes,
            partitions=settings.partitions,
            extra_topic_configs=replicated,
            options={"driver": "rocksdict"} if rocksdb else None,
            on_changelog_event=self._on_changelog_event,
        )
        #: the processors' tables: faust's memory store itself, or the rocksdb store behind a
        #: LocalState (writes reach the disk once their changelog record is confirmed)
        self.runs_data: Any = self.runs.data
        fleet_data: Any = self.fleet_table.data
        self._local: dict[str, LocalState] = {}  # changelog topic -> its table's LocalState
        if rocksdb:
            self.runs_data = LocalState(self.runs.data)
            fleet_data = LocalState(self.fleet_table.data)
            self._local = {
                self.runs.changelog_topic.get_topic_name(): self.runs_data,
                self.fleet_table.changelog_topic.get_topic_name(): fleet_data,
            }
        self.processor = RunProcessor(
            self.runs_data,
            self._send,
            self._flush,
            self._seek,
            lambda: self.config,
            self.metrics,
            {
                "verdicts": settings.topic_verdicts,
                "dead_letter": settings.topic_dead_letter,
                "changelog": self.runs.changelog_topic.get_topic_name(),
                "facts": settings.topic_fleet_facts,
                "replies": settings.topic_replies,
            },
            cache,
            _fault_hook(),
            self.alerts,
            settings.parsed_runs_max,
            settings.parsed_idle_s,
        )
        self.fleet_processor = FleetProcessor(
            fleet_data,
            self._send,
            self._seek_facts,
            lambda: self.config,
            {"alerts": settings.topic_alerts, "changelog": self.fleet_table.changelog_topic.get_topic_name()},
            self._on_alert,
        )
        self.processor.send_reply = self._send_reply
        self.processor.replies_out = self._replies_out
        #: the input records this worker shows its fleet view as it applies them (its own
        #: partitions), the others its follower reads; None: no fleet view
        self.view_handoff = (
            ViewHandoff(functools.partial(show_event, self.fleet)) if settings.fleet_view else None
        )
        if self.view_handoff is not None:
            self.processor.show = self.view_handoff.worker_applies
        self._reply_producer: AIOKafkaProducer | None = None
        self._committed: dict[Any, int] = {}  # topic-partition -> committed offset
        self._revocations = 0  # revocations begun: on_ready starts no cursor of an older assignment
        self._commit_lock = asyncio.Lock()
        app.bulk_sink = self
        app.topics.add(events_topic)  # subscribed by faust's conductor; read by the bulk consumer
        app.topics.add(facts_topic)
        app.on_partitions_revoked.connect(self._on_revoked)
        worker = self

        async def metrics(view: Any, request: Any) -> Any:  # faust binds pages to its views
            return view.text(worker.metrics_text(), content_type="text/plain; version=0.0.4")

        async def health(view: Any, request: Any) -> Any:
            return view.json({"status": "ok", "events": sum(worker.metrics.events.values())})

        app.page("/metrics")(metrics)
        app.page("/health")(health)
        register_faust_pages(app, Dashboard(self.fleet))  # /dashboard, /fleet, /fleet/overview, /fleet/run
        if settings.fleet_view:  # events: own partitions as applied, the rest followed
            app.task(self._follow_fleet)
        app.timer(COMMIT_INTERVAL_S)(self._commit_applied)
        app.timer(settings.expiry_interval_s)(self._expire_idle_runs)
        app.task(self._follow_config)
        app.task(self._follow_alerts)
        if cache is not None:
            app.timer(1.0)(cache.tick)

    # -- the bulk sink (streams.kafka.bulk_consumer.BulkSink) ------------------------------------------

    def _processors(self) -> tuple[tuple[str, Any], ...]:
        return ((self.topic, self.processor), (self.facts_topic, self.fleet_processor))

    def ready_partitions(self) -> set[Any]:
        return {faust.types.TP(t, p) for t, proc in self._processors() for p in proc.cursors.ready()}

    async def process(self, fetched: dict[Any, list[Any]]) -> None:
        for topic, processor in self._processors():
            part = {tp: records for tp, records in fetched.items() if tp.topic == topic}
            if part:
                await processor.process(part)

    async def on_ready(self, offsets: dict[Any, int]) -> None:
        """The tables are recovered for these partitions; apply from ``offsets``."""
        generation = self._revocations
        ready = {tp.partition for tp in offsets if tp.topic == self.topic}
        for topic, processor in self._processors():
            async with processor.lock:
                if topic == self.topic and ready:  # before the partitions' cursors start
                    fresh = {p for p in ready if not self._resume_inventory(p, generation)}
                    if fresh:
                        await self._take_inventory(fresh)
                if self._revocations != generation:  # revoked meanwhile: a new assignment follows
                    _log.info("partitions revoked before they were ready", topic=topic)
                    return
                for tp, offset in offsets.items():
                    if tp.topic == topic:
                        processor.cursors.start(tp.partition, offset)
                        self._committed[tp] = offset
                        if topic == self.topic and self.view_handoff is not None:
                            self.view_handoff.take(tp.partition, offset)
        positions = {f"{tp.topic}[{tp.partition}]": o for tp, o in sorted(offsets.items())}
        replayed = {f"{topic}[{p}]": n for (topic, p), n in sorted(self._replayed.items())}
        standbys = sorted(f"{tp.topic}[{tp.partition}]" for tp in self.app.assignor.assigned_standbys())
        standby_read = {f"{topic}[{p}]": n for (topic, p), n in sorted(self._standby_read.items())}
        self._replayed.clear()
        self._standby_read.clear()
        _log.info(
            "partitions ready",
            positions=positions,
            store=self.settings.store,
            changelog_replayed=replayed,  # read to recover the partitions now active
            standbys=standbys,
            standby_records=standby_read,  # read for standby partitions since the last rebalance
        )

    async def _on_changelog_event(self, event: Any) -> None:
        """faust read a changelog record: recovering an active partition, or for a standby."""
        tp = event.message.tp
        tables: Any = self.app.tables
        if tp in tables.recovery.active_tps:
            self._replayed[(tp.topic, tp.partition)] += 1
        else:
            self._standby_read[(tp.topic, tp.partition)] += 1

    async def _on_revoked(self, app: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
        """Finish the batch in progress, then commit everything applied (faust's signal)."""
        revoked: set[Any] = args[0] if args else kwargs.get("revoked", set())
        self._revocations += 1  # before any wait: an on_ready in progress starts no cursor
        stopped: dict[Any, int] = {}
        for topic, processor in self._processors():
            partitions = {tp.partition for tp in revoked if tp.topic == topic}
            async with processor.lock:
                running = processor.cursors.stop(partitions)
                for partition, offset in running.items():
                    stopped[faust.types.TP(topic, partition)] = offset
                    if processor is self.processor and self.view_handoff is not None:
                        self.view_handoff.release(partition, offset)  # the follower reads on
                if processor is self.processor:  # complete inventories kept for a quick return
                    self.processor.forget_partitions(partitions, set(running), self._revocations)
                else:
                    processor.forget_partitions(partitions)
        await self._commit(stopped)
        for tp in revoked:
            self._committed.pop(faust.types.TP(tp.topic, tp.partition), None)
        partitions = {tp.partition for tp in revoked if tp.topic in self.bulk_topics}
        for local in self._local.values():  # committed and persisted: the next owner may change them
            local.forget(partitions)

    async def on_stop(self) -> None:
        """Shutdown: finish the batch in progress, commit what was applied."""
        stopped: dict[Any, int] = {}
        for topic, processor in self._processors():
            async with processor.lock:
                for partition, offset in processor.cursors.stop_all().items():
                    stopped[faust.types.TP(topic, partition)] = offset
        await self._commit(stopped)
        if self._local:
            for local in self._local.values():
                local.close()
            saved = {topic: local.persisted for topic, local in self._local.items()}
            _log.info("local state saved", data_dir=self.settings.data_dir, changelog_records=saved)
        if self._reply_producer is not None:
            await self._reply_producer.stop()
        if self.verdict_export is not None:
            await asyncio.to_thread(self.verdict_export.shutdown)

    # -- producer, consumer and commits ----------------------------------------------------------

    async def _send(self, topic: str, key: bytes | None, value: bytes | None, partition: int | None) -> Any:
        if self.verdict_export is not None and topic == self.settings.topic_verdicts:
            self.verdict_export.export_encoded(value)
        future = await self.app.producer.send(topic, key, value, partition, None, None)
        local = self._local.get(topic) if self._local else None
        if local is not None:  # a table value: it reaches the disk once the broker confirmed it
            local.sent(key, value, partition, future)
        return future

    async def _send_reply(self, topic: str, key: bytes, value: bytes, scope: bytes) -> Any:
        """A decision's reply, at once: its own producer without linger (replies are answers
        someone waits for, not state; losing one only makes that question time out), on the
        partition of the run's scope: a run's replies are read in the order they were sent."""
        producer = self._reply_producer
        if producer is None:
            producer = AIOKafkaProducer(
                bootstrap_servers=self.settings.kafka_bootstrap,
                linger_ms=0,
                acks=1,
                **aiokafka_auth(self.settings),
            )
            await producer.start()
            self._reply_producer = producer
        partitions = sorted(await producer.partitions_for(topic))
        return await producer.send(
            topic, value, key=key, partition=partitions[key_partition(scope, len(partitions))]
        )

    async def _replies_out(self) -> None:
        """Give the reply producer the turns of the event loop it takes to send what a batch
        replied (its waiter's callback, its sender's wake-up, the request's task), before the
        batch's facts, table writes and fleet facts: otherwise the replies leave only when the
        whole fetch is applied. Nothing waits for the broker here."""
        if self._reply_producer is not None:
            for _ in range(REPLY_TURNS):
                await asyncio.sleep(0)

    async def _flush(self) -> None:
        await self.app.producer.flush()

    async def _seek(self, partition: int, offset: int) -> None:
        consumer: Any = self.app.consumer
        await consumer.seek_input(self.topic, partition, offset)

    async def _seek_facts(self, partition: int, offset: int) -> None:
        consumer: Any = self.app.consumer
        await consumer.seek_input(self.facts_topic, partition, offset)

    async def _commit_applied(self) -> None:
        positions = {
            faust.types.TP(topic, p): o
            for topic, processor in self._processors()
            for p, o in processor.cursors.positions().items()
        }
        await self._commit(positions)

    async def _commit(self, positions: dict[Any, int]) -> None:
        """Flush the producer, write the confirmed table values to the local database (rocksdb
        store), then commit ``positions`` (topic-partition → next offset)."""
        async with self._commit_lock:
            todo = {tp: o for tp, o in positions.items() if o > self._committed.get(tp, -1)}
            if not todo and not any(local.pending() for local in self._local.values()):
                return
            await self._flush()  # state changes, verdicts and facts before the offsets that imply them
            for local in self._local.values():
                local.persist()
            if not todo:
                return
            consumer: Any = self.app.consumer
            if await consumer._commit(todo):
                self._committed.update(todo)

    # -- monitoring ------------------------------------------------------------------------------

    def metrics_text(self) -> str:
        """The Prometheus exposition of this worker."""
        live, ended, size = self.processor.inventory.totals()
        lag: dict[int, int] = {}
        for partition, position in self.processor.cursors.positions().items():
            try:
                highwater = self.app.consumer.highwater(faust.types.TP(self.topic, partition))
            except Exception:  # noqa: BLE001 - a partition moved away during a rebalance
                continue
            if highwater is not None:
                lag[partition] = max(0, int(highwater) - position)
        now_ms = int(time.time() * 1000)
        self.metrics.note_fleet(self.fleet_processor.applied, self.fleet_processor.unstorable)
        return self.metrics.render(live, ended, size, lag, self.alerts, now_ms)

    # -- expiry ----------------------------------------------------------------------------------

    def _resume_inventory(self, partition: int, rebalance: int) -> bool:
        """Whether the runs partition came straight back from ``rebalance`` with its inventory."""
        if not self.processor.inventory.resume(partition, rebalance):
            return False
        _log.info("runs table inventory kept", partition=partition)
        return True

    async def _take_inventory(self, partitions: set[int]) -> None:
        """Read the runs table's values of newly owned partitions once (streams.kafka.run_inventory),
        giving the event loop a turn every :data:`INVENTORY_SLICE` values (the web server,
        the other tables' processing); their cursors start only afterwards."""
        started = time.perf_counter()
        now = time.time()
        inventory = self.processor.inventory
        data = self.runs_data
        for partition in partitions:
            inventory.start(partition)
        if isinstance(data, LocalState):  # one database per partition
            items: Iterable[tuple[int, bytes, bytes]] = (
                (partition, key, blob)
                for partition in partitions
                for key, blob in data.partition_items(partition)
            )
        else:  # the memory store: every partition's keys in one mapping
            count = self.settings.partitions
            items = (
                (partition, key, blob)
                for key, blob in list(data.items())
                if (partition := key_partition(key, count)) in partitions
            )
        for index, (partition, key, blob) in enumerate(items, 1):
            inventory.found(partition, key, blob, now)
            if index % INVENTORY_SLICE == 0:
                await asyncio.sleep(0)
        live, ended, _ = inventory.totals()
        _log.info(
            "runs table inventory",
            partitions=sorted(partitions),
            live_runs=live,
            ended_runs=ended,
            seconds=round(time.perf_counter() - started, 3),
        )

    async def _expire_idle_runs(self) -> None:
        """``run_end`` for owned runs idle past the state TTL; tombstones past their grace dropped.

        From the inventory, not the table: only runs that are due cost anything.
        """
        now = time.time()
        inventory = self.processor.inventory
        ready = self.processor.cursors.ready()
        due_ended: dict[bytes, tuple[int, bytes]] = {}  # tombstone → its partition and bytes
        grace_ms = self.settings.ended_run_grace_s * 1000
        ttl = self.settings.state_ttl_s
        for partition in sorted(ready):
            for key, ended_ms in list(inventory.ended.get(partition, {}).items()):
                if now * 1000 - ended_ms > grace_ms:
                    blob = self.runs_data.get(key)
                    if blob:
                        due_ended[key] = (partition, blob)
            seen = inventory.seen.get(partition)
            if seen is None:
                continue
            for key in [key for key, last in seen.items() if now - last > ttl]:
                # read again at each run: a send may wait (a full batch), and batches applied
                # meanwhile make runs active again; a revocation replaces or drops the times
                if (
                    inventory.seen.get(partition) is not seen
                    or partition not in self.processor.cursors.ready()
                ):
                    break
                last = seen.get(key)
                if last is None or now - last <= ttl:
                    continue
                scope = key.decode()
                # the run's last applied offset: applied after a later event of the run, this
                # run_end is stale and changes nothing (the run was active again meanwhile)
                position = live_offset_of(self.runs_data.get(key) or b"")
                end = expiry_event(scope, int(last), position)
                await self._send(self.topic, key, encode_event(end), partition)
                if key in seen:  # not sent again before its run_end is applied
                    seen[key] = max(seen[key], now)
                _log.info("idle run expired", run_id=scope, idle_s=round(now - last))
        if due_ended:
            async with self.processor.lock:
                await self.processor.drop_ended(due_ended)
        async with self.fleet_processor.lock:  # delegation chains past their chainTtlS (F6)
            await self.fleet_processor.drop_expired_chains(self._owned_fact_partition)

    def _owned_fact_partition(self, key: bytes) -> int | None:
        partition = key_partition(key, self.settings.partitions)
        return partition if partition in self.fleet_processor.cursors.ready() else None

    # -- followers (streams.kafka.topic_followers) ----------------------------------------------------

    async def _follow_fleet(self) -> None:
        await follow_fleet(
            self.settings, self.fleet, lambda: self.config.settings.max_event_bytes, self.view_handoff
        )

    async def _follow_alerts(self) -> None:
        await follow_alerts(self.settings, self.alerts, self.processor.facts.chains)

    def _on_alert(self, alert: FleetAlert) -> None:
        """An alert this worker's fleet processor gave: known at once, before its follower reads it."""
        self.alerts.add(alert)
        self.processor.facts.chains.add(alert)

    async def _follow_config(self) -> None:
        def apply(key: bytes | None, value: bytes | None) -> None:
            self.config = apply_logged(self.config, key, value)

        await follow_config(self.settings, self._config_offset, apply)
