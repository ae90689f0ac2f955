"""F1's optional fail-fast block: a call to a tool under an open outage is refused.

While an outage of the tool is open and its last failure is less than ``blockSeconds`` old
(event time), every ``tool_call`` of it gets a critical ``verdict``, detector ``tool_outage``,
action ``block``, count = the failing runs its ``tool_outage`` alert reported (what every
worker knows of it). After ``blockSeconds`` without a new
failure, calls pass again and act as probes. The block is the fleet's, not the run's: it is
added to the run's outputs but never counts toward the run's escalation to abort.
"""

from __future__ import annotations

from typing import Final

from loopwatch.config.fleet_rules import ToolOutageRule
from loopwatch.detectors.events import ToolCall, Verdict
from loopwatch.detectors.verdicts import fleet_block

__all__ = ["DETECTOR", "block_message", "fail_fast_verdict", "is_blocking"]

DETECTOR: Final = "tool_outage"


def is_blocking(last_failure_ts: int, ts: int, rule: ToolOutageRule) -> bool:
    """Whether a call at event time ``ts`` is refused, the outage's last failure at ``last_failure_ts``."""
    return rule.block and ts - last_failure_ts < rule.block_s * 1000


def block_message(tool: str, runs: int) -> str:
    return (
        f"CRITICAL: {tool} is failing for the whole fleet right now ({runs} runs, same error). "
        "Do not call it again; continue without it or report that it is unavailable."
    )


def fail_fast_verdict(scope: str, event: ToolCall, runs: int, observe_only: bool) -> Verdict:
    """The block of one call of a tool under an open outage with ``runs`` failing runs."""
    message = block_message(event.tool, runs)
    return fleet_block(scope, event, DETECTOR, runs, message, f"{DETECTOR}:{event.tool}", observe_only)
