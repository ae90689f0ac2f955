"""Fetched input records applied to the runs' states: each offset once, in order, in bulk.

The worker's consumer hands every fetched batch of the input topic here
(:meth:`RunProcessor.process`). For each partition the batch is admitted against the
partition's cursor (:mod:`streams.kafka.input_cursors`), then every record is applied to its run:

* decode (invalid records go to the dead-letter topic with the reason and their origin);
* the run's table value (:mod:`streams.kafka.run_table`) says whether the record is new: a record at
  or below the run's last applied offset is a redelivery, and only its outputs still awaiting
  broker confirmation are re-published, with the same verdict ids; an ended run's tombstone
  makes every later record of it a counted no-op;
* otherwise the core's step runs; its outputs are kept in the run's outbox, sent, and leave
  the outbox when the broker confirms them.

At the end of the batch the facts the fleet-wide rules need (:mod:`detectors.fleet.facts`)
are sent to the facts topic, one record per subject (tool or agent) — those of redelivered
events again, which changes nothing there; a verdict leaves the outbox only once its facts
are confirmed too. Then every run changed in the batch is written once to the table and its
changelog (on the run's input partition), and only then does the partition's cursor move
past the batch. A ``tool_call`` of a tool under an open outage (known from the alerts topic)
gets F1's fail-fast block first when ``toolOutage.block`` is on. The committer commits
cursors after flushing the producer, so a committed offset always has its state changes,
verdicts and facts on the broker before it.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final, Protocol

import msgspec
import structlog
from aiokafka.errors import MessageSizeTooLargeError

from loopwatch.config.fleet import FleetConfig
from loopwatch.detectors.decoding import decode_event
from loopwatch.detectors.events import (
    Abort,
    Event,
    InvalidEvent,
    ToolCall,
    Verdict,
    encode_output,
    run_scope,
)
from loopwatch.detectors.fleet.facts import FLEET_DETECTORS
from loopwatch.detectors.run_engine import RunEngine, RunSlot, RunStore, Stepped
from loopwatch.detectors.state import OUTBOX_LIMIT, RunState
from loopwatch.detectors.tombstone import Tombstone
from loopwatch.streams.fleet_view.alert_board import AlertBoard
from loopwatch.streams.fleet_view.metrics import WorkerMetrics
from loopwatch.streams.kafka.batch_records import decode_batch, is_batch
from loopwatch.streams.kafka.dead_letter import dead_letter, letter_key
from loopwatch.streams.kafka.fact_sender import FactSender
from loopwatch.streams.kafka.input_cursors import InputCursors, apply_admitted
from loopwatch.streams.kafka.local_state import writing_notice
from loopwatch.streams.kafka.redis_cache import DecisionCache
from loopwatch.streams.kafka.run_inventory import RunInventory
from loopwatch.streams.kafka.run_table import (
    LIVE,
    NO_OFFSET,
    pack_ended_hashes,
    pack_live,
    unpack,
)
from loopwatch.streams.logs import verdict_log_fields

__all__ = ["OUTBOX_FLUSH_AT", "REPLY_HEADER", "RunProcessor"]

#: A run holding the unconfirmed outputs of this many events makes the batch wait for the
#: broker's confirmations (which empty the outbox) before it goes on: the outbox stays bounded.
OUTBOX_FLUSH_AT: Final = OUTBOX_LIMIT

_log = structlog.get_logger("loopwatch.worker")
_OUTPUT: Any = msgspec.json.Decoder(Verdict | Abort)


#: A record with this header (any value) asks for its outputs on the replies topic, at once:
#: ``{"event_id": ..., "scope": ..., "outputs": [...]}`` keyed by event id, also when there are
#: none (the HTTP gateway's ``/v1/decide`` on Kafka answers "allow" without waiting out its
#: timeout), with ``"aborted": [reason, message]`` while the run is aborted. The replies of one
#: run go to one partition of the replies topic (chosen by its scope), in the order its records
#: were applied; the ``run_end`` that ends an aborted run is answered too, asked or not, so that
#: every gateway reading the replies knows the run's abort is over (``streams.gateway.kafka_backend``).
REPLY_HEADER: Final = "loopwatch-reply"


async def _nothing() -> None:
    return None


def _wants_reply(record: Any) -> bool:
    headers = getattr(record, "headers", None) or ()
    return any(name == REPLY_HEADER for name, _ in headers)


def _misrouted(given: bytes | None, key: bytes) -> str:
    """Why a record keyed otherwise than its event's run scope is refused (wire contract)."""
    had = "no key" if given is None else f"the key {given[:100].decode('utf-8', 'replace')!r}"
    return (
        f"the record's key must be its run scope {key.decode('utf-8', 'replace')!r} (run_id, or "
        f"session:<session_id>), not {had}: a run's events must share one partition, in order"
    )


def _trigger_of(answers: list[list[bytes]]) -> int | None:
    """The call that refused a batch, read from its calls' unconfirmed outputs (a redelivered
    batch's answer): an enforced block of a loop rule is only ever the trigger's (an admitted
    batch has none; the fleet's blocks are per call). ``None`` when none is held any more."""
    for index, outputs in enumerate(answers):
        for value in outputs:
            output = _OUTPUT.decode(value)
            if (
                isinstance(output, Verdict)
                and output.action == "block"
                and output.enforced
                and output.detector not in FLEET_DETECTORS
            ):
                return index
    return None


class Record(Protocol):
    """What is read of an aiokafka ``ConsumerRecord``."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None


Send = Callable[[str, bytes | None, bytes | None, int | None], Awaitable["asyncio.Future[Any]"]]
#: How a reply is sent: (topic, key: the event id, value, the run's scope: its partition's key)
SendReply = Callable[[str, bytes, bytes, bytes], Awaitable[Any]]


class _Run(RunSlot):
    """A run's table entry (:class:`~detectors.run_engine.RunSlot`: the position is the input
    offset), with the bytes it was parsed from (None: changed since), its input partition, and
    whether it is deleted in this batch (``gone``)."""

    def __init__(
        self,
        partition: int,
        blob: bytes | None = None,
        state: RunState | None = None,
        ended: Tombstone | None = None,
        ended_ms: int = 0,
        offset: int = NO_OFFSET,
        gone: bool = False,
    ) -> None:
        super().__init__(state, ended, ended_ms, offset)
        self.partition = partition
        self.blob = blob
        self.gone = gone
        #: whether the stored bytes hold verdicts awaiting confirmation (an outbox)
        self.stored_outbox = state is not None and bool(state.outbox)
        self.touched = 0.0  # the start of the last batch that had an event of it (monotonic)


class RunProcessor(RunStore):
    def __init__(
        self,
        data: MutableMapping[bytes, bytes],
        send: Send,
        flush: Callable[[], Awaitable[None]],
        seek: Callable[[int, int], Awaitable[None]],
        config: Callable[[], FleetConfig],
        metrics: WorkerMetrics,
        topics: dict[str, str],
        cache: DecisionCache | None = None,
        fault_hook: Callable[[Event], None] | None = None,
        alerts: AlertBoard | None = None,
        parsed_runs_max: int = 100_000,
        parsed_idle_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.data = data
        self._send = send
        self._flush = flush
        self._seek = seek
        self._config = config
        self.metrics = metrics
        self.cache = cache
        self.fault_hook = fault_hook
        self._verdicts = topics["verdicts"]
        self._dead_letter = topics["dead_letter"]
        self._changelog = topics["changelog"]
        self.facts = FactSender(topics.get("facts"), send, alerts)  # None: no fleet rules
        self._replies = topics.get("replies")  # decisions asked for (REPLY_HEADER) go there
        #: how replies are sent (the worker: its own producer without linger, on the partition
        #: of the run's scope; default: ``send``, partitioned by the event id)
        self.send_reply: SendReply = lambda topic, key, value, scope: send(topic, key, value, None)
        #: called once the records of a batch that replied are applied, before its facts and
        #: table writes (the worker: lets its reply producer send them; default: nothing)
        self.replies_out: Callable[[], Awaitable[None]] = _nothing
        self._replied = False  # replies were handed over in the batch being applied
        #: each decoded input record (partition, offset, event, record time), before it is
        #: applied: the worker's fleet view (streams.kafka.view_handoff); None: not shown
        self.show: Callable[[int, int, Event, int], None] | None = None
        self._answer: tuple[str, list[bytes]] | None = None  # the record being applied: its outputs
        self._answer_key: bytes | None = None  # ... and its run's key
        #: a batch record's answer: each call's outputs, and the index of the call that refused it
        self._batch_answer: tuple[list[list[bytes]], int | None] | None = None
        self._announce = False  # the record ended an aborted run: answered, asked or not
        self.cursors = InputCursors()
        #: the run engine over this processor's runs (it is their store: :meth:`entry`, :meth:`settle`)
        self.engine = RunEngine(config(), self, self.facts)
        self.engine.before_apply = self._before_apply
        self._partition = -1  # the input partition of the record being applied
        self._current: tuple[str, bytes, _Run] | None = None  # ... its run: scope, key, entry
        self._record_ms = 0  # ... and its record time
        #: Held while a batch is applied, and by whatever must not interleave with one
        #: (revocation, shutdown, expiry).
        self.lock = asyncio.Lock()
        #: Parsed runs, least recently active first; after a batch, none idle for
        #: ``parsed_idle_s`` or more and at most ``parsed_runs_max`` (:meth:`_evictions`). A
        #: parsed state takes several times its stored bytes (docs/capacity.md), so this, not
        #: the table, sets how many runs a worker holds per GiB.
        self._runs: OrderedDict[bytes, _Run] = OrderedDict()
        self._parsed_runs_max = parsed_runs_max
        self._parsed_idle_s = parsed_idle_s
        self._clock = clock
        self._batch_at = clock()  # when the batch being applied began
        self._uncache: Callable[[list[bytes]], None] | None = getattr(data, "uncache", None)
        self._writing = writing_notice(data)  # the rocksdb store is told when a batch is written
        self._dirty: dict[bytes, _Run] = {}
        self._flush_before_write = False
        #: Per owned partition: live runs' last activity, tombstones, gauges (the expiry timer's
        #: and ``/metrics``' source: neither reads the table)
        self.inventory = RunInventory()

    # -- batches -------------------------------------------------------------------------------

    async def process(self, fetched: dict[Any, list[Any]]) -> None:
        """Apply one fetched batch (topic-partition → records in offset order)."""
        async with self.lock:
            self._batch_at = self._clock()
            self.facts.begin(self._config())
            advanced = await apply_admitted(
                self.cursors, fetched, self._record, self._seek_back, self._skipped
            )
            if self._replied:  # answers someone waits for: on their way before the batch's writes
                self._replied = False
                await self.replies_out()
            await self.facts.send()
            evicted = self._evictions()
            await self._write_dirty()
            for partition, offset in advanced.items():
                self.cursors.advance(partition, offset)
            for key in evicted:  # (a run that expired in the batch is gone already)
                if self._runs.pop(key, None) is not None:
                    self.metrics.parsed_evictions += 1
            if evicted and self._uncache is not None:
                self._uncache(evicted)  # the rocksdb store's cached bytes go with the parsed state

    def _evictions(self) -> list[bytes]:
        """The runs idle for ``parsed_idle_s`` or more and the least recently active beyond
        ``parsed_runs_max``, whose parsed states go once the batch is written (the table keeps
        their bytes; parsed again on their next event). A run whose verdicts await the
        broker's confirmation stays: confirmations empty the parsed outbox. One whose stored
        bytes still hold verdicts confirmed since is written again first, so that bytes parsed
        later hold no confirmed verdict."""
        runs = self._runs
        over = len(runs) - self._parsed_runs_max
        idle_before = self._batch_at - self._parsed_idle_s
        evicted: list[bytes] = []
        busy: list[tuple[bytes, _Run]] = []
        for key, run in runs.items():  # least recently active first
            if over <= 0 and run.touched > idle_before:
                break
            if run.state is not None and run.state.outbox:
                busy.append((key, run))
                continue
            if run.stored_outbox:
                self._dirty[key] = run
            evicted.append(key)
            over -= 1
        for key, run in busy:  # made the most recent: not looked at again in the next batches
            run.touched = self._batch_at
            runs.move_to_end(key)
        return evicted

    async def _seek_back(self, partition: int, first_offset: int, seek_to: int) -> None:
        self.metrics.reseeks += 1
        _log.warning(
            "fetched records start past the last applied one: seeking back",
            partition=partition,
            first_offset=first_offset,
            seek_to=seek_to,
        )
        await self._seek(partition, seek_to)

    def _skipped(self, partition: int, first_missing: int, missing: int) -> None:
        self.metrics.gaps += missing
        _log.error(
            "input records missing on the broker were skipped",
            partition=partition,
            first_missing=first_missing,
            missing=missing,
        )

    async def _write_dirty(self) -> None:
        """One table and changelog write per run changed in the batch."""
        with self._writing():
            await self._write_runs()

    async def _write_runs(self) -> None:
        data = self.data
        send = self._send
        if self._flush_before_write:
            await self._flush()
            self._flush_before_write = False
        inventory = self.inventory
        for key, run in self._dirty.items():
            if run.gone:
                self._runs.pop(key, None)
                old = data.pop(key, None)
                inventory.written(run.partition, key, old, None)
                if old is not None:
                    await send(self._changelog, key, None, run.partition)
                continue
            if run.ended is not None:
                blob = pack_ended_hashes(run.position, run.ended_ms, run.ended.hashes)
            else:
                assert run.state is not None
                blob = pack_live(run.position, self._state_bytes(key, run))
            run.stored_outbox = run.state is not None and bool(run.state.outbox)
            inventory.written(run.partition, key, data.get(key), blob, run.ended_ms)
            data[key] = blob
            run.blob = blob
            await send(self._changelog, key, blob, run.partition)
        self._dirty.clear()

    def _state_bytes(self, key: bytes, run: _Run) -> bytes:
        """The run's state as stored; a state that cannot be stored (a bug, never input: the
        doors bound what a state holds) is replaced by a fresh one rather than stop the worker."""
        state = run.state
        assert state is not None
        try:
            return state.to_bytes()
        except (OverflowError, UnicodeEncodeError, ValueError, TypeError) as exc:
            _log.error(
                "run state cannot be stored: the run starts afresh",
                run_id=key.decode("utf-8", "replace"),
                error=f"{type(exc).__name__}: {exc}",
            )
            limit = self._config().settings.seen_event_ids
            run.state = RunState(state.scope, state.agent_id, state.run_id, state.session_id, limit)
            run.state.depth, run.state.root, run.state.first_ts = state.depth, state.root, state.first_ts
            return run.state.to_bytes()

    def forget_partitions(
        self, partitions: set[int], kept: set[int] | None = None, rebalance: int = 0
    ) -> None:
        """Drop the parsed states and the inventory of partitions this worker no longer owns
        (a stale time would expire a run that was active elsewhere, should it come back);
        the inventories of ``kept`` (complete: their cursors ran) are set aside for
        ``rebalance``, in case it gives them straight back (streams.kafka.run_inventory)."""
        for key in [k for k, run in self._runs.items() if run.partition in partitions]:
            del self._runs[key]
        kept = partitions & kept if kept is not None else set()
        self.inventory.keep(kept, rebalance)
        self.inventory.forget(partitions - kept)

    # -- records -------------------------------------------------------------------------------

    async def _record(self, record: Record) -> None:
        started = time.perf_counter()
        self._answer = None
        self._answer_key = None
        self._batch_answer = None
        self._announce = False
        self._current = None
        kind = await self._apply(record)
        self.metrics.event(kind, time.perf_counter() - started)
        key = self._answer_key
        if self._replies is None or self._answer is None or key is None:
            return
        if self._announce or _wants_reply(record):
            event_id, encoded = self._answer
            head = (
                b'{"event_id":'
                + msgspec.json.encode(event_id)
                + b',"scope":'
                + msgspec.json.encode(key.decode())
            )
            reply = head + b',"outputs":[' + b",".join(encoded) + b"]"
            batch = self._batch_answer
            if batch is not None:  # a batch's calls: each one's outputs, and the call that refused it
                answers, refused_by = batch
                every = [output for outputs in answers for output in outputs]
                reply = head + b',"outputs":[' + b",".join(every) + b"]"
                reply += b',"batch":[' + b",".join(b"[" + b",".join(one) + b"]" for one in answers) + b"]"
                reply += b',"refused_by":' + msgspec.json.encode(refused_by)
            run = self._runs.get(key)
            if run is not None and run.state is not None and run.state.aborted is not None:
                reply += b',"aborted":' + msgspec.json.encode(run.state.aborted)  # sticky: an aborted run
            await self.send_reply(self._replies, event_id.encode(), reply + b"}", key)
            self._replied = True

    async def _apply(self, record: Record) -> str:
        """Apply one record; the kind counted for it."""
        config = self._config()
        if not record.value:
            what = "no value (a tombstone)" if record.value is None else "an empty value"
            await self._refuse(record, f"the record has {what}: not an event")
            return "invalid"
        value: bytes = record.value
        batch = is_batch(record)  # one model turn's calls (streams.kafka.batch_records)
        if not batch and len(value) > config.settings.max_event_bytes:
            limit = config.settings.max_event_bytes
            await self._refuse(record, f"event of {len(value)} bytes exceeds the limit of {limit}")
            return "invalid"
        try:
            if batch:  # (each call within the limit of one event)
                events: list[Event] = list(decode_batch(value, config.settings.max_event_bytes, texts=True))
            else:  # (params and results hashed from their text)
                events = [decode_event(value, texts=True)]
            key = run_scope(events[0]).encode()
        except InvalidEvent as exc:
            await self._refuse(record, exc.reason)
            return "invalid"
        except Exception as exc:  # noqa: BLE001 - whatever one record breaks, the worker goes on
            await self._refuse(record, f"undecodable: {type(exc).__name__}: {exc}")
            return "invalid"
        if self.show is not None:
            for event in events:
                self.show(record.partition, record.offset, event, record.timestamp)
        if record.key != key:  # its run's other events are elsewhere: applied, it would drop some
            await self._refuse(record, _misrouted(record.key, key))
            return "invalid"
        try:
            if not batch:
                return await self._apply_event(record, events[0], key)
            await self._apply_calls(record, events, key)  # type: ignore[arg-type]
        except Exception as exc:  # noqa: BLE001 - one event's failure must not stop the others
            _log.exception(
                "event processing failed",
                run_id=key.decode(),
                partition=record.partition,
                offset=record.offset,
            )
            await self._refuse(record, f"processing failed: {type(exc).__name__}: {exc}")
            return "invalid"
        for _ in events[1:]:
            self.metrics.event("tool_call", 0.0)  # (the record's own is counted with its time)
        return "tool_call"

    async def _apply_calls(self, record: Record, calls: list[ToolCall], key: bytes) -> None:
        first = calls[0]
        self._answer = (first.event_id, [])
        run, scope = self._begin(record, key)
        fresh = run.state is None
        ts = first.ts if first.ts is not None else record.timestamp
        stepped = self.engine.step_batch(calls, ts, record.offset, scope)
        outcome = stepped.batch
        assert outcome is not None
        answers: list[list[bytes]] = [[] for _ in calls]
        state = run.state
        refused_by = outcome.refused_by
        if stepped.kind == "redelivered" and state is not None:  # re-publish what is unconfirmed
            for index, call in enumerate(calls):
                outbox = answers[index] = state.outbox.get(call.event_id, [])
                await self._publish(key, state, call.event_id, outbox, bool(outbox) and self.facts.active)
            refused_by = _trigger_of(answers)
        elif stepped.kind == "applied" and state is not None:
            spend = stepped.loop_spend  # the turn's usage rides on the first of its calls that has any
            for index, call in enumerate(calls):
                if not outcome.applied[index]:
                    continue
                self.metrics.chain(call, fresh and index == 0)
                if call.usage is not None:
                    self.metrics.spend(call.agent_id, call.usage, spend, state.first_detector)
                    spend = 0.0
                one = Stepped("applied", outcome.outputs[index])
                await self._applied(key, run, call, record, one, False, count_chain=False)
                answers[index] = self._answer[1] if self._answer is not None else []
            self._answer = (first.event_id, [])
        self._batch_answer = (answers, refused_by)

    async def _apply_event(self, record: Record, event: Event, key: bytes) -> str:
        kind = str(event.__struct_config__.tag)
        self._answer = (event.event_id, [])
        run, scope = self._begin(record, key)
        state = run.state
        unconfirmed = state is not None and bool(state.outbox)  # (a tombstone keeps no outbox)
        aborted = state is not None and state.aborted is not None
        fresh = state is None  # the run's first event (its chain fields fix its place, F6)
        ts = event.ts if event.ts is not None else record.timestamp
        stepped = self.engine.step(event, ts, record.offset, scope)
        done = stepped.kind
        if done == "redelivered":  # applied before: re-publish what is unconfirmed
            if run.state is not None:
                outbox = run.state.outbox.get(event.event_id, [])
                self._answer = (event.event_id, outbox)
                with_facts = bool(outbox) and self.facts.active
                await self._publish(key, run.state, event.event_id, outbox, with_facts)
        elif done == "ended" or done == "expired":
            self._flush_before_write = self._flush_before_write or unconfirmed
            if self.cache is not None:
                await self.cache.forget(key.decode())
            if aborted:  # the gateways forget its abort
                self._announce = True
        elif done == "applied":
            await self._applied(key, run, event, record, stepped, fresh)
        return kind

    # -- the run engine's store ----------------------------------------------------------------

    def _begin(self, record: Record, key: bytes) -> tuple[_Run, str]:
        """The record's run, loaded once for the engine's step (:meth:`entry`), and its scope."""
        self._answer_key = key
        run = self._load(key, record.partition)
        scope = key.decode()
        self._current = (scope, key, run)
        self._partition, self._record_ms = record.partition, record.timestamp
        self.facts.source = (record.partition, record.offset)
        self.engine.config = self._config()
        return run, scope

    def entry(self, scope: str) -> RunSlot:
        """The run's entry: the record's own, loaded by :meth:`_begin` (another, parsed from
        the table: :meth:`_load`)."""
        current = self._current
        if current is not None and current[0] == scope:
            return current[2]
        return self._load(scope.encode(), self._partition)

    def settle(self, scope: str, slot: RunSlot, stepped: Stepped) -> None:
        """What the engine did to a run: counted, and kept for the batch's table write."""
        assert isinstance(slot, _Run)
        kind = stepped.kind
        metrics = self.metrics
        if stepped.late:
            metrics.ended_run_events += stepped.late  # redelivered or republished
        if kind == "redelivered":
            metrics.redelivered += 1
        elif kind == "stale":
            metrics.stale_expiries += 1  # the run went on after the expiry timer decided
        elif kind == "applied" or kind == "ended" or kind == "expired":
            slot.gone = kind == "expired"  # (deleted at the batch's end)
            if kind == "ended":
                slot.ended_ms = self._record_ms or 0  # (its grace period runs on record time)
            elif kind == "applied":
                self.inventory.touched(slot.partition, scope.encode(), time.time())

    def _before_apply(self, event: Event) -> None:
        """An event is about to change its run: the run is written at the batch's end."""
        if self.fault_hook is not None:
            self.fault_hook(event)
        current = self._current
        assert current is not None  # (the engine applies only the record's own run's events)
        _, key, run = current
        run.blob = None
        self._dirty[key] = run

    async def _applied(
        self,
        key: bytes,
        run: _Run,
        event: Event,
        record: Record,
        stepped: Stepped,
        fresh: bool,
        count_chain: bool = True,
    ) -> None:
        """What an applied event gave: its outputs held, published, logged and counted (and,
        ``count_chain``, the event's run and spend: a batch counts those itself)."""
        scope = key.decode()
        state = run.state
        assert state is not None
        if count_chain:
            self.metrics.chain(event, fresh)
            usage = event.usage if isinstance(event, ToolCall) else None
            if usage is not None:
                self.metrics.spend(event.agent_id, usage, stepped.loop_spend, state.first_detector)
        self._answer = (event.event_id, [])
        outputs = stepped.outputs
        if not outputs:
            return
        encoded = [encode_output(out) for out in outputs]
        self._answer = (event.event_id, encoded)
        state.hold(event.event_id, encoded)  # persisted with the state at the end of the batch
        for out in outputs:
            self.metrics.output(out)
            _log.warning(
                "tool loop",
                run_id=scope,
                partition=record.partition,
                offset=record.offset,
                **verdict_log_fields(out, scope),
            )
        await self._publish(key, state, event.event_id, encoded, self.facts.active)
        if self.cache is not None:
            for out in outputs:
                await self.cache.record(scope, out)
        if len(state.outbox) >= OUTBOX_FLUSH_AT:
            await self.facts.send()  # the outbox waits for them too
            await self._flush()  # confirmations empty the outbox

    def _load(self, key: bytes, partition: int) -> _Run:
        """The run's parsed table value (cached while the table holds the same bytes)."""
        blob = self.data.get(key)
        run = self._runs.get(key)
        if run is not None and (run.blob is None or run.blob is blob):
            run.touched = self._batch_at
            self._runs.move_to_end(key)
            return run
        if blob is None:
            run = _Run(partition)
        else:
            try:
                value = unpack(blob)
                if value.kind == LIVE:
                    state = RunState.from_bytes(value.state, self._config().settings.seen_event_ids)
                    run = _Run(partition, blob, state, offset=value.offset)
                else:
                    ended = Tombstone(hashes=value.ended_ids)
                    run = _Run(partition, blob, None, ended, value.ended_ms, value.offset)
            except (ValueError, msgspec.DecodeError) as exc:  # not written by this version: start afresh
                _log.error(
                    "unreadable run state replaced", run_id=key.decode("utf-8", "replace"), error=str(exc)
                )
                run = _Run(partition)
        run.touched = self._batch_at
        self._runs[key] = run
        self._runs.move_to_end(key)
        return run

    async def _publish(
        self, key: bytes, state: RunState, event_id: str, encoded: list[bytes], with_facts: bool = False
    ) -> None:
        """Send outputs; once the broker confirmed all of them (and, ``with_facts``, the batch's
        fleet facts) they leave the run's outbox."""
        if not encoded:
            return
        pending = len(encoded) + with_facts

        def confirmed_one() -> None:
            nonlocal pending
            pending -= 1
            if pending == 0:
                state.delivered(event_id)

        def confirmed(future: asyncio.Future[Any]) -> None:
            if future.cancelled() or future.exception() is not None:
                return  # stays in the outbox: re-published if the event comes again
            confirmed_one()

        if with_facts:
            self.facts.wait(confirmed_one)
        for value in encoded:
            future = await self._send(self._verdicts, key, value, None)
            future.add_done_callback(confirmed)

    async def _refuse(self, record: Record, reason: str) -> None:
        reason = reason.encode("utf-8", "backslashreplace").decode()  # the log line encodes too
        self.metrics.invalid += 1
        key = None if record.key is None else record.key[:200].decode("utf-8", "replace")
        _log.warning(
            "invalid event sent to dead-letter topic",
            reason=reason,
            key=key,  # (the run id, when the producer keyed the record by it, as it must)
            partition=record.partition,
            offset=record.offset,
        )

        def letter(keep_bytes: int) -> bytes:
            return dead_letter(
                reason,
                record.topic,
                record.partition,
                record.offset,
                record.key,
                record.value,
                record.timestamp,
                keep_bytes,
            )

        try:
            await self._send(
                self._dead_letter,
                letter_key(record.key),
                letter(self._config().settings.max_event_bytes),
                None,
            )
        except MessageSizeTooLargeError as exc:  # a producer set below the letter's bound
            _log.error("dead letter too large: sent without the value", error=str(exc), offset=record.offset)
            await self._send(self._dead_letter, letter_key(record.key), letter(0), None)

    # -- housekeeping --------------------------------------------------------------------------

    async def drop_ended(self, due: dict[bytes, tuple[int, bytes]]) -> None:
        """Delete tombstones past their grace period: key → (its partition, the tombstone's
        bytes as the expiry scan saw them). Call with :attr:`lock` held. A key whose value
        changed since the scan (a batch started a new run under the ended run's id while the
        scan waited for the lock) is left alone."""
        data = self.data
        owned = self.cursors.ready()
        for key, (partition, blob) in due.items():
            if partition in owned and data.get(key) == blob:  # still ours, still that tombstone
                self._dirty[key] = _Run(partition, gone=True)
        await self._write_dirty()
