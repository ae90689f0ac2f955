"""What an ended run leaves behind: the 64-bit hashes of the event ids it had seen.

An event of an ended run that comes again (a redelivery, a republished event) is recognised
by its id and ignored; any other event starts a new run under the same scope. The hashes are
kept sorted in one ``array`` (8 bytes an id, about 2.1 KB for a run that saw the default
256-id window), the same hashes the Kafka worker's tombstones hold.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Iterable
from typing import Final

import xxhash

__all__ = ["SHORT_ID", "Tombstone", "id_hash", "key_hash", "seen_key"]


def id_hash(event_id: str) -> int:
    """The 64-bit hash an ended run keeps of an event id."""
    return xxhash.xxh3_64_intdigest(event_id.encode("utf-8", "surrogatepass"))


#: Event ids of at most this many characters are kept as they are (their hash is no shorter).
SHORT_ID: Final = 8


def seen_key(event_id: str) -> str | int:
    """How a run state keeps an event id it has seen: a short id itself, any other its 64-bit
    hash (:func:`id_hash`; two ids of one run that collide would be 1 in 2**64 per pair)."""
    return event_id if len(event_id) <= SHORT_ID else id_hash(event_id)


def key_hash(key: str | int) -> int:
    """The :func:`id_hash` of the event id a :func:`seen_key` stands for."""
    return key if isinstance(key, int) else id_hash(key)


class Tombstone:
    """The event ids of an ended run, as sorted hashes (membership by binary search)."""

    __slots__ = ("hashes",)

    def __init__(self, event_ids: Iterable[str] = (), hashes: Iterable[int] | None = None) -> None:
        """From the run's event ids, or from their ``hashes`` as stored."""
        if hashes is None:
            hashes = {id_hash(event_id) for event_id in event_ids}
        self.hashes = array("Q", sorted(set(hashes)))

    def __contains__(self, event_id: str) -> bool:
        hashes = self.hashes
        wanted = id_hash(event_id)
        index = bisect_left(hashes, wanted)
        return index < len(hashes) and hashes[index] == wanted

    def __len__(self) -> int:
        return len(self.hashes)
