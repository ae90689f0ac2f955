"""``same_call_streak`` (loopwatch's own; on in the agents preset): the same call in a row.

Per run: the ``argsHash`` (tool and arguments) of the last call proposed, and how many calls
in a row had it. A proposed call with the same ``argsHash`` is the streak's next; its count
at ``warningThreshold`` (3) warns, at ``criticalThreshold`` (5) blocks. Every proposed call
counts, blocked or not (a model that proposes the blocked call again is still repeating it);
a call with other arguments starts a new streak at 1. Outcomes are not read: the loops this
ends ("cd fastjson/" 44 times, the same edit re-applied as the file grows) often differ in
their results only by noise. Tools in ``exemptTools`` (a poll, a wait) neither count nor
break a streak. Trace (3/5): read a, read a, read a (3: warning), read a (4), read a (5:
blocked); read a, read a, list, read a (1).
"""

from __future__ import annotations

from typing import Any, Final, NamedTuple

from loopwatch.config.loop_detection import ResolvedLoopDetection
from loopwatch.config.rule_sections import RuleSection, exempt_words, ordinal
from loopwatch.config.sections import ExemptTools, Positive
from loopwatch.detectors.events import Output
from loopwatch.detectors.rule_state import RuleState
from loopwatch.detectors.rules.base import CRITICAL, WARNING, CallContext, Detection, Rule, stronger

__all__ = [
    "DETECTOR",
    "RULE",
    "SECTION",
    "Settings",
    "Streak",
    "critical_message",
    "warning_key",
    "warning_message",
]

DETECTOR: Final = "same_call_streak"

#: ``loopwatch.detectors.sameCallStreak``
Settings = NamedTuple(  # noqa: UP014 (a class body's types are lost to mypyc; these are kept)
    "Settings",
    [
        ("enabled", bool),
        ("warning_threshold", Positive),
        ("critical_threshold", Positive),
        ("exempt_tools", ExemptTools),
    ],
)


def explain(settings: Settings) -> tuple[str, str] | None:
    if not settings.enabled:
        return None
    return "on", (
        f"warns at the {ordinal(settings.warning_threshold)} same call (tool and arguments) in a row, "
        f"blocks the {ordinal(settings.critical_threshold)}; {exempt_words(settings.exempt_tools)}"
    )


SECTION: Final = RuleSection(
    DETECTOR,
    "the same call (tool and arguments) made again and again in a row.",
    Settings(enabled=False, warning_threshold=3, critical_threshold=5, exempt_tools=frozenset()),
    ordered=(("warning_threshold", "critical_threshold"),),
    explain=explain,
    presets={"agents-2026-12": {"enabled": True, "warningThreshold": 3, "criticalThreshold": 5}},
)


class Streak(RuleState):
    """The last call's ``argsHash`` and the length of its streak."""

    __slots__ = ("args_hash", "count")

    def __init__(self, args_hash: str = "", count: int = 0) -> None:
        self.args_hash = args_hash
        self.count = count

    def dump(self) -> Any:
        return [self.args_hash, self.count]


def _next_count(state: Any, args_hash: str) -> int:
    return state.count + 1 if isinstance(state, Streak) and state.args_hash == args_hash else 1


class SameCallStreak(Rule):
    """Counts every proposed call (when on); speaks at the thresholds."""

    def __init__(self) -> None:
        super().__init__(DETECTOR, section=SECTION, runtime_loop=runtime_loop)

    def active(self, resolved: ResolvedLoopDetection) -> bool:
        return resolved.rules.get(SECTION).enabled

    def on_call(self, ctx: CallContext, found: Detection | None) -> Detection | None:
        settings = ctx.resolved.rules.get(SECTION)
        if not settings.enabled or ctx.tool in settings.exempt_tools:
            return found
        count = _next_count(ctx.state.rule_states.get(DETECTOR), ctx.args_hash)
        warning = settings.warning_threshold
        if count < warning:
            return found
        critical = count >= settings.critical_threshold
        message = (critical_message if critical else warning_message)(ctx.tool, count)
        level = CRITICAL if critical else WARNING
        own = Detection(level, DETECTOR, count, message, warning_key(ctx.args_hash), None, None, warning)
        return stronger(found, own)

    def after_call(self, ctx: CallContext, blocked: bool, outputs: list[Output]) -> None:
        settings = ctx.resolved.rules.get(SECTION)
        if not settings.enabled or ctx.tool in settings.exempt_tools:
            return
        states = ctx.state.rule_states
        streak = states.get(DETECTOR)
        count = _next_count(streak, ctx.args_hash)
        if isinstance(streak, Streak):
            streak.args_hash = ctx.args_hash
            streak.count = count
        else:
            states[DETECTOR] = Streak(ctx.args_hash, count)

    def load_state(self, raw: Any) -> Streak:
        args_hash, count = raw
        return Streak(args_hash, count)


def critical_message(tool: str, count: int) -> str:
    return (
        f"CRITICAL: {tool} was called {count} times in a row with the same arguments. Repeating "
        "it will not change the result; change the approach or stop and report the task as failed."
    )


def warning_message(tool: str, count: int) -> str:
    return (
        f"WARNING: {tool} has been called {count} times in a row with the same arguments. If it "
        "is not making progress, try something different."
    )


def warning_key(args_hash: str) -> str:
    return f"same-call-streak:{args_hash}"


def runtime_loop(tool: str, count: int) -> str:
    return f"{tool} was called {count} times in a row with the same arguments"


RULE: Final[SameCallStreak] = SameCallStreak()
