"""Events built from a runtime's Python values: the one way the in-process detector and the
Kafka client turn a call or its outcome into a wire event.

``params`` and ``result`` go through :func:`python_value` (what JSON would carry, the same
for both); an error given as an exception is its text (its type's name when the text is
empty); ``usage`` is read by :func:`detectors.events.as_usage`.

An event built here holds to the limits of every door (:mod:`detectors.input_limits`), or
:class:`~detectors.events.InvalidEvent` says what and where, before anything is hashed or
published: ids are strings, ``params`` and ``result`` nest at most 64 arrays and objects
(a value that holds itself nests without end), and a value whose text is its memory address
(an object without a ``__str__`` or ``__repr__`` of its own) is refused, as two equal calls
would never hash the same.
"""

from __future__ import annotations

import base64
import re
from typing import Any, TypeVar

import msgspec
from msgspec import UNSET

from loopwatch.detectors.decoding import validate_event
from loopwatch.detectors.events import Event, InvalidEvent, ToolCall, ToolResult, Usage, as_usage
from loopwatch.detectors.input_limits import IDENTITY_FIELDS, MAX_NESTING
from loopwatch.detectors.outcomes import MISSING
from loopwatch.detectors.stable_json import JSNumber, from_python

__all__ = ["call_event", "checked", "python_value", "result_event"]

E = TypeVar("E", bound=Event)


def python_value(name: str, value: Any) -> Any:
    """``value`` as the JSON the wire carries, the same for the in-process detector and the
    Kafka client (so both hash it alike): numbers with JavaScript's value
    (:func:`~detectors.stable_json.from_python`), tuples as arrays, keys as text, bytes as
    ``{"data": base64, "type": "Uint8Array"}`` and an exception as ``{"message", "name"}`` (as
    OpenClaw's ``stableStringify`` writes them), any other object as its text (a dataclass, a
    date, a path). :class:`InvalidEvent` names ``name`` when it nests more than
    :data:`MAX_NESTING` arrays and objects (or holds itself), or holds an object whose text is
    its memory address or cannot be made."""
    return _wire(name, value, 0, [])


def _wire(name: str, value: Any, depth: int, open_ids: list[int]) -> Any:
    if value is None or type(value) is bool or isinstance(value, JSNumber):
        return value
    if isinstance(value, str):  # (a StrEnum's member: its value)
        return value if type(value) is str else str.__str__(value)
    if isinstance(value, int):  # (an IntEnum's member: its value)
        return value if type(value) is int else int(value)
    if isinstance(value, float):
        return from_python(float(value))
    if isinstance(value, (dict, list, tuple)):
        if depth >= MAX_NESTING or id(value) in open_ids:
            raise InvalidEvent(f"{name}: nests more than {MAX_NESTING} arrays and objects (or holds itself)")
        open_ids.append(id(value))
        try:
            if isinstance(value, dict):
                return {
                    _text(name, key): _wire(name, item, depth + 1, open_ids) for key, item in value.items()
                }
            return [_wire(name, item, depth + 1, open_ids) for item in value]
        finally:
            open_ids.pop()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"data": base64.b64encode(bytes(value)).decode(), "type": "Uint8Array"}
    if isinstance(value, BaseException):
        return {"message": _text(name, value), "name": type(value).__name__}
    return _text(name, value)


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]{4,}>")
_OBJECT_STR: Any = object.__str__
_OBJECT_REPR: Any = object.__repr__


def _text(name: str, value: Any) -> str:
    """The text a value goes by (a key, an object): :class:`InvalidEvent` naming ``name`` when
    it is its memory address (``<Obj object at 0x7f…>``, ``<function f at 0x7f…>``: it differs
    between two equal calls) or cannot be made."""
    if type(value) is str:
        return value
    kind: Any = type(value)
    if kind.__str__ is _OBJECT_STR and kind.__repr__ is _OBJECT_REPR:
        raise _address(name, kind)
    try:
        text = str.__str__(value) if isinstance(value, str) else str(value)
    except Exception as exc:
        raise InvalidEvent(
            f"{name}: a {kind.__name__} has no text (its __str__ raised {type(exc).__name__}: {exc})"
        ) from exc
    if _ADDRESS.search(text) is not None:
        raise _address(name, kind)
    return text


def _address(name: str, kind: type) -> InvalidEvent:
    return InvalidEvent(
        f"{name}: a {kind.__name__} has no JSON form (its text is its memory address, "
        "so equal calls would never match): pass its fields, or give the class a __repr__"
    )


_REQUIRED = frozenset({"event_id", "tool", "agent_id"})


def checked(event: E) -> E:
    """``event``, once its fields have their types and every door's limits hold
    (:func:`~detectors.decoding.validate_event`; ``params`` / ``result`` were measured by
    :func:`python_value`); :class:`InvalidEvent` says what and where."""
    exact: dict[str, str] = {}
    for name in IDENTITY_FIELDS:
        value = getattr(event, name, None)
        if value is None and name in _REQUIRED and hasattr(event, name):
            raise InvalidEvent(f"{name}: must be a string, not None")
        if value is not None and value is not UNSET and not isinstance(value, str):
            raise InvalidEvent(f"{name}: must be a string, not {type(value).__name__}")
        if type(value) is not str and isinstance(value, str):  # (a StrEnum's member: its value)
            exact[name] = str.__str__(value)
    if exact:
        event = msgspec.structs.replace(event, **exact)
    ts = event.ts
    if ts is not None and (type(ts) is not int):
        raise InvalidEvent(f"ts: must be an integer (milliseconds), not {type(ts).__name__}")
    validate_event(event, deep=False)
    return event


def call_event(
    event_id: str,
    run_id: str,
    tool: str,
    params: Any,
    *,
    agent_id: str,
    session_id: str | None = None,
    ts: int | None = None,
    tool_call_id: str | None = None,
    usage: Usage | dict[str, Any] | None = None,
    parent_run_id: str | None = None,
    batch_id: str | None = None,
) -> ToolCall:
    """A ``tool_call`` (``parent_run_id``: the run that started this one, on its first call;
    ``batch_id``: shared by the calls of one model turn)."""
    return checked(
        ToolCall(
            event_id=event_id,
            run_id=run_id,
            session_id=session_id,
            agent_id=agent_id,
            ts=ts,
            tool=tool,
            params=python_value("params", params),
            tool_call_id=tool_call_id,
            usage=as_usage(usage),
            parent_run_id=parent_run_id if parent_run_id else UNSET,
            batch_id=batch_id if batch_id else UNSET,
        )
    )


def result_event(
    event_id: str,
    run_id: str,
    tool: str,
    params: Any,
    *,
    agent_id: str,
    result: Any = UNSET,
    error: BaseException | str | None = None,
    session_id: str | None = None,
    ts: int | None = None,
    tool_call_id: str | None = None,
) -> ToolResult:
    """A ``tool_result``: ``error`` raised (it wins), else ``result`` returned (neither: an
    outcome with nothing to record)."""
    if error is not None:
        error_value: Any = str(error) or (type(error).__name__ if isinstance(error, BaseException) else "")
        result_value: Any = UNSET
    else:
        error_value = UNSET
        result_value = UNSET if result is UNSET or result is MISSING else python_value("result", result)
    event = ToolResult(
        event_id=event_id,
        run_id=run_id,
        session_id=session_id,
        agent_id=agent_id,
        ts=ts,
        tool=tool,
        params=python_value("params", params),
        result=result_value,
        error=error_value,
        tool_call_id=tool_call_id,
    )
    if result_value is UNSET and error_value is UNSET:  # an outcome with nothing to record: its
        checked(msgspec.structs.replace(event, error=""))  # other fields are checked all the same
        return event
    return checked(event)
