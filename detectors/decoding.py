"""Wire JSON to validated events (compiled with mypyc: this runs for every record).

:func:`decode_event` raises :class:`detectors.events.InvalidEvent` with what is wrong and where.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec
from msgspec import UNSET
from msgspec.structs import astuple

from loopwatch.detectors import json_scan, raw_json
from loopwatch.detectors.events import CompactionRetry, Event, InvalidEvent, RunEnd, ToolCall, ToolResult
from loopwatch.detectors.input_limits import (
    IDENTITY_FIELDS,
    MAX_ID_BYTES,
    MAX_NESTING,
    identity_problem,
    int64_problem,
    nesting_exceeds,
)
from loopwatch.detectors.stable_json import (
    WIRE_DECODER,
    JSNumber,
    _float_hook,
    encodable,
    loads_with_surrogates,
    plain,
)

__all__ = ["SPLIT_ABOVE", "decode_event", "validate_event"]

raw_json.bind_events(ToolCall, ToolResult, msgspec.Raw)  # the types raw_json.fast_event builds

_DECODER: Final = msgspec.json.Decoder(Event, float_hook=_float_hook)
_DECODE: Final = _DECODER.decode  # bound once: no method lookup per event
_OPENING_BRACKETS: Final = json_scan.opening_brackets
_LINE_SCAN: Final = json_scan.line_scan
_LONGEST_TEXT: Final = json_scan.longest_text
_UTF8_VALID: Final = raw_json.utf8_valid
_SPLIT: Final = raw_json.split_event
_FAST_EVENT: Final = raw_json.fast_event
_RAW: Final = msgspec.Raw
#: the fields msgspec keeps as their JSON text (events.JsonValue), of a result and of a call
_TEXTS: Final = ("params", "result")
_CALL_TEXTS: Final = ("params",)
_FORCE_SETATTR: Final = msgspec.structs.force_setattr
_DECODE_VALUE: Final = WIRE_DECODER.decode

# Compiled, a module's own Final names are C statics; a name imported from an interpreted
# module (msgspec's, the event Structs) would be a dict lookup at every use.
_UNSET: Final = UNSET
_ASTUPLE: Final = astuple
_TOOL_CALL: Final = ToolCall
_TOOL_RESULT: Final = ToolResult


def _at(kind: type[Event], name: str) -> int:
    """The position of field ``name`` of ``kind`` in ``astuple`` order."""
    return kind.__struct_fields__.index(name)


# Field positions in ``astuple`` order (one C call reads every field: cheaper than a getattr
# each); msgspec puts the required fields first, so the common ones move with the type.
_COMMON: Final = {
    kind: (_at(kind, "event_id"), _at(kind, "run_id"), _at(kind, "session_id"), _at(kind, "ts"))
    for kind in (ToolCall, ToolResult, CompactionRetry, RunEnd)
}
#: the common fields' positions of the two kinds nearly every event is (C statics, no lookup)
_CALL_COMMON: Final = _COMMON[ToolCall]
_RESULT_COMMON: Final = _COMMON[ToolResult]
_CALL_TOOL: Final = _at(ToolCall, "tool")
_CALL_PARAMS: Final = _at(ToolCall, "params")
_CALL_ARGS_DIGEST: Final = _at(ToolCall, "args_digest")
_TOOL: Final = _at(ToolResult, "tool")
_PARAMS: Final = _at(ToolResult, "params")
_ARGS_DIGEST: Final = _at(ToolResult, "args_digest")
_RESULT: Final = _at(ToolResult, "result")
_ERROR: Final = _at(ToolResult, "error")
_RESULT_DIGEST: Final = _at(ToolResult, "result_digest")
_OUTCOME_KIND: Final = _at(ToolResult, "outcome_kind")
_NO_PROGRESS: Final = _at(ToolResult, "no_progress")
_FAILURE_DIGEST: Final = _at(ToolResult, "failure_digest")


def validate_event(event: Event, deep: bool = True, json_size: int | None = None) -> None:
    """Checks msgspec's types cannot express, and the input limits
    (:mod:`detectors.input_limits`); raises :class:`InvalidEvent`.

    ``deep=False`` skips the nesting walk (the caller knows the JSON holds too few brackets).
    ``json_size``: the size of the JSON msgspec decoded the event from, if it did; its strings
    then hold no lone surrogate and at most that many bytes, so only longer ones are measured.
    """
    values = _ASTUPLE(event)
    kind = type(event)
    if kind is _TOOL_CALL:
        event_at, run_at, session_at, ts_at = _CALL_COMMON
    elif kind is _TOOL_RESULT:
        event_at, run_at, session_at, ts_at = _RESULT_COMMON
    else:
        event_at, run_at, session_at, ts_at = _COMMON[kind]
    if json_size is None:
        _check_identities(kind, values, False)
    elif json_size > MAX_ID_BYTES and _LONGEST_TEXT(values, _IDENTITIES[kind]) > _SURELY_SHORT:
        _check_identities(kind, values, True)
    ts = values[ts_at]
    if ts is not None and (problem := int64_problem(ts)) is not None:
        raise InvalidEvent(f"ts: {problem}")
    if deep and (kind is _TOOL_CALL or kind is _TOOL_RESULT):
        for name in ("params", "result", "error"):
            if nesting_exceeds(plain(getattr(event, name, None)), MAX_NESTING):
                raise InvalidEvent(f"{name}: nests more than {MAX_NESTING} arrays and objects")
    if not values[event_at]:
        raise InvalidEvent("event_id: must be a non-empty string")
    run_id, session_id = values[run_at], values[session_at]
    if not _present(run_id) and not _present(session_id):
        raise InvalidEvent("run_id or session_id: one of them is required")
    if kind is _TOOL_CALL:
        _check_call_fields(values[_CALL_TOOL], values[_CALL_PARAMS], values[_CALL_ARGS_DIGEST])
    elif kind is _TOOL_RESULT:
        _check_call_fields(values[_TOOL], values[_PARAMS], values[_ARGS_DIGEST])
        error = values[_ERROR]
        result_digest = values[_RESULT_DIGEST]
        given = (
            (values[_RESULT] is not _UNSET)
            + (error is not _UNSET and error is not None)
            + (result_digest is not _UNSET)
        )
        if given != 1:
            raise InvalidEvent("result / error / result_digest: exactly one of them is required")
        _check_digested_outcome(
            result_digest, values[_OUTCOME_KIND], values[_NO_PROGRESS], values[_FAILURE_DIGEST]
        )


def _present(text: str | None) -> bool:
    """Whether ``text`` holds a character that is not white space (``isspace`` stops at the
    first one that is not: an id's first)."""
    if not text:
        return False
    return not text.isspace()


def _check_call_fields(tool: str, params: Any, args_digest: Any) -> None:
    if not tool:
        raise InvalidEvent("tool: must be a non-empty string")
    if (params is _UNSET) is (args_digest is _UNSET):
        raise InvalidEvent("params / args_digest: exactly one of them is required")


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


def _check_identities(kind: type[Event], values: tuple[Any, ...], surrogate_free: bool) -> None:
    for position in _IDENTITIES[kind]:
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
            raise InvalidEvent(f"{kind.__struct_fields__[position]}: {problem}")


def _check_digested_outcome(
    result_digest: Any, kind: str | None, no_progress: bool, failure: str | None
) -> None:
    """The 2026-08 classification fields come only with ``result_digest`` and agree with it."""
    if result_digest is _UNSET:
        if kind is not None or no_progress or failure is not None:
            raise InvalidEvent(
                "outcome_kind / no_progress / failure_digest: only with result_digest (digest-only mode)"
            )
        return
    if kind == "tool-loop-veto" and result_digest is not None:
        raise InvalidEvent("result_digest: must be null for outcome_kind tool-loop-veto")
    if kind == "terminal-exec-failure" and result_digest is None:
        raise InvalidEvent("result_digest: required with outcome_kind terminal-exec-failure")
    if (kind == "terminal-exec-failure") != (failure is not None):
        raise InvalidEvent("failure_digest: required with outcome_kind terminal-exec-failure, and only then")


_TOO_DEEP: Final = f"nests more than {MAX_NESTING} arrays and objects"


def decode_event(data: bytes | str, texts: bool = False) -> Event:
    """Decode and validate one JSON event; raises :class:`InvalidEvent` with the reason.

    ``texts``: keep ``params`` and ``result`` as their JSON text (``msgspec.Raw``, read by
    :func:`detectors.stable_json.plain`), for the shells that hand the event straight to the
    engine, which hashes that text without building the value (:mod:`detectors.raw_json`);
    otherwise they are the decoded values. The same events are valid either way. With
    ``texts``, a call or result of the common shape is read in C straight into its Struct
    (``raw_json.fast_event``), the same event msgspec and :func:`validate_event` would give.

    Never raises anything else for any input (deep nesting included)."""
    if texts and isinstance(data, bytes):
        fast: Event | None = _FAST_EVENT(data)  # (None: not its common shape)
        if fast is not None:
            return fast
    return _decode_whole(data, texts)


def _decode_whole(data: bytes | str, texts: bool) -> Event:
    """:func:`decode_event` without its C reader of common calls and results: msgspec reads
    the event (its long texts cut out first), then :func:`validate_event` checks it."""
    # msgspec's strings hold no lone surrogate and no more bytes than the JSON they came from
    json_size = len(data) if isinstance(data, bytes) else None
    if texts and json_size is not None and json_size > SPLIT_ABOVE:
        split = _SPLIT(data)  # type: ignore[arg-type]
        if split is not None:
            parted = _from_split(data, split)  # type: ignore[arg-type]
            if parted is not None:
                validate_event(parted, False, json_size)  # (split read every value: none nests deep)
                return parted
    try:
        event: Event = _DECODE(data)
    except msgspec.ValidationError as exc:
        raise InvalidEvent(f"invalid event: {exc}") from exc
    except (msgspec.DecodeError, UnicodeEncodeError) as exc:  # (a str holding a lone surrogate)
        event = _decode_fallback(data, exc)
        json_size = None
    except RecursionError as exc:
        raise InvalidEvent(f"the event {_TOO_DEEP}") from exc
    else:
        kind = type(event)
        if kind is _TOOL_CALL or kind is _TOOL_RESULT:
            if isinstance(data, bytes):
                scan = _LINE_SCAN(data)  # brackets * 2, plus 1 where not ASCII
                deep = scan >> 1 > MAX_NESTING
                ascii_bytes = not scan & 1  # (then every text is valid UTF-8)
            else:
                deep = _brackets(data) > MAX_NESTING
                ascii_bytes = False
            values = not texts
            if (values or deep or not ascii_bytes) and not _texts_valid(event, kind, values, deep):
                event = _decode_fallback(data, None)
                json_size = None
            validate_event(event, deep, json_size)
            return event
    validate_event(event, _brackets(data) > MAX_NESTING, json_size)
    return event


#: Events longer than this (bytes) have their params and result cut out before msgspec reads
#: the rest (``raw_json.split_event``); shorter ones cost less read whole.
SPLIT_ABOVE: Final = 2048


def _from_split(data: bytes, split: raw_json.Split) -> Event | None:
    """The event from ``split_event``'s answer: its envelope decoded, ``params`` and ``result``
    the texts cut out of ``data``; ``None`` where msgspec refuses the envelope (the whole
    event is then read as always, to say what is wrong)."""
    envelope, params_start, params_end, result_start, result_end = split
    try:
        event: Event = _DECODE(envelope)
    except (msgspec.ValidationError, msgspec.DecodeError, UnicodeEncodeError, RecursionError):
        return None
    kind = type(event)
    if kind is not _TOOL_CALL and kind is not _TOOL_RESULT:
        return event
    view = memoryview(data)
    if params_start >= 0:
        _FORCE_SETATTR(event, "params", _RAW(view[params_start:params_end]))
    if kind is _TOOL_RESULT and result_start >= 0:
        _FORCE_SETATTR(event, "result", _RAW(view[result_start:result_end]))
    return event


def _texts_valid(event: Event, kind: type[Event], values: bool, deep: bool) -> bool:
    """Whether the JSON texts msgspec kept of the event's ``params`` and ``result`` are valid
    (it checked all but their UTF-8 when it skipped them); ``values``: give them as their
    values instead; ``deep``: each is decoded once here (where it might nest too deep for the
    decoder), then kept as its text. ``False``: the event is read again as a whole, to say
    what is wrong as it always did."""
    for name in _TEXTS if kind is _TOOL_RESULT else _CALL_TEXTS:
        raw = getattr(event, name)
        if raw is _UNSET:
            continue
        if values or deep:
            try:
                value = _DECODE_VALUE(raw)
            except (msgspec.DecodeError, RecursionError):
                return False
            if values:
                _FORCE_SETATTR(event, name, value)
        elif not _UTF8_VALID(raw):
            return False
    return True


def _brackets(data: bytes | str) -> int:
    """An upper bound of the JSON's nesting depth (brackets inside strings counted too)."""
    if isinstance(data, str):
        return data.count("[") + data.count("{")
    return _OPENING_BRACKETS(data)


def _decode_fallback(data: bytes | str, error: Exception | None) -> Event:
    """The event read by the stdlib parser, its ``params`` and ``result`` as plain values.

    ``error``: what msgspec said of the whole event (``None``: it read the event, but not one
    of the values it had only skipped; asked again, untyped, it says what is wrong)."""
    # msgspec rejects lone UTF-16 surrogates ("\ud800"); JavaScript accepts them and OpenClaw
    # sanitises them before hashing, so such events stay valid through the stdlib parser.
    try:
        value = loads_with_surrogates(data)
    except UnicodeDecodeError as exc:  # (what msgspec said may be of a later place: this is first)
        raise InvalidEvent(f"not valid JSON: invalid UTF-8 at byte {exc.start}") from exc
    except (ValueError, TypeError):
        raise InvalidEvent(f"not valid JSON: {_printable(str(error or _untyped_error(data)))}") from error
    except RecursionError as exc:
        raise InvalidEvent(f"the event {_TOO_DEEP}") from exc
    values: dict[str, Any] = {}
    if type(value) is dict:  # a key with a lone surrogate names no field: ignored, as unknown keys are
        value = {key: item for key, item in value.items() if encodable(key)}
        values = {name: value.pop(name) for name in _TEXTS if name in value}  # (msgspec keeps them as text)
        value = _typed_numbers(value)
    try:
        converted: Event = msgspec.convert(value, Event, strict=True)
    except msgspec.ValidationError as exc:
        raise InvalidEvent(f"invalid event: {_printable(str(exc))}") from exc
    except UnicodeEncodeError as exc:  # a lone surrogate where msgspec needs text it can encode
        raise InvalidEvent(f"{_surrogate_at(value)}: a lone UTF-16 surrogate is not valid here") from exc
    except RecursionError as exc:
        raise InvalidEvent(f"the event {_TOO_DEEP}") from exc
    for name, item in values.items():
        if name in type(converted).__struct_fields__:
            _FORCE_SETATTR(converted, name, item)
    return converted


def _typed_numbers(value: dict[str, Any]) -> dict[str, Any]:
    """The event's fields (``params`` and ``result`` taken out) with the numbers the stdlib
    reader gave as :class:`JSNumber` as msgspec's own decoder gives them: a float, and a number
    beyond a double refused as msgspec refuses it (the same reason, whichever reader read it)."""
    out: dict[str, Any] = {}
    for key, item in value.items():
        if key in _ANY_VALUE:
            out[key] = item
        elif type(item) is dict:  # (usage: the one struct an event holds)
            out[key] = {inner: _typed_number(part, f"{key}.{inner}") for inner, part in item.items()}
        else:
            out[key] = _typed_number(item, key)
    return out


def _typed_number(item: Any, path: str) -> Any:
    if type(item) is not JSNumber:
        return item
    number: float = item.value
    if number - number != 0:  # ±Infinity (JSON holds no NaN)
        raise InvalidEvent(f"invalid event: Number out of range - at `$.{_printable(path)}`")
    return number


def _untyped_error(data: bytes | str) -> Exception:
    """What msgspec says of ``data`` read as any JSON (the reason an event is not JSON)."""
    try:
        WIRE_DECODER.decode(data)
    except (msgspec.DecodeError, RecursionError) as exc:
        return exc
    return ValueError("not valid JSON")


#: fields whose values are any JSON (their strings may hold lone surrogates)
_ANY_VALUE: Final = frozenset({"params", "result", "error"})


def _surrogate_at(value: Any) -> str:
    """Where a typed field of a decoded event holds a lone surrogate (``$`` if not found)."""
    if type(value) is not dict:
        return "$"
    for key, item in value.items():
        if key in _ANY_VALUE:
            continue
        if type(item) is str and not encodable(item):
            return str(key)
        if type(item) is dict:
            for inner, inner_item in item.items():
                if not encodable(inner) or (type(inner_item) is str and not encodable(inner_item)):
                    return f"{key}.{_printable(inner)}"
    return "$"


def _printable(text: str) -> str:
    """``text`` with lone surrogates escaped, so a reason can always be encoded."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
