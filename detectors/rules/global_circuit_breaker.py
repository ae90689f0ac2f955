"""Rule 2, ``global_circuit_breaker``: identical no-progress outcomes beyond the global limit.

Not gated by ``detectors`` and checked before every tool-specific rule. Trace (defaults): the
same ``read`` answered identically 30 times in the window → the next proposal is blocked
with count 30 (a 30-record window caps the count at 30).
"""

from __future__ import annotations

DETECTOR = "global_circuit_breaker"


def message(tool: str, count: int) -> str:
    return (
        f"CRITICAL: {tool} has repeated identical no-progress outcomes {count} times. "
        "Session execution blocked by global circuit breaker to prevent runaway loops."
    )


def warning_key(tool: str, args_hash: str, latest: str | None) -> str:
    return f"global:{tool}:{args_hash}:{latest or 'none'}"
