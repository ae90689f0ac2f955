"""OTLP/HTTP traces in: ``execute_tool`` spans (OpenTelemetry GenAI conventions) as wire events.

No I/O here: the gateway's ``POST /v1/traces`` route (:mod:`streams.gateway.server`) reads the
body and applies the events; this module turns an ``ExportTraceServiceRequest`` (protobuf or
OTLP/JSON) into :class:`Span` values (:func:`parse_request`), those into ``tool_call`` +
``tool_result`` events (:func:`events_of`), and writes the OTLP answers
(:func:`export_response`, :func:`status_body`).

The mapping of one span whose ``gen_ai.operation.name`` is ``"execute_tool"``:

* ``run_id``: ``gen_ai.conversation.id`` (span, else resource attribute), else the trace id
  (32 lowercase hex digits). ``agent_id``: ``gen_ai.agent.name``, else ``gen_ai.agent.id``
  (span, else resource), else ``"default"``.
* ``tool``: ``gen_ai.tool.name``, else the span name after ``"execute_tool "``.
  ``tool_call_id``: ``gen_ai.tool.call.id``.
* ``params``: ``gen_ai.tool.call.arguments``. A string holding a JSON object or array is that
  JSON (the conventions serialise arguments that way); any other string is the string; a
  structured value (kvlist, array) is its value. Missing: ``{}``.
* the outcome: with status code ERROR, ``error`` is the status description, else the first
  ``exception`` event's ``exception.message`` (else ``exception.type``), else the
  ``error.type`` attribute, else ``"error"``. Otherwise ``result`` is
  ``gen_ai.tool.call.result`` read like the arguments; missing: ``null``.
* ``event_id``: ``otlp:<trace id>:<span id>:call`` and ``…:result`` (a span sent again is the
  same events: the run's state de-duplicates them). ``ts``: the span's start (call) and end
  (result) time in ms; 0 means unknown.
* the events of a request are applied span by span in start-time order (call, then result).

**The precision cost of spans without content.** The conventions make arguments and results
opt-in (they may hold sensitive data), so many exporters leave them out. Such calls are hashed
from what is there: every argument-less call of a tool has the same ``params`` (``{}``), so
different calls of one tool count as repeats (the generic-repeat rule may warn on a run that
makes progress), and every result-less outcome is the same ``null`` (no-progress rules see no
change, ping-pong sees none either). Errors still differ by their description.

A span that is not ``execute_tool`` is ignored (counted, never an error). An ``execute_tool``
span that cannot become valid events (no tool name, ids of the wrong length, an attribute of
the wrong type, an input limit exceeded) is rejected: it is counted in the answer's
``partial_success`` with the first reasons, and the other spans are applied. A request that
is not an ``ExportTraceServiceRequest`` at all (bad protobuf, bad JSON, wrong JSON types) is
:class:`OtlpError` (400 with the reason).

Work per request is bounded (:data:`MAX_SPANS`, :data:`MAX_ATTRIBUTES`, :data:`MAX_EVENTS`:
eight times what an OpenTelemetry SDK sends with its default limits, so no such export is
refused): a span over a limit is rejected without its values being read, the spans past the
first :data:`MAX_SPANS` are counted as rejected, and the answer's ``partial_success`` names the
limit. Of protobuf only the attributes the mapping reads are converted; OTLP/JSON's are all
read (their types are checked). :func:`convert` is what the gateway runs, off its event loop
for a large body; it lets the interpreter go every :data:`PACE_EVERY` values it converts.

Numbers follow docs/wire-numbers.md: integers in ASCII digits within their field's range
(``fixed64`` times: no negative start), doubles as proto3's JSON mapping writes them (``1e400``
in a ``doubleValue`` is refused; ``"Infinity"`` is read); an infinite double inside arguments
or a result is JavaScript's Infinity, a NaN there rejects its span.

Protobuf needs ``opentelemetry-proto`` (the ``otlp`` extra, imported on first use):
:data:`PROTOBUF_MISSING` is the reason given without it. OTLP/JSON needs nothing more.
"""

from __future__ import annotations

import base64
import json
import math
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from loopwatch.detectors.decoding import decode_event
from loopwatch.detectors.events import Event, InvalidEvent
from loopwatch.detectors.stable_json import WIRE_DECODER, JSNumber, wire_enc_hook
from loopwatch.streams.gateway.tolerant_json import dumps, loads

__all__ = [
    "DEADLINE_EXCEEDED",
    "INVALID_ARGUMENT",
    "JSON_MEDIA",
    "MAX_ATTRIBUTES",
    "MAX_EVENTS",
    "MAX_SPANS",
    "PROTOBUF_MEDIA",
    "PROTOBUF_MISSING",
    "Mapped",
    "OtlpError",
    "Span",
    "convert",
    "events_of",
    "export_response",
    "limit_problem",
    "parse_request",
    "protobuf_available",
    "span_events",
    "status_body",
]

PROTOBUF_MEDIA: Final = "application/x-protobuf"
JSON_MEDIA: Final = "application/json"
#: The answer to a protobuf request when ``opentelemetry-proto`` is not installed (415).
PROTOBUF_MISSING: Final = (
    "OTLP protobuf needs the otlp extra (pip install 'loopwatch[otlp]'); OTLP/JSON "
    "(Content-Type: application/json) works without it"
)
_STATUS_ERROR: Final = 2
_TOOL_OPERATION: Final = "execute_tool"
#: How many rejection reasons an answer quotes.
_REASONS_QUOTED: Final = 3

# The limits of one request (bounded work per body): eight times what an OpenTelemetry SDK
# sends with its default limits (128 attributes, events and links per span, 128 attributes
# per event; 512 spans per export of the batch span processor), so no such export is ever
# refused. A span over a limit is rejected (partial success, naming the limit) without its
# values being read; the spans after the first MAX_SPANS likewise. Links are never read.
#: The most spans one request may hold.
MAX_SPANS: Final = 4096
#: The most attributes of one span, one of its events, or the resource.
MAX_ATTRIBUTES: Final = 1024
#: The most events of one span.
MAX_EVENTS: Final = 1024
#: What an SDK sends at most with its defaults (quoted in the refusals).
_SDK_DEFAULTS: Final = "an OpenTelemetry SDK sends at most 128 with its default limits"


#: The attributes the mapping reads of a span and its resource, and of an ``exception`` event
#: (of protobuf, only these are converted: bounded work per span whatever else it carries).
_READ_KEYS: Final = frozenset(
    {
        "gen_ai.operation.name",
        "gen_ai.tool.name",
        "gen_ai.conversation.id",
        "gen_ai.agent.name",
        "gen_ai.agent.id",
        "gen_ai.tool.call.id",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
        "error.type",
    }
)
_EVENT_KEYS: Final = frozenset({"exception.message", "exception.type"})
#: The values converted between two moments the reading thread lets the event loop's take
#: the interpreter (:func:`_pace`).
PACE_EVERY: Final = 1024
_paced = [0]


def _pace(values: int) -> None:
    """Counts ``values`` converted; every :data:`PACE_EVERY` of them the interpreter lock is
    let go for a moment (``time.sleep(0)``), so the event loop's thread, which may be waiting
    for it, answers its requests now rather than after the switch interval (5 ms)."""
    _paced[0] += values
    if _paced[0] >= PACE_EVERY:
        _paced[0] = 0
        time.sleep(0)


def limit_problem(attributes: int, events: int, event_attributes: int) -> str:
    """Which limit a span breaks, given its counts ("": none)."""
    if attributes > MAX_ATTRIBUTES:
        return f"{attributes} attributes, more than the limit of {MAX_ATTRIBUTES} per span ({_SDK_DEFAULTS})"
    if events > MAX_EVENTS:
        return f"{events} events, more than the limit of {MAX_EVENTS} per span ({_SDK_DEFAULTS})"
    if event_attributes > MAX_ATTRIBUTES:
        return (
            f"an event with {event_attributes} attributes, more than the limit of {MAX_ATTRIBUTES} "
            f"per event ({_SDK_DEFAULTS})"
        )
    return ""


def _resource_problem(attributes: int) -> str:
    if attributes > MAX_ATTRIBUTES:
        return f"its resource has {attributes} attributes, more than the limit of {MAX_ATTRIBUTES}"
    return ""


def _overflow_reason(overflow: int) -> str:
    return (
        f"{overflow} span(s) after the first {MAX_SPANS} of the request (the most one request may "
        "hold; an OpenTelemetry SDK exports at most 512 at once by default)"
    )


class OtlpError(Exception):
    """The body is not an ``ExportTraceServiceRequest``; ``reason`` says what and where."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


@dataclass(frozen=True)
class Span:
    """What the mapping reads of one span (ids in lowercase hex, times in ns since the epoch)."""

    trace_id: str
    span_id: str
    name: str = ""
    start_ns: int = 0
    end_ns: int = 0
    attributes: dict[str, Any] = field(default_factory=dict)
    resource: dict[str, Any] = field(default_factory=dict)
    status_code: int = 0
    status_message: str = ""
    events: tuple[tuple[str, dict[str, Any]], ...] = ()
    #: the limit the span breaks (:func:`limit_problem`): rejected with it, its values unread
    problem: str = ""


@dataclass
class Mapped:
    """The events of a request's spans, and what was not turned into events."""

    events: list[Event] = field(default_factory=list)
    tool_spans: int = 0
    ignored: int = 0
    rejected: int = 0
    reasons: list[str] = field(default_factory=list)
    #: of the rejected, the spans over a limit (any spans: their attributes were not read)
    limited: int = 0

    def message(self) -> str:
        """The answer's ``partial_success.error_message`` ("" when there is nothing to say)."""
        parts = []
        if self.rejected:
            what = "span(s)" if self.limited else "execute_tool span(s)"
            parts.append(f"{self.rejected} {what} rejected: " + "; ".join(self.reasons))
        if self.ignored:
            parts.append(f"{self.ignored} span(s) ignored (not gen_ai.operation.name=execute_tool)")
        return ". ".join(parts)


# -- the mapping ---------------------------------------------------------------------------------


def _lookup(span: Span, key: str) -> Any:
    value = span.attributes.get(key)
    return span.resource.get(key) if value is None else value


def _text(value: Any, key: str) -> str | None:
    """An attribute that must be a string (None: absent or empty)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidEvent(f"{key}: must be a string, not {type(value).__name__}")
    return value or None


def _content(value: Any, key: str) -> Any:
    """Arguments or a result as wire JSON: a JSON object or array given as a string is that
    JSON (kept as its text, so the core reads its numbers like any wire event's: a number
    beyond a double is JavaScript's ±Infinity); a structured value is its value
    (:func:`_json_value`)."""
    if isinstance(value, str):
        stripped = value.strip()
        if stripped[:1] in ("{", "["):
            raw = stripped.encode("utf-8", "surrogatepass")
            try:
                WIRE_DECODER.decode(raw)  # (JSON as the wire reads it: 1e400 is JSON, NaN is not)
            except (msgspec.DecodeError, RecursionError):
                return value
            return msgspec.Raw(raw)
        return value
    try:
        return _json_value(value, key)
    except RecursionError as exc:
        raise InvalidEvent(f"{key}: nested too deeply") from exc


def _json_value(value: Any, key: str) -> Any:
    """A structured attribute value as the wire holds it: bytes as base64, an infinite double
    as JavaScript's ±Infinity (hashed ``"Infinity"``, as OpenClaw hashes it); a NaN double has
    no JSON form (the span is rejected)."""
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        if value != value:
            raise InvalidEvent(f"{key}: holds a NaN double, which JSON cannot carry")
        return JSNumber(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, dict):
        return {name: _json_value(item, key) for name, item in value.items()}
    if isinstance(value, list):
        return [_json_value(item, key) for item in value]
    return value


def _error_of(span: Span) -> str:
    if span.status_message:
        return span.status_message
    for name, attributes in span.events:
        if name == "exception":
            message = attributes.get("exception.message") or attributes.get("exception.type")
            if message:
                return str(message)
    kind = span.attributes.get("error.type")
    return str(kind) if kind else "error"


def span_events(span: Span) -> list[Event] | None:
    """The ``tool_call`` and ``tool_result`` of an ``execute_tool`` span; None for any other
    span. Raises :class:`InvalidEvent` for a tool span that cannot be valid events, and for a
    span over a limit (:attr:`Span.problem`), whatever it is."""
    if span.problem:
        raise InvalidEvent(span.problem)
    if span.attributes.get("gen_ai.operation.name") != _TOOL_OPERATION:
        return None
    if len(span.trace_id) != 32 or len(span.span_id) != 16 or span.trace_id == "0" * 32:
        raise InvalidEvent("traceId / spanId: a span needs a 16-byte trace id and an 8-byte span id")
    tool = _text(span.attributes.get("gen_ai.tool.name"), "gen_ai.tool.name")
    if tool is None:
        prefix = _TOOL_OPERATION + " "
        tool = span.name[len(prefix) :].strip() if span.name.startswith(prefix) else ""
        if not tool:
            raise InvalidEvent("gen_ai.tool.name: missing (and the span name names no tool)")
    run_id = _text(_lookup(span, "gen_ai.conversation.id"), "gen_ai.conversation.id") or span.trace_id
    agent = _text(_lookup(span, "gen_ai.agent.name"), "gen_ai.agent.name")
    agent = agent or _text(_lookup(span, "gen_ai.agent.id"), "gen_ai.agent.id") or "default"
    common: dict[str, Any] = {"run_id": run_id, "agent_id": agent, "tool": tool}
    call_id = _text(span.attributes.get("gen_ai.tool.call.id"), "gen_ai.tool.call.id")
    if call_id is not None:
        common["tool_call_id"] = call_id
    arguments = span.attributes.get("gen_ai.tool.call.arguments")
    common["params"] = {} if arguments is None else _content(arguments, "gen_ai.tool.call.arguments")
    base = f"otlp:{span.trace_id}:{span.span_id}"
    call: dict[str, Any] = {"type": "tool_call", "event_id": f"{base}:call", **common}
    outcome: dict[str, Any] = {"type": "tool_result", "event_id": f"{base}:result", **common}
    if span.start_ns:
        call["ts"] = span.start_ns // 1_000_000
    if span.end_ns:
        outcome["ts"] = span.end_ns // 1_000_000
    if span.status_code == _STATUS_ERROR:
        outcome["error"] = _error_of(span)
    else:
        outcome["result"] = _content(
            span.attributes.get("gen_ai.tool.call.result"), "gen_ai.tool.call.result"
        )
    return [decode_event(_encode(call)), decode_event(_encode(outcome))]


_WIRE_ENCODE: Final = msgspec.json.Encoder(enc_hook=wire_enc_hook).encode


def _encode(value: dict[str, Any]) -> bytes:
    try:
        return _WIRE_ENCODE(value)
    except (TypeError, UnicodeEncodeError):  # lone surrogates: the standard library escapes them
        # (a JSON text kept as msgspec.Raw holds none: msgspec read it; its value goes instead)
        plain = {
            name: loads(bytes(item))[0] if isinstance(item, msgspec.Raw) else item
            for name, item in value.items()
        }
        return dumps(plain, True)
    except RecursionError as exc:
        raise InvalidEvent("gen_ai.tool.call.arguments / result: nested too deeply") from exc


def events_of(spans: list[Span], overflow: int = 0) -> Mapped:
    """The events of a request's spans (tool spans in start-time order), and the counts
    (``overflow``: the spans past :data:`MAX_SPANS`, rejected unread)."""
    mapped = Mapped()
    if overflow:
        mapped.rejected += overflow
        mapped.limited += overflow
        mapped.reasons.append(_overflow_reason(overflow))
    ordered = sorted(spans, key=lambda span: (span.start_ns, span.end_ns))
    for span in ordered:
        if span.problem:
            mapped.rejected += 1
            mapped.limited += 1
            if len(mapped.reasons) < _REASONS_QUOTED:
                mapped.reasons.append(f"span {span.span_id or '?'}: {span.problem}")
            continue
        try:
            events = span_events(span)
        except InvalidEvent as exc:
            mapped.tool_spans += 1
            mapped.rejected += 1
            if len(mapped.reasons) < _REASONS_QUOTED:
                mapped.reasons.append(f"span {span.span_id or '?'}: {exc.reason}")
            continue
        if events is None:
            mapped.ignored += 1
            continue
        mapped.tool_spans += 1
        mapped.events.extend(events)
    return mapped


# -- OTLP/JSON -----------------------------------------------------------------------------------


def _field(obj: dict[str, Any], camel: str, snake: str, where: str, kind: type | tuple[type, ...]) -> Any:
    """A field by its JSON name (or its proto name, which parsers accept too), type-checked."""
    value = obj.get(camel, obj.get(snake))
    if value is None:
        return None
    if not isinstance(value, kind) or isinstance(value, bool) is not (kind is bool):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise OtlpError(
            f"{where}.{camel}: expected {_json_type(names)}, got {_json_type(type(value).__name__)}"
        )
    return value


def _json_type(name: str) -> str:
    return {"dict": "an object", "list": "an array", "str": "a string", "int": "an integer"}.get(name, name)


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise OtlpError(f"{where}: expected an object, got {_json_type(type(value).__name__)}")
    return value


def _items(obj: dict[str, Any], camel: str, snake: str, where: str) -> Iterator[tuple[str, dict[str, Any]]]:
    values = _field(obj, camel, snake, where, list) or []
    for index, item in enumerate(values):
        path = f"{where}.{camel}[{index}]"
        yield path, _object(item, path)


#: A decimal integer in ASCII digits (``int()`` and ``str.isdigit`` read other scripts' digits too).
_INTEGER: Final = re.compile(r"-?[0-9]{1,20}")
#: A JSON number (ASCII), as proto3's JSON mapping takes a double in a string.
_NUMBER: Final = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
#: proto3's JSON names of the doubles JSON has no number for
_NAMED_DOUBLES: Final = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
#: the ranges of OTLP's integer fields: ``fixed64`` times, ``int64`` values, ``int32`` enums
UINT64: Final = (0, 2**64 - 1, "an unsigned 64-bit integer")
INT64: Final = (-(2**63), 2**63 - 1, "a signed 64-bit integer")
INT32: Final = (-(2**31), 2**31 - 1, "a signed 32-bit integer")


def _integer(value: Any, where: str, kind: tuple[int, int, str] = INT64) -> int:
    """An integer field: a JSON integer or its decimal string (ASCII digits), within ``kind``."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise OtlpError(f"{where}: expected an integer (or its decimal string)")
    if isinstance(value, str) and _INTEGER.fullmatch(value) is None:
        raise OtlpError(f"{where}: expected an integer (or its decimal string), got {value[:40]!r}")
    number = int(value)
    low, high, name = kind
    if not low <= number <= high:
        raise OtlpError(f"{where}: out of the range of {name}")
    return number


def _double(value: Any, where: str) -> float:
    """A ``double`` field: a JSON number, or a string holding one or naming NaN or ±Infinity
    (proto3's JSON mapping); a number beyond a double is refused, as protobuf's JSON parsers
    refuse it (JSON has no infinite number: they are written ``"Infinity"``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str, JSNumber)):
        raise OtlpError(f"{where}: expected a number")
    if isinstance(value, str):
        named = _NAMED_DOUBLES.get(value)
        if named is not None:
            return named
        if _NUMBER.fullmatch(value) is None:
            raise OtlpError(f"{where}: expected a number, got {value[:40]!r}")
    number = value.value if isinstance(value, JSNumber) else value
    try:
        double = float(number)
    except OverflowError:  # an integer of more than 308 digits
        double = math.inf
    if math.isinf(double):
        raise OtlpError(f'{where}: {_BEYOND_A_DOUBLE} (an infinite double is written "Infinity")')
    return double


#: what a number too large for a double is called in refusals
_BEYOND_A_DOUBLE: Final = "a number beyond a double"


def _json_any(value: Any, where: str) -> Any:
    """An OTLP/JSON ``AnyValue`` as a Python value."""
    obj = _object(value, where)
    if "stringValue" in obj or "string_value" in obj:
        return _field(obj, "stringValue", "string_value", where, str) or ""
    if "boolValue" in obj or "bool_value" in obj:
        return bool(_field(obj, "boolValue", "bool_value", where, bool))
    if "intValue" in obj or "int_value" in obj:
        return _integer(obj.get("intValue", obj.get("int_value")), f"{where}.intValue")
    if "doubleValue" in obj or "double_value" in obj:
        return _double(obj.get("doubleValue", obj.get("double_value")), f"{where}.doubleValue")
    if "arrayValue" in obj or "array_value" in obj:
        array = _field(obj, "arrayValue", "array_value", where, dict) or {}
        values = _field(array, "values", "values", f"{where}.arrayValue", list) or []
        return [_json_any(item, f"{where}.arrayValue.values[{i}]") for i, item in enumerate(values)]
    if "kvlistValue" in obj or "kvlist_value" in obj:
        kvlist = _field(obj, "kvlistValue", "kvlist_value", where, dict) or {}
        return _json_attributes(kvlist, f"{where}.kvlistValue", "values")
    if "bytesValue" in obj or "bytes_value" in obj:
        text = _field(obj, "bytesValue", "bytes_value", where, str) or ""
        try:
            return base64.b64decode(text, validate=True)
        except ValueError:
            raise OtlpError(f"{where}.bytesValue: not base64") from None
    return None


def _json_attributes(obj: dict[str, Any], where: str, name: str = "attributes") -> dict[str, Any]:
    items = _field(obj, name, name, where, list) or []
    _pace(len(items))
    attributes: dict[str, Any] = {}
    for index, item in enumerate(items):
        if type(item) is dict and len(item) == 2:  # the common {"key": k, "value": {"stringValue": s}}
            key, value = item.get("key"), item.get("value")
            if type(key) is str and type(value) is dict and len(value) == 1:
                text = value.get("stringValue")
                if type(text) is str:
                    attributes[key] = text
                    continue
        path = f"{where}.{name}[{index}]"  # (written only for the others: their errors name it)
        item = _object(item, path)
        key = _field(item, "key", "key", path, str)
        if key is None:
            raise OtlpError(f"{path}.key: required")
        value = item.get("value")
        attributes[key] = None if value is None else _json_any(value, f"{path}.value")
    return attributes


def _json_id(obj: dict[str, Any], camel: str, snake: str, where: str) -> str:
    text = _field(obj, camel, snake, where, str) or ""
    try:
        return bytes.fromhex(text).hex()
    except ValueError:
        raise OtlpError(f"{where}.{camel}: expected hex digits, got {text[:40]!r}") from None


def _json_status(span: dict[str, Any], where: str) -> tuple[int, str]:
    status = _field(span, "status", "status", where, dict) or {}
    code = status.get("code", 0)
    if isinstance(code, str) and _INTEGER.fullmatch(code) is None:
        names = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}
        if code not in names:
            raise OtlpError(f"{where}.status.code: unknown status code {code[:40]!r}")
        code = names[code]
    number = _integer(code, f"{where}.status.code", INT32)
    return number, _field(status, "message", "message", f"{where}.status", str) or ""


def _json_count(obj: Any, name: str) -> int:
    """How many items the list ``obj[name]`` holds (0 where it is not one: read later, it
    is refused with its path)."""
    items = obj.get(name) if isinstance(obj, dict) else None
    return len(items) if isinstance(items, list) else 0


def _json_span(span: dict[str, Any], where: str, resource: dict[str, Any], problem: str) -> Span:
    events_list = span.get("events")
    events_list = events_list if isinstance(events_list, list) else []
    problem = problem or limit_problem(
        _json_count(span, "attributes"),
        len(events_list),
        max((_json_count(event, "attributes") for event in events_list), default=0),
    )
    code, message = _json_status(span, where)
    start = span.get("startTimeUnixNano", span.get("start_time_unix_nano", 0))
    end = span.get("endTimeUnixNano", span.get("end_time_unix_nano", 0))
    ids: dict[str, Any] = {
        "trace_id": _json_id(span, "traceId", "trace_id", where),
        "span_id": _json_id(span, "spanId", "span_id", where),
        "name": _field(span, "name", "name", where, str) or "",
        "start_ns": _integer(start, f"{where}.startTimeUnixNano", UINT64),
        "end_ns": _integer(end, f"{where}.endTimeUnixNano", UINT64),
        "status_code": code,
        "status_message": message,
    }
    if problem:
        return Span(**ids, problem=problem)
    events = tuple(
        (_field(event, "name", "name", path, str) or "", _json_attributes(event, path))
        for path, event in _items(span, "events", "events", where)
    )
    return Span(**ids, attributes=_json_attributes(span, where), resource=resource, events=events)


class _JsonScope(msgspec.Struct, gc=False):
    spans: list[msgspec.Raw] | None = None


class _JsonResourceSpans(msgspec.Struct, gc=False):
    resource: msgspec.Raw | None = None
    scopeSpans: list[_JsonScope] | None = None  # (OTLP/JSON's names)
    scope_spans: list[_JsonScope] | None = None


class _JsonRequest(msgspec.Struct, gc=False):
    resourceSpans: list[_JsonResourceSpans] | None = None
    resource_spans: list[_JsonResourceSpans] | None = None


#: An OTLP/JSON request's frame, its spans (and resources) kept as their JSON text: each span
#: is then read on its own (the interpreter let go between them), never the whole body at once.
_FRAME: Final = msgspec.json.Decoder(_JsonRequest).decode


def _json_text(raw: msgspec.Raw, where: str) -> Any:
    _pace(len(raw) >> 5)  # (about one value per 32 bytes)
    try:
        return loads(bytes(raw))[0]
    except InvalidEvent as exc:
        raise OtlpError(f"{where}: {exc.reason}") from exc


def _spans_of_json(body: bytes) -> tuple[list[Span], int]:
    """The spans of an OTLP/JSON request: its frame first, then span by span; a body whose
    frame does not decode is read whole (:func:`_spans_of_json_whole`), which says what is
    wrong and where."""
    try:
        request = _FRAME(body)
    except (msgspec.DecodeError, RecursionError):
        return _spans_of_json_whole(body)
    spans: list[Span] = []
    overflow = 0
    try:
        resources = request.resourceSpans if request.resourceSpans is not None else request.resource_spans
        for index, resource_spans in enumerate(resources or []):
            where = f"body.resourceSpans[{index}]"
            raw = resource_spans.resource
            value = None if raw is None else {"resource": _json_text(raw, f"{where}.resource")}
            resource_obj = _field(value or {}, "resource", "resource", where, dict) or {}
            problem = _resource_problem(_json_count(resource_obj, "attributes"))
            resource = {} if problem else _json_attributes(resource_obj, f"{where}.resource")
            scopes = (
                resource_spans.scopeSpans
                if resource_spans.scopeSpans is not None
                else resource_spans.scope_spans
            )
            for scope_index, scope in enumerate(scopes or []):
                scope_where = f"{where}.scopeSpans[{scope_index}]"
                given = scope.spans or []
                room = max(MAX_SPANS - len(spans), 0)
                overflow += max(len(given) - room, 0)  # (the rest are counted, never read)
                for span_index, span_raw in enumerate(given[:room]):
                    span_where = f"{scope_where}.spans[{span_index}]"
                    span = _object(_json_text(span_raw, span_where), span_where)
                    spans.append(_json_span(span, span_where, resource, problem))
    except RecursionError:
        raise OtlpError("the body nests attribute values too deeply") from None
    return spans, overflow


def _spans_of_json_whole(body: bytes) -> tuple[list[Span], int]:
    try:
        value, _ = loads(body)
    except InvalidEvent as exc:
        raise OtlpError(exc.reason) from exc
    request = _object(value, "the body (an ExportTraceServiceRequest)")
    spans: list[Span] = []
    overflow = 0
    try:
        for where, resource_spans in _items(request, "resourceSpans", "resource_spans", "body"):
            resource_obj = _field(resource_spans, "resource", "resource", where, dict) or {}
            problem = _resource_problem(_json_count(resource_obj, "attributes"))
            resource = {} if problem else _json_attributes(resource_obj, f"{where}.resource")
            for scope_where, scope in _items(resource_spans, "scopeSpans", "scope_spans", where):
                room = MAX_SPANS - len(spans)
                if room < _json_count(scope, "spans"):  # (the rest are counted, never read)
                    overflow += _json_count(scope, "spans") - max(room, 0)
                    scope = {"spans": scope["spans"][: max(room, 0)]}
                for span_where, span in _items(scope, "spans", "spans", scope_where):
                    spans.append(_json_span(span, span_where, resource, problem))
    except RecursionError:
        raise OtlpError("the body nests attribute values too deeply") from None
    return spans, overflow


# -- OTLP protobuf (opentelemetry-proto, imported on first use) ------------------------------------


def protobuf_available() -> bool:
    """Whether ``opentelemetry-proto`` (the ``otlp`` extra) is installed."""
    try:
        import opentelemetry.proto.collector.trace.v1.trace_service_pb2  # noqa: F401
    except ImportError:
        return False
    return True


def _proto_any(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [_proto_any(item) for item in value.array_value.values]
    if kind == "kvlist_value":
        return _proto_attributes(value.kvlist_value.values)
    return getattr(value, kind)


def _proto_attributes(items: Any) -> dict[str, Any]:
    return {item.key: _proto_any(item.value) for item in items}


def _proto_read(items: Any, keys: frozenset[str]) -> dict[str, Any]:
    """The attributes among ``items`` the mapping reads (protobuf needs no check of the others:
    the parser checked their types)."""
    _pace(len(items))
    return {item.key: _proto_any(item.value) for item in items if item.key in keys}


def _spans_of_protobuf(body: bytes) -> tuple[list[Span], int]:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(body)
    except Exception as exc:  # google.protobuf's DecodeError (it ships no types)
        raise OtlpError(f"not a protobuf ExportTraceServiceRequest: {exc}") from exc
    spans: list[Span] = []
    overflow = 0
    for resource_spans in request.resource_spans:
        attributes = resource_spans.resource.attributes
        resource_problem = _resource_problem(len(attributes))
        resource = {} if resource_problem else _proto_read(attributes, _READ_KEYS)
        for scope in resource_spans.scope_spans:
            room = max(MAX_SPANS - len(spans), 0)
            overflow += max(len(scope.spans) - room, 0)
            for span in scope.spans[:room]:
                events = span.events
                problem = resource_problem or limit_problem(
                    len(span.attributes), len(events), max((len(e.attributes) for e in events), default=0)
                )
                common: dict[str, Any] = {
                    "trace_id": span.trace_id.hex(),
                    "span_id": span.span_id.hex(),
                    "name": span.name,
                    "start_ns": span.start_time_unix_nano,
                    "end_ns": span.end_time_unix_nano,
                    "status_code": span.status.code,
                    "status_message": span.status.message,
                }
                if problem:
                    spans.append(Span(**common, problem=problem))
                    continue
                spans.append(
                    Span(
                        **common,
                        attributes=_proto_read(span.attributes, _READ_KEYS),
                        resource=resource,
                        events=tuple(
                            (e.name, _proto_read(e.attributes, _EVENT_KEYS) if e.name == "exception" else {})
                            for e in events
                        ),
                    )
                )
    return spans, overflow


def _parse(body: bytes, protobuf: bool) -> tuple[list[Span], int]:
    parse: Callable[[bytes], tuple[list[Span], int]] = _spans_of_protobuf if protobuf else _spans_of_json
    return parse(body)


def parse_request(body: bytes, protobuf: bool) -> list[Span]:
    """The spans of an ``ExportTraceServiceRequest`` (``protobuf``: else OTLP/JSON), the
    first :data:`MAX_SPANS` of them.

    Raises :class:`OtlpError` for a body that is not one (never anything else); ImportError
    for protobuf without ``opentelemetry-proto`` (see :func:`protobuf_available`)."""
    return _parse(body, protobuf)[0]


def convert(body: bytes, protobuf: bool) -> Mapped:
    """The events of an ``ExportTraceServiceRequest``'s spans, and what was not turned into
    events (the spans past :data:`MAX_SPANS` rejected): :func:`parse_request` and
    :func:`events_of` in one, the work the gateway does off its event loop."""
    spans, overflow = _parse(body, protobuf)
    return events_of(spans, overflow)


# -- the answers -----------------------------------------------------------------------------------


def export_response(mapped: Mapped, protobuf: bool) -> bytes:
    """An ``ExportTraceServiceResponse``: ``partial_success`` when spans were rejected (or, as a
    warning with 0 rejected, ignored)."""
    message = mapped.message()
    if protobuf:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTracePartialSuccess,
            ExportTraceServiceResponse,
        )

        response = ExportTraceServiceResponse()
        if message:
            response.partial_success.CopyFrom(
                ExportTracePartialSuccess(rejected_spans=mapped.rejected, error_message=message)
            )
        return bytes(response.SerializeToString())
    answer: dict[str, Any] = {}
    if message:
        answer["partialSuccess"] = {"rejectedSpans": str(mapped.rejected), "errorMessage": message}
    return msgspec.json.encode(answer)


def _varint(number: int) -> bytes:
    out = bytearray()
    while True:
        byte = number & 0x7F
        number >>= 7
        if number:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


#: ``google.rpc.Code.INVALID_ARGUMENT``
INVALID_ARGUMENT: Final = 3
#: ``google.rpc.Code.DEADLINE_EXCEEDED``
DEADLINE_EXCEEDED: Final = 4


def status_body(reason: str, protobuf: bool, code: int = INVALID_ARGUMENT) -> bytes:
    """A refusal's body as OTLP/HTTP says: a ``google.rpc.Status`` (``code``, the reason as its
    message), protobuf or JSON like the request (JSON also says ``error``, like the gateway's
    other refusals)."""
    if protobuf:
        text = reason.encode("utf-8", "backslashreplace")
        return b"\x08" + _varint(code) + b"\x12" + _varint(len(text)) + text
    return json.dumps({"code": code, "message": reason, "error": reason}).encode()
