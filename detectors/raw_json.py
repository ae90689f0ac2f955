"""stableStringify straight from the JSON text of a wire event's ``params`` and ``result``.

A decoded event keeps those two values as the JSON text it came with (``msgspec.Raw``:
msgspec checks the text as it skips it, all but its UTF-8, which :func:`utf8_valid` checks
where the event is not ASCII) and they are hashed from that text, without building the value
where they can: a call's ``argsHash`` needs only the canonical bytes of its params, and most
results only those of ``{"details": …, "text": …}`` (spec §3.3). ``_raw_json.c`` reads the
text once into a flat tree and writes those bytes; the functions below are the same in
Python, for an install without a compiler.

* :func:`canonical`: ``stableStringify(JSON.parse(raw))`` as UTF-8 bytes.
* :func:`outcome`: for a result's JSON, ``(bytes, is_object, loop_veto, unchanged)``: the
  canonical bytes it hashes as in the general case of §3.3 (of the value itself when it is no
  object), whether it is an object, whether its details are the detector's own loop veto
  (status ``blocked``, deniedReason ``tool-loop``), whether they say ``changed: false``.
* :func:`utf8_valid`: whether the bytes are valid UTF-8.
* :func:`args_hash` and :func:`outcome_hash`: under the ``xxh3`` digest, a call's ``argsHash``
  (``"{tool}:{digest}"``) from :func:`canonical`'s bytes, and the digest of :func:`outcome`'s
  where its details say neither the loop veto nor ``changed: false``: hashed in C as they are
  written. The Python twins never answer (``None``: hash the bytes of the two above).
* :func:`exec_outcome`: for a finished ``exec`` (details status ``completed`` or ``failed``),
  ``(bytes, status, exit_code, timed_out, output)``: the canonical bytes of its fingerprint
  (§3.3) and what the 2026-08 terminal-failure rule reads. The Python twin never answers
  (``None``: the general path decodes the result). :func:`exec_hash`: under the ``xxh3``
  digest, the digest of that fingerprint where the ``exec`` is surely no terminal failure
  (its exit code no number or 0, or it timed out); ``None`` otherwise (the twin: always).
* :func:`fast_event`: a call or result of the common shape (plain ASCII ids, ``ts`` a small
  integer or null, params and result any JSON it can read) straight into its Struct, as
  ``decode_event(data, texts=True)`` would give it, once :func:`bind_events` has named the
  types; ``None`` for anything else (the twin: always).
* :func:`split_event`: a long event's JSON with the values of ``params`` and ``result`` as
  ``null``, and where they were (msgspec skips a long text a byte at a time; this reads it as
  :func:`canonical` does, 32 bytes at a time). The Python twin never splits (``None``).

``canonical`` and ``outcome`` answer ``None`` where they cannot be sure (invalid JSON or UTF-8,
nesting deeper than :data:`MAX_DEPTH`; the C ones also for numbers with a fraction or an
exponent or beyond 2**53, lone surrogate escapes and object keys beyond the Basic
Multilingual Plane): the caller then decodes the value and takes the general path. Where both
answer, they agree (``tests/property/test_raw_json.py``).
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from loopwatch.detectors.hashing import content_text
from loopwatch.detectors.input_limits import nesting_exceeds
from loopwatch.detectors.stable_json import WIRE_DECODER, canonical_bytes

__all__ = [
    "MAX_DEPTH",
    "FinishedExec",
    "Outcome",
    "Split",
    "args_hash",
    "bind_events",
    "canonical",
    "exec_hash",
    "exec_outcome",
    "fast_event",
    "outcome",
    "outcome_hash",
    "python_args_hash",
    "python_bind_events",
    "python_canonical",
    "python_exec_hash",
    "python_exec_outcome",
    "python_fast_event",
    "python_outcome",
    "python_outcome_hash",
    "python_split_event",
    "python_utf8_valid",
    "split_event",
    "utf8_valid",
]

#: Deeper JSON is left to the general path (which checks the wire's nesting limit).
MAX_DEPTH: Final = 32

#: ``(canonical bytes, is_object, loop_veto, unchanged)``
Outcome = tuple[bytes, bool, bool, bool]


def _value(raw: bytes | msgspec.Raw) -> tuple[bool, Any]:
    try:
        value = WIRE_DECODER.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return False, None
    return not nesting_exceeds(value, MAX_DEPTH), value


def python_canonical(raw: bytes | msgspec.Raw) -> bytes | None:
    """:func:`canonical` in Python."""
    sure, value = _value(raw)
    return canonical_bytes(value) if sure else None


def python_outcome(raw: bytes | msgspec.Raw) -> Outcome | None:
    """:func:`outcome` in Python."""

    sure, result = _value(raw)
    if not sure:
        return None
    if type(result) is not dict:
        return canonical_bytes(result), False, False, False
    details = result.get("details")
    if type(details) is not dict:
        details = {}
    veto = details.get("status") == "blocked" and details.get("deniedReason") == "tool-loop"
    hashed = canonical_bytes({"details": details, "text": content_text(result)})
    return hashed, True, veto, details.get("changed") is False


def python_utf8_valid(raw: bytes | msgspec.Raw) -> bool:
    """:func:`utf8_valid` in Python."""
    try:
        bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


#: ``(fingerprint bytes, status, exit code or None, timed out, output)``
FinishedExec = tuple[bytes, str, int | None, bool, str]


def python_exec_outcome(raw: bytes | msgspec.Raw) -> FinishedExec | None:
    """:func:`exec_outcome` in Python: never read (the general path decodes the result)."""
    return None


#: ``(envelope, params_start, params_end, result_start, result_end)`` (-1: absent)
Split = tuple[bytes, int, int, int, int]


def python_split_event(data: bytes) -> Split | None:
    """:func:`split_event` in Python: never split (decode_event reads the whole event)."""
    return None


def python_fast_event(data: bytes) -> Any:
    """:func:`fast_event` in Python: never read here (decode_event reads the event as always)."""
    return None


def python_bind_events(call: type, result: type, raw: type) -> None:
    """:func:`bind_events` in Python: nothing to bind."""


def python_exec_hash(raw: bytes | msgspec.Raw) -> str | None:
    """:func:`exec_hash` in Python: never hashed here (the caller reads :func:`exec_outcome`)."""
    return None


def python_args_hash(tool: str, raw: bytes | msgspec.Raw) -> str | None:
    """:func:`args_hash` in Python: never hashed here (the caller hashes :func:`canonical`'s bytes)."""
    return None


def python_outcome_hash(raw: bytes | msgspec.Raw) -> str | None:
    """:func:`outcome_hash` in Python: never hashed here (the caller hashes :func:`outcome`'s bytes)."""
    return None


try:
    from loopwatch.detectors._raw_json import (
        args_hash,
        bind_events,
        canonical,
        exec_hash,
        exec_outcome,
        fast_event,
        outcome,
        outcome_hash,
        split_event,
        utf8_valid,
    )
except ImportError:  # built without a compiler, or imported from sources only
    args_hash = python_args_hash
    bind_events = python_bind_events
    fast_event = python_fast_event
    exec_hash = python_exec_hash
    outcome_hash = python_outcome_hash
    exec_outcome = python_exec_outcome
    split_event = python_split_event
    canonical = python_canonical
    outcome = python_outcome
    utf8_valid = python_utf8_valid
