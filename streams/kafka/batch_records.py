"""One model turn's calls as one record of the input topic.

The Kafka gateway's ``/v1/decide`` with a JSON array (openclaw-rules §7.6) produces the calls
as one record: keyed by their run's scope, its value the JSON array of the ``tool_call``
events in assistant order, with the :data:`BATCH_HEADER` header. The worker that applies it
admits the calls together through the run engine, as the embedded runtime does, and answers
them together (a reply with ``batch``: each call's outputs, and ``refused_by``). A worker of an
earlier release sends such a record to the dead-letter topic (not an event): upgrade the
workers before the gateways.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from loopwatch.detectors.batch_admission import batch_problem
from loopwatch.detectors.decoding import decode_event
from loopwatch.detectors.events import InvalidEvent, ToolCall, encode_event

__all__ = ["BATCH_HEADER", "MAX_BATCH_CALLS", "decode_batch", "encode_batch", "is_batch"]

#: A record with this header (any value) holds a batch of calls, not one event.
BATCH_HEADER: Final = "loopwatch-batch"
#: The most calls one batch holds (the gateway's limit of a ``/v1/decide`` array).
MAX_BATCH_CALLS: Final = 256

_PARTS: Any = msgspec.json.Decoder(list[msgspec.Raw])


def is_batch(record: Any) -> bool:
    """Whether an input record (an aiokafka ``ConsumerRecord``) holds a batch of calls."""
    headers = getattr(record, "headers", None) or ()
    return any(name == BATCH_HEADER for name, _ in headers)


def encode_batch(calls: list[ToolCall]) -> bytes:
    """The record value of one run's calls, decided together."""
    return b"[" + b",".join(encode_event(call) for call in calls) + b"]"


def decode_batch(value: bytes, max_call_bytes: int, texts: bool = False) -> list[ToolCall]:
    """The calls of a batch record (at most :data:`MAX_BATCH_CALLS`, each of at most
    ``max_call_bytes``); :class:`InvalidEvent` says what is wrong, and where (``texts``: as
    :func:`~detectors.decoding.decode_event` takes it)."""
    try:
        parts = _PARTS.decode(value)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise InvalidEvent(f"a batch record holds a JSON array of tool_call events: {exc}") from None
    if not 0 < len(parts) <= MAX_BATCH_CALLS:
        raise InvalidEvent(f"a batch holds 1 to {MAX_BATCH_CALLS} calls, this one {len(parts)}")
    calls: list[ToolCall] = []
    for index, part in enumerate(parts):
        if len(part) > max_call_bytes:
            raise InvalidEvent(
                f"call {index}: event of {len(part)} bytes exceeds the limit of {max_call_bytes}"
            )
        try:
            event = decode_event(bytes(part), texts)
        except InvalidEvent as exc:
            raise InvalidEvent(f"call {index}: {exc.reason}") from None
        if not isinstance(event, ToolCall):
            kind = event.__struct_config__.tag
            raise InvalidEvent(f"call {index}: a batch holds tool_call events only, not {kind}")
        calls.append(event)
    problem = batch_problem(calls)
    if problem is not None:
        raise InvalidEvent(problem)
    return calls
