"""Wire JSON to validated events (compiled with mypyc: this runs for every record).

:func:`decode_event` raises :class:`detectors.events.InvalidEvent` with what is wrong and where.
"""

from __future__ import annotations

from typing import Final

import msgspec
from msgspec import UNSET
from msgspec.structs import astuple

from loopwatch.detectors.events import CompactionRetry, Event, InvalidEvent, RunEnd, ToolCall, ToolResult
from loopwatch.detectors.input_limits import (
    IDENTITY_FIELDS,
    MAX_ID_BYTES,
    MAX_NESTING,
    identity_problem,
    int64_problem,
    nesting_exceeds,
)
from loopwatch.detectors.json_scan import opening_brackets
from loopwatch.detectors.stable_json import _float_hook

__all__ = ["decode_event", "validate_event"]

_DECODER: Final = msgspec.json.Decoder(Event, float_hook=_float_hook)


def validate_event(event: Event, deep: bool = True, json_size: int | None = None) -> None:
    """Checks msgspec's types cannot express, and the input limits
    (:mod:`detectors.input_limits`); raises :class:`InvalidEvent`.

    ``deep=False`` skips the nesting walk (the caller knows the JSON holds too few brackets).
    ``json_size``: the size of the JSON msgspec decoded the event from, if it did; its strings
    then hold no lone surrogate and at most that many bytes, so only longer ones are measured.
    """
    _check_limits(event, deep, json_size)
    if not event.event_id:
        raise InvalidEvent("event_id: must be a non-empty string")
    run_id, session_id = event.run_id, event.session_id
    if not (run_id and not run_id.isspace()) and not (session_id and not session_id.isspace()):
        raise InvalidEvent("run_id or session_id: one of them is required")
    kind = type(event)
    if kind is ToolCall or kind is ToolResult:
        if not event.tool:  # type: ignore[union-attr]
            raise InvalidEvent("tool: must be a non-empty string")
        if (event.params is UNSET) is (event.args_digest is UNSET):  # type: ignore[union-attr]
            raise InvalidEvent("params / args_digest: exactly one of them is required")
    if kind is ToolResult:
        error = event.error  # type: ignore[union-attr]
        given = (
            (event.result is not UNSET)  # type: ignore[union-attr]
            + (error is not UNSET and error is not None)
            + (event.result_digest is not UNSET)  # type: ignore[union-attr]
        )
        if given != 1:
            raise InvalidEvent("result / error / result_digest: exactly one of them is required")
        _validate_digested_outcome(event)  # type: ignore[arg-type]


#: Per event type, the positions (in ``astuple`` order) of the identity fields it has
#: (computed once, not per event).
_IDENTITIES: Final = {
    kind: tuple(
        kind.__struct_fields__.index(name) for name in IDENTITY_FIELDS if name in kind.__struct_fields__
    )
    for kind in (ToolCall, ToolResult, CompactionRetry, RunEnd)
}


#: A string of at most this many code points holds at most :data:`MAX_ID_BYTES` UTF-8 bytes.
_SURELY_SHORT: Final = MAX_ID_BYTES // 4


def _check_limits(event: Event, deep: bool, json_size: int | None) -> None:
    if json_size is None or json_size > MAX_ID_BYTES:
        _check_identities(event, json_size is not None)
    if event.ts is not None and (problem := int64_problem(event.ts)) is not None:
        raise InvalidEvent(f"ts: {problem}")
    if deep and type(event) in (ToolCall, ToolResult):
        for name in ("params", "result", "error"):
            if nesting_exceeds(getattr(event, name, None), MAX_NESTING):
                raise InvalidEvent(f"{name}: nests more than {MAX_NESTING} arrays and objects")


def _check_identities(event: Event, surrogate_free: bool) -> None:
    values = astuple(event)  # one C call for every field: cheaper than a getattr per field
    for position in _IDENTITIES[type(event)]:
        value = values[position]
        if type(value) is not str:
            continue
        if surrogate_free:  # msgspec decoded it: only its size can be wrong
            if len(value) <= _SURELY_SHORT:
                continue
        elif len(value) <= MAX_ID_BYTES and value.isascii():  # one length test and one flag read
            continue
        problem = identity_problem(value)
        if problem is not None:
            raise InvalidEvent(f"{type(event).__struct_fields__[position]}: {problem}")


def _validate_digested_outcome(event: ToolResult) -> None:
    """The 2026-08 classification fields come only with ``result_digest`` and agree with it."""
    kind = event.outcome_kind
    if event.result_digest is UNSET:
        if kind is not None or event.no_progress or event.failure_digest is not None:
            raise InvalidEvent(
                "outcome_kind / no_progress / failure_digest: only with result_digest (digest-only mode)"
            )
        return
    if kind == "tool-loop-veto" and event.result_digest is not None:
        raise InvalidEvent("result_digest: must be null for outcome_kind tool-loop-veto")
    if kind == "terminal-exec-failure" and event.result_digest is None:
        raise InvalidEvent("result_digest: required with outcome_kind terminal-exec-failure")
    if (kind == "terminal-exec-failure") != (event.failure_digest is not None):
        raise InvalidEvent("failure_digest: required with outcome_kind terminal-exec-failure, and only then")


_TOO_DEEP: Final = f"nests more than {MAX_NESTING} arrays and objects"


def decode_event(data: bytes | str) -> Event:
    """Decode and validate one JSON event; raises :class:`InvalidEvent` with the reason.

    Never raises anything else for any input (deep nesting included)."""
    # msgspec's strings hold no lone surrogate and no more bytes than the JSON they came from
    json_size = len(data) if isinstance(data, bytes) else None
    try:
        event: Event = _DECODER.decode(data)
    except msgspec.ValidationError as exc:
        raise InvalidEvent(f"invalid event: {exc}") from exc
    except msgspec.DecodeError as exc:
        event = _decode_fallback(data, exc)
        json_size = None
    except RecursionError as exc:
        raise InvalidEvent(f"the event {_TOO_DEEP}") from exc
    validate_event(event, _brackets(data) > MAX_NESTING, json_size)
    return event


def _brackets(data: bytes | str) -> int:
    """An upper bound of the JSON's nesting depth (brackets inside strings counted too)."""
    if isinstance(data, str):
        return data.count("[") + data.count("{")
    return opening_brackets(data)


def _decode_fallback(data: bytes | str, error: msgspec.DecodeError) -> Event:
    # msgspec rejects lone UTF-16 surrogates ("\ud800"); JavaScript accepts them and OpenClaw
    # sanitises them before hashing, so such events stay valid through the stdlib parser.
    import json

    try:
        value = json.loads(data, parse_float=_float_hook, parse_int=int)
    except (ValueError, TypeError):
        raise InvalidEvent(f"not valid JSON: {error}") from error
    except RecursionError as exc:
        raise InvalidEvent(f"the event {_TOO_DEEP}") from exc
    try:
        converted: Event = msgspec.convert(value, Event, strict=True)
    except msgspec.ValidationError as exc:
        raise InvalidEvent(f"invalid event: {_printable(str(exc))}") from exc
    except RecursionError as exc:
        raise InvalidEvent(f"the event {_TOO_DEEP}") from exc
    return converted


def _printable(text: str) -> str:
    """``text`` with lone surrogates escaped, so a reason can always be encoded."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
