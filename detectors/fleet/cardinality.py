"""A small HyperLogLog over the 63-bit id hashes of :func:`detectors.fleet.chain_sketch.id_hash`:
4-bit registers, two to a byte of a ``bytearray`` (msgspec stores it as one binary value);
the registers of several sketches merged by their maximum give the count of a union.

A register keeps the rank (1 + leading zeros) of the next :data:`RANK_BITS` hash bits after
the register index, 15 meaning "all zero": counts up to about 2^(precision + 14) stay exact
in distribution (past 60 million for 2^12 registers). Counted with Ertl's estimator ("New
cardinality estimation algorithms for HyperLogLog sketches", 2017), which needs no bias
tables and is nearly unbiased from one element on: the relative standard error is about
1.04 / sqrt(registers) (1.6 % for 4,096 registers in 2 KB, 2.3 % for 2,048 in 1 KB).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Final

__all__ = ["RANK_BITS", "hll_add", "hll_estimate", "hll_union", "new_hll"]

#: Hash bits a register ranks (its largest value, all of them zero, is RANK_BITS + 1 = 15).
RANK_BITS: Final = 14
_ALPHA_INF: Final = 1 / (2 * math.log(2))
_LOW: Final = bytes(b & 15 for b in range(256))
_HIGH: Final = bytes(b >> 4 for b in range(256))
#: (a << 8 | b) -> the byte whose two registers are the larger of a's and b's
_MAX_PAIR: Final = bytes(
    max(a & 15, b & 15) | max(a >> 4, b >> 4) << 4 for a in range(256) for b in range(256)
)


def new_hll(precision: int) -> bytearray:
    """An empty sketch of ``2 ** precision`` registers (``2 ** precision / 2`` bytes)."""
    return bytearray(1 << (precision - 1))


def hll_add(registers: bytearray, value: int) -> bool:
    """Add a 63-bit hash; whether a register changed (if not, the count cannot have grown)."""
    count = len(registers) * 2
    index = value & (count - 1)
    rest = (value >> (count.bit_length() - 1)) & ((1 << RANK_BITS) - 1)
    rank = RANK_BITS - rest.bit_length() + 1
    byte, shift = index >> 1, (index & 1) * 4
    if (registers[byte] >> shift) & 15 >= rank:
        return False
    registers[byte] = (registers[byte] & (0xF0 >> shift)) | (rank << shift)
    return True


def hll_union(sketches: Iterable[bytearray]) -> bytearray:
    """The sketch of the union of the sets the (same-sized) ``sketches`` stand for."""
    union: bytearray | None = None
    for sketch in sketches:
        if union is None:
            union = bytearray(sketch)
        else:
            union = bytearray(_MAX_PAIR[a << 8 | b] for a, b in zip(union, sketch, strict=True))
    return union if union is not None else bytearray()


def hll_estimate(registers: bytearray) -> float:
    """The estimated number of distinct values added (0.0 for an empty sketch)."""
    m = len(registers) * 2
    if not m:
        return 0.0
    low, high = registers.translate(_LOW), registers.translate(_HIGH)
    q = RANK_BITS
    counts = [low.count(k) + high.count(k) for k in range(q + 2)]
    if counts[0] == m:
        return 0.0
    z = m * _tau(1 - counts[q + 1] / m)
    for k in range(q, 0, -1):
        z = 0.5 * (z + counts[k])
    z += m * _sigma(counts[0] / m)
    return _ALPHA_INF * m * m / z


def _sigma(x: float) -> float:
    if x == 1.0:
        return math.inf
    y, z = 1.0, x
    while True:
        x *= x
        previous = z
        z += x * y
        y += y
        if z == previous:
            return z


def _tau(x: float) -> float:
    if x == 0.0 or x == 1.0:
        return 0.0
    y, z = 1.0, 1 - x
    while True:
        x = math.sqrt(x)
        previous = z
        y *= 0.5
        z -= (1 - x) ** 2 * y
        if z == previous:
            return z / 3
