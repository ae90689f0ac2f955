"""Rule 2, ``global_circuit_breaker``: identical no-progress outcomes beyond the global limit.

Not gated by ``detectors`` and checked before every tool-specific rule. Trace (defaults): the
same ``read`` answered identically 30 times in the window → the next proposal is blocked
with count 30 (a 30-record window caps the count at 30).
"""

from __future__ import annotations

from typing import Final

from loopwatch.config.loop_detection import ResolvedLoopDetection
from loopwatch.detectors.rules.base import CRITICAL, CallContext, Detection, Rule

__all__ = ["DETECTOR", "RULE", "GlobalCircuitBreaker", "message", "warning_key"]

DETECTOR: Final = "global_circuit_breaker"


class GlobalCircuitBreaker(Rule):
    """Rule 2 (the streak counts the ``exec`` terminal-failure tail under 2026-08)."""

    def __init__(self) -> None:
        super().__init__(DETECTOR, openclaw=True)

    def active(self, resolved: ResolvedLoopDetection) -> bool:
        return resolved.enabled

    def on_call(self, ctx: CallContext, found: Detection | None) -> Detection | None:
        count = ctx.no_progress
        if count < ctx.resolved.global_circuit_breaker_threshold:
            return None
        tool = ctx.tool
        return Detection(
            CRITICAL, DETECTOR, count, message(tool, count), warning_key(tool, ctx.args_hash, ctx.latest)
        )


def message(tool: str, count: int) -> str:
    return (
        f"CRITICAL: {tool} has repeated identical no-progress outcomes {count} times. "
        "Session execution blocked by global circuit breaker to prevent runaway loops."
    )


def warning_key(tool: str, args_hash: str, latest: str | None) -> str:
    return f"global:{tool}:{args_hash}:{latest or 'none'}"


RULE: Final[GlobalCircuitBreaker] = GlobalCircuitBreaker()
