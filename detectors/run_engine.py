"""The run engine: what events do to their run, the same in every shell (one object).

A shell keeps its runs' entries (:class:`RunSlot`: a live state, or the tombstone of an
ended run, and the position of the last event applied) in a :class:`RunStore` of its own —
a dict (:class:`detectors.engine.Engine`: the embedded runtime, the gateway, replay, the
facade) or the worker's table (:class:`streams.kafka.run_processor.RunProcessor`) — and hands
each event, or one model turn's calls (a batch: :mod:`detectors.batch_admission`), to
:meth:`RunEngine.step`, which:

* ignores an event of an ended run that the run had seen, or that sits at or below the
  tombstone's position (``late``); any other event of an ended run starts a new run (of a
  batch, the calls the ended run never had);
* with positions (the Kafka input offset), recognises an event applied before
  (``redelivered``: the fleet hooks are handed its facts again, with the outputs the run
  still holds for it; the shell re-publishes those);
* ends a run at ``run_end`` (``ended``: the tombstone of the event ids it had seen) or
  forgets it at an expiry's ``run_end`` (``expired``: :func:`expiry_event`, the timer's
  event), unless the run went on after the timer decided (``stale``: nothing changes);
* otherwise hashes the event once (:func:`detectors.step.prepare_for`), asks the fleet hooks
  for F1's fail-fast block of a fresh call, else F6's chain block (it comes first), applies
  the core's step (event-id de-duplication, the rules, spend, the sticky abort:
  :func:`detectors.step.apply`, or :func:`detectors.batch_admission.admit_batch` for a
  batch), and hands the fleet hooks the event's facts (``applied``);
* and tells the store what it did (:meth:`RunStore.settle`).

The shell does its I/O around it: decode before, publish, store and commit after.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, Literal

import msgspec
from mypy_extensions import mypyc_attr

from loopwatch.config.fleet import FleetConfig
from loopwatch.detectors.batch_admission import BatchOutcome, admit_batch, batch_problem
from loopwatch.detectors.event_fields import CALL, RESULT, fields_of
from loopwatch.detectors.events import (
    EXPIRY_EVENT_PREFIX,
    Abort,
    Event,
    Output,
    RunEnd,
    ToolCall,
    ToolResult,
    Verdict,
    run_scope,
)
from loopwatch.detectors.state import RunState
from loopwatch.detectors.step import Prepared, apply, new_state, prepare_for
from loopwatch.detectors.tombstone import Tombstone, id_hash, key_hash

__all__ = [
    "EXPIRY_AT",
    "NO_POSITION",
    "FleetHooks",
    "RunEngine",
    "RunSlot",
    "RunStore",
    "StepKind",
    "Stepped",
    "expiry_event",
    "expiry_position",
]

NO_POSITION: Final = -1

#: An expiry ``run_end``'s id ends with this and the run's position (its last applied offset)
#: when the timer decided: ``loopwatch-expiry:{scope}:{idle since}@{position}``.
EXPIRY_AT: Final = "@"

# Compiled, a module's own Final names are C statics; the event Structs, imported from an
# interpreted module, would be a dict lookup at every use.
_RUN_END: Final = RunEnd
_TOOL_CALL: Final = ToolCall
_TOOL_RESULT: Final = ToolResult
_OUTPUT: Final[Any] = msgspec.json.Decoder(Verdict | Abort)

StepKind = Literal["applied", "redelivered", "late", "ended", "expired", "stale"]


@mypyc_attr(allow_interpreted_subclasses=True)
class RunSlot:
    """One run scope's entry: its live ``state`` (``None`` before its first event), or the
    ``ended`` run's tombstone (with the ``ended_ms`` of its ``run_end``), and the ``position``
    of the last event applied to it (:data:`NO_POSITION` where the shell has none)."""

    def __init__(
        self,
        state: RunState | None = None,
        ended: Tombstone | None = None,
        ended_ms: int = 0,
        position: int = NO_POSITION,
    ) -> None:
        self.state = state
        self.ended = ended
        self.ended_ms = ended_ms
        self.position = position


@mypyc_attr(allow_interpreted_subclasses=True)
class FleetHooks:
    """What a run's step asks of the fleet rules (none by default)."""

    def fail_fast(self, scope: str, event: ToolCall, ts: int, config: FleetConfig) -> Output | None:
        """F1's block of a fresh call to a tool under an open outage, if blocks are on."""
        return None

    def chain_block(
        self, state: RunState, event: ToolCall, ts: int, prepared: Prepared, config: FleetConfig
    ) -> Output | None:
        """F6b's or F6c's block of a fresh call of a run of a delegation chain, if blocks are on."""
        return None

    def noted(
        self,
        scope: str,
        event: ToolCall | ToolResult,
        ts: int,
        prepared: Prepared,
        outputs: list[Output],
        config: FleetConfig,
        state: RunState | None = None,
    ) -> None:
        """The facts of an applied (or redelivered) call or result (of the run ``state``: F6
        needs its chain), and of the outputs it gave."""


class Stepped:
    """What one step did: its ``kind``, its new ``outputs`` (fail-fast block first), its
    hashes (calls and results that were applied), what it added to the run's loop spend, how
    many of its events were ``late`` (events of an ended run that it had seen), and for a
    batch what admitting it did (``batch``)."""

    __slots__ = ("batch", "kind", "late", "loop_spend", "outputs", "prepared")

    def __init__(
        self,
        kind: StepKind,
        outputs: list[Output] | None = None,
        prepared: Prepared | None = None,
        loop_spend: float = 0.0,
        late: int = 0,
        batch: BatchOutcome | None = None,
    ) -> None:
        self.kind: StepKind = kind
        self.outputs: list[Output] = outputs if outputs is not None else []
        self.prepared = prepared
        self.loop_spend = loop_spend
        self.late = late
        self.batch = batch


@mypyc_attr(allow_interpreted_subclasses=True)
class RunStore:
    """Where a shell keeps its runs' entries (a dict, a faust table): the engine reads one
    per step and tells the store what the step did. (A class, not a protocol: compiled, the
    engine's calls to a compiled store are native.)"""

    def entry(self, scope: str) -> RunSlot:
        """The run's entry (an empty :class:`RunSlot` for a run it does not hold)."""
        raise NotImplementedError

    def settle(self, scope: str, slot: RunSlot, stepped: Stepped) -> None:
        """What a step did to the entry :meth:`entry` gave (changed in place): keep it."""
        raise NotImplementedError


def _stepped(
    into: Stepped | None,
    kind: StepKind,
    outputs: list[Output] | None = None,
    prepared: Prepared | None = None,
    loop_spend: float = 0.0,
) -> Stepped:
    """A :class:`Stepped`: ``into`` filled in, where the caller lends one (it reads it before
    its next event), else a new one."""
    if into is None:
        return Stepped(kind, outputs, prepared, loop_spend)
    into.kind = kind
    into.outputs = outputs if outputs is not None else []
    into.prepared = prepared
    into.loop_spend = loop_spend
    into.late = 0
    into.batch = None
    return into


def expiry_event(scope: str, idle_since: int, position: int = NO_POSITION) -> RunEnd:
    """The ``run_end`` that expires a run idle since ``idle_since``, decided when its last
    applied event was at ``position``: stepped later than another event of the run, it is
    ``stale`` and changes nothing (the run went on)."""
    session = scope.removeprefix("session:") if scope.startswith("session:") else None
    return RunEnd(
        event_id=f"{EXPIRY_EVENT_PREFIX}{scope}:{idle_since}{EXPIRY_AT}{position}",
        run_id=None if session is not None else scope,
        session_id=session,
    )


def expiry_position(event_id: str) -> int | None:
    """The position an expiry ``run_end`` was decided at (None: not an expiry, or one written
    before the position was part of its id: then it applies as it did)."""
    if not event_id.startswith(EXPIRY_EVENT_PREFIX):
        return None
    _, at, offset = event_id.rpartition(EXPIRY_AT)
    digits = offset[1:] if offset.startswith("-") else offset
    if not at or not digits.isascii() or not digits.isdigit():  # ("²" is a digit int() refuses)
        return None
    return int(offset)


class RunEngine:
    """Steps events (and batches) of any number of runs over a :class:`RunStore`.

    ``fleet``: the fleet rules' hooks (F1's fail-fast block, F6's chain blocks, the facts)."""

    def __init__(self, config: FleetConfig, store: RunStore, fleet: FleetHooks | None = None) -> None:
        self.config = config
        self.store = store
        self.fleet = fleet
        #: called with each event about to be applied (not one refused as late, redelivered or
        #: stale), before it changes its run: the worker marks the run changed there, and its
        #: fault injection raises there
        self.before_apply: Callable[[Event], None] | None = None

    def step(
        self,
        event: Event,
        ts: int | None = None,
        position: int = NO_POSITION,
        scope: str | None = None,
        into: Stepped | None = None,
        values: tuple[Any, ...] | None = None,
    ) -> Stepped:
        """Step one event at time ``ts`` (the event's own by default: the fleet rules' clock)
        with its input ``position``, where the shell has one, of run ``scope`` (the event's
        by default); what it did (in ``into``, where the caller lends one it reads before its
        next event: no new object per event). ``values``: a call's or result's
        :func:`~detectors.event_fields.fields_of`, when the shell has read them."""
        if scope is None or ts is None:
            event_kind = type(event)
            if event_kind is _TOOL_CALL or event_kind is _TOOL_RESULT:  # (fields read once)
                if values is None:
                    values = fields_of(event)  # type: ignore[arg-type]
                at = CALL if event_kind is _TOOL_CALL else RESULT
                run_id: str | None = values[at.run_id]
                event_ts: int | None = values[at.ts]
            else:
                run_id = event.run_id
                event_ts = event.ts
            if scope is None:
                scope = run_id if run_id and run_id == run_id.strip() else run_scope(event)
            if ts is None:
                ts = event_ts if event_ts is not None else 0
        store = self.store
        slot = store.entry(scope)
        kind = _admitted(slot, event, position)
        if kind is None:
            stepped = self._apply(slot, scope, event, ts, position, into, values)
        else:
            stepped = _stepped(into, kind)
            if kind == "late":
                stepped.late = 1
            elif kind == "redelivered":
                self._redelivered(slot, scope, event, ts)
        store.settle(scope, slot, stepped)
        return stepped

    def step_batch(
        self,
        calls: list[ToolCall],
        ts: int | None = None,
        position: int = NO_POSITION,
        scope: str | None = None,
    ) -> Stepped:
        """Step one model turn's calls of one run together, as :meth:`step` steps one event
        (``ts``: the first call's time by default; ``position``: the batch's input offset):
        its ``batch`` says what admitting it did, per call in its order (``ValueError``: the
        calls cannot be one batch, :func:`detectors.batch_admission.batch_problem`). A batch
        of an ended run is ``late`` when the run had every call;
        otherwise its other calls start a new run."""
        problem = batch_problem(calls)
        if problem is not None:
            raise ValueError(problem)
        first = calls[0]
        if scope is None:
            scope = run_scope(first)
        if ts is None:
            ts = first.ts if first.ts is not None else 0
        store = self.store
        slot = store.entry(scope)
        fresh = list(range(len(calls)))
        ended = slot.ended
        if ended is not None:
            if position != NO_POSITION and position <= slot.position:
                fresh = []
            else:
                fresh = [index for index, call in enumerate(calls) if call.event_id not in ended]
            if fresh:
                slot.ended = None
                slot.ended_ms = 0
                slot.state = None
        elif position != NO_POSITION and position <= slot.position:
            stepped = Stepped("redelivered", batch=BatchOutcome(calls, "redelivered"))
            for call in calls:
                self._redelivered(slot, scope, call, ts)
            store.settle(scope, slot, stepped)
            return stepped
        if not fresh:
            stepped = Stepped("late", late=len(calls), batch=BatchOutcome(calls, "late"))
        else:
            admitted = calls if len(fresh) == len(calls) else [calls[index] for index in fresh]
            if self.before_apply is not None:
                for call in admitted:
                    self.before_apply(call)
            if position != NO_POSITION:
                slot.position = position
            outcome = self._apply_batch(slot, scope, admitted, ts)
            if len(admitted) != len(calls):
                outcome = _spread_over(calls, fresh, outcome)
            stepped = Stepped(
                "applied", outcome.all_outputs(), None, outcome.loop_spend, len(calls) - len(fresh)
            )
            stepped.batch = outcome
        store.settle(scope, slot, stepped)
        return stepped

    def aborted(self, scope: str) -> tuple[str, str] | None:
        """The (reason, message) of the run's first enforced abort, while the run lives: what
        every later call of the run is answered."""
        state = self.store.entry(scope).state
        return state.aborted if state is not None else None

    def _apply(
        self,
        slot: RunSlot,
        scope: str,
        event: Event,
        ts: int,
        position: int,
        into: Stepped | None,
        values: tuple[Any, ...] | None,
    ) -> Stepped:
        """Apply an admitted event to its run's entry ``slot`` (changed in place)."""
        if self.before_apply is not None:
            self.before_apply(event)
        if position != NO_POSITION:
            slot.position = position
        config = self.config
        fleet = self.fleet
        kind = type(event)
        if kind is _RUN_END:
            state = slot.state
            slot.state = None
            if event.event_id.startswith(EXPIRY_EVENT_PREFIX):
                return _stepped(into, "expired")
            seen = [key_hash(key) for key in state.seen] if state is not None else []
            slot.ended = Tombstone(hashes=[*seen, id_hash(event.event_id)])
            slot.ended_ms = ts
            return _stepped(into, "ended")
        state = slot.state
        if state is None:
            state = slot.state = new_state(event, config, ts)
        if kind is not _TOOL_CALL and kind is not _TOOL_RESULT:
            return _stepped(into, "applied", apply(state, event, config))
        if values is None:
            values = fields_of(event)  # type: ignore[arg-type]
        resolved = config.for_agent(values[(CALL if kind is _TOOL_CALL else RESULT).agent_id])
        prepared = prepare_for(event, config, resolved, state.history, values)  # type: ignore[arg-type]
        block = None
        if fleet is not None and kind is _TOOL_CALL:
            block = self._fleet_block(state, scope, event, ts, prepared)  # type: ignore[arg-type]
        loop_before = state.loop_spend_usd
        outputs = apply(state, event, config, prepared, resolved, values)
        if block is not None:
            outputs.insert(0, block)
        if fleet is not None:
            fleet.noted(scope, event, ts, prepared, outputs, config, state)  # type: ignore[arg-type]
        return _stepped(into, "applied", outputs, prepared, state.loop_spend_usd - loop_before)

    def _fleet_block(
        self, state: RunState, scope: str, call: ToolCall, ts: int, prepared: Prepared
    ) -> Output | None:
        """The fleet's block of a fresh call (one the run has not seen): F1's fail-fast, else
        a chain's (F6)."""
        fleet = self.fleet
        config = self.config
        if fleet is None or state.has_seen(call.event_id, config.seen_event_ids):
            return None
        block = fleet.fail_fast(scope, call, ts, config)
        if block is None:
            block = fleet.chain_block(state, call, ts, prepared, config)
        return block

    def _apply_batch(self, slot: RunSlot, scope: str, calls: list[ToolCall], ts: int) -> BatchOutcome:
        """Admit a batch to its run's entry (the fleet's block of each fresh call first in its
        outputs, the calls hashed once, then the facts of each call)."""
        config = self.config
        fleet = self.fleet
        state = slot.state
        if state is None:
            state = slot.state = new_state(calls[0], config, ts)
        ready: list[Prepared] = []
        blocks: list[Output | None] = []
        fresh: set[str] = set()
        for call in calls:
            hashes = prepare_for(call, config, config.for_agent(call.agent_id))
            ready.append(hashes)
            block = None
            if fleet is not None and call.event_id not in fresh:
                block = self._fleet_block(state, scope, call, ts, hashes)
            fresh.add(call.event_id)
            blocks.append(block)
        loop_before = state.loop_spend_usd
        outcome = admit_batch(state, calls, config, ready)
        outcome.loop_spend = state.loop_spend_usd - loop_before
        for index, call in enumerate(calls):
            block = blocks[index]
            if block is not None:
                outcome.outputs[index].insert(0, block)
            if fleet is not None:
                fleet.noted(scope, call, ts, ready[index], outcome.outputs[index], config, state)
        return outcome

    def _redelivered(self, slot: RunSlot, scope: str, event: Event, ts: int) -> None:
        """The facts of an event applied before, handed to the fleet hooks again (they may not
        have reached the facts topic), with the outputs its run still holds for it."""
        fleet = self.fleet
        state = slot.state
        if fleet is None or state is None or not isinstance(event, (ToolCall, ToolResult)):
            return
        held = state.outbox.get(event.event_id, [])
        outputs: list[Output] = [_OUTPUT.decode(value) for value in held]
        fleet.noted(scope, event, ts, prepare_for(event, self.config), outputs, self.config, state)


def _admitted(slot: RunSlot, event: Event, position: int) -> StepKind | None:
    """``late``, ``redelivered`` or ``stale`` when the event must not be applied (again),
    else ``None`` (an event of an ended run it never had clears the entry: a new run)."""
    if type(event) is _RUN_END:
        decided = expiry_position(event.event_id)
        if decided is not None and decided != slot.position:
            return "stale"  # the run went on (or ended) after the timer decided
    ended = slot.ended
    if ended is not None:
        if (position != NO_POSITION and position <= slot.position) or event.event_id in ended:
            return "late"  # redelivered or republished
        slot.ended = None
        slot.ended_ms = 0
        slot.state = None
        return None
    if position != NO_POSITION and position <= slot.position:
        return "redelivered"
    return None


def _spread_over(calls: list[ToolCall], fresh: list[int], outcome: BatchOutcome) -> BatchOutcome:
    """``outcome`` of the calls at ``fresh`` positions as the outcome of the whole batch (the
    others, late calls of the ended run, neither applied nor evaluated)."""
    whole = BatchOutcome(calls)
    for position, index in enumerate(fresh):
        whole.outputs[index] = outcome.outputs[position]
        whole.prepared[index] = outcome.prepared[position]
        whole.applied[index] = outcome.applied[position]
        whole.evaluated[index] = outcome.evaluated[position]
        whole.found[index] = outcome.found[position]
    if outcome.refused_by is not None:
        whole.refused_by = fresh[outcome.refused_by]
    whole.loop_spend = outcome.loop_spend
    return whole
