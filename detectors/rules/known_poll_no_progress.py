"""Rules 3–4, ``known_poll_no_progress``: a poll tool that keeps getting the same answer.

Known polls are ``command_status`` and ``process`` with action ``poll``/``log``. Polls whose
outcomes change never fire (progress), and polls never get ``generic_repeat``. Trace
(defaults): ``process poll s1`` answered "(no new output), running" 10 times → warning with
count 10; 20 times → blocked.
"""

from __future__ import annotations

from typing import Final

from loopwatch.config.loop_detection import ResolvedLoopDetection
from loopwatch.detectors.events import Level
from loopwatch.detectors.rules import argument_churn
from loopwatch.detectors.rules.base import CRITICAL, WARNING, CallContext, Detection, Rule

__all__ = ["DETECTOR", "RULE", "KnownPollNoProgress", "level", "message", "warning_key"]

DETECTOR: Final = "known_poll_no_progress"


class KnownPollNoProgress(Rule):
    """Rules 3-4 (gated by ``detectors.knownPollNoProgress``)."""

    def __init__(self) -> None:
        super().__init__(DETECTOR, openclaw=True)

    def active(self, resolved: ResolvedLoopDetection) -> bool:
        return resolved.enabled and resolved.known_poll_no_progress

    def on_call(self, ctx: CallContext, found: Detection | None) -> Detection | None:
        if not ctx.known_poll or not ctx.resolved.known_poll_no_progress:
            return None
        count = ctx.no_progress
        level_ = level(count, ctx.resolved)
        if level_ is None:
            return None
        tool = ctx.tool
        return Detection(
            level_,
            DETECTOR,
            count,
            message(level_, tool, count),
            warning_key(tool, ctx.args_hash, ctx.latest),
            None,
            argument_churn.liveness(ctx) if level_ == WARNING else None,
        )


def level(no_progress: int, config: ResolvedLoopDetection) -> Level | None:
    if no_progress >= config.critical_threshold:
        return CRITICAL
    if no_progress >= config.warning_threshold:
        return WARNING
    return None


def message(level: str, tool: str, count: int) -> str:
    if level == CRITICAL:
        return (
            f"CRITICAL: Called {tool} with identical arguments and no progress {count} times. "
            "This appears to be a stuck polling loop. Session execution blocked to prevent "
            "resource waste."
        )
    return (
        f"WARNING: You have called {tool} {count} times with identical arguments and no "
        "progress. Stop polling and either (1) increase wait time between checks, or (2) "
        "report the task as failed if the process is stuck."
    )


def warning_key(tool: str, args_hash: str, latest: str | None) -> str:
    return f"poll:{tool}:{args_hash}:{latest or 'none'}"


RULE: Final[KnownPollNoProgress] = KnownPollNoProgress()
