"""The Kafka worker: a faust-streaming app built from settings (DESIGN §5).

One agent consumes the tool-event topic (key = run scope). Its body is short: decode →
core → verdicts → state table → Redis → one log line. Rules of the shell:

* State lives in the faust table ``runs`` (run scope → :meth:`RunState.to_bytes`), whose
  changelog is co-partitioned with the input. Events are processed in small batches
  (``take_events``); a run's state is written once per batch in which it changed, before the
  batch is acknowledged, so a run that sends a burst of events costs one changelog write. The snapshot
  holds every detector's state in named sections: ``records`` (the rolling window shared by
  generic repeat, known poll, ping-pong, unknown tool and the global breaker), ``buckets``
  (warning de-duplication), ``guard_*`` (post-compaction guard), ``criticals`` /
  ``recovery_aborted`` (bounded recovery) and ``seen`` (event-id de-duplication).
* Verdicts are sent without waiting. Until the broker confirms them they are also kept in the
  run's state (its outbox), which is written with the event: a crash at any point either
  replays the event from scratch or finds it already applied and re-publishes its
  unconfirmed verdicts — the same verdict ids, never a lost verdict.
* Invalid records go to the dead-letter topic with the reason and their origin.
* ``run_end`` deletes the run's state; runs idle longer than the state TTL get a synthetic
  ``run_end`` on their own partition. Config overrides are followed on the compacted config
  topic and apply to the next event, without a restart.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import faust
import msgspec
import structlog
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.partitioner import murmur2

from config.errors import ConfigError
from config.fleet import FleetConfig
from config.stream_settings import StreamSettings
from detectors.decoding import decode_event
from detectors.events import Abort, InvalidEvent, RunEnd, Verdict, encode_event, encode_output, run_scope
from detectors.state import RunState
from detectors.step import apply, new_state
from streams.dashboard import Dashboard, register_faust_pages
from streams.dead_letter import dead_letter
from streams.fleet_view import FleetView
from streams.kafka_connect import aiokafka_auth, faust_credentials
from streams.logs import verdict_log_fields
from streams.metrics import WorkerMetrics
from streams.redis_cache import DecisionCache
from streams.stall_watch import StallWatch

__all__ = ["LoopwatchWorker", "apply_config_record", "read_config_overrides"]

#: Events are taken in batches of at most BATCH_MAX, waiting at most BATCH_WITHIN_S for more;
#: each run's state is written once per batch, before the batch's offsets are acknowledged.
BATCH_MAX = 500
BATCH_WITHIN_S = 0.005
#: Input partitions are checked for stalls this often (see ``_watch_stalls``).
STALL_CHECK_S = 5.0
STALL_AFTER_S = 20.0
#: The fleet view's follower fetches in bulk (see ``_follow_fleet``).
FLEET_FETCH_MIN_BYTES = 256 * 1024
FLEET_FETCH_WAIT_MS = 250

_log = structlog.get_logger("loopwatch.worker")
_OUTPUTS: Any = msgspec.json.Decoder(Verdict | Abort)


def apply_config_record(config: FleetConfig, key: bytes | None, value: bytes | None) -> FleetConfig:
    """A config-topic record applied: key = agent id, value = a loopDetection block or null."""
    if not key:
        raise ConfigError([], "config record without an agent id key")
    agent = key.decode("utf-8", "replace")
    block = None if not value else _json_object(value, agent)
    return config.with_agent_block(agent, block)


def _json_object(value: bytes, agent: str) -> dict[str, Any] | None:
    import json5

    from config.errors import ConfigProblem

    try:
        block = json5.loads(value.decode("utf-8"))
    except ValueError as exc:
        raise ConfigError([ConfigProblem(f"agents.{agent}", f"not valid JSON: {exc}")]) from exc
    if block is not None and not isinstance(block, dict):
        raise ConfigError([ConfigProblem(f"agents.{agent}.tools.loopDetection", "must be an object")])
    return block


async def read_config_overrides(settings: StreamSettings, config: FleetConfig) -> tuple[FleetConfig, int]:
    """The config topic read to its end; returns the config and the next offset."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.kafka_bootstrap, enable_auto_commit=False, **aiokafka_auth(settings)
    )
    await consumer.start()
    try:
        tp = TopicPartition(settings.topic_config, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        end = (await consumer.end_offsets([tp]))[tp]
        while await consumer.position(tp) < end:
            batch = await consumer.getmany(tp, timeout_ms=1000)
            for message in batch.get(tp, []):
                config = _apply_logged(config, message.key, message.value)
        return config, end
    finally:
        await consumer.stop()


def _apply_logged(config: FleetConfig, key: bytes | None, value: bytes | None) -> FleetConfig:
    try:
        updated = apply_config_record(config, key, value)
    except ConfigError as exc:
        _log.error(
            "config override refused",
            agent=(key or b"").decode("utf-8", "replace"),
            problems=[str(p) for p in exc.problems] or [str(exc)],
        )
        return config
    _log.info("config override applied", agent=(key or b"").decode("utf-8", "replace"), removed=not value)
    return updated


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
        # run scope -> (the table value it was loaded from, or None while changed in this batch; state)
        self._live: dict[bytes, tuple[bytes | None, RunState]] = {}
        self._dirty: dict[bytes, tuple[int, RunState | None]] = {}
        self._last_seen: dict[bytes, float] = {}
        self.metrics = WorkerMetrics()
        self.fleet = FleetView(
            f"worker {settings.app_id}",
            horizon_s=settings.fleet_horizon_s,
            failing_runs=settings.fleet_failing_runs,
            previews=settings.dashboard_previews,
            enabled=settings.fleet_view,
        )
        self._offsets: dict[int, int] = {}  # input partition -> last processed offset
        self.stalls = StallWatch(STALL_AFTER_S)
        app = faust.App(
            settings.app_id,
            broker=[f"kafka://{host.strip()}" for host in settings.kafka_bootstrap.split(",")],
            broker_credentials=faust_credentials(settings),
            store="memory://",
            topic_partitions=settings.partitions,
            topic_replication_factor=settings.replication_factor,
            topic_disable_leader=True,
            processing_guarantee="at_least_once",
            consumer_auto_offset_reset="earliest",
            producer_acks=-1,
            web_enabled=settings.web_enabled,
            web_host=settings.web_host,
            web_port=settings.web_port,
            datadir=settings.data_dir,
        )
        self.app = app

        def raw_topic(name: str) -> Any:  # bytes in, bytes out: decoding is ours
            return app.topic(
                name,
                key_type=bytes,
                value_type=bytes,
                key_serializer="raw",
                value_serializer="raw",
                partitions=settings.partitions,
            )

        self.events_topic = raw_topic(settings.topic_events)
        self.verdicts_topic = raw_topic(settings.topic_verdicts)
        self.dead_letter_topic = raw_topic(settings.topic_dead_letter)
        # bytes keys and values: faust derives the "raw" codec for the table and its changelog
        self.runs = app.Table(
            "runs", default=None, key_type=bytes, value_type=bytes, partitions=settings.partitions
        )
        app.agent(self.events_topic, name="detect")(self._agent)
        worker = self

        async def metrics(view: Any, request: Any) -> Any:  # faust binds pages to its views
            return view.text(worker.metrics_text(), content_type="text/plain; version=0.0.4")

        async def health(view: Any, request: Any) -> Any:
            return view.json({"status": "ok", "events": sum(worker.metrics.events.values())})

        app.page("/metrics")(metrics)
        app.page("/health")(health)
        register_faust_pages(app, Dashboard(self.fleet))  # /dashboard, /fleet, /fleet/overview, /fleet/run
        if settings.fleet_view:  # every worker then also reads every event and verdict
            app.task(self._follow_fleet)
        app.timer(settings.expiry_interval_s)(self._expire_idle_runs)
        app.timer(STALL_CHECK_S)(self._watch_stalls)
        app.task(self._follow_config)
        if cache is not None:
            app.timer(1.0)(cache.tick)

    async def _agent(self, stream: Any) -> None:
        async for batch in stream.take_events(BATCH_MAX, within=BATCH_WITHIN_S):
            for event in batch:
                await self.handle(event.message)
            self._write_dirty()  # before take_events acks the batch

    def _write_dirty(self) -> None:
        """One changelog write per run changed in the batch, on the run's input partition."""
        data = self.runs.data
        for key, (partition, state) in self._dirty.items():
            if state is None:
                if key in data:
                    del data[key]
                    self.runs.send_changelog(partition, key, None, value_serializer="raw")
                self._live.pop(key, None)
                continue
            blob = state.to_bytes()
            data[key] = blob
            self.runs.send_changelog(partition, key, blob)
            self._live[key] = (blob, state)
        self._dirty.clear()

    async def handle(self, message: Any) -> None:
        """Process one input record, timed for the metrics."""
        started = time.perf_counter()
        kind = await self._handle(message)
        self._offsets[message.partition] = message.offset
        self.metrics.event(kind, time.perf_counter() - started)

    def metrics_text(self) -> str:
        """The Prometheus exposition of this worker."""
        data = self.runs.data
        keys = list(data.keys())
        size = sum(len(data[key] or b"") for key in keys)
        lag: dict[int, int] = {}
        for partition, offset in self._offsets.items():
            try:
                highwater = self.app.consumer.highwater(faust.types.TP(self.settings.topic_events, partition))
            except Exception:  # noqa: BLE001 - a partition moved away during a rebalance
                continue
            if highwater is not None:
                lag[partition] = max(0, int(highwater) - offset - 1)
        return self.metrics.render(len(keys), size, lag)

    async def _handle(self, message: Any) -> str:
        """Process one input record (any error in it goes to the dead-letter topic); its kind."""
        with structlog.contextvars.bound_contextvars(partition=message.partition, offset=message.offset):
            value: bytes = message.value or b""
            if len(value) > self.config.settings.max_event_bytes:
                reason = (
                    f"event of {len(value)} bytes exceeds the limit of {self.config.settings.max_event_bytes}"
                )
                await self._dead_letter(message, reason)
                return "invalid"
            try:
                event = decode_event(value)
            except InvalidEvent as exc:
                await self._dead_letter(message, exc.reason)
                return "invalid"
            scope = run_scope(event)
            key = scope.encode()
            structlog.contextvars.bind_contextvars(run_id=scope)
            kind = event.__struct_config__.tag
            if isinstance(event, RunEnd):
                await self._drop(key, scope, message.partition)
                return str(kind)
            self._last_seen[key] = time.time()
            state = self._load(key, event)
            if event.event_id in state.seen_set:  # redelivered: re-publish what is unconfirmed
                await self._publish(key, state, event.event_id, state.outbox.get(event.event_id, []))
                return str(kind)
            outputs = apply(state, event, self.config)
            if outputs:
                encoded = [encode_output(out) for out in outputs]
                state.hold(event.event_id, encoded)  # persisted with the state written below
                await self._publish(key, state, event.event_id, encoded)
                for out in outputs:
                    self.metrics.output(out)
                    _log.warning("tool loop", **verdict_log_fields(out, scope))
                    if self.cache is not None:
                        await self.cache.record(scope, out)
            self._dirty[key] = (message.partition, state)
            self._live[key] = (None, state)
            return str(kind)

    async def _publish(self, key: bytes, state: RunState, event_id: str, encoded: list[bytes]) -> None:
        """Send outputs without waiting; confirmed ones leave the state's outbox."""
        if not encoded:
            return
        pending = len(encoded)

        def confirmed(_: Any) -> None:
            nonlocal pending
            pending -= 1
            if pending == 0:
                state.delivered(event_id)

        for value in encoded:
            await self.verdicts_topic.send(key=key, value=value, force=True, callback=confirmed)

    def _load(self, key: bytes, event: Any) -> RunState:
        """The run's live state: changed in this batch, or hydrated from the table."""
        cached = self._live.get(key)
        blob = self.runs.data.get(key)
        if cached is not None and (cached[0] is None or cached[0] is blob):
            return cached[1]
        if blob is None:
            return new_state(event, self.config)
        return RunState.from_bytes(blob, self.config.settings.seen_event_ids)

    async def _drop(self, key: bytes, scope: str, partition: int) -> None:
        self._dirty[key] = (partition, None)
        self._live.pop(key, None)
        self._last_seen.pop(key, None)
        if self.cache is not None:
            await self.cache.forget(scope)

    async def _dead_letter(self, message: Any, reason: str) -> None:
        self.metrics.invalid += 1
        _log.warning("invalid event sent to dead-letter topic", reason=reason)
        record = dead_letter(
            reason,
            message.topic,
            message.partition,
            message.offset,
            message.key,
            message.value,
            message.timestamp and int(message.timestamp * 1000),
            self.config.settings.max_event_bytes,
        )
        await self.dead_letter_topic.send(key=message.key, value=record, force=True)

    def _owns(self, key: bytes) -> bool:
        partition = (murmur2(key) & 0x7FFFFFFF) % self.settings.partitions
        assignment = self.app.consumer.assignment()
        return faust.types.TP(self.settings.topic_events, partition) in assignment

    async def _expire_idle_runs(self) -> None:
        """Send a ``run_end`` for every owned run idle longer than the state TTL."""
        now = time.time()
        keys = list(self.runs.keys())
        live = set(keys)
        for key in list(self._live):
            if key not in live:
                self._live.pop(key, None)
        for key in keys:
            last = self._last_seen.setdefault(key, now)
            if now - last <= self.settings.state_ttl_s or not self._owns(key):
                continue
            scope = key.decode()
            session = scope.removeprefix("session:") if scope.startswith("session:") else None
            end = RunEnd(
                event_id=f"loopwatch-expiry:{scope}:{int(last)}",
                run_id=None if session is not None else scope,
                session_id=session,
            )
            await self.events_topic.send(key=key, value=encode_event(end), force=True)
            self._last_seen[key] = now
            _log.info("idle run expired", run_id=scope, idle_s=round(now - last))

    async def _watch_stalls(self) -> None:
        """Resume and re-seek an assigned input partition whose records stopped flowing."""
        consumer = self.app.consumer
        mine = [tp for tp in consumer.assignment() if tp.topic == self.settings.topic_events]
        self.stalls.forget({tp.partition for tp in mine})
        if not mine:
            return
        try:
            ends = await consumer.highwaters(*mine)
        except Exception:  # noqa: BLE001 - the broker is unreachable: nothing to judge now
            return
        committed = getattr(consumer, "_committed_offset", {})  # faust's view after a rebalance
        now = time.monotonic()
        for tp in mine:
            position = max(self._offsets.get(tp.partition, -1) + 1, committed.get(tp) or 0)
            end = ends.get(tp)
            if end is None:
                continue
            stalled = self.stalls.check(tp.partition, position, int(end), now)
            if stalled is None:
                continue
            self.metrics.stall_recoveries += 1
            _log.error(
                "input partition stalled: resuming and re-seeking it",
                stalled_partition=tp.partition,
                position=position,
                end=int(end),
                stalled_s=round(stalled),
            )
            consumer.resume_partitions([tp])
            await consumer.seek(tp, position)

    async def _follow_fleet(self) -> None:
        """Every event and verdict of the fleet (all partitions), for the fleet view of /fleet.

        Fetches wait up to FLEET_FETCH_WAIT_MS for FLEET_FETCH_MIN_BYTES: a dashboard a quarter
        of a second behind costs far fewer fetch round trips than one that chases every record.
        """
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.settings.kafka_bootstrap,
            enable_auto_commit=False,
            fetch_min_bytes=FLEET_FETCH_MIN_BYTES,
            fetch_max_wait_ms=FLEET_FETCH_WAIT_MS,
            **aiokafka_auth(self.settings),
        )
        await consumer.start()
        try:
            topics = (self.settings.topic_events, self.settings.topic_verdicts)
            partitions = [TopicPartition(t, p) for t in topics for p in range(self.settings.partitions)]
            consumer.assign(partitions)
            since = int(time.time() * 1000) - self.fleet.horizon_ms
            ends = await consumer.end_offsets(partitions)  # before the time lookup: no gap
            starts = await consumer.offsets_for_times(dict.fromkeys(partitions, since))
            for tp in partitions:
                found = starts.get(tp)
                consumer.seek(tp, ends[tp] if found is None else found.offset)
            while True:
                batch = await consumer.getmany(timeout_ms=1000)
                for tp, messages in batch.items():
                    for message in messages:
                        self._observe(
                            tp.topic == self.settings.topic_verdicts, message.value, message.timestamp
                        )
        finally:
            await consumer.stop()

    def _observe(self, is_verdict: bool, value: bytes, ts_ms: int) -> None:
        if not value or len(value) > self.config.settings.max_event_bytes:
            return  # refused by the workers too
        try:
            if is_verdict:
                self.fleet.output(_OUTPUTS.decode(value), ts_ms)
            else:
                self.fleet.event(decode_event(value), ts_ms)
        except (InvalidEvent, msgspec.DecodeError):
            pass  # invalid input is counted by the metrics and kept in the dead-letter topic

    async def _follow_config(self) -> None:
        """Apply config overrides published after startup, for as long as the worker runs."""
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.settings.kafka_bootstrap,
            enable_auto_commit=False,
            **aiokafka_auth(self.settings),
        )
        await consumer.start()
        try:
            tp = TopicPartition(self.settings.topic_config, 0)
            consumer.assign([tp])
            consumer.seek(tp, self._config_offset)
            while True:
                batch = await consumer.getmany(tp, timeout_ms=1000)
                for message in batch.get(tp, []):
                    self.config = _apply_logged(self.config, message.key, message.value)
        except asyncio.CancelledError:
            raise
        finally:
            await consumer.stop()
