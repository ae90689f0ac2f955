"""Rules 3–4, ``known_poll_no_progress``: a poll tool that keeps getting the same answer.

Known polls are ``command_status`` and ``process`` with action ``poll``/``log``. Polls whose
outcomes change never fire (progress), and polls never get ``generic_repeat``. Trace
(defaults): ``process poll s1`` answered "(no new output), running" 10 times → warning with
count 10; 20 times → blocked.
"""

from __future__ import annotations

from loopwatch.config.loop_detection import ResolvedLoopDetection

DETECTOR = "known_poll_no_progress"


def level(no_progress: int, config: ResolvedLoopDetection) -> str | None:
    if no_progress >= config.critical_threshold:
        return "critical"
    if no_progress >= config.warning_threshold:
        return "warning"
    return None


def message(level: str, tool: str, count: int) -> str:
    if level == "critical":
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
