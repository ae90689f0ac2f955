"""Rules 5–6, ``ping_pong``: two call patterns alternating (A, B, A, B, ...).

Rules:

* ``last`` is the newest record, ``other`` the newest record whose ``argsHash`` differs; the
  tail is the newest run of records alternating ``last, other, last, ...``; a tail shorter
  than 2 is no pattern.
* The proposed call must be ``other`` (it continues the alternation); the count is the tail
  plus the proposed call.
* A critical also needs evidence of no progress: every tail record has an outcome and each
  side's outcomes are all identical. Without it the pattern is only a warning.

Trace (defaults): read(a), list(w), read(a), ... 9 records, proposed list(w) → count 10,
warning; with identical outcomes on both sides, at 20 → blocked. Both sides may be the same
tool with different arguments.
"""

from __future__ import annotations

from typing import Final

from loopwatch.config.loop_detection import ResolvedLoopDetection
from loopwatch.detectors.events import Level
from loopwatch.detectors.history import History, Record
from loopwatch.detectors.rules import argument_churn
from loopwatch.detectors.rules.base import CRITICAL, WARNING, CallContext, Detection, Rule

__all__ = ["DETECTOR", "RULE", "PingPong", "evaluate", "message", "warning_key"]

DETECTOR: Final = "ping_pong"


class PingPong(Rule):
    """Rules 5-6 (gated by ``detectors.pingPong``)."""

    def __init__(self) -> None:
        super().__init__(DETECTOR, openclaw=True)

    def active(self, resolved: ResolvedLoopDetection) -> bool:
        return resolved.enabled and resolved.ping_pong

    def on_call(self, ctx: CallContext, found: Detection | None) -> Detection | None:
        records = ctx.history.records
        args_hash = ctx.args_hash
        if not ctx.resolved.ping_pong or len(records) < 2 or records[-2].args_hash != args_hash:
            return None
        pattern = evaluate(ctx.history, args_hash, ctx.resolved)
        if pattern is None:
            return None
        level, count, paired = pattern
        return Detection(
            level,
            DETECTOR,
            count,
            message(level, count),
            warning_key(ctx.tool, args_hash, paired.args_hash),
            paired.tool,
            argument_churn.liveness(ctx) if level == WARNING else None,
        )


def evaluate(
    history: History, args_hash: str, config: ResolvedLoopDetection
) -> tuple[Level, int, Record] | None:
    """``(level, count, newest record)`` when the proposal continues an alternation."""
    tail = history.alternating_tail()
    if tail < 2:
        return None
    records = history.records
    if records[-2].args_hash != args_hash:
        return None
    count = tail + 1
    last = records[-1]
    if count >= config.critical_threshold and history.tail_has_stable_outcomes(tail):
        return CRITICAL, count, last
    if count >= config.warning_threshold:
        return WARNING, count, last
    return None


def message(level: str, count: int) -> str:
    if level == CRITICAL:
        return (
            f"CRITICAL: You are alternating between repeated tool-call patterns ({count} "
            "consecutive calls) with no progress. This appears to be a stuck ping-pong loop. "
            "Session execution blocked to prevent resource waste."
        )
    return (
        f"WARNING: You are alternating between repeated tool-call patterns ({count} "
        "consecutive calls). This looks like a ping-pong loop; stop retrying and report the "
        "task as failed."
    )


def _utf16(text: str) -> bytes:
    return text.encode("utf-16-be", "surrogatepass")


def warning_key(tool: str, args_hash: str, paired: str | None) -> str:
    if paired is None:
        return f"pingpong:{tool}:{args_hash}"
    first, second = sorted((args_hash, paired), key=_utf16)
    return f"pingpong:{first}|{second}"


RULE: Final[PingPong] = PingPong()
