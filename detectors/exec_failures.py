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

from loopwatch.detectors.stable_json import JSNumber, js_number_text

__all__ = ["VOLATILE_PATTERNS", "failure_shape", "terminal_exit_code"]

# JavaScript's \s (white space and line terminators), for use inside a character class
_WS: Final = r"\s\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
_ISO_DATE_TIME: Final = re.compile(
    r"\d{4}-\d{2}-\d{2}[t ]\d{2}:\d{2}:\d{2}(?:\.\d{1,6})?(?:z|[+-]\d{2}:\d{2})?", re.ASCII | re.IGNORECASE
)
_CLOCK_TIME: Final = re.compile(r"\d{1,2}:\d{2}:\d{2}(?:\.\d{1,6})?", re.ASCII)
_COUNTER: Final = re.compile(rf"\b(?:attempt|retry)\b[{_WS}#:=]*\d+", re.ASCII | re.IGNORECASE)
_DURATION: Final = re.compile(
    rf"\b\d+(?:\.\d+)?[{_WS}]?(?:ns|us|ms|seconds?|minutes?|hours?|s)\b", re.ASCII | re.IGNORECASE
)
_PROCESS_ID: Final = re.compile(rf"\b(?:pid|ppid)\b[{_WS}#:=]*\d+", re.ASCII | re.IGNORECASE)
_DIGITS_TO_ZERO: Final = str.maketrans("123456789", "000000000")
_ASCII_DIGITS_TO_ZERO: Final = bytes.maketrans(b"123456789", b"000000000")


def _sub_from_digits(pattern: re.Pattern[str], text: str) -> str:
    """``pattern.sub("#", text)`` for a pattern whose every match starts at an ASCII digit.

    Python's ``re`` tries a pattern without a literal prefix at every position (about 18 ns a
    character); where digits are sparse this tries it only where a digit is, found with
    ``str.find`` (the same matches, left to right, non-overlapping).
    """
    if text.isascii():  # (bytes.translate is many times faster than str.translate; same places)
        marked_bytes = text.encode("ascii").translate(_ASCII_DIGITS_TO_ZERO)
        digits = marked_bytes.count(b"0")
        if digits == 0:
            return text
        if digits * 16 > len(text):  # digit-dense text (logs): the plain scan is cheaper
            return pattern.sub("#", text)
        return _sub_at_marks(pattern, text, marked_bytes.decode("ascii"))
    marked = text.translate(_DIGITS_TO_ZERO)
    digits = marked.count("0")
    if digits == 0:
        return text
    if digits * 16 > len(text):
        return pattern.sub("#", text)
    return _sub_at_marks(pattern, text, marked)


def _sub_at_marks(pattern: re.Pattern[str], text: str, marked: str) -> str:
    """``pattern.sub("#", text)``, trying the pattern only where ``marked`` has a ``0``."""
    pos = marked.find("0")
    parts: list[str] = []
    last = 0
    while pos >= 0:
        match = pattern.match(text, pos)
        if match is None:
            pos = marked.find("0", pos + 1)
            continue
        parts.append(text[last:pos])
        parts.append("#")
        last = match.end()
        pos = marked.find("0", last)
    parts.append(text[last:])
    return "".join(parts)


def failure_shape(output: str) -> str:
    """``output`` with the volatile diagnostics replaced by ``#`` (in the order of the module doc)."""
    if ":" in output:
        if "-" in output:
            output = _sub_from_digits(_ISO_DATE_TIME, output)
        output = _sub_from_digits(_CLOCK_TIME, output)
    lower = output.lower()  # ASCII letters lowered: no match is missed by the word checks
    if "attempt" in lower or "retry" in lower:
        output = _COUNTER.sub("#", output)
    output = _sub_from_digits(_DURATION, output)
    if "pid" in lower:
        output = _PROCESS_ID.sub("#", output)
    return output


#: the five patterns in their order, for tests that compare with plain ``re.sub``
VOLATILE_PATTERNS: Final = (_ISO_DATE_TIME, _CLOCK_TIME, _COUNTER, _DURATION, _PROCESS_ID)


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
