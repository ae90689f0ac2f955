"""Where each owned input partition continues: the offset of the next record to apply (pure).

The worker applies every offset of an input partition once, in order, starting at the
group's committed offset when the partition was assigned, and commits only offsets it has
applied. The cursor is the single source of both: a fetched batch is admitted against it,
and the committer reads it.

* A batch that starts below the cursor overlaps what was applied (a stale pre-fetch, a
  re-read): the records below it are skipped.
* A batch that starts above it would skip records (a consumer position moved past them, as
  faust-streaming's fetcher can after a rebalance): nothing of it is applied and the
  partition is sought back to the cursor. If the records at the cursor still do not come
  after that seek, the broker no longer has them (retention, transaction markers): the gap
  is accepted and reported.
* A partition without a cursor is not ready (not assigned, or its table not recovered yet):
  its records are dropped and fetched again once it is.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, NamedTuple

__all__ = ["Admission", "InputCursors", "apply_admitted"]


class Admission(NamedTuple):
    """What to do with a fetched batch of one partition."""

    apply_from: int | None  # apply the records at or above this offset; None: apply nothing
    seek_to: int | None  # seek the partition to this offset first
    gap: int  # offsets accepted as missing (reported)


_DROP = Admission(None, None, 0)


class InputCursors:
    def __init__(self) -> None:
        self._next: dict[int, int] = {}
        self._sought: dict[int, int] = {}

    def start(self, partition: int, offset: int) -> None:
        """The partition is ready; its next record to apply is at ``offset``."""
        self._next[partition] = offset
        self._sought.pop(partition, None)

    def stop(self, partitions: set[int]) -> dict[int, int]:
        """The partitions are no longer processed; their positions (for the last commit)."""
        stopped = {p: self._next.pop(p) for p in partitions if p in self._next}
        for partition in partitions:
            self._sought.pop(partition, None)
        return stopped

    def stop_all(self) -> dict[int, int]:
        return self.stop(set(self._next))

    def ready(self) -> set[int]:
        return set(self._next)

    def positions(self) -> dict[int, int]:
        """partition → offset of the next record to apply (what may be committed)."""
        return dict(self._next)

    def admit(self, partition: int, first_offset: int) -> Admission:
        """Decide about a fetched batch whose first record is at ``first_offset``."""
        expected = self._next.get(partition)
        if expected is None:
            return _DROP
        if first_offset <= expected:
            return Admission(expected, None, 0)
        if self._sought.get(partition) == expected:  # sought there already: the broker skips it
            return Admission(first_offset, None, first_offset - expected)
        self._sought[partition] = expected
        return Admission(None, expected, 0)

    def advance(self, partition: int, next_offset: int) -> None:
        """Records below ``next_offset`` were applied."""
        if partition in self._next and next_offset > self._next[partition]:
            self._next[partition] = next_offset
            self._sought.pop(partition, None)


async def apply_admitted(
    cursors: InputCursors,
    fetched: Mapping[Any, Sequence[Any]],
    apply: Callable[[Any], Awaitable[None]],
    seek_back: Callable[[int, int, int], Awaitable[None]],
    skipped: Callable[[int, int, int], None],
) -> dict[int, int]:
    """Apply the admitted records of one fetched batch (topic-partition → records in offset
    order), each once and in order; returns partition → the offset after its last record.

    ``seek_back(partition, first_offset, seek_to)`` when a batch starts past the cursor (none of
    it is applied); ``skipped(partition, first_missing, missing)`` when a gap is accepted. The
    caller advances the cursors to the returned offsets once what was applied is written.
    """
    advanced: dict[int, int] = {}
    for tp, records in fetched.items():
        if not records:
            continue
        partition: int = tp.partition
        admission = cursors.admit(partition, records[0].offset)
        if admission.seek_to is not None:
            await seek_back(partition, records[0].offset, admission.seek_to)
            continue
        if admission.apply_from is None:
            continue  # not ready: fetched again once it is
        start = admission.apply_from
        if admission.gap:
            skipped(partition, start - admission.gap, admission.gap)
        for record in records:
            if record.offset >= start:
                await apply(record)
        advanced[partition] = records[-1].offset + 1
    return advanced
