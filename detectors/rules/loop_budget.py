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

from typing import Annotated, Any, Final, NamedTuple

from msgspec import Meta

from loopwatch.config.rule_sections import RuleSection
from loopwatch.detectors.events import Output
from loopwatch.detectors.rule_state import RuleState
from loopwatch.detectors.rules.base import CRITICAL, CallContext, Detection, Rule
from loopwatch.detectors.verdicts import new_abort

__all__ = [
    "ABORT_REASON",
    "DETECTOR",
    "RULE",
    "SECTION",
    "BudgetSpent",
    "Settings",
    "abort_message",
    "critical_message",
    "reached",
    "warning_key",
]

DETECTOR: Final = "loop_budget"
ABORT_REASON: Final = "loop_budget_exhausted"
_INT64_MAX: Final = 2**63 - 1

#: ``loopwatch.detectors.loopBudget``
Settings = NamedTuple(  # noqa: UP014 (a class body's types are lost to mypyc; these are kept)
    "Settings",
    [
        (
            "usd",
            Annotated[
                float,
                Meta(
                    gt=0,
                    description="The spend (USD) at which a run is stopped, counted from its first verdict "
                    "on; null: no budget.",
                    extra={"unit": "USD"},
                ),
            ]
            | None,
        )
    ],
)


def explain(settings: Settings) -> tuple[str, str] | None:
    budget = settings.usd
    if budget is None:
        return None
    return f"${budget:.2f}", (
        f"a run's spend from its first verdict on is blocked at ${budget:.2f} "
        f"and aborted at ${2 * budget:.2f}"
    )


SECTION: Final = RuleSection(
    DETECTOR,
    "a run's spend from its first verdict on (unset: off).",
    Settings(usd=None),
    explain=explain,
    listed_before="sameCallStreak",  # beside the other rules no preset turns on, as first documented
)


def reached(spend: float, limit: float) -> bool:
    """``spend >= limit`` up to a millionth of a dollar (ten $0.10 turns reach $1.00)."""
    return spend >= limit - 1e-6


class BudgetSpent(RuleState):
    """Whether the run got the budget's critical verdict, and its abort."""

    __slots__ = ("aborted", "fired")

    def __init__(self, fired: bool = False, aborted: bool = False) -> None:
        self.fired = fired
        self.aborted = aborted

    def dump(self) -> Any:
        return [self.fired, self.aborted]


def _budget_of(rule_states: dict[str, RuleState]) -> BudgetSpent:
    spent = rule_states.get(DETECTOR)
    if not isinstance(spent, BudgetSpent):
        spent = rule_states[DETECTOR] = BudgetSpent()
    return spent


class LoopBudget(Rule):
    """Counts every call's usage into the run's spend (whatever the budget: the spend is the
    run's, on the dashboard and in ``/metrics``), from the run's first verdict on also into
    its loop spend; with a budget, the critical at the budget and the abort at twice it.
    Registered last: the verdicts of every rule before it start the loop spend."""

    def __init__(self) -> None:
        super().__init__(
            DETECTOR,
            section=SECTION,
            runtime_loop=runtime_loop,
            runtime_stops={ABORT_REASON: "looping has cost twice the loop budget"},
        )

    def on_call(self, ctx: CallContext, found: Detection | None) -> Detection | None:
        state = ctx.state
        if found is not None and state.first_detector is None:
            state.first_detector = found.detector
        in_loop = state.first_detector is not None
        usage = ctx.event.usage
        if usage is not None:
            cost = usage.cost_usd
            state.spend_usd += cost
            # bounded: a run's sums stay storable (int64), whatever its calls claim
            state.input_tokens = min(state.input_tokens + usage.input_tokens, _INT64_MAX)
            state.output_tokens = min(state.output_tokens + usage.output_tokens, _INT64_MAX)
            if in_loop:
                state.loop_spend_usd += cost
        budget = ctx.resolved.rules.get(SECTION).usd
        if budget is None or not in_loop or not reached(state.loop_spend_usd, budget):
            return found
        if found is not None and found.critical:
            return found
        spent = _budget_of(state.rule_states)
        if spent.fired:
            return found
        spent.fired = True
        cents = round(state.loop_spend_usd * 100)
        message = critical_message(state.loop_spend_usd, budget)
        return Detection(CRITICAL, DETECTOR, cents, message, warning_key())

    def after_call(self, ctx: CallContext, blocked: bool, outputs: list[Output]) -> None:
        state = ctx.state
        budget = ctx.resolved.rules.get(SECTION).usd
        if budget is None or state.first_detector is None or not reached(state.loop_spend_usd, 2 * budget):
            return
        spent = _budget_of(state.rule_states)
        if spent.aborted:
            return
        spent.aborted = True
        spend = state.loop_spend_usd
        observe_only = ctx.settings.observe_only
        cents = round(spend * 100)
        text = abort_message(spend, budget)
        outputs.append(
            new_abort(state.scope, state.run_id, ctx.event, ABORT_REASON, cents, text, observe_only)
        )

    def load_state(self, raw: Any) -> BudgetSpent:
        fired, aborted = raw
        return BudgetSpent(fired, aborted)


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


def runtime_loop(tool: str, count: int) -> str:
    return f"looping has cost {count / 100:.2f} USD so far"


RULE: Final[LoopBudget] = LoopBudget()
