"""The worker process's garbage collector: full collections on a clock, not on allocations.

CPython's cyclic collector runs a full collection whenever a quarter of the old generation
has been promoted since the previous one. In a busy worker that is every few seconds, and
each one walks every object the worker holds (the run states and their history records, the
dashboard's recent activity, faust and its libraries): 150–360 ms at 3,000 runs on the
2-core bench machine (``stream_bench --trace``), during which no event is processed, so
every event that arrives meanwhile waits. What the worker holds is freed by reference
counting (run states are acyclic); the cycles a worker makes (exceptions, finished tasks)
are short-lived and found by the young generations' collections, which stay as they are.

:func:`install` (``loopwatch worker`` calls it; ``LOOPWATCH_GC_FULL_INTERVAL_S`` > 0):

* automatic full collections off (the old generation's threshold out of reach);
* once the worker runs (faust starts app tasks after the tables are recovered), one full
  collection, then everything alive is frozen (``gc.freeze``): what start-up built is never
  walked again;
* then a full collection every ``LOOPWATCH_GC_FULL_INTERVAL_S`` seconds, logged with its
  duration and what it found (cycles that grew old before they died are freed there).
"""

from __future__ import annotations

import asyncio
import gc
import time
from typing import Any, Final

import structlog

__all__ = ["OLD_GENERATION_OFF", "full_collection", "install"]

#: The old generation's threshold: counted in young-generation collections, never reached.
OLD_GENERATION_OFF: Final = 2**31 - 1

_log = structlog.get_logger("loopwatch.worker")


def full_collection() -> tuple[int, float]:
    """One full collection: the unreachable objects found and the seconds it took."""
    started = time.perf_counter()
    found = gc.collect()
    return found, time.perf_counter() - started


def install(app: Any, interval_s: float) -> None:
    """Apply the policy to this process, for ``app`` (a faust app); ``interval_s`` <= 0: CPython's own."""
    if interval_s <= 0:
        return
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, OLD_GENERATION_OFF)

    async def collect_on_schedule() -> None:
        found, spent = full_collection()
        gc.freeze()
        _log.info("start-up objects frozen", frozen=gc.get_freeze_count(), ms=round(spent * 1000, 1))
        while True:
            await asyncio.sleep(interval_s)
            found, spent = full_collection()
            _log.info("full garbage collection", unreachable=found, ms=round(spent * 1000, 1))

    app.task(collect_on_schedule)
