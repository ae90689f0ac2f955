"""What the worker keeps per run scope in the faust table ``runs`` (and its changelog).

Every value starts with a 9-byte header: a kind byte and the offset, in the run's input
partition, of the last record applied to it (big-endian, signed). The offset is what makes a
redelivery harmless whatever its cause (crash, rebalance, a re-read after a gap): a record at
or below it was applied already, and only the outputs still waiting for confirmation are
re-published (:attr:`RunState.outbox`).

* ``L`` (live): the header, then :meth:`RunState.to_bytes`.
* ``E`` (ended): the header, then the broker timestamp (ms) of the ``run_end`` record. An ended
  run keeps this 17-byte tombstone for the grace period, so late or redelivered events of it
  are ignored and counted instead of being detected again from an empty state.

Values written before this header existed (plain state bytes, a msgpack array) are read as
live states with no offset.
"""

from __future__ import annotations

import struct
from typing import Final, NamedTuple

__all__ = ["ENDED", "LIVE", "NO_OFFSET", "TableValue", "pack_ended", "pack_live", "unpack"]

LIVE: Final = 0x4C  # "L"
ENDED: Final = 0x45  # "E"
NO_OFFSET: Final = -1

_HEADER: Final = struct.Struct(">Bq")
_ENDED: Final = struct.Struct(">Bqq")


class TableValue(NamedTuple):
    kind: int  # LIVE or ENDED
    offset: int  # last input offset applied (NO_OFFSET if unknown)
    state: bytes  # LIVE: the state bytes; ENDED: b""
    ended_ms: int  # ENDED: broker timestamp of the run_end record; LIVE: 0


def pack_live(offset: int, state: bytes) -> bytes:
    return _HEADER.pack(LIVE, offset) + state


def pack_ended(offset: int, ended_ms: int) -> bytes:
    return _ENDED.pack(ENDED, offset, ended_ms)


def unpack(blob: bytes) -> TableValue:
    """The value's parts; raises ``ValueError`` on bytes that are neither form."""
    if not blob:
        raise ValueError("empty table value")
    kind = blob[0]
    if kind == LIVE and len(blob) >= _HEADER.size:
        return TableValue(LIVE, _HEADER.unpack_from(blob)[1], blob[_HEADER.size :], 0)
    if kind == ENDED and len(blob) == _ENDED.size:
        _, offset, ended_ms = _ENDED.unpack(blob)
        return TableValue(ENDED, offset, b"", ended_ms)
    if 0x90 <= kind <= 0x9F or kind == 0xDC:  # a state stored before the header existed
        return TableValue(LIVE, NO_OFFSET, blob, 0)
    raise ValueError(f"unknown table value kind 0x{kind:02x}")
