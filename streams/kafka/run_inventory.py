"""What a worker knows of the runs of each partition it owns, without reading its table again.

The worker's ``/metrics`` gauges (active runs, ended runs, stored bytes) and its expiry timer
(idle runs, tombstones past their grace) used to read every value of the runs table, on the
event loop: 3.6 s per scrape and per expiry pass at 1M runs on the RocksDB store
(docs/capacity.md). :class:`RunInventory` keeps instead, per owned partition:

* ``seen``: each live run's last activity here (wall clock). A run found in the table when the
  partition became this worker's (recovered, or taken over) counts as active from then on;
* ``ended``: each tombstone's end time (the ``run_end``'s event time, ms);
* a :class:`Tally` of live runs, tombstones and their stored bytes.

It is filled once per partition, when the partition becomes ready (:meth:`RunInventory.start`,
then :meth:`RunInventory.found` for each of that partition's table values, read once), and
kept current by every table write (:meth:`RunInventory.written`). A revocation forgets the
partition whole, so no stale time survives to expire a run that was active on another worker
meanwhile, except where the same rebalance gives the partition straight back: its inventory is
set aside at the revocation (:meth:`RunInventory.keep`, with the rebalance's number) and taken
up again when the partition is ready (:meth:`RunInventory.resume`) if no other revocation came
in between. Nobody else owned the partition then (a consumer group revokes every partition at
each rebalance), so its runs keep their idle clocks: runs that never end still expire one TTL
after their last event however often workers join and leave, and the table is not read again.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import suppress

from loopwatch.streams.kafka.run_table import ENDED, ended_ms_of

__all__ = ["RunInventory", "Tally"]


class Tally:
    """Live runs, tombstones and the bytes of both, in one partition."""

    __slots__ = ("ended", "live", "size")

    def __init__(self) -> None:
        self.live = 0
        self.ended = 0
        self.size = 0

    def add(self, blob: bytes, sign: int) -> None:
        if blob[0] == ENDED:
            self.ended += sign
        else:
            self.live += sign
        self.size += sign * len(blob)


_Kept = tuple[int, dict[bytes, float], dict[bytes, int], Tally]


class RunInventory:
    def __init__(self) -> None:
        self.seen: dict[int, dict[bytes, float]] = {}
        self.ended: dict[int, dict[bytes, int]] = {}
        self.tallies: dict[int, Tally] = {}
        self._kept: dict[int, _Kept] = {}  # partition -> (rebalance, seen, ended, tally)

    def start(self, partition: int) -> None:
        """Begin the partition's inventory afresh (then :meth:`found` for each of its values)."""
        self.seen[partition] = {}
        self.ended[partition] = {}
        self.tallies[partition] = Tally()

    def found(self, partition: int, key: bytes, blob: bytes, now: float) -> None:
        """One table value of a partition whose inventory is being taken."""
        if not blob:
            return
        self.tallies[partition].add(blob, 1)
        if blob[0] == ENDED:
            with suppress(ValueError):  # not written by this version: replaced on its next event
                self.ended[partition][key] = ended_ms_of(blob)
        else:
            self.seen[partition][key] = now

    def forget(self, partitions: Iterable[int]) -> None:
        for partition in partitions:
            self.seen.pop(partition, None)
            self.ended.pop(partition, None)
            self.tallies.pop(partition, None)
            self._kept.pop(partition, None)

    def keep(self, partitions: Iterable[int], rebalance: int) -> None:
        """Set aside the complete inventories of partitions revoked by ``rebalance`` (what an
        older rebalance set aside and did not give back is forgotten)."""
        self._kept = {p: kept for p, kept in self._kept.items() if kept[0] == rebalance}
        for partition in partitions:
            seen = self.seen.pop(partition, None)
            ended = self.ended.pop(partition, None)
            tally = self.tallies.pop(partition, None)
            if seen is not None and ended is not None and tally is not None:
                self._kept[partition] = (rebalance, seen, ended, tally)

    def resume(self, partition: int, rebalance: int) -> bool:
        """Take up the inventory set aside for ``partition`` if ``rebalance`` revoked it (and no
        revocation came since); otherwise forget it and say so (the table must be read)."""
        kept = self._kept.pop(partition, None)
        if kept is None or kept[0] != rebalance:
            return False
        _, self.seen[partition], self.ended[partition], self.tallies[partition] = kept
        return True

    def touched(self, partition: int, key: bytes, now: float) -> None:
        """An event of a live run was applied."""
        seen = self.seen.get(partition)
        if seen is None:
            seen = self.seen[partition] = {}
        seen[key] = now

    def written(
        self, partition: int, key: bytes, old: bytes | None, new: bytes | None, ended_ms: int = 0
    ) -> None:
        """The table's value of ``key`` went from ``old`` to ``new`` (None: absent)."""
        tally = self.tallies.get(partition)
        if tally is not None:
            if old:
                tally.add(old, -1)
            if new:
                tally.add(new, 1)
        if new and new[0] == ENDED:
            self.seen.get(partition, {}).pop(key, None)
            self.ended.setdefault(partition, {})[key] = ended_ms
        else:
            self.ended.get(partition, {}).pop(key, None)
            if not new:
                self.seen.get(partition, {}).pop(key, None)

    def totals(self) -> tuple[int, int, int]:
        """(live runs, tombstones, stored bytes) of every owned partition."""
        live = ended = size = 0
        for tally in self.tallies.values():
            live += tally.live
            ended += tally.ended
            size += tally.size
        return live, ended, size
