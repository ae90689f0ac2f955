"""Dead-letter records: the invalid input, why it was refused, and where it came from."""

from __future__ import annotations

import base64

import msgspec

__all__ = ["DeadLetter", "dead_letter"]


class DeadLetter(msgspec.Struct, kw_only=True, frozen=True):
    """One refused input record (JSON on the dead-letter topic)."""

    reason: str
    topic: str
    partition: int
    offset: int
    key: str | None
    value_base64: str
    value_size: int
    timestamp: int | None = None


_ENCODER = msgspec.json.Encoder()


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
    """Encode a dead-letter record; at most ``keep_bytes`` of the original value are kept."""
    raw = value or b""
    return _ENCODER.encode(
        DeadLetter(
            reason=reason.encode("utf-8", "backslashreplace").decode(),  # always encodable
            topic=topic,
            partition=partition,
            offset=offset,
            key=key.decode("utf-8", "replace") if key is not None else None,
            value_base64=base64.b64encode(raw[:keep_bytes]).decode(),
            value_size=len(raw),
            timestamp=timestamp,
        )
    )
