"""``loop_budget`` (loopwatch's own; the budget is unset by default): what a loop may cost.

Every ``tool_call`` may carry ``usage`` (the model turn that proposed it). A run's *loop
spend* is the spend of its calls from its first verdict (any detector, the call that got it
included) on. With ``loopBudget.usd`` set, the call at which the loop spend reaches the
budget gets one critical verdict (count: the cents spent in the loop); at twice the budget
the run is aborted with reason ``loop_budget_exhausted``. Trace (budget $1.00, $0.30 a
turn): first warning at call 11 → loop spend 0.30, 0.60, 0.90, 1.20 at call 14: blocked;
2.10 at call 17: aborted.
"""

from __future__ import annotations

from typing import Final

__all__ = ["ABORT_REASON", "DETECTOR", "abort_message", "critical_message", "reached", "warning_key"]

DETECTOR: Final = "loop_budget"
ABORT_REASON: Final = "loop_budget_exhausted"


def reached(spend: float, limit: float) -> bool:
    """``spend >= limit`` up to a millionth of a dollar (ten $0.10 turns reach $1.00)."""
    return spend >= limit - 1e-6


def critical_message(loop_spend: float, budget: float) -> str:
    return (
        f"CRITICAL: this run has spent ${loop_spend:.2f} since it was first warned about a loop "
        f"(budget ${budget:.2f}). Stop and report the task as failed."
    )


def abort_message(loop_spend: float, budget: float) -> str:
    return (
        f"loopwatch stopped this run: it has spent ${loop_spend:.2f} since it was first warned about "
        f"a loop, twice its budget of ${budget:.2f}."
    )


def warning_key() -> str:
    return "loop-budget"
