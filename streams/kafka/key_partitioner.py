"""aiokafka's default partitioner with each key's hash kept: the same partition for a key
(murmur2 of its bytes, as Kafka's Java client), without hashing it again in Python for every
record of a run (the gateway produces a run's calls and results keyed by its scope)."""

from __future__ import annotations

from typing import Any

from aiokafka.partitioner import DefaultPartitioner, murmur2

__all__ = ["KeyPartitioner"]

#: The keys whose hashes are kept (beyond them the table starts again: a hash is ~2 µs).
KEYS_KEPT = 65_536
#: A longer key is hashed every time (a run id may be long: the table stays ~KEYS_KEPT × this).
KEY_BYTES_KEPT = 256


class KeyPartitioner:
    """``partitioner=`` of an aiokafka producer: what :class:`DefaultPartitioner` chooses."""

    __slots__ = ("_hashes",)

    def __init__(self) -> None:
        self._hashes: dict[bytes, int] = {}

    def __call__(self, key: bytes | None, all_partitions: list[int], available: list[int]) -> Any:
        if key is None:  # (a random partition: nothing to keep)
            return DefaultPartitioner()(key, all_partitions, available)
        hashed = self._hashes.get(key)
        if hashed is None:
            hashed = murmur2(key) & 0x7FFFFFFF
            if len(key) <= KEY_BYTES_KEPT:
                if len(self._hashes) >= KEYS_KEPT:
                    self._hashes.clear()
                self._hashes[key] = hashed
        return all_partitions[hashed % len(all_partitions)]
