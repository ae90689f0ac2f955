"""``run_no_progress`` (loopwatch's own, off by default): repeats across tools.

An agent that rotates between tools escapes every per-tool rule. Per run, each outcome with
a result hash is *new* when its (tool, result hash) pair is not among the run's 256 most
recently seen distinct pairs. The count is the number of outcomes since the last new one,
within the last ``windowSize`` outcomes: a warning at ``warningThreshold``, a critical at
``windowSize``. Trace (20/30): read a → "x", list → "y", read a → "x", list → "y", ... the
third outcome is the first repeat; 20 repeats later the next call gets the warning.
"""

from __future__ import annotations

from collections import deque
from typing import Annotated, Any, Final, NamedTuple

from msgspec import Meta

from loopwatch.config.loop_detection import ResolvedLoopDetection
from loopwatch.config.rule_sections import RuleSection
from loopwatch.config.sections import MAX_WINDOW, Positive
from loopwatch.detectors.events import Output
from loopwatch.detectors.rule_state import RuleState
from loopwatch.detectors.rules.base import (
    CRITICAL,
    WARNING,
    CallContext,
    Detection,
    ResultContext,
    Rule,
    stronger,
)

__all__ = [
    "DETECTOR",
    "RULE",
    "SECTION",
    "OutcomeRepeats",
    "Settings",
    "critical_message",
    "warning_key",
    "warning_message",
]

DETECTOR: Final = "run_no_progress"
SEEN_PAIRS: Final = 256

#: ``loopwatch.detectors.runNoProgress``
Settings = NamedTuple(  # noqa: UP014 (a class body's types are lost to mypyc; these are kept)
    "Settings",
    [
        ("enabled", bool),
        ("warning_threshold", Positive),
        ("window_size", Annotated[int, Meta(gt=0, le=MAX_WINDOW)]),
    ],
)


def explain(settings: Settings) -> tuple[str, str] | None:
    if not settings.enabled:
        return None
    return "on", (
        f"warns after {settings.warning_threshold} repeated results across tools, "
        f"blocks after {settings.window_size}"
    )


SECTION: Final = RuleSection(
    DETECTOR,
    "results repeating across tools without progress.",
    Settings(enabled=False, warning_threshold=20, window_size=30),
    ordered=(("warning_threshold", "window_size"),),
    explain=explain,
)


class OutcomeRepeats(RuleState):
    """Tools of the last ``windowSize`` outcomes, outcomes since the last new one, and the
    256 most recently seen (tool, result hash) pairs, oldest first."""

    __slots__ = ("seen_pairs", "since_new", "tools")

    def __init__(
        self, tools: list[str] | None = None, since_new: int = 0, seen_pairs: list[str] | None = None
    ) -> None:
        self.tools: deque[str] = deque(tools) if tools is not None else deque()
        self.since_new = since_new
        self.seen_pairs: dict[str, None] = dict.fromkeys(seen_pairs) if seen_pairs is not None else {}

    def dump(self) -> Any:
        return [list(self.tools), self.since_new, list(self.seen_pairs)]

    def observe(self, tool: str, result_hash: str, window: int) -> None:
        """Account for one outcome with a result hash."""
        key = f"{tool}\x1f{result_hash}"
        seen = self.seen_pairs
        if key in seen:
            del seen[key]  # seen again: most recent now
            self.since_new += 1
        else:
            self.since_new = 0
            if len(seen) >= SEEN_PAIRS:
                del seen[next(iter(seen))]
        seen[key] = None
        tools = self.tools
        tools.append(tool)
        while len(tools) > window:
            tools.popleft()

    def count(self) -> int:
        """Outcomes since the run's last new outcome, within the window."""
        return min(self.since_new, len(self.tools))

    def tools_in(self, last: int) -> int:
        """How many tools the newest ``last`` outcomes came from."""
        tools = self.tools
        return len({tools[index] for index in range(len(tools) - last, len(tools))})


class RunNoProgress(Rule):
    """Counts at every hashed outcome, judges at every call (when on)."""

    def __init__(self) -> None:
        super().__init__(DETECTOR, section=SECTION, runtime_loop=runtime_loop)

    def active(self, resolved: ResolvedLoopDetection) -> bool:
        return resolved.rules.get(SECTION).enabled

    def on_call(self, ctx: CallContext, found: Detection | None) -> Detection | None:
        settings = ctx.resolved.rules.get(SECTION)
        if not settings.enabled:
            return found
        repeats = ctx.state.rule_states.get(DETECTOR)
        count = repeats.count() if isinstance(repeats, OutcomeRepeats) else 0
        warning = settings.warning_threshold
        if count < warning:
            return found
        tools = repeats.tools_in(count) if isinstance(repeats, OutcomeRepeats) else 0
        critical = count >= settings.window_size
        message = (critical_message if critical else warning_message)(count, tools)
        level = CRITICAL if critical else WARNING
        return stronger(found, Detection(level, DETECTOR, count, message, warning_key(), None, None, warning))

    def on_result(self, ctx: ResultContext, outputs: list[Output]) -> None:
        settings = ctx.resolved.rules.get(SECTION)
        result_hash = ctx.result_hash
        if not settings.enabled or result_hash is None:
            return
        state = ctx.state
        repeats = state.rule_states.get(DETECTOR)
        if not isinstance(repeats, OutcomeRepeats):
            repeats = state.rule_states[DETECTOR] = OutcomeRepeats()
        repeats.observe(ctx.tool, result_hash, settings.window_size)

    def load_state(self, raw: Any) -> OutcomeRepeats:
        tools, since_new, seen_pairs = raw
        return OutcomeRepeats(tools, since_new, seen_pairs)


def critical_message(count: int, tools: int) -> str:
    return (
        f"CRITICAL: the last {count} tool results of this run were all repeats of earlier results, "
        f"across {tools} tools. No progress is being made; stop and report the task as failed."
    )


def warning_message(count: int, tools: int) -> str:
    return (
        f"WARNING: the last {count} tool results of this run repeated earlier results across {tools} "
        "tools. If this is not making progress, stop and report."
    )


def warning_key() -> str:
    return "run-no-progress"


def runtime_loop(tool: str, count: int) -> str:
    return f"the last {count} tool results brought nothing new"


RULE: Final[RunNoProgress] = RunNoProgress()
