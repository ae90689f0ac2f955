"""Small, bounded pieces of a delegation chain's state (F6): ids as 63-bit hashes, a fixed-size
Bloom filter for distinct counts past an exact set, and a sample of five runs, root first.

A chain's table value must stay small whatever the chain does (one changelog record per
chain: Kafka refuses records over its size limit), so nothing in a chain's state grows with
its runs or its calls beyond the caps given here.
"""

from __future__ import annotations

import hashlib
from typing import Final

__all__ = ["BLOOM_BYTES", "SAMPLES", "SAMPLE_BYTES", "bloom_add", "id_hash", "new_bloom", "sampled"]

SAMPLES: Final = 5
#: What the sample runs' ids may take together (ids are up to 512 bytes: then fewer samples).
SAMPLE_BYTES: Final = 320
#: The Bloom filter's size (bits = 8 × bytes) and hash count.
BLOOM_BYTES: Final = 16384
_BLOOM_HASHES: Final = 3


def id_hash(text: str) -> int:
    """A 63-bit hash of an id (stable across processes and builds)."""
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def new_bloom() -> bytearray:
    return bytearray(BLOOM_BYTES)


def bloom_add(bloom: bytearray, value: int) -> bool:
    """Add a hashed id; whether it was (probably) absent before."""
    bits = len(bloom) * 8
    absent = False
    for k in range(_BLOOM_HASHES):
        position = ((value >> (k * 20)) ^ (value * (k + 1))) % bits
        byte, bit = position >> 3, 1 << (position & 7)
        if not bloom[byte] & bit:
            absent = True
            bloom[byte] |= bit
    return absent


def sampled(samples: list[tuple[str, int]], root: str, run: str, ts: int) -> None:
    """Keep the five first runs (the root first, then by event time, then id) in ``samples``,
    as many of them as fit :data:`SAMPLE_BYTES` (at least one); a run already there keeps its
    earliest time."""
    for index, (known, known_ts) in enumerate(samples):
        if known == run:
            if ts < known_ts:
                samples[index] = (run, ts)
                _order(samples, root)
            return
    samples.append((run, ts))
    _order(samples, root)
    del samples[SAMPLES:]
    size = 0
    for index, (known, _) in enumerate(samples):
        size += len(known.encode("utf-8", "surrogatepass"))
        if index and size > SAMPLE_BYTES:
            del samples[index:]
            break


def _order(samples: list[tuple[str, int]], root: str) -> None:
    ordered = sorted((run != root, ts, run) for run, ts in samples)
    samples[:] = [(run, ts) for _, ts, run in ordered]
