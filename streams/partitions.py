"""Which partition a key goes to: Kafka's default partitioner (murmur2 of the key bytes), as
aiokafka's producer, the worker and the embedded runtime all partition runs."""

from __future__ import annotations

from aiokafka.partitioner import murmur2

__all__ = ["key_partition"]


def key_partition(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner gives ``key`` among ``partitions``."""
    return int(murmur2(key) & 0x7FFFFFFF) % partitions
