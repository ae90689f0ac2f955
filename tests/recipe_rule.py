"""``tool_streak``: a throwaway rule written as CONTRIBUTING.md's "Adding a rule" says, for
``tests/unit/test_rule_recipe.py``, which copies it to ``detectors/rules/tool_streak.py`` of a
copy of the package and adds its line to that copy's registry, and nothing else.

Per run: the tool of the last call proposed and how many calls in a row were of it, whatever
their arguments. A call of the same tool is the streak's next; its count at
``warningThreshold`` (4) warns, at ``criticalThreshold`` (6) blocks; a call of another tool
starts a new streak at 1. Off by default. Trace (4/6): read, read, read, read (4: warning),
read, read (6: blocked); read, list (1).
"""

from __future__ import annotations

from typing import Any, Final, NamedTuple

from loopwatch.config.loop_detection import ResolvedLoopDetection
from loopwatch.config.rule_sections import RuleSection, ordinal
from loopwatch.config.sections import Positive
from loopwatch.detectors.events import Output
from loopwatch.detectors.rule_state import RuleState
from loopwatch.detectors.rules.base import CRITICAL, WARNING, CallContext, Detection, Rule, stronger

__all__ = ["DETECTOR", "RULE", "SECTION", "Settings", "ToolStreak", "message"]

DETECTOR: Final = "tool_streak"

#: ``loopwatch.detectors.toolStreak``
Settings = NamedTuple(  # noqa: UP014 (a class body's types are lost to mypyc; these are kept)
    "Settings", [("enabled", bool), ("warning_threshold", Positive), ("critical_threshold", Positive)]
)


def explain(settings: Settings) -> tuple[str, str] | None:
    if not settings.enabled:
        return None
    return "on", (
        f"warns at the {ordinal(settings.warning_threshold)} call of one tool in a row, "
        f"blocks the {ordinal(settings.critical_threshold)}"
    )


SECTION: Final = RuleSection(
    DETECTOR,
    "the same tool called again and again in a row, whatever its arguments.",
    Settings(enabled=False, warning_threshold=4, critical_threshold=6),
    ordered=(("warning_threshold", "critical_threshold"),),
    explain=explain,
)


class ToolStreak(RuleState):
    """The last call's tool and the length of its streak."""

    __slots__ = ("count", "tool")

    def __init__(self, tool: str = "", count: int = 0) -> None:
        self.tool = tool
        self.count = count

    def dump(self) -> Any:
        return [self.tool, self.count]


def _next_count(state: Any, tool: str) -> int:
    return state.count + 1 if isinstance(state, ToolStreak) and state.tool == tool else 1


class ToolStreakRule(Rule):
    """Counts every proposed call (when on); speaks at the thresholds."""

    def __init__(self) -> None:
        super().__init__(DETECTOR, section=SECTION, runtime_loop=runtime_loop)

    def active(self, resolved: ResolvedLoopDetection) -> bool:
        return resolved.rules.get(SECTION).enabled

    def on_call(self, ctx: CallContext, found: Detection | None) -> Detection | None:
        settings = ctx.resolved.rules.get(SECTION)
        count = _next_count(ctx.state.rule_states.get(DETECTOR), ctx.tool)
        if count < settings.warning_threshold:
            return found
        critical = count >= settings.critical_threshold
        level = CRITICAL if critical else WARNING
        key = f"tool-streak:{ctx.tool}"
        warning = settings.warning_threshold  # warnings de-duplicated in buckets of it
        own = Detection(level, DETECTOR, count, message(ctx.tool, count, critical), key, None, None, warning)
        return stronger(found, own)

    def after_call(self, ctx: CallContext, blocked: bool, outputs: list[Output]) -> None:
        states = ctx.state.rule_states
        streak = states.get(DETECTOR)
        count = _next_count(streak, ctx.tool)
        if isinstance(streak, ToolStreak):
            streak.tool, streak.count = ctx.tool, count
        else:
            states[DETECTOR] = ToolStreak(ctx.tool, count)

    def load_state(self, raw: Any) -> ToolStreak:
        tool, count = raw
        return ToolStreak(tool, count)


def message(tool: str, count: int, critical: bool) -> str:
    if critical:
        return f"CRITICAL: {tool} was called {count} times in a row. Use another tool or stop."
    return f"WARNING: {tool} has been called {count} times in a row."


def runtime_loop(tool: str, count: int) -> str:
    return f"{tool} was called {count} times in a row, whatever its arguments"


RULE: Final[ToolStreakRule] = ToolStreakRule()
