"""The run engine: what one event does to its run, the same in every shell.

A shell keeps its runs' entries (:class:`RunSlot`: a live state, or the tombstone of an
ended run, and the position of the last event applied) where it likes — a dict
(:class:`detectors.engine.Engine`: the embedded runtime, the gateway, replay, the facade) or
a faust table (the Kafka worker's run processor) — and hands each event with its run's entry
to :func:`admit` and then, unless it refused the event, :func:`step_admitted`; together:

* ignores an event of an ended run that the run had seen, or that sits at or below the
  tombstone's position (``late``); any other event of an ended run starts a new run;
* with positions (the Kafka input offset), recognises an event applied before
  (``redelivered``: the shell re-publishes what its outbox still holds for it);
* ends a run at ``run_end`` (``ended``: the tombstone of the event ids it had seen) or
  forgets it at an expiry's ``run_end`` (``expired``);
* otherwise hashes the event once (:func:`detectors.step.prepare_for`), asks the fleet hooks
  for F1's fail-fast block of a fresh call, else F6's chain block (it comes first), applies
  the core's step (event-id de-duplication, the rules, spend, the sticky abort:
  :func:`detectors.step.apply`), and hands the fleet hooks the event's facts (``applied``).

The shell does its I/O around it: decode before, publish, store and commit after.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from mypy_extensions import mypyc_attr

from loopwatch.config.fleet import FleetConfig
from loopwatch.detectors.event_fields import CALL, RESULT, fields_of
from loopwatch.detectors.events import EXPIRY_EVENT_PREFIX, Event, Output, RunEnd, ToolCall, ToolResult
from loopwatch.detectors.state import RunState
from loopwatch.detectors.step import Prepared, apply, new_state, prepare_for
from loopwatch.detectors.tombstone import Tombstone, id_hash, key_hash

__all__ = [
    "NO_POSITION",
    "FleetHooks",
    "RunSlot",
    "StepKind",
    "Stepped",
    "admit",
    "step_admitted",
]

NO_POSITION: Final = -1

# Compiled, a module's own Final names are C statics; the event Structs, imported from an
# interpreted module, would be a dict lookup at every use.
_RUN_END: Final = RunEnd
_TOOL_CALL: Final = ToolCall
_TOOL_RESULT: Final = ToolResult

StepKind = Literal["applied", "redelivered", "late", "ended", "expired"]


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
        """The facts of an applied call or result (of the run ``state``: F6 needs its chain),
        and of the outputs it gave."""


class Stepped:
    """What one event did: its ``kind``, its new ``outputs`` (fail-fast block first), its
    hashes (calls and results that were applied) and what it added to the run's loop spend."""

    __slots__ = ("kind", "loop_spend", "outputs", "prepared")

    def __init__(
        self,
        kind: StepKind,
        outputs: list[Output] | None = None,
        prepared: Prepared | None = None,
        loop_spend: float = 0.0,
    ) -> None:
        self.kind: StepKind = kind
        self.outputs: list[Output] = outputs if outputs is not None else []
        self.prepared = prepared
        self.loop_spend = loop_spend


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
    return into


def admit(slot: RunSlot, event: Event, position: int = NO_POSITION) -> StepKind | None:
    """``late`` or ``redelivered`` when the event must not be applied again, else ``None``
    (an event of an ended run it never had clears the entry: a new run)."""
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


def step_admitted(
    slot: RunSlot,
    scope: str,
    event: Event,
    config: FleetConfig,
    ts: int,
    position: int = NO_POSITION,
    fleet: FleetHooks | None = None,
    into: Stepped | None = None,
    values: tuple[Any, ...] | None = None,
) -> Stepped:
    """Apply an event :func:`admit` let through to its run's entry ``slot`` (changed in
    place); what it did (in ``into``, where the caller lends one it reads before its next
    event: no new object per event). ``values``: a call's or result's
    :func:`~detectors.event_fields.fields_of`, when the shell has read them."""
    if position != NO_POSITION:
        slot.position = position
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
    if fleet is not None and kind is _TOOL_CALL and not state.has_seen(event.event_id, config.seen_event_ids):
        block = fleet.fail_fast(scope, event, ts, config)  # type: ignore[arg-type]
        if block is None:
            block = fleet.chain_block(state, event, ts, prepared, config)  # type: ignore[arg-type]
    loop_before = state.loop_spend_usd
    outputs = apply(state, event, config, prepared, resolved, values)
    if block is not None:
        outputs.insert(0, block)
    if fleet is not None:
        fleet.noted(scope, event, ts, prepared, outputs, config, state)  # type: ignore[arg-type]
    return _stepped(into, "applied", outputs, prepared, state.loop_spend_usd - loop_before)
