"""Rules 7–8, ``generic_repeat``: the same call over and over (known polls excluded).

A warning needs only repeated identical calls; the critical needs identical outcomes too.
Trace (defaults): ``read(a)`` proposed after 10 identical calls → warning, count 10; after
20 identical outcomes in a row (other calls in between do not break the streak) → blocked.
"""

from __future__ import annotations

from typing import Final

from loopwatch.config.loop_detection import ResolvedLoopDetection
from loopwatch.detectors.rules.base import CRITICAL, WARNING, CallContext, Detection, Rule

__all__ = ["CRITICAL_RULE", "DETECTOR", "WARNING_RULE", "GenericRepeat"]

DETECTOR: Final = "generic_repeat"


class GenericRepeat(Rule):
    """Rule 7 (``critical``) or rule 8 (warning): OpenClaw checks argument churn (7a) between
    the two, so the registry holds each level as an entry of its own."""

    def __init__(self, critical: bool) -> None:
        super().__init__(DETECTOR, openclaw=True)
        self.critical = critical

    def active(self, resolved: ResolvedLoopDetection) -> bool:
        return resolved.enabled and resolved.generic_repeat

    def on_call(self, ctx: CallContext, found: Detection | None) -> Detection | None:
        if ctx.known_poll or not ctx.resolved.generic_repeat:
            return None
        tool = ctx.tool
        if self.critical:
            count = ctx.no_progress
            if count >= ctx.resolved.critical_threshold:
                key = critical_key(tool, ctx.args_hash, ctx.latest)
                return Detection(CRITICAL, DETECTOR, count, critical_message(tool, count), key)
        else:
            count = ctx.recent
            if count >= ctx.resolved.warning_threshold:
                key = warning_key(tool, ctx.args_hash)
                return Detection(WARNING, DETECTOR, count, warning_message(tool, count), key)
        return None


def critical_message(tool: str, count: int) -> str:
    return (
        f"CRITICAL: Called {tool} with identical arguments and identical outcomes {count} "
        "times. Session execution blocked to prevent runaway loops."
    )


def warning_message(tool: str, count: int) -> str:
    return (
        f"WARNING: You have called {tool} {count} times with identical arguments. If this is "
        "not making progress, stop retrying and report the task as failed."
    )


def critical_key(tool: str, args_hash: str, latest: str | None) -> str:
    return f"generic:{tool}:{args_hash}:{latest or 'none'}"


def warning_key(tool: str, args_hash: str) -> str:
    return f"generic:{tool}:{args_hash}"


CRITICAL_RULE: Final[GenericRepeat] = GenericRepeat(critical=True)
WARNING_RULE: Final[GenericRepeat] = GenericRepeat(critical=False)
