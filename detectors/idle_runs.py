"""When each run last sent an event, oldest first: the in-memory stores (the embedded
runtime's workers, :class:`detectors.facade.LoopDetector`) forget a run idle past their state
TTL with it, as the Kafka worker's expiry does."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

__all__ = ["IdleRuns"]


class IdleRuns:
    """Run scope -> when it last sent, in the order they last sent.

    An ``OrderedDict``: its oldest entry is found in constant time however many runs moved
    to the end (a plain dict's first entry is found by walking the slots their moves left).
    """

    __slots__ = ("_last_seen",)

    def __init__(self) -> None:
        self._last_seen: OrderedDict[str, float] = OrderedDict()

    def touch(self, scope: str, now: float, alive: bool = True) -> None:
        """The run sent an event at ``now``; ``alive``: it lives on (not a ``run_end``)."""
        last_seen = self._last_seen
        if not alive:
            last_seen.pop(scope, None)
        elif scope in last_seen:
            last_seen[scope] = now
            last_seen.move_to_end(scope)
        else:
            last_seen[scope] = now

    def expire(self, states: dict[str, Any], horizon: float) -> int:
        """Drop from ``states`` the runs that last sent at or before ``horizon``, oldest first;
        how many of them had a state."""
        last_seen = self._last_seen
        expired = 0
        while last_seen:
            scope, seen_at = next(iter(last_seen.items()))
            if seen_at > horizon:
                break
            del last_seen[scope]
            if states.pop(scope, None) is not None:
                expired += 1
        return expired
