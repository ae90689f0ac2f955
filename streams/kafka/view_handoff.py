"""Who shows the fleet view each record of the input topic: the worker or its follower (pure).

Every worker's fleet view sees every event of the fleet. The records of the input partitions
the worker owns it has just decoded to apply them, so it shows them to the view itself; the
follower (:func:`streams.kafka.topic_followers.follow_fleet`) reads only the other
partitions, and none of the input topic at all on a worker that owns every partition. Each
record must be shown exactly once across assignments, revocations and a follower that
starts late or lags, so per partition:

* **take** (the partition's cursor starts at ``start``): the worker shows the records from
  ``max(start, the follower's position)`` on: what the follower has shown already is not
  shown again, and what it has not reached yet it still reads, up to there; nor what the
  worker showed in an earlier ownership (applied again: that cursor was not committed);
* the follower shows a record unless the worker shows or showed it: it reaches the worker's
  open range → it stops the partition there (seeks back to that record and pauses it);
  a closed range → it skips to its end;
* **release** (revoked; the cursor stopped at ``after``): the worker's range closes at
  ``after`` and the follower resumes the partition: it skips the range and goes on from
  ``after``.

The follower's position is the offset of the next record it would show (unknown until it
has positioned the partition); closed ranges below it are forgotten.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

__all__ = ["PAUSE", "ViewHandoff"]

#: :meth:`ViewHandoff.follower_skips`: the worker shows this record and the ones after it.
PAUSE: Final = -1


class ViewHandoff:
    def __init__(self) -> None:
        self._open: dict[int, int] = {}  # owned partition -> the first offset the worker shows
        self._closed: dict[int, list[tuple[int, int]]] = {}  # partition -> [(first, after)] shown
        self._position: dict[int, int] = {}  # partition -> the follower's next offset
        #: called with a released partition (the follower resumes it, if it paused it)
        self.on_release: Callable[[int], None] = lambda partition: None

    # -- the worker -----------------------------------------------------------------------------

    def take(self, partition: int, start: int) -> int:
        """The worker applies ``partition`` from ``start``; the first offset it shows."""
        first = self._open.get(partition)
        if first is None:
            first = self._open[partition] = max(start, self._position.get(partition, start))
        return first

    def release(self, partition: int, after: int) -> None:
        """The worker stopped applying ``partition`` before ``after``."""
        first = self._open.pop(partition, None)
        if first is None:
            return
        if after > first:
            self._closed.setdefault(partition, []).append((first, after))
        self.on_release(partition)

    def worker_shows(self, partition: int, offset: int) -> bool:
        """Whether the worker shows the record it applies at ``offset`` (not when it showed it
        before: a record applied again after a revocation whose cursor was not committed)."""
        first = self._open.get(partition)
        if first is None or offset < first:
            return False
        closed = self._closed.get(partition)
        return not closed or not any(lo <= offset < after for lo, after in closed)

    # -- the follower ---------------------------------------------------------------------------

    def positioned(self, partition: int, offset: int) -> None:
        """The follower reads ``partition`` from ``offset`` (its start, or a seek)."""
        self._position[partition] = offset
        closed = self._closed.get(partition)
        if closed:
            closed[:] = [span for span in closed if span[1] > offset]

    def follower_skips(self, partition: int, offset: int) -> int | None:
        """None: the follower shows this record (and is past it); else where it goes on: the
        end of a range the worker showed, or :data:`PAUSE` (stay at this record, paused)."""
        first = self._open.get(partition)
        if first is not None and offset >= first:
            self._position[partition] = offset
            return PAUSE
        for lo, after in self._closed.get(partition, ()):
            if lo <= offset < after:
                self.positioned(partition, after)
                return after
        self._position[partition] = offset + 1
        return None

    def owned(self) -> set[int]:
        return set(self._open)
