"""Many runs at once: run-scope → :class:`RunState`, in memory (the embedded core).

The Kafka worker keeps the same states in faust tables; this class is the in-memory store
used by ``loopwatch run``, replay, the demo and :class:`detectors.facade.LoopDetector`.
``run_end`` drops a run's state, so memory is bounded by the number of open runs.
"""

from __future__ import annotations

from config.fleet import FleetConfig
from detectors.events import Event, Output, RunEnd, run_scope
from detectors.state import RunState
from detectors.step import Prepared, apply, new_state

__all__ = ["Engine"]


class Engine:
    """Applies events of any number of runs; each run scope has its own state."""

    __slots__ = ("config", "states")

    def __init__(self, config: FleetConfig) -> None:
        self.config = config
        self.states: dict[str, RunState] = {}

    def process(self, event: Event, prepared: Prepared | None = None) -> list[Output]:
        """Apply one event; the verdicts and aborts it produced."""
        run_id = event.run_id
        scope = run_id if run_id and run_id == run_id.strip() else run_scope(event)
        if type(event) is RunEnd:
            self.states.pop(scope, None)
            return []
        state = self.states.get(scope)
        if state is None:
            state = self.states[scope] = new_state(event, self.config)
        return apply(state, event, self.config, prepared)
