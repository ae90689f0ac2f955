"""Dead-letter records: the invalid input, why it was refused, and where it came from.

A letter always fits in one producer request (:data:`MAX_LETTER_BYTES`): the original value is
kept base64-encoded (a third larger) as far as that room allows, and ``value_size`` says how
large it was; a key or reason of absurd size is cut. An oversized record, or one with a huge
key, must never make its own letter unsendable: the worker would fail on it at every restart.
"""

from __future__ import annotations

import base64
from typing import Final

import msgspec

__all__ = ["MAX_KEY_BYTES", "MAX_LETTER_BYTES", "DeadLetter", "dead_letter", "letter_key"]

#: The largest letter: under the producer's request limit (faust's ``producer_max_request_size``,
#: 1,000,000 bytes by default), with room for the record's key, headers and framing.
MAX_LETTER_BYTES: Final = 900_000
#: The most of a refused record's key a letter keeps (as its Kafka key and in ``key``).
MAX_KEY_BYTES: Final = 1024
#: The most of a reason a letter keeps, in characters.
MAX_REASON_CHARS: Final = 4096


class DeadLetter(msgspec.Struct, kw_only=True, frozen=True):
    """One refused input record (JSON on the dead-letter topic)."""

    reason: str
    topic: str
    partition: int
    offset: int
    key: str | None
    value_base64: str  # the value's first bytes: all of them unless ``value_size`` says more
    value_size: int
    timestamp: int | None = None


_ENCODER = msgspec.json.Encoder()


def letter_key(key: bytes | None) -> bytes | None:
    """The Kafka key of a refused record's letter: the record's own, cut to :data:`MAX_KEY_BYTES`."""
    return key if key is None or len(key) <= MAX_KEY_BYTES else key[:MAX_KEY_BYTES]


def dead_letter(
    reason: str,
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | None,
    timestamp: int | None,
    keep_bytes: int,
) -> bytes:
    """Encode a dead-letter record; at most ``keep_bytes`` of the original value are kept, and
    fewer where the letter would exceed :data:`MAX_LETTER_BYTES`."""
    raw = value or b""
    if len(reason) > MAX_REASON_CHARS:
        reason = f"{reason[:MAX_REASON_CHARS]}… ({len(reason)} characters)"
    kept_key = letter_key(key)
    letter = DeadLetter(
        reason=reason.encode("utf-8", "backslashreplace").decode(),  # always encodable
        topic=topic,
        partition=partition,
        offset=offset,
        key=kept_key.decode("utf-8", "replace") if kept_key is not None else None,
        value_base64="",
        value_size=len(raw),
        timestamp=timestamp,
    )
    room = MAX_LETTER_BYTES - len(_ENCODER.encode(letter))
    keep = max(0, min(keep_bytes, len(raw), room // 4 * 3))
    if keep == 0:
        return _ENCODER.encode(letter)
    kept = base64.b64encode(raw[:keep]).decode()
    return _ENCODER.encode(msgspec.structs.replace(letter, value_base64=kept))
