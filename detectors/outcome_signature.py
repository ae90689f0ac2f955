"""What a tool's outcome says, with its noise removed: failed or not, and how (the agents preset).

Rules (docs/real-loops.md has the measurements behind them):

* The *text* of an outcome: ``error`` when set (a marked failure), else ``result``; a string
  as it is, any other value as its string leaves in order, joined by newlines, leaving out
  the values of ``type`` keys (a content block's ``"type": "text"`` is a tag, not output); at
  most :data:`TEXT_CHARS` characters are read. A call's *arguments* are read the same way
  (their string leaves, not their JSON, so a backslash is one backslash).
* An outcome is *unproductive* when it is a marked failure; else, when its text reports an
  exit status (``<returncode>N</returncode>``, ``exit code N``, ``exit status N``), when that
  status is not 0; else when its first two non-blank lines or its last one carry a failure
  marker (:data:`_FAILURE_MARKERS`: an error, an exception, "not found", "no such file",
  "no matches", "permission denied", "usage:", ...), matched on whole words so that a file
  named ``IOException.java`` is no failure, and not where the line counts none ("0 errors",
  "Errors: 0", "no failures"). An empty text is not unproductive.
* Its *failure signature* (:func:`signature`): the text lower-cased; (with ``echo_free``) every
  quoted span (``"…"``, ``'…'`` not inside a word, as the apostrophe of "can't" is, a
  backquote span) whose content occurs in the call's arguments emptied, so that
  "no matches for "a"" and "no matches for "b"" are one failure;
  then F1's normalisation (BEYOND-OPENCLAW §F1: UUIDs and runs of 8+ hex characters → ``x``,
  digit runs → ``0``: shell line counters, PIDs, sizes, timestamps); then each non-blank line
  cut to what follows its last ``": "`` (the message without the program, line and subject
  prefixes of ``/bin/bash: line 7: foo: command not found``); the first
  :data:`SIGNATURE_LINES` distinct lines, in order, joined by newlines.
"""

from __future__ import annotations

import re
from typing import Any, Final

__all__ = [
    "SIGNATURE_LINES",
    "TEXT_CHARS",
    "outcome_text",
    "preview",
    "signature",
    "unproductive",
]

TEXT_CHARS: Final = 4000
SIGNATURE_LINES: Final = 64

_UUID: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_HEX: Final = re.compile(r"[0-9a-f]{8,}")
_DIGITS: Final = re.compile(r"[0-9]+")
_QUOTED: Final = re.compile(
    r"\"([^\"\n]{1,200})\"|(?<![a-z0-9])'([^'\n]{1,200})'(?![a-z0-9])|`([^`'\n]{1,200})[`']"
)
_EXIT_STATUS: Final = re.compile(
    r"<returncode>(-?\d+)</returncode>|exit (?:code|status):? ?(-?\d+)", re.IGNORECASE
)
#: counts of nothing ("0 errors", "errors: 0", "no failures"): removed before markers are looked for
_NONE_COUNTED: Final = re.compile(
    r"\b(?:0|no|zero)\s+(?:errors?|failures?|failed|exceptions?)\b"
    r"|\b(?:errors?|failures?|failed|exceptions?)\s*[:=]\s*0\b"
)
_FAILURE_MARKERS: Final = re.compile(
    r"\b(?:error|errors|exception|fatal|failed|failure|traceback)\b|[a-z](?:error|exception):"
    r"|not found|no such file|cannot |can't |could not|couldn't|unable to|permission denied"
    r"|\bdenied\b|refused|timed out|does not exist|not exist|no matches|not recognized"
    r"|\binvalid\b|\bunknown\b|\bunexpected\b|usage:"
)


def _leaves(value: Any, out: list[str], budget: int) -> int:
    """Append the string leaves of a JSON-like value, depth first, until ``budget`` chars."""
    if budget <= 0:
        return budget
    if isinstance(value, str):
        out.append(value)
        return budget - len(value)
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "type":
                continue
            budget = _leaves(item, out, budget)
            if budget <= 0:
                break
    elif isinstance(value, (list, tuple)):
        for item in value:
            budget = _leaves(item, out, budget)
            if budget <= 0:
                break
    return budget


def outcome_text(value: Any) -> str:
    """The text of a result or error value (its first :data:`TEXT_CHARS` characters)."""
    if isinstance(value, str):
        return value[:TEXT_CHARS]
    if value is None:
        return ""
    parts: list[str] = []
    _leaves(value, parts, TEXT_CHARS)
    return "\n".join(parts)[:TEXT_CHARS]


def unproductive(text: str, failed: bool) -> bool:
    """Whether an outcome (its text; ``failed``: a marked failure) brought nothing but a failure."""
    if failed:
        return True
    status = _EXIT_STATUS.search(text)
    if status is not None:
        code = status.group(1) or status.group(2)
        return int(code) != 0
    lines = [line for line in text.lower().split("\n") if line.strip()]
    if not lines:
        return False
    head = lines[:2]
    head.append(lines[-1])
    return any(_FAILURE_MARKERS.search(_NONE_COUNTED.sub(" ", line)) is not None for line in head)


def signature(text: str, arguments: str, echo_free: bool) -> str:
    """The failure signature of an outcome's text; ``arguments``: the call's arguments as text
    (lower-cased), whose quoted echoes are emptied when ``echo_free``."""
    lowered = text.lower()
    if echo_free:

        def emptied(found: re.Match[str]) -> str:
            inner = found.group(1) or found.group(2) or found.group(3) or ""
            inner = inner.strip()
            return '""' if inner and inner in arguments else found.group(0)

        lowered = _QUOTED.sub(emptied, lowered)
    lowered = _DIGITS.sub("0", _HEX.sub("x", _UUID.sub("x", lowered)))
    kept: list[str] = []
    for line in lowered.split("\n"):
        line = line.strip()
        if not line:
            continue
        tail = line.rsplit(": ", 1)[-1]
        if tail not in kept:
            kept.append(tail)
            if len(kept) >= SIGNATURE_LINES:
                break
    return "\n".join(kept)


def preview(text: str, limit: int = 80) -> str:
    """The first non-blank line of an outcome's text, for a message (at most ``limit`` chars)."""
    for line in text.split("\n"):
        line = line.strip()
        if line:
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""
