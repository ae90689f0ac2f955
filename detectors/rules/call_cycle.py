"""``call_cycle`` (loopwatch's own; on in the agents preset): the same few calls going round.

Per run: the ``argsHash`` and tool of the most recent calls proposed (every one, blocked or
not; tools in ``exemptTools`` are skipped), at most ``maxPeriod`` × (``criticalThreshold`` + 1).
For a proposed call, for each period p from 2 to ``maxPeriod`` (5): m = how many of the
latest calls, the proposed one included, equal the call p before them; the cycle has
*rounds* = (m + p) // p. A period whose p calls are all the same is no cycle (that is a
streak: ``same_call_streak``). The period with the most rounds counts (the shorter on a tie);
its rounds at ``warningThreshold`` (2) warn, at ``criticalThreshold`` (3) block. OpenClaw's
ping-pong sees only two alternating calls, and only from 10 of them; a 3-call cycle of
open → search_file → search_dir is never seen by it. Trace (2/3, period 3): a b c a b c
(2 rounds: warning at the second c) a b c (3 rounds: the third c is blocked).
"""

from __future__ import annotations

from collections import deque
from typing import Annotated, Any, Final, NamedTuple

from msgspec import Meta

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
    "RecentCalls",
    "Settings",
    "critical_message",
    "rounds_of",
    "warning_key",
    "warning_message",
]

DETECTOR: Final = "call_cycle"

#: ``loopwatch.detectors.callCycle``
Settings = NamedTuple(  # noqa: UP014 (a class body's types are lost to mypyc; these are kept)
    "Settings",
    [
        ("enabled", bool),
        ("max_period", Annotated[int, Meta(ge=2, le=8)]),
        ("warning_threshold", Positive),
        ("critical_threshold", Annotated[int, Meta(gt=0, le=16)]),
        ("exempt_tools", ExemptTools),
    ],
)


def explain(settings: Settings) -> tuple[str, str] | None:
    if not settings.enabled:
        return None
    return "on", (
        f"the same 2 to {settings.max_period} calls going round in the same order: warns at the "
        f"{ordinal(settings.warning_threshold)} round, blocks at the "
        f"{ordinal(settings.critical_threshold)}; {exempt_words(settings.exempt_tools)}"
    )


SECTION: Final = RuleSection(
    DETECTOR,
    "the same 2 to ``maxPeriod`` calls made in the same order, round after round; the "
    "thresholds count rounds.",
    Settings(
        enabled=False, max_period=5, warning_threshold=2, critical_threshold=3, exempt_tools=frozenset()
    ),
    ordered=(("warning_threshold", "critical_threshold"),),
    explain=explain,
    presets={
        "agents-2026-12": {"enabled": True, "maxPeriod": 5, "warningThreshold": 2, "criticalThreshold": 3}
    },
)


class RecentCalls(RuleState):
    """The latest calls' ``argsHash`` and tool, oldest first."""

    __slots__ = ("hashes", "tools")

    def __init__(self, hashes: list[str] | None = None, tools: list[str] | None = None) -> None:
        self.hashes: deque[str] = deque(hashes) if hashes is not None else deque()
        self.tools: deque[str] = deque(tools) if tools is not None else deque()

    def dump(self) -> Any:
        return [list(self.hashes), list(self.tools)]


def _kept(settings: Settings) -> int:
    return settings.max_period * (settings.critical_threshold + 1)


def rounds_of(hashes: list[str], max_period: int) -> tuple[int, int]:
    """``(rounds, period)`` of the longest cycle the sequence ends with (``(0, 0)``: none)."""
    best_rounds, best_period = 0, 0
    size = len(hashes)
    for period in range(2, max_period + 1):
        if size < 2 * period:
            break
        if len(set(hashes[size - period :])) < 2:
            continue
        matched = 0
        index = size - 1
        while index - period >= 0 and hashes[index] == hashes[index - period]:
            matched += 1
            index -= 1
        rounds = (matched + period) // period
        if rounds >= 2 and rounds > best_rounds:
            best_rounds, best_period = rounds, period
    return best_rounds, best_period


def _may_cycle(recent: deque[str], proposed: str, max_period: int) -> bool:
    """Whether :func:`rounds_of` can find a cycle once ``proposed`` follows ``recent``: only
    where the proposed call is the call some period p (one :func:`rounds_of` tries) before it
    (most calls are not: their latest calls are not copied)."""
    size = len(recent) + 1
    for period in range(2, max_period + 1):
        if size < 2 * period:
            break
        if recent[size - 1 - period] == proposed:
            return True
    return False


class CallCycle(Rule):
    """Keeps the latest calls (when on); speaks when they end in a cycle of enough rounds."""

    def __init__(self) -> None:
        super().__init__(DETECTOR, section=SECTION, runtime_loop=runtime_loop)

    def active(self, resolved: ResolvedLoopDetection) -> bool:
        return resolved.rules.get(SECTION).enabled

    def on_call(self, ctx: CallContext, found: Detection | None) -> Detection | None:
        settings = ctx.resolved.rules.get(SECTION)
        if not settings.enabled or ctx.tool in settings.exempt_tools:
            return found
        recent = ctx.state.rule_states.get(DETECTOR)
        if not isinstance(recent, RecentCalls):
            return found
        if not _may_cycle(recent.hashes, ctx.args_hash, settings.max_period):
            return found
        hashes = list(recent.hashes)
        hashes.append(ctx.args_hash)
        rounds, period = rounds_of(hashes, settings.max_period)
        warning = settings.warning_threshold
        if rounds < warning:
            return found
        tools = list(recent.tools)[len(hashes) - 1 - period + 1 :]
        tools.append(ctx.tool)
        critical = rounds >= settings.critical_threshold
        message = (critical_message if critical else warning_message)(tools, rounds)
        level = CRITICAL if critical else WARNING
        key = warning_key(min(hashes[len(hashes) - period :]))
        return stronger(found, Detection(level, DETECTOR, rounds, message, key, None, None, warning))

    def after_call(self, ctx: CallContext, blocked: bool, outputs: list[Output]) -> None:
        settings = ctx.resolved.rules.get(SECTION)
        if not settings.enabled or ctx.tool in settings.exempt_tools:
            return
        states = ctx.state.rule_states
        recent = states.get(DETECTOR)
        if not isinstance(recent, RecentCalls):
            recent = states[DETECTOR] = RecentCalls()
        recent.hashes.append(ctx.args_hash)
        recent.tools.append(ctx.tool)
        kept = _kept(settings)
        while len(recent.hashes) > kept:
            recent.hashes.popleft()
            recent.tools.popleft()

    def load_state(self, raw: Any) -> RecentCalls:
        hashes, tools = raw
        return RecentCalls(hashes, tools)


def _cycle(tools: list[str]) -> str:
    return " → ".join(tools)


def critical_message(tools: list[str], rounds: int) -> str:
    return (
        f"CRITICAL: the same {len(tools)} calls ({_cycle(tools)}) have now been made {rounds} times "
        "over, in the same order. Going round again will not change the results; change the "
        "approach or stop and report the task as failed."
    )


def warning_message(tools: list[str], rounds: int) -> str:
    return (
        f"WARNING: the same {len(tools)} calls ({_cycle(tools)}) have been made {rounds} times over, "
        "in the same order. If this is not making progress, try something different."
    )


def warning_key(cycle_hash: str) -> str:
    return f"call-cycle:{cycle_hash}"


def runtime_loop(tool: str, count: int) -> str:
    return f"the same few calls went round {count} times in the same order"


RULE: Final[CallCycle] = CallCycle()
