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

import xxhash

__all__ = ["Tombstone", "id_hash"]


def id_hash(event_id: str) -> int:
    """The 64-bit hash an ended run keeps of an event id."""
    return xxhash.xxh3_64_intdigest(event_id.encode("utf-8", "surrogatepass"))


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
