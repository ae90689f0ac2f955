"""Many runs at once: run-scope → :class:`RunState`, in memory (the embedded core), each
event through the run engine (:mod:`detectors.run_engine`).

The Kafka worker keeps the same states in faust tables; this class is the in-memory store
used by ``loopwatch run``, replay, the demo and :class:`detectors.facade.LoopDetector`.
``run_end`` drops a run's state, so memory is bounded by the number of open runs, and
remembers the event ids the run had seen (for the latest ``ended_limit`` ended runs): an
event of an ended run that comes again (a redelivery, a republished event) is ignored and
counted in :attr:`Engine.late`, as the Kafka worker's tombstones do; an event the run never
had starts a new run under the same id. A ``run_end`` whose id starts with
:data:`EXPIRY_EVENT_PREFIX` (an idle run expired) forgets the run without that memory.
"""

from __future__ import annotations

from typing import Any, Final

from loopwatch.config.fleet import FleetConfig
from loopwatch.detectors.event_fields import CALL, RESULT, fields_of
from loopwatch.detectors.events import Event, Output, ToolCall, ToolResult, run_scope
from loopwatch.detectors.run_engine import NO_POSITION, FleetHooks, RunSlot, Stepped, admit, step_admitted
from loopwatch.detectors.state import RunState
from loopwatch.detectors.tombstone import Tombstone

__all__ = ["ENDED_RUNS_KEPT", "Engine"]

ENDED_RUNS_KEPT: Final = 4096

# compiled, a module's own Final names are C statics (the Structs' names would be looked up)
_TOOL_CALL: Final = ToolCall
_TOOL_RESULT: Final = ToolResult


class Engine:
    """Applies events of any number of runs; each run scope has its own state.

    ``fleet``: the fleet rules' hooks (F1's fail-fast block; the embedded runtime and replay
    watch the fleet themselves, after each step)."""

    __slots__ = ("_slot", "_stepped", "config", "ended", "ended_limit", "fleet", "late", "states")

    def __init__(
        self, config: FleetConfig, ended_limit: int = ENDED_RUNS_KEPT, fleet: FleetHooks | None = None
    ) -> None:
        self.config = config
        self.states: dict[str, RunState] = {}
        # scope -> the event ids an ended run had seen; insertion-ordered: oldest forgotten first
        self.ended: dict[str, Tombstone] = {}
        self.ended_limit = ended_limit
        self.fleet = fleet
        self.late = 0
        self._slot = RunSlot()  # the entry of the event being stepped (its fields set per event)
        self._stepped = Stepped("applied")  # what process() learns of each event (read at once)

    def aborted(self, scope: str) -> tuple[str, str] | None:
        """The (reason, message) of the run's first enforced abort, while the run lives."""
        state = self.states.get(scope)
        return state.aborted if state is not None else None

    def process(self, event: Event) -> list[Output]:
        """Apply one event; the verdicts and aborts it produced."""
        return self._step(event, None, self._stepped).outputs

    def step(self, event: Event, ts: int | None = None) -> Stepped:
        """Apply one event (``ts``: its time for the fleet rules, the event's own by default)."""
        return self._step(event, ts, None)

    def _step(self, event: Event, ts: int | None, into: Stepped | None) -> Stepped:
        """:meth:`step`, its answer in ``into`` where given (:meth:`process` lends its own)."""
        event_kind = type(event)
        values: tuple[Any, ...] | None = None
        if event_kind is _TOOL_CALL or event_kind is _TOOL_RESULT:  # (fields read once: event_fields)
            values = fields_of(event)  # type: ignore[arg-type]
            at = CALL if event_kind is _TOOL_CALL else RESULT
            run_id: str | None = values[at.run_id]
            event_ts: int | None = values[at.ts]
        else:
            run_id = event.run_id
            event_ts = event.ts
        scope = run_id if run_id and run_id == run_id.strip() else run_scope(event)
        states = self.states
        state = states.get(scope)
        ended = self.ended.get(scope) if state is None else None
        slot = self._slot
        slot.state = state
        slot.ended = ended
        slot.ended_ms = 0
        if ts is None:
            ts = event_ts if event_ts is not None else 0
        if ended is not None and admit(slot, event) is not None:  # an event the ended run had
            self.late += 1
            return Stepped("late")
        stepped = step_admitted(slot, scope, event, self.config, ts, NO_POSITION, self.fleet, into, values)
        kind = stepped.kind
        if ended is not None:
            del self.ended[scope]
        if kind == "applied":
            if state is None:
                assert slot.state is not None
                states[scope] = slot.state
            return stepped
        states.pop(scope, None)
        if kind == "ended" and self.ended_limit > 0:
            assert slot.ended is not None
            self.ended[scope] = slot.ended
            if len(self.ended) > self.ended_limit:
                del self.ended[next(iter(self.ended))]
        return stepped
