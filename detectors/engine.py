"""Many runs at once: run-scope → :class:`RunState`, in memory (the embedded core).

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

from typing import Final

from loopwatch.config.fleet import FleetConfig
from loopwatch.detectors.events import EXPIRY_EVENT_PREFIX, Event, Output, RunEnd, run_scope
from loopwatch.detectors.state import RunState
from loopwatch.detectors.step import Prepared, apply, new_state
from loopwatch.detectors.tombstone import Tombstone

__all__ = ["ENDED_RUNS_KEPT", "Engine"]

ENDED_RUNS_KEPT: Final = 4096


class Engine:
    """Applies events of any number of runs; each run scope has its own state."""

    __slots__ = ("config", "ended", "ended_limit", "late", "states")

    def __init__(self, config: FleetConfig, ended_limit: int = ENDED_RUNS_KEPT) -> None:
        self.config = config
        self.states: dict[str, RunState] = {}
        # scope -> the event ids an ended run had seen; insertion-ordered: oldest forgotten first
        self.ended: dict[str, Tombstone] = {}
        self.ended_limit = ended_limit
        self.late = 0

    def aborted(self, scope: str) -> tuple[str, str] | None:
        """The (reason, message) of the run's first enforced abort, while the run lives."""
        state = self.states.get(scope)
        return state.aborted if state is not None else None

    def process(self, event: Event, prepared: Prepared | None = None) -> list[Output]:
        """Apply one event; the verdicts and aborts it produced."""
        run_id = event.run_id
        scope = run_id if run_id and run_id == run_id.strip() else run_scope(event)
        ended = self.ended.get(scope)
        if ended is not None:
            if event.event_id in ended:
                self.late += 1
                return []
            del self.ended[scope]  # an event the ended run never had: a new run
        if type(event) is RunEnd:
            state = self.states.pop(scope, None)
            if self.ended_limit > 0 and not event.event_id.startswith(EXPIRY_EVENT_PREFIX):
                seen = list(state.seen) if state is not None else []
                self.ended[scope] = Tombstone([*seen, event.event_id])
                if len(self.ended) > self.ended_limit:
                    del self.ended[next(iter(self.ended))]
            return []
        state = self.states.get(scope)
        if state is None:
            state = self.states[scope] = new_state(event, self.config)
        return apply(state, event, self.config, prepared)
