"""Events built from a runtime's Python values: the one way the in-process detector and the
Kafka client turn a call or its outcome into a wire event.

``params`` and ``result`` go through :func:`detectors.stable_json.from_python` (what JSON
would carry); an error given as an exception is its text (its type's name when the text is
empty); ``usage`` is read by :func:`detectors.events.as_usage`.

An event built here holds to the limits of every door (:mod:`detectors.input_limits`), or
:class:`~detectors.events.InvalidEvent` says what and where, before anything is hashed or
published: ids are strings, ``params`` and ``result`` nest at most 64 arrays and objects
(a value that holds itself nests without end), and a value whose text is its memory address
(an object without a ``__str__`` or ``__repr__`` of its own) is refused, as two equal calls
would never hash the same.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

from msgspec import UNSET

from loopwatch.detectors.decoding import validate_event
from loopwatch.detectors.events import Event, InvalidEvent, ToolCall, ToolResult, Usage, as_usage
from loopwatch.detectors.input_limits import IDENTITY_FIELDS, MAX_NESTING
from loopwatch.detectors.outcomes import MISSING
from loopwatch.detectors.stable_json import from_python

__all__ = ["call_event", "checked", "python_value", "result_event"]

E = TypeVar("E", bound=Event)


def python_value(name: str, value: Any) -> Any:
    """``value`` as the JSON the wire would carry (:func:`from_python`), once it nests at most
    :data:`MAX_NESTING` arrays and objects and holds no object whose text is its address."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list, tuple)):
            if depth >= MAX_NESTING:
                raise InvalidEvent(
                    f"{name}: nests more than {MAX_NESTING} arrays and objects (or holds itself)"
                )
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
        elif _text_is_address(item):
            raise InvalidEvent(
                f"{name}: a {type(item).__name__} has no JSON form (its text is its memory address, "
                "so equal calls would never match): pass its fields, or give the class a __repr__"
            )
    return from_python(value)


_PLAIN = (str, int, float, bool, type(None))
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]{4,}>")
_OBJECT_STR: Any = object.__str__
_OBJECT_REPR: Any = object.__repr__


def _text_is_address(value: Any) -> bool:
    """Whether the text a value is hashed by holds its memory address (``<Obj object at
    0x7f…>``, ``<function f at 0x7f…>``): it differs between two equal calls."""
    if isinstance(value, _PLAIN):
        return False
    kind: Any = type(value)
    if kind.__str__ is _OBJECT_STR and kind.__repr__ is _OBJECT_REPR:
        return True
    try:
        text = str(value)
    except Exception:  # noqa: BLE001 - a __str__ that fails: the hashing would fail alike
        return False
    return _ADDRESS.search(text) is not None


_REQUIRED = frozenset({"event_id", "tool", "agent_id"})


def checked(event: E) -> E:
    """``event``, once its fields have their types and every door's limits hold
    (:func:`~detectors.decoding.validate_event`; ``params`` / ``result`` were measured by
    :func:`python_value`); :class:`InvalidEvent` says what and where."""
    for name in IDENTITY_FIELDS:
        value = getattr(event, name, None)
        if value is None and name in _REQUIRED and hasattr(event, name):
            raise InvalidEvent(f"{name}: must be a string, not None")
        if value is not None and value is not UNSET and not isinstance(value, str):
            raise InvalidEvent(f"{name}: must be a string, not {type(value).__name__}")
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
    if result_value is UNSET and error_value is UNSET:
        return event  # (an outcome with nothing to record: the caller records nothing)
    return checked(event)
