"""What the worker keeps per run scope in the faust table ``runs`` (and its changelog).

Every value starts with a 9-byte header: a kind byte and the offset, in the run's input
partition, of the last record applied to it (big-endian, signed). The offset is what makes a
redelivery harmless whatever its cause (crash, rebalance, a re-read after a gap): a record at
or below it was applied already, and only the outputs still waiting for confirmation are
re-published (:attr:`RunState.outbox`).

* ``L`` (live): the header, then :meth:`RunState.to_bytes`.
* ``E`` (ended): the header, the broker timestamp (ms) of the ``run_end`` record, then the
  64-bit hashes (XXH3) of the event ids the run had seen (at most ``seenEventIds``). An ended
  run keeps this tombstone for the grace period: a record of it at or below the offset, or
  one whose event id it had seen (republished), is ignored and counted instead of being
  detected again from an empty state; an event it never had starts a new run.

Values written before this header existed (plain state bytes, a msgpack array) are read as
live states with no offset.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Final, NamedTuple

from loopwatch.detectors.tombstone import id_hash

__all__ = [
    "ENDED",
    "LIVE",
    "NO_OFFSET",
    "TableValue",
    "ended_ms_of",
    "id_hash",
    "live_offset_of",
    "pack_ended",
    "pack_ended_hashes",
    "pack_live",
    "unpack",
]

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
    ended_ids: frozenset[int] = frozenset()  # ENDED: hashes of the event ids the run had seen


def pack_live(offset: int, state: bytes) -> bytes:
    return _HEADER.pack(LIVE, offset) + state


def pack_ended(offset: int, ended_ms: int, event_ids: Iterable[str] = ()) -> bytes:
    return pack_ended_hashes(offset, ended_ms, {id_hash(event_id) for event_id in event_ids})


def pack_ended_hashes(offset: int, ended_ms: int, hashes: Iterable[int]) -> bytes:
    ordered = sorted(hashes)
    return _ENDED.pack(ENDED, offset, ended_ms) + struct.pack(f">{len(ordered)}Q", *ordered)


def ended_ms_of(blob: bytes) -> int:
    """A tombstone's end time (ms), read without its hashes; ``ValueError`` if not one."""
    if len(blob) < _ENDED.size or blob[0] != ENDED:
        raise ValueError("not a tombstone")
    ended_ms: int = _ENDED.unpack_from(blob)[2]
    return ended_ms


def live_offset_of(blob: bytes) -> int:
    """The input offset a live run's value was written at (read without its state);
    :data:`NO_OFFSET` for any other value."""
    if len(blob) >= _HEADER.size and blob[0] == LIVE:
        offset: int = _HEADER.unpack_from(blob)[1]
        return offset
    return NO_OFFSET


def unpack(blob: bytes) -> TableValue:
    """The value's parts; raises ``ValueError`` on bytes that are neither form."""
    if not blob:
        raise ValueError("empty table value")
    kind = blob[0]
    if kind == LIVE and len(blob) >= _HEADER.size:
        return TableValue(LIVE, _HEADER.unpack_from(blob)[1], blob[_HEADER.size :], 0)
    if kind == ENDED and len(blob) >= _ENDED.size and (len(blob) - _ENDED.size) % 8 == 0:
        _, offset, ended_ms = _ENDED.unpack_from(blob)
        count = (len(blob) - _ENDED.size) // 8
        hashes = frozenset(struct.unpack_from(f">{count}Q", blob, _ENDED.size))
        return TableValue(ENDED, offset, b"", ended_ms, hashes)
    if 0x90 <= kind <= 0x9F or kind == 0xDC:  # a state stored before the header existed
        return TableValue(LIVE, NO_OFFSET, blob, 0)
    raise ValueError(f"unknown table value kind 0x{kind:02x}")
