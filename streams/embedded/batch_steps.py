"""The embedded runtime's side of a batch: one model turn's calls stepped together on their
run's worker (:func:`detectors.batch_admission.step_batch`), then seen by the view and the
fleet rules call by call, as the runtime's single events are.

A batch takes one input position: its calls are released together, in their order, after
the events queued before it and before those queued after it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from loopwatch.detectors.batch_admission import BatchOutcome, step_batch
from loopwatch.detectors.engine import Engine
from loopwatch.detectors.events import run_scope
from loopwatch.detectors.fleet.alerts import FleetAlert
from loopwatch.detectors.fleet.chains import chain_key
from loopwatch.detectors.fleet.watch import FleetWatch

if TYPE_CHECKING:
    from loopwatch.streams.embedded.runtime import EmbeddedRuntime, _Done

__all__ = ["batch_fleet_alerts", "step_batch_done"]


def step_batch_done(runtime: EmbeddedRuntime, engine: Engine, done: _Done) -> None:
    """Step ``done``'s batch on ``engine`` (its run's worker) and tell the view about it."""
    calls = done.batch
    assert calls is not None
    view = runtime.view
    started = time.perf_counter()
    scope = run_scope(calls[0])
    fresh = view is not None and scope not in engine.states  # the run's first events
    outcome = done.outcome = step_batch(engine, calls, done.ts)
    done.outputs = outcome.all_outputs()
    state = engine.states.get(scope)
    applied = outcome.kind == "applied" and state is not None
    if applied and state is not None and runtime.fleet.rules.delegation.enabled:
        done.root = chain_key(state)
    if done.decides:
        done.aborted = engine.aborted(scope)
    if view is None:
        return
    if applied and state is not None:
        spend = outcome.loop_spend  # the turn's usage rides on the first of its calls that has any
        for call in calls:
            if call.usage is not None:
                view.metrics.spend(call.agent_id, call.usage, spend, state.first_detector)
                spend = 0.0
    elapsed = (time.perf_counter() - started) / len(calls)
    for index, (call, outputs) in enumerate(zip(calls, outcome.outputs, strict=True)):
        view.metrics.event(str(call.__struct_config__.tag), elapsed)
        if applied:
            view.metrics.chain(call, fresh and index == 0)
        for output in outputs:
            view.metrics.output(output)
        runtime._observe(call, outputs)


def batch_fleet_alerts(
    fleet: FleetWatch, outcome: BatchOutcome, ts: int, root: str | None
) -> list[FleetAlert]:
    """The fleet rules see a released batch's calls, each with its hashes and outputs, in order."""
    alerts: list[FleetAlert] = []
    for index, call in enumerate(outcome.calls):
        prepared = outcome.prepared[index] if outcome.kind == "applied" else None
        alerts.extend(fleet.observe(call, run_scope(call), ts, prepared, outcome.outputs[index], root))
    return alerts
