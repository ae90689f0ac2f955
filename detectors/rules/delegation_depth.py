"""F6a ``delegation_depth`` (loopwatch's own, off by default): a run started too deep in a
delegation chain.

Agents start subagents that start their own; a chain that recurses keeps every single run
looking healthy. A run's depth comes from its first event (``depth``, or 1 for a run with a
``parent_run_id`` and no depth; 0 for a root) and never changes. With
``loopwatch.detectors.delegation.enabled``, every ``tool_call`` of a run deeper than
``maxDepth`` (3) gets a critical verdict, count = the depth: it blocks the call and counts
toward the run's escalation like every critical (the second one aborts the run). Trace
(maxDepth 3): a run at depth 3 acts freely; a run at depth 4 is blocked at its first call and
aborted at its second.

Its settings are those of the fleet-wide ``delegation`` section (:data:`config.sections.DELEGATION`,
which the chain rules of ``detectors/fleet`` read too), so it declares no section of its own.
"""

from __future__ import annotations

from typing import Final

from loopwatch.config.loop_detection import ResolvedLoopDetection
from loopwatch.config.sections import DELEGATION
from loopwatch.detectors.rules.base import CRITICAL, CallContext, Detection, Rule, stronger

__all__ = ["DETECTOR", "RULE", "DelegationDepth", "message", "warning_key"]

DETECTOR: Final = "delegation_depth"


def message(depth: int, max_depth: int) -> str:
    return (
        f"CRITICAL: this agent was started {depth} levels deep in a delegation chain (limit "
        f"{max_depth}). Do not start more agents; finish with what you have and report back."
    )


def warning_key() -> str:
    return "delegation-depth"


class DelegationDepth(Rule):
    """Every call of a run deeper than ``maxDepth`` is blocked (when on)."""

    def __init__(self) -> None:
        super().__init__(DETECTOR)

    def active(self, resolved: ResolvedLoopDetection) -> bool:
        return resolved.rules.get(DELEGATION).enabled

    def on_call(self, ctx: CallContext, found: Detection | None) -> Detection | None:
        depth = ctx.state.depth
        limit = ctx.resolved.rules.get(DELEGATION).max_depth
        if depth <= limit:
            return found
        return stronger(found, Detection(CRITICAL, DETECTOR, depth, message(depth, limit), warning_key()))


RULE: Final[DelegationDepth] = DelegationDepth()
