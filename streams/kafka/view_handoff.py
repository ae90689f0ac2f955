"""Who shows the fleet view each record of the input topic: the worker or its follower (pure).

Every worker's fleet view sees every event of the fleet, each once and, within a partition
(a run's events), in order. The records of the input partitions the worker owns it has just
decoded to apply them, so it shows them to the view itself; the follower
(:func:`streams.kafka.topic_followers.follow_fleet`) reads only the other partitions, and
none of the input topic at all on a worker that owns every partition. Per partition:

* **take** (the partition's cursor starts at ``start``): the worker's range begins at
  ``first = max(start, the follower's position)``: what the follower has shown already is
  not shown again, and what it has not reached yet it still reads, up to ``first``;
* the worker's records from ``first`` on (but those it showed in an earlier ownership,
  applied again because that cursor was not committed) wait until the follower reaches
  ``first``, then are shown in order, and from then on at once: a follower that is still
  reading older records of the partition (the view's horizon at start-up, a lag) shows them
  first. At most ``waiting_max`` records wait: beyond that they are shown at once (in
  order among themselves, before older ones the follower still has to read);
* the follower shows a record unless the worker shows or showed it: it reaches the worker's
  range → it stops the partition there (seeks back to that record and pauses it); a range
  the worker showed and gave back → it skips to its end;
* **release** (revoked; the cursor stopped at ``after``): a range the worker showed closes
  at ``after`` and the follower resumes the partition, skips the range and goes on from
  ``after``; records still waiting are dropped, and the follower reads them instead.

The follower's position is the offset of the next record it would show (unknown until it
has positioned the partition). A closed range is forgotten once both the follower and the
worker's current range are past it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

__all__ = ["PAUSE", "WAITING_MAX", "ViewHandoff"]

#: :meth:`ViewHandoff.follower_skips`: the worker shows this record and the ones after it.
PAUSE: Final = -1
#: Records of one partition the worker holds back until its follower reaches them.
WAITING_MAX: Final = 50_000


class _Range:
    __slots__ = ("first", "waiting")

    def __init__(self, first: int) -> None:
        self.first = first
        #: the worker's records held back, in order (None: the follower reached ``first``)
        self.waiting: list[tuple[Any, int]] | None = []


class ViewHandoff:
    def __init__(self, show: Callable[[Any, int], None], waiting_max: int = WAITING_MAX) -> None:
        self._show = show  # (event, record time) to the view
        self._waiting_max = waiting_max
        self._open: dict[int, _Range] = {}  # owned partition -> the worker's range
        self._closed: dict[int, list[tuple[int, int]]] = {}  # partition -> [(first, after)] shown
        self._position: dict[int, int] = {}  # partition -> the follower's next offset
        #: called with a released partition (the follower resumes it, if it paused it)
        self.on_release: Callable[[int], None] = lambda partition: None

    # -- the worker -----------------------------------------------------------------------------

    def take(self, partition: int, start: int) -> int:
        """The worker applies ``partition`` from ``start``; the first offset it shows."""
        span = self._open.get(partition)
        if span is None:
            position = self._position.get(partition)
            span = self._open[partition] = _Range(start if position is None else max(start, position))
            if position is not None and position >= span.first:
                span.waiting = None  # the follower is there already
        return span.first

    def release(self, partition: int, after: int) -> None:
        """The worker stopped applying ``partition`` before ``after``."""
        span = self._open.pop(partition, None)
        if span is None:
            return
        if span.waiting is None and after > span.first:  # (waiting: the follower reads them)
            self._closed.setdefault(partition, []).append((span.first, after))
        self.on_release(partition)

    def worker_applies(self, partition: int, offset: int, event: Any, ts_ms: int) -> None:
        """The worker applies the record at ``offset``: shown now, held back, or not at all
        (the follower's, or shown in an earlier ownership)."""
        span = self._open.get(partition)
        if span is None or offset < span.first:
            return
        closed = self._closed.get(partition)
        if closed and any(lo <= offset < after for lo, after in closed):
            return
        waiting = span.waiting
        if waiting is None:
            self._show(event, ts_ms)
            return
        waiting.append((event, ts_ms))
        if len(waiting) > self._waiting_max:  # the follower is far behind: no longer held back
            self._reached(span)

    def owned(self) -> set[int]:
        return set(self._open)

    # -- the follower ---------------------------------------------------------------------------

    def positioned(self, partition: int, offset: int) -> None:
        """The follower reads ``partition`` from ``offset`` (its start, or a seek)."""
        self._position[partition] = offset
        span = self._open.get(partition)
        if span is not None and offset >= span.first:
            self._reached(span)
        closed = self._closed.get(partition)
        if closed:
            done = min(offset, span.first) if span is not None else offset
            closed[:] = [lo_after for lo_after in closed if lo_after[1] > done]

    def follower_skips(self, partition: int, offset: int) -> int | None:
        """None: the follower shows this record (and is past it); else where it goes on: the
        end of a range the worker showed, or :data:`PAUSE` (stay at this record, paused)."""
        span = self._open.get(partition)
        if span is not None and offset >= span.first:
            self._position[partition] = offset
            self._reached(span)
            return PAUSE
        for lo, after in self._closed.get(partition, ()):
            if lo <= offset < after:
                self.positioned(partition, after)
                return after
        self._position[partition] = offset + 1
        return None

    def _reached(self, span: _Range) -> None:
        """The follower has shown everything before the worker's range: what waits, now."""
        waiting, span.waiting = span.waiting, None
        for event, ts_ms in waiting or ():
            self._show(event, ts_ms)
