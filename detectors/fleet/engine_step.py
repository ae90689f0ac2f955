"""One event through an in-memory :class:`~detectors.engine.Engine` with the fleet rules beside it.

The event is hashed once (:func:`detectors.step.prepare`); the hashes serve the run's
detectors and the fleet's facts. A fresh ``tool_call`` of a tool under an open outage gets
the fail-fast block first (when ``toolOutage.block`` is on); a redelivered or late event gets
nothing, as from the engine.
"""

from __future__ import annotations

from loopwatch.detectors.engine import Engine
from loopwatch.detectors.events import Event, Output, ToolCall, ToolResult, run_scope
from loopwatch.detectors.fleet.watch import FleetWatch
from loopwatch.detectors.hashing import digester_for
from loopwatch.detectors.step import Prepared, prepare

__all__ = ["step_event"]


def _fresh(engine: Engine, scope: str, event_id: str) -> bool:
    state = engine.states.get(scope)
    if state is not None:
        return event_id not in state.seen_set
    ended = engine.ended.get(scope)
    return ended is None or event_id not in ended


def step_event(
    engine: Engine, event: Event, ts: int, watch: FleetWatch | None
) -> tuple[list[Output], Prepared | None]:
    """The event's outputs (fail-fast block first) and its hashes (``None``: not a call or result)."""
    kind = type(event)
    if kind is not ToolCall and kind is not ToolResult:
        return engine.process(event), None
    config = engine.config
    settings = config.settings
    prepared = prepare(
        event,  # type: ignore[arg-type]
        digester_for(settings.digest),
        settings.provider_send_tools,
        config.for_agent(event.agent_id).newest,
    )
    block = None
    if watch is not None and kind is ToolCall and watch.rules.tool_outage.block:
        scope = run_scope(event)
        if _fresh(engine, scope, event.event_id):
            block = watch.fail_fast(scope, event, ts, settings.observe_only)  # type: ignore[arg-type]
    outputs = engine.process(event, prepared)
    if block is not None:
        outputs.insert(0, block)
    return outputs, prepared
