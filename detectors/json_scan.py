"""Scans of JSON bytes that every event pays for, in C where it was built.

* :func:`opening_brackets`: how many ``[`` and ``{`` bytes the data holds (inside strings
  too): an upper bound of its nesting depth, so the exact walk runs only past the limit.
* :func:`line_scan`: that count doubled, plus one where the data is not ASCII (then the UTF-8
  of the texts an event keeps undecoded is checked): both facts of an event's JSON in one pass.
* :func:`longest_text`: the most code points of a string among an event's fields at the
  given positions (its ids): only an event with a long one has its ids measured in bytes.
* :func:`javascript_safe`: whether msgspec's sorted JSON is byte-identical to OpenClaw's
  ``stableStringify`` (see :func:`detectors.stable_json.canonical_bytes`): no run of sixteen
  digits (an integer beyond 2**53 may be one) and no byte >= 0xEE (a code point >= U+E000,
  whose UTF-8 order can differ from its UTF-16 order in a key).

``_json_scan.c`` scans 16 bytes at a time, without the copies Python's ``bytes.translate``
makes (several times faster on the benchmark's events); the functions
below are the same scans in Python, for an install without a compiler and the sources-only
test session. ``tests/property/test_json_scan.py`` checks that both give the same answers.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "javascript_safe",
    "line_scan",
    "longest_text",
    "opening_brackets",
    "python_javascript_safe",
    "python_line_scan",
    "python_longest_text",
    "python_opening_brackets",
]

_OPENERS: Final = b"[{"
# digits map to "0", everything else to " ": a run of sixteen "0" is a run of sixteen digits
_DIGIT_MAP: Final = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_SIXTEEN_DIGITS: Final = b"0" * 16


def python_opening_brackets(data: bytes) -> int:
    """How many ``[`` and ``{`` bytes ``data`` holds (one C pass of ``translate``)."""
    return len(data) - len(data.translate(None, _OPENERS))


def python_line_scan(data: bytes) -> int:
    """Twice the ``[`` and ``{`` bytes of ``data``, plus one if it holds a byte >= 0x80."""
    return python_opening_brackets(data) * 2 + (not data.isascii())


def python_javascript_safe(out: bytes) -> bool:
    """No run of sixteen digits and no byte >= 0xEE in ``out``."""
    return (out.isascii() or max(out) < 0xEE) and _SIXTEEN_DIGITS not in out.translate(_DIGIT_MAP)


def python_longest_text(values: tuple[object, ...], positions: tuple[int, ...]) -> int:
    """The most code points of a ``str`` (exactly) among ``values`` at ``positions`` (each
    from 0 to ``len(values) - 1``: :class:`IndexError` otherwise, a negative one too)."""
    longest = 0
    for at in positions:
        if not 0 <= at < len(values):
            raise IndexError("longest_text() position out of range")
        value = values[at]
        if type(value) is str and len(value) > longest:
            longest = len(value)
    return longest


try:
    from loopwatch.detectors._json_scan import javascript_safe, line_scan, longest_text, opening_brackets
except ImportError:  # built without a compiler, or imported from sources only
    javascript_safe = python_javascript_safe
    line_scan = python_line_scan
    longest_text = python_longest_text
    opening_brackets = python_opening_brackets
