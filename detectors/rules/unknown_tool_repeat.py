"""Rule 1, ``unknown_tool_repeat``: the same missing tool retried (not gated by ``detectors``).

Trace (threshold 10): ``exec`` fails "Tool exec not found" 10 times in a row → the 11th
``exec`` proposal is blocked with count 10, whatever its arguments. A pending ``exec`` call at
the end of the history (no outcome yet) ends the streak.
"""

from __future__ import annotations

from typing import Final

from loopwatch.config.loop_detection import ResolvedLoopDetection
from loopwatch.detectors.rules.base import CRITICAL, CallContext, Detection, Rule

__all__ = ["DETECTOR", "RULE", "UnknownToolRepeat", "message", "warning_key"]

DETECTOR: Final = "unknown_tool_repeat"


class UnknownToolRepeat(Rule):
    """Rule 1. Under revision 2026-08 the streak passes over veto records."""

    def __init__(self) -> None:
        super().__init__(DETECTOR, openclaw=True)

    def active(self, resolved: ResolvedLoopDetection) -> bool:
        return resolved.enabled

    def on_call(self, ctx: CallContext, found: Detection | None) -> Detection | None:
        tool = ctx.tool
        streak, unknown_name = ctx.history.unknown_tool_streak(tool, ctx.revision == "2026-08")
        if streak and streak >= ctx.resolved.unknown_tool_threshold:
            message_ = message(unknown_name or tool, streak)
            return Detection(CRITICAL, DETECTOR, streak, message_, warning_key(tool, unknown_name))
        return None


def message(name: str, count: int) -> str:
    return (
        f"CRITICAL: attempted unavailable tool {name} {count} times. "
        "Stop retrying that missing tool and answer without it."
    )


def warning_key(tool: str, unknown_name: str | None) -> str:
    return f"unknown-tool:{tool}:{unknown_name or 'unknown'}"


RULE: Final[UnknownToolRepeat] = UnknownToolRepeat()
