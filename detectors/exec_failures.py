"""Terminal ``exec`` failures and their failure identity (revision 2026-08, docs/rules-2026-08.md).

A finished ``exec`` (status ``completed`` or ``failed``) with a finite, non-zero exit code, not
timed out, whose output says something beyond the bare exit footer, is a *terminal failure*.
Its *identity* is the digest of ``{status, exitCode, timedOut, output}`` with five volatile
patterns of the output replaced by ``#``, in this order: ISO date-times, clock times,
attempt/retry counters, durations, process ids. Calendar dates, errno values, HTTP codes,
ports and counts keep their meaning, so failures that differ in them stay different.

Trace: ``make`` failing with ``12:00:01 build failed after 3.2s (pid 4411)`` and, next time,
``12:00:09 build failed after 2.9s (pid 4470)`` have one identity (``# build failed after #
(#)``); the same with ``exit 2`` instead of ``exit 1`` does not.

The patterns are upstream's JavaScript regexes (``g``, ``u``, ``i`` where upstream has it)
with ASCII digit and word classes; ``\\s`` is spelled out as JavaScript's white space.
"""

from __future__ import annotations

import math
import re
from typing import Any, Final

from detectors.stable_json import JSNumber, js_number_text

__all__ = ["failure_shape", "terminal_exit_code"]

# JavaScript's \s (white space and line terminators), for use inside a character class
_WS: Final = r"\s\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
_VOLATILE: Final = (
    re.compile(
        r"\d{4}-\d{2}-\d{2}[t ]\d{2}:\d{2}:\d{2}(?:\.\d{1,6})?(?:z|[+-]\d{2}:\d{2})?",
        re.ASCII | re.IGNORECASE,
    ),
    re.compile(r"\d{1,2}:\d{2}:\d{2}(?:\.\d{1,6})?", re.ASCII),
    re.compile(rf"\b(?:attempt|retry)\b[{_WS}#:=]*\d+", re.ASCII | re.IGNORECASE),
    re.compile(
        rf"\b\d+(?:\.\d+)?[{_WS}]?(?:ns|us|ms|seconds?|minutes?|hours?|s)\b",
        re.ASCII | re.IGNORECASE,
    ),
    re.compile(rf"\b(?:pid|ppid)\b[{_WS}#:=]*\d+", re.ASCII | re.IGNORECASE),
)


def failure_shape(output: str) -> str:
    """``output`` with the volatile diagnostics replaced by ``#``."""
    for pattern in _VOLATILE:
        output = pattern.sub("#", output)
    return output


def terminal_exit_code(details: dict[str, Any], status: str, output: str) -> Any:
    """The exit code when the finished ``exec`` is a terminal failure, else ``None``."""
    if status != "completed" and status != "failed":
        return None
    exit_code = details.get("exitCode")
    if isinstance(exit_code, bool):
        return None
    if isinstance(exit_code, int):
        value = float(exit_code)
    elif isinstance(exit_code, float):
        value = exit_code
    elif isinstance(exit_code, JSNumber):
        value = exit_code.value
    else:
        return None
    if not math.isfinite(value) or value == 0 or details.get("timedOut") is True:
        return None
    if not output or output == f"(Command exited with code {js_number_text(value)})":
        return None
    return exit_code
