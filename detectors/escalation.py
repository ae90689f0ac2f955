"""Bounded recovery (loopwatch E1, after openclaw/openclaw#118647).

Every critical verdict blocks the proposed call. A run may receive
``critical_blocks_before_abort`` critical blocks (default 1); the next critical is followed,
with the same trigger event, by an abort ``tool_loop_recovery_exhausted``, at most once per
run. ``recovery_abort = false`` leaves blocks only.

Trace (default): block at call 24 (recovery), block at call 27 + abort.
"""

from __future__ import annotations

from loopwatch.config.settings import DetectorSettings

REASON = "tool_loop_recovery_exhausted"
MESSAGE = (
    "OpenClaw stopped this run because tool-loop recovery encountered another critical loop. "
    "No blocked tool action was executed."
)


def recovery_exhausted(criticals: int, already_aborted: bool, settings: DetectorSettings) -> bool:
    """Whether the critical just counted (``criticals`` in all) must also abort the run."""
    return (
        settings.recovery_abort and not already_aborted and criticals > settings.critical_blocks_before_abort
    )
