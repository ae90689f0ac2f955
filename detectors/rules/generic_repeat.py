"""Rules 7–8, ``generic_repeat``: the same call over and over (known polls excluded).

A warning needs only repeated identical calls; the critical needs identical outcomes too.
Trace (defaults): ``read(a)`` proposed after 10 identical calls → warning, count 10; after
20 identical outcomes in a row (other calls in between do not break the streak) → blocked.
"""

from __future__ import annotations

DETECTOR = "generic_repeat"


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
