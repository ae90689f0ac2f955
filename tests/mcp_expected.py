"""What ``loopwatch mcp`` must do with a run's calls, from the in-process core: the configs the
MCP tests loop under, the core's decisions for a sequence of calls (:class:`Engine` fed the
same events the proxy records), and what the client must then read (:func:`client_texts`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec

from loopwatch.config.fleet import parse_config_value
from loopwatch.detectors.engine import Engine
from loopwatch.detectors.event_builders import call_event, result_event
from loopwatch.detectors.events import run_scope
from loopwatch.detectors.facade import Decision, decision_of
from loopwatch.detectors.runtime_texts import decision_text

__all__ = ["LOOP_CONFIGS", "client_texts", "core_decisions", "loopwatch_text"]

#: the configs a looping call is checked under: OpenClaw's rules with low thresholds, and the
#: agents preset
LOOP_CONFIGS: dict[str, dict[str, Any]] = {
    "thresholds": {
        "tools": {"loopDetection": {"enabled": True, "warningThreshold": 3, "criticalThreshold": 5}}
    },
    "agents-preset": {"loopwatch": {"preset": "agents"}},
}

Outcome = Callable[[int], Mapping[str, Any]]


def core_decisions(config: Any, calls: Sequence[tuple[str, Any]], outcome: Outcome) -> list[Decision]:
    """The core's decision for each call (tool, params) of one run, in order; a call that may
    proceed gets ``outcome(its index)`` (``result=`` or ``error=``) as its result."""
    engine = Engine(parse_config_value(config))
    decisions = []
    for index, (tool, params) in enumerate(calls):
        call = call_event(f"call-{index}", "run", tool, params, agent_id="agent", tool_call_id=str(index))
        decision = decision_of(engine.process(call), engine.aborted(run_scope(call)))
        decisions.append(decision)
        if decision.proceed:
            engine.process(
                result_event(
                    f"result-{index}",
                    "run",
                    tool,
                    params,
                    agent_id="agent",
                    tool_call_id=str(index),
                    **outcome(index),
                )
            )
    return decisions


def loopwatch_text(decision: Decision) -> str:
    """What loopwatch says of ``decision`` to a runtime other than OpenClaw."""
    answer = {
        "decision": decision.action,
        "reason": decision.reason,
        "verdicts": [msgspec.to_builtins(output) for output in decision.outputs],
    }
    return decision_text(answer)


def client_texts(
    decision: Decision, tool_texts: list[str], tool_error: bool = False
) -> tuple[bool, list[str]]:
    """What the client reads for a call the core decided so, whose tool would answer
    ``tool_texts`` (``tool_error``: with ``isError``): (``isError``, the texts of the content)."""
    if not decision.proceed:
        return True, [loopwatch_text(decision)]
    if decision.action == "warn":
        return tool_error, [*tool_texts, loopwatch_text(decision)]
    return tool_error, tool_texts
