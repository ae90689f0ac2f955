"""The fleet facts topic applied to the fleet rules' per-subject states: each offset once, in bulk.

Run processors send the facts of their events and verdicts (:mod:`detectors.fleet.facts`)
to the facts topic keyed by subject — ``tool:{tool}`` for F1, ``agent:{agent}`` for F2,
``chain:{root}`` for F6 (re-keyed by the root of the run's delegation chain) — so one worker
owns all of a tool's, an agent's or a chain's facts, whichever runs they come from. This
processor keeps each subject's state (:class:`SubjectState`: the rule's rolling window of
event-time buckets, its open outage or alert marks, a chain's runs and repeated work) in the
worker's ``fleet`` table, whose changelog is partitioned like the facts topic, and publishes
the alerts on the alerts topic.

The discipline is the run processor's (:mod:`streams.kafka.run_processor`): a batch is admitted
against the partition's cursor; a record at or below the subject's last applied offset is a
redelivery and only re-publishes the subject's unconfirmed alerts (same ``alert_id``); a new
one steps the rule; at the end of the batch each changed subject is written once to the
table and its changelog, and only then does the cursor move on. A worker killed mid-outage
therefore neither loses the open outage (it is in the recovered state) nor opens it again.

A subject's state that cannot be stored (encoded larger than :data:`MAX_VALUE_BYTES`, or
refused by the producer as too large) is logged, counted (:attr:`FleetProcessor.unstorable`,
``loopwatch_fleet_states_unstorable_total``) and stored without its alerts awaiting
confirmation (sent already: only their re-publication after a crash is lost), or, if that is
still too large, replaced by a fresh one (its offset kept): the subject starts afresh, and the
worker goes on deciding. The rules' states are bounded far below it (a delegation chain's, the
largest, stays under 64 KB).

Delegation chains come and go (one subject per root): :meth:`FleetProcessor.drop_expired_chains`
deletes, from the table and its changelog, the chains whose last event is ``chainTtlS`` older
than the newest fact this worker applied on their partition (a later fact of such a chain
would have started it afresh anyway); a dropped chain that had alerts gets its ``chain_expired``
alert, which ends its blocks on every worker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

import msgspec
import structlog
from aiokafka.errors import MessageSizeTooLargeError

from loopwatch.config.fleet import FleetConfig
from loopwatch.config.fleet_rules import FleetRules, fleet_rules
from loopwatch.detectors.fleet import chains, systemic_loop, tool_outage
from loopwatch.detectors.fleet.alerts import FleetAlert, encode_alert
from loopwatch.detectors.fleet.chains import ChainState
from loopwatch.detectors.fleet.facts import ChainRunFact, decode_facts
from loopwatch.detectors.fleet.watch import apply_fact
from loopwatch.streams.kafka.input_cursors import InputCursors, apply_admitted
from loopwatch.streams.kafka.local_state import writing_notice

__all__ = ["FleetProcessor", "SubjectState"]

NO_OFFSET: Final = -1
#: The largest table value written (faust's producer refuses requests over 1,000,000 bytes).
MAX_VALUE_BYTES: Final = 900_000
_log = structlog.get_logger("loopwatch.worker")

Send = Callable[[str, bytes | None, bytes | None, int | None], Awaitable["asyncio.Future[Any]"]]


class SubjectState(msgspec.Struct, array_like=True):
    """One subject's table value: the last facts offset applied, the rule's state, unconfirmed alerts."""

    offset: int = NO_OFFSET
    # the rule's state, under its tool or agent (one entry: a subject is one tool or one agent)
    outages: dict[str, tool_outage.OutageState] = msgspec.field(default_factory=dict)
    loops: dict[str, systemic_loop.AgentLoops] = msgspec.field(default_factory=dict)
    outbox: list[bytes] = msgspec.field(default_factory=list)
    chains: dict[str, ChainState] = msgspec.field(default_factory=dict)  # F6: root -> its chain


_ENCODER: Final = msgspec.msgpack.Encoder()
_DECODER: Final[Any] = msgspec.msgpack.Decoder(SubjectState)
_FRESH_BYTES: Final = 64  # an empty state with the largest offset


class FleetProcessor:
    def __init__(
        self,
        data: MutableMapping[bytes, bytes],
        send: Send,
        seek: Callable[[int, int], Awaitable[None]],
        config: Callable[[], FleetConfig],
        topics: dict[str, str],
        on_alert: Callable[[FleetAlert], object] | None = None,
    ) -> None:
        self.data = data
        self._writing = writing_notice(data)  # the rocksdb store is told when a batch is written
        self._send = send
        self._seek = seek
        self._config = config
        self._alerts = topics["alerts"]
        self._changelog = topics["changelog"]
        self.on_alert = on_alert
        self.cursors = InputCursors()
        self.lock = asyncio.Lock()
        # parsed states: subject -> (the blob parsed, None if changed since; state; partition)
        self._states: dict[bytes, tuple[bytes | None, SubjectState, int]] = {}
        self._dirty: dict[bytes, tuple[int, SubjectState]] = {}
        self._rules: tuple[object, FleetRules] = (object(), fleet_rules(None))
        self.applied = 0  # fact records applied
        self.unstorable = 0  # subject states too large to store (their outbox dropped, or afresh)
        self._newest: dict[int, int] = {}  # facts partition -> the newest event time of its facts

    async def process(self, fetched: dict[Any, list[Any]]) -> None:
        """Apply one fetched batch of the facts topic (topic-partition → records in offset order)."""
        async with self.lock:
            advanced = await apply_admitted(
                self.cursors, fetched, self._record, self._seek_back, self._skipped
            )
            await self._write_dirty()
            for partition, offset in advanced.items():
                self.cursors.advance(partition, offset)

    async def _seek_back(self, partition: int, first_offset: int, seek_to: int) -> None:
        await self._seek(partition, seek_to)

    @staticmethod
    def _skipped(partition: int, first_missing: int, missing: int) -> None:
        _log.error(
            "fleet facts missing on the broker were skipped",
            partition=partition,
            first_missing=first_missing,
            missing=missing,
        )

    def forget_partitions(self, partitions: set[int]) -> None:
        """Drop the parsed states of partitions this worker no longer owns."""
        for key in [k for k, cached in self._states.items() if cached[2] in partitions]:
            del self._states[key]

    def _fleet_rules(self) -> FleetRules:
        global_rules = self._config().global_rules
        if self._rules[0] is not global_rules:
            self._rules = (global_rules, fleet_rules(global_rules))
        return self._rules[1]

    def _load(self, key: bytes, partition: int) -> SubjectState:
        blob = self.data.get(key)
        cached = self._states.get(key)
        if cached is not None and (cached[0] is None or cached[0] is blob):
            return cached[1]
        state = SubjectState()
        if blob is not None:
            try:
                state = _DECODER.decode(blob)
            except msgspec.DecodeError as exc:  # not written by this version: start afresh
                _log.error(
                    "unreadable fleet state replaced", subject=key.decode("utf-8", "replace"), error=str(exc)
                )
        self._states[key] = (blob, state, partition)
        return state

    async def _record(self, record: Any) -> None:
        key: bytes = record.key or b""
        state = self._load(key, record.partition)
        if record.offset <= state.offset:  # applied before: re-publish what is unconfirmed
            await self._publish(key, state, list(state.outbox))
            return
        try:
            facts = decode_facts(record.value or b"")
        except Exception as exc:  # noqa: BLE001 - one bad record is skipped, never fatal
            _log.error(
                "unreadable fleet facts skipped",
                subject=key.decode("utf-8", "replace"),
                partition=record.partition,
                offset=record.offset,
                error=f"{type(exc).__name__}: {exc}",
            )
            facts = []
        rules = self._fleet_rules()
        alerts = [
            alert
            for fact in facts
            for alert in apply_fact(fact, rules, state.outages, state.loops, state.chains)
        ]
        if facts:
            newest = max(fact.last if type(fact) is ChainRunFact else fact.ts for fact in facts)
            if newest > self._newest.get(record.partition, newest - 1):
                self._newest[record.partition] = newest
        state.offset = record.offset
        self.applied += 1
        self._states[key] = (None, state, record.partition)
        self._dirty[key] = (record.partition, state)
        if alerts:
            encoded = [encode_alert(alert) for alert in alerts]
            state.outbox.extend(encoded)
            for alert in alerts:
                if alert.kind != chains.ACTIVE_KIND:  # bookkeeping for the blocks, no alert
                    _log.warning(
                        "fleet alert", alert_id=alert.alert_id, kind=alert.kind, message=alert.message
                    )
                if self.on_alert is not None:
                    self.on_alert(alert)
            await self._publish(key, state, encoded)

    async def _publish(self, key: bytes, state: SubjectState, encoded: list[bytes]) -> None:
        """Send alerts; each leaves the subject's outbox once the broker confirmed it."""
        for value in encoded:

            def confirmed(future: asyncio.Future[Any], value: bytes = value) -> None:
                if future.cancelled() or future.exception() is not None:
                    return  # stays in the outbox: re-published if the facts come again
                if value in state.outbox:
                    state.outbox.remove(value)

            future = await self._send(self._alerts, key, value, None)
            future.add_done_callback(confirmed)

    async def drop_expired_chains(self, partition_of: Callable[[bytes], int | None]) -> int:
        """Delete the chain subjects of this worker's partitions (``partition_of``: a key's
        partition if this worker applies it, else ``None``) whose every chain expired by the
        newest event time applied on that partition, and whose alerts are all confirmed; how
        many. Call with :attr:`lock` held."""
        with self._writing():
            return await self._drop_expired_chains(partition_of)

    async def _drop_expired_chains(self, partition_of: Callable[[bytes], int | None]) -> int:
        rule = self._fleet_rules().delegation
        dropped = 0
        for key in [k for k in list(self.data) if k.startswith(b"chain:")]:
            partition = partition_of(key)
            newest = self._newest.get(partition) if partition is not None else None
            if partition is None or newest is None:
                continue
            state = self._load(key, partition)
            live = [chain for chain in state.chains.values() if not chains.expired(chain, newest, rule)]
            if state.outbox or live:
                continue
            self.data.pop(key, None)
            self._states.pop(key, None)
            self._dirty.pop(key, None)
            await self._send(self._changelog, key, None, partition)
            for chain in state.chains.values():
                closed = chains.expiry_alert(chain, rule)
                if closed is not None:
                    await self._send(self._alerts, f"chain:{chain.root}".encode(), encode_alert(closed), None)
                    if self.on_alert is not None:
                        self.on_alert(closed)
            dropped += 1
        return dropped

    async def _write_dirty(self) -> None:
        with self._writing():
            await self._write_states()

    async def _write_states(self) -> None:
        for key, (partition, state) in self._dirty.items():
            counted = self.unstorable
            blob, stored = self._stored(key, state, MAX_VALUE_BYTES)
            while True:
                try:
                    await self._send(self._changelog, key, blob, partition)
                    break
                except MessageSizeTooLargeError as exc:  # the broker's limit is lower than ours
                    if len(blob) <= _FRESH_BYTES:
                        raise  # not even an empty state: the broker is misconfigured
                    first = self.unstorable == counted
                    blob, stored = self._stored(key, stored, len(blob) - 1, exc, first)
            state = stored
            self.data[key] = blob
            self._states[key] = (blob, state, partition)
        self._dirty.clear()

    def _stored(
        self,
        key: bytes,
        state: SubjectState,
        limit: int,
        refused: Exception | None = None,
        first: bool = True,
    ) -> tuple[bytes, SubjectState]:
        """The subject's state as stored within ``limit`` bytes, and the state it stands for: first
        without its alerts awaiting confirmation (sent already: only their re-publication after a
        crash is lost), else a fresh one (the subject starts afresh, its offset kept)."""
        subject = key.decode("utf-8", "replace")
        try:
            blob = _ENCODER.encode(state)
        except (OverflowError, UnicodeEncodeError, ValueError, TypeError) as exc:
            refused, blob = exc, b""
        else:
            if len(blob) <= limit:
                return blob, state
        if refused is None:
            refused = ValueError(f"{len(blob)} bytes exceed {limit}")
        if first:  # counted once per write
            self.unstorable += 1
        if state.outbox and blob:
            state.outbox.clear()
            blob = _ENCODER.encode(state)
            if len(blob) <= limit:
                _log.error(
                    "fleet state too large: its unconfirmed alerts are not stored",
                    subject=subject,
                    error=f"{type(refused).__name__}: {refused}",
                )
                return blob, state
        _log.error(
            "fleet state cannot be stored: the subject starts afresh",
            subject=subject,
            error=f"{type(refused).__name__}: {refused}",
        )
        fresh = SubjectState(offset=state.offset)
        return _ENCODER.encode(fresh), fresh
