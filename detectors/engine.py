"""Many runs at once in memory: the run engine (:class:`detectors.run_engine.RunEngine`) over
a dict of run scope → :class:`RunState` (:class:`MemoryRuns`).

The Kafka worker keeps the same entries in faust tables; this is the store of ``loopwatch
run``, replay, the demo, the embedded runtime and :class:`detectors.facade.LoopDetector`.
``run_end`` drops a run's state, so memory is bounded by the number of open runs, and
remembers the event ids the run had seen (for the latest ``ended_limit`` ended runs): an
event of an ended run that comes again (a redelivery, a republished event) is ignored and
counted in :attr:`Engine.late`, as the Kafka worker's tombstones do; an event the run never
had starts a new run under the same id. With a ``clock``, :meth:`Engine.expire` forgets the
runs idle past a horizon, oldest first, each by an expiry ``run_end`` stepped like any other
event (:func:`detectors.run_engine.expiry_event`), as the worker's expiry timer does.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Final

from loopwatch.config.fleet import FleetConfig
from loopwatch.detectors.events import Event, Output
from loopwatch.detectors.run_engine import (
    NO_POSITION,
    FleetHooks,
    RunEngine,
    RunSlot,
    RunStore,
    Stepped,
    expiry_event,
)
from loopwatch.detectors.state import RunState
from loopwatch.detectors.tombstone import Tombstone

__all__ = ["ENDED_RUNS_KEPT", "Engine", "MemoryRuns"]

ENDED_RUNS_KEPT: Final = 4096


class MemoryRuns(RunStore):
    """The runs' entries in dicts (:class:`~detectors.run_engine.RunStore`): ``states`` of
    the live runs, ``ended`` (scope → the event ids an ended run had seen, the latest
    ``ended_limit``, oldest forgotten first), ``late`` events counted, and with a ``clock``
    when each live run was last applied (``idle``: least recently first)."""

    __slots__ = ("_had_ended", "_slot", "clock", "ended", "ended_limit", "idle", "late", "states")

    def __init__(self, ended_limit: int = ENDED_RUNS_KEPT, clock: Callable[[], float] | None = None) -> None:
        self.states: dict[str, RunState] = {}
        self.ended: dict[str, Tombstone] = {}  # insertion-ordered: oldest forgotten first
        self.ended_limit = ended_limit
        self.late = 0
        self.clock = clock
        # an OrderedDict: its oldest entry is found in constant time however many runs moved
        self.idle: OrderedDict[str, float] = OrderedDict()
        self._slot = RunSlot()  # the entry of the event being stepped (its fields set per event)
        self._had_ended = False

    def entry(self, scope: str) -> RunSlot:
        slot = self._slot
        state = self.states.get(scope)
        slot.state = state
        slot.ended = self.ended.get(scope) if state is None else None
        slot.ended_ms = 0
        slot.position = NO_POSITION
        self._had_ended = slot.ended is not None
        return slot

    def touch(self, scope: str) -> None:
        """The live run ``scope`` is active now, before its next event is applied (the
        embedded runtime: an event of it waits in its worker's queue)."""
        idle = self.idle
        if self.clock is not None and scope in idle:
            idle[scope] = self.clock()
            idle.move_to_end(scope)

    def settle(self, scope: str, slot: RunSlot, stepped: Stepped) -> None:
        kind = stepped.kind
        if stepped.late:
            self.late += stepped.late
        if kind == "late" or kind == "stale" or kind == "redelivered":
            return
        if self._had_ended:
            del self.ended[scope]  # a new run under the same id
        clock = self.clock
        if kind == "applied":
            state = slot.state
            assert state is not None
            self.states[scope] = state
            if clock is not None:
                idle = self.idle
                idle[scope] = clock()
                idle.move_to_end(scope)
            return
        self.states.pop(scope, None)
        if clock is not None:
            self.idle.pop(scope, None)
        if kind == "ended" and self.ended_limit > 0:
            assert slot.ended is not None
            self.ended[scope] = slot.ended
            if len(self.ended) > self.ended_limit:
                del self.ended[next(iter(self.ended))]


class Engine(RunEngine):
    """The run engine over :class:`MemoryRuns`: applies events of any number of runs; each
    run scope has its own state.

    ``fleet``: the fleet rules' hooks (F1's fail-fast block; the embedded runtime and replay
    watch the fleet themselves, after each step); ``clock``: when runs were last applied, for
    :meth:`expire` (``None``: nothing expires)."""

    def __init__(
        self,
        config: FleetConfig,
        ended_limit: int = ENDED_RUNS_KEPT,
        fleet: FleetHooks | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.runs = MemoryRuns(ended_limit, clock)
        super().__init__(config, self.runs, fleet)
        self._stepped = Stepped("applied")  # what process() learns of each event (read at once)

    @property
    def states(self) -> dict[str, RunState]:
        return self.runs.states

    @property
    def ended(self) -> dict[str, Tombstone]:
        return self.runs.ended

    @property
    def late(self) -> int:
        return self.runs.late

    def process(self, event: Event) -> list[Output]:
        """Apply one event; the verdicts and aborts it produced."""
        return self.step(event, into=self._stepped).outputs

    def expire(self, horizon: float) -> int:
        """Forget the runs last applied at or before ``horizon`` (on the ``clock``), oldest
        first, each by its expiry ``run_end``; how many."""
        idle = self.runs.idle
        expired = 0
        while idle:
            scope, seen_at = next(iter(idle.items()))
            if seen_at > horizon:
                break
            self.step(expiry_event(scope, int(seen_at)), 0, scope=scope)
            idle.pop(scope, None)
            expired += 1
        return expired
