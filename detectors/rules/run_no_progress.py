"""``run_no_progress`` (loopwatch's own, off by default): repeats across tools.

An agent that rotates between tools escapes every per-tool rule. Per run, each outcome with
a result hash is *new* when its (tool, result hash) pair is not among the run's 256 most
recently seen distinct pairs. The count is the number of outcomes since the last new one,
within the last ``windowSize`` outcomes: a warning at ``warningThreshold``, a critical at
``windowSize``. Trace (20/30): read a → "x", list → "y", read a → "x", list → "y", ... the
third outcome is the first repeat; 20 repeats later the next call gets the warning.
"""

from __future__ import annotations

from typing import Final

from loopwatch.detectors.state import RunState

__all__ = ["DETECTOR", "count", "critical_message", "observe", "tools_in", "warning_key", "warning_message"]

DETECTOR: Final = "run_no_progress"
SEEN_PAIRS: Final = 256


def observe(state: RunState, tool: str, result_hash: str, window: int) -> None:
    """Account for one outcome with a result hash."""
    key = f"{tool}\x1f{result_hash}"
    seen = state.seen_pairs
    if key in seen:
        del seen[key]  # seen again: most recent now
        state.since_new += 1
    else:
        state.since_new = 0
        if len(seen) >= SEEN_PAIRS:
            del seen[next(iter(seen))]
    seen[key] = None
    tools = state.outcome_tools
    tools.append(tool)
    while len(tools) > window:
        tools.popleft()


def count(state: RunState) -> int:
    """Outcomes since the run's last new outcome, within the window."""
    return min(state.since_new, len(state.outcome_tools))


def tools_in(state: RunState, last: int) -> int:
    """How many tools the newest ``last`` outcomes came from."""
    tools = state.outcome_tools
    return len({tools[index] for index in range(len(tools) - last, len(tools))})


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
