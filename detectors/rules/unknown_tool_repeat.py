"""Rule 1, ``unknown_tool_repeat``: the same missing tool retried (not gated by ``detectors``).

Trace (threshold 10): ``exec`` fails "Tool exec not found" 10 times in a row → the 11th
``exec`` proposal is blocked with count 10, whatever its arguments. A pending ``exec`` call at
the end of the history (no outcome yet) ends the streak.
"""

from __future__ import annotations

DETECTOR = "unknown_tool_repeat"


def message(name: str, count: int) -> str:
    return (
        f"CRITICAL: attempted unavailable tool {name} {count} times. "
        "Stop retrying that missing tool and answer without it."
    )


def warning_key(tool: str, unknown_name: str | None) -> str:
    return f"unknown-tool:{tool}:{unknown_name or 'unknown'}"
