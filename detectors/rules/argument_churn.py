"""Rule 7a, ``argument_churn`` (revision 2026-08): a few argument variants, one stuck outcome.

An agent that cycles one tool through a handful of argument variants, each answered with the
same no-progress outcome (an error, a no-op write), never builds an exact-arguments streak.
This rule names the pattern. It only ever warns; it is not gated by ``detectors``.

Rules, newest record first over the run's history, for a proposed call of ``tool``:

* another tool ends the scan; pending calls and veto records are passed over;
* an outcome not flagged no-progress ends the scan (successes, exec failures, ...);
* each variant (``argsHash``) keeps the result hash of its newest occurrence; an occurrence
  with another result hash ends the scan (it is not counted).

Churn holds when at least two variants are *stable* (``MIN_STABLE_CALLS`` or more calls each),
the stable variants make up every counted record, they share one result hash, and the
proposed arguments are one of them (a novel argument may be an escape). Its count is the
number of records counted. Trace (warning threshold 10): write a, b, a, a, b, a, b, a, a, b,
each "no changes" → proposing ``a`` again gives churn count 10 over 2 variants → warning.
"""

from __future__ import annotations

from typing import Final

from loopwatch.config.loop_detection import ResolvedLoopDetection
from loopwatch.detectors.history import History
from loopwatch.detectors.rules.base import WARNING, CallContext, Detection, Rule

__all__ = [
    "DETECTOR",
    "LIVENESS_SIGNAL",
    "MIN_STABLE_CALLS",
    "RULE",
    "ArgumentChurn",
    "evaluate",
    "liveness",
    "message",
    "warning_key",
]

DETECTOR: Final = "argument_churn"
LIVENESS_SIGNAL: Final = "argument_churn"
MIN_STABLE_CALLS: Final = 3


class ArgumentChurn(Rule):
    """Rule 7a (revision 2026-08 only)."""

    def __init__(self) -> None:
        super().__init__(DETECTOR, openclaw=True)

    def active(self, resolved: ResolvedLoopDetection) -> bool:
        return resolved.enabled and resolved.revision == "2026-08"

    def on_call(self, ctx: CallContext, found: Detection | None) -> Detection | None:
        if ctx.revision != "2026-08":
            return None
        tool = ctx.tool
        churn, variants = evaluate(ctx.history, tool, ctx.args_hash)
        if churn < ctx.resolved.warning_threshold:
            return None
        message_ = message(tool, variants, churn)
        return Detection(WARNING, DETECTOR, churn, message_, warning_key(tool), None, LIVENESS_SIGNAL)


def liveness(ctx: CallContext) -> str | None:
    """The liveness signal a poll or ping-pong warning carries while churn is at threshold
    (revision 2026-08)."""
    if ctx.revision != "2026-08":
        return None
    churn = evaluate(ctx.history, ctx.tool, ctx.args_hash)[0]
    return LIVENESS_SIGNAL if churn >= ctx.resolved.warning_threshold else None


def evaluate(history: History, tool: str, args_hash: str) -> tuple[int, int]:
    """``(count, variant_count)`` of the churn for the proposed call, ``(0, 0)`` if none."""
    if history.recent(args_hash) < MIN_STABLE_CALLS:  # cheap: the proposal cannot be stable
        return 0, 0
    outcomes: dict[str, str] = {}  # variant -> result hash of its newest occurrence
    calls: dict[str, int] = {}
    total = 0
    for record in reversed(history.records):
        if record.tool != tool:
            break
        result_hash = record.result_hash
        if result_hash is None:
            continue
        if not record.no_progress:
            break
        variant = record.args_hash
        seen = outcomes.get(variant)
        if seen is None:
            outcomes[variant] = result_hash
            calls[variant] = 1
        elif seen != result_hash:
            break
        else:
            calls[variant] += 1
        total += 1
    if calls.get(args_hash, 0) < MIN_STABLE_CALLS:
        return 0, 0
    outcome = outcomes[args_hash]
    stable = 0
    stable_calls = 0
    for variant, count in calls.items():
        if count >= MIN_STABLE_CALLS:
            if outcomes[variant] != outcome:
                return 0, 0
            stable += 1
            stable_calls += count
    if stable < 2 or stable_calls != total:
        return 0, 0
    return total, stable


def message(tool: str, variant_count: int, count: int) -> str:
    return (
        f"WARNING: {tool} has cycled through {variant_count} repeated argument patterns with the "
        f"same stable outcome {count} times. Continued churn is treated as stalled run activity, "
        "but this tool call remains allowed."
    )


def warning_key(tool: str) -> str:
    return f"argument-churn:{tool}"


RULE: Final[ArgumentChurn] = ArgumentChurn()
