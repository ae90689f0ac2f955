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
  marker (:data:`_MARKER_PHRASES`, :data:`_MARKER_WORDS`, :data:`_MARKER_SUFFIXED`: an
  error, an exception, "not found", "no such file",
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
    "signatures",
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
#: the failure markers (matched in a lower-cased line): these phrases as they are, ...
_MARKER_PHRASES: Final = (
    "not found",
    "no such file",
    "cannot ",
    "can't ",
    "could not",
    "couldn't",
    "unable to",
    "permission denied",
    "refused",
    "timed out",
    "does not exist",
    "not exist",
    "no matches",
    "not recognized",
    "usage:",
)
#: ... these words as whole words ...
_MARKER_WORDS: Final = re.compile(
    r"\b(?:error|errors|exception|fatal|failed|failure|traceback|denied|invalid|unknown|unexpected)\b"
)
#: ... (what every match of :data:`_MARKER_WORDS` holds) ...
_MARKER_WORD_NEEDS: Final = (
    "error",
    "exception",
    "fail",
    "fatal",
    "traceback",
    "denied",
    "invalid",
    "unknown",
    "unexpected",
)
#: ... and "error:" or "exception:" right after a letter ("valueerror:"; written so that the
#: search looks only where the word starts)
_MARKER_SUFFIXED: Final = re.compile(r"error(?<=[a-z]error):|exception(?<=[a-z]exception):")
#: what a line holds wherever :data:`_NONE_COUNTED` matches in it (each of its words holds one)
_COUNTED_WORDS: Final = ("error", "fail", "exception")
#: where a match of :data:`_EXIT_STATUS` can start: at a "<", or just before an "x" (only "x"
#: and "X" match an "x" whatever the case)
_EXIT_START: Final = re.compile(r"[<xX]")


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


def _exit_status(text: str) -> re.Match[str] | None:
    """``_EXIT_STATUS.search(text)``, tried only where a match can start (in order: the first
    match found is the leftmost, the one the search gives)."""
    for found in _EXIT_START.finditer(text):
        start = found.start()
        if text[start] != "<":
            start -= 1
            if start < 0:
                continue
        status = _EXIT_STATUS.match(text, start)
        if status is not None:
            return status
    return None


def _marked(line: str) -> bool:
    """Whether a (lower-cased) line carries a failure marker once its counts of nothing are
    removed; each regular expression is run only on a line that holds what it needs."""
    for word in _COUNTED_WORDS:
        if word in line:
            line = _NONE_COUNTED.sub(" ", line)
            break
    for phrase in _MARKER_PHRASES:
        if phrase in line:
            return True
    if ("error:" in line or "exception:" in line) and _MARKER_SUFFIXED.search(line) is not None:
        return True
    for needed in _MARKER_WORD_NEEDS:
        if needed in line:
            return _MARKER_WORDS.search(line) is not None
    return False


def unproductive(text: str, failed: bool) -> bool:
    """Whether an outcome (its text; ``failed``: a marked failure) brought nothing but a failure."""
    if failed:
        return True
    status = _exit_status(text)
    if status is not None:
        code = status.group(1) or status.group(2)
        return int(code) != 0
    lines = [line for line in text.lower().split("\n") if line.strip()]
    if not lines:
        return False
    last = lines[-1]
    if _marked(lines[0]):
        return True
    if len(lines) > 1 and _marked(lines[1]):
        return True
    return len(lines) > 2 and _marked(last)


def signature(text: str, arguments: str, echo_free: bool) -> str:
    """The failure signature of an outcome's text; ``arguments``: the call's arguments as text
    (lower-cased), whose quoted echoes are emptied when ``echo_free``."""
    lowered = text.lower()
    return _normalised(_echoes_emptied(lowered, arguments) if echo_free else lowered)


def signatures(text: str, arguments: str) -> tuple[str, str]:
    """``(signature(text, arguments, False), signature(text, arguments, True))``, the text
    lower-cased and normalised once where it echoes nothing of the arguments."""
    lowered = text.lower()
    same = _normalised(lowered)
    emptied = _echoes_emptied(lowered, arguments)
    return same, same if emptied == lowered else _normalised(emptied)


def _echoes_emptied(lowered: str, arguments: str) -> str:
    """The text with every quoted span whose content occurs in ``arguments`` emptied."""
    if '"' not in lowered and "'" not in lowered and "`" not in lowered:
        return lowered  # no quoted span (each starts with one of these)

    def emptied(found: re.Match[str]) -> str:
        inner = found.group(1) or found.group(2) or found.group(3) or ""
        inner = inner.strip()
        return '""' if inner and inner in arguments else found.group(0)

    return _QUOTED.sub(emptied, lowered)


def _normalised(lowered: str) -> str:
    """F1's normalisation, then the first distinct line tails (see the module's docstring)."""
    if "-" in lowered:  # a UUID holds four
        lowered = _UUID.sub("x", lowered)
    lowered = _DIGITS.sub("0", _HEX.sub("x", lowered))
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
