"""``loopwatch worker`` (or ``gateway``) with timing probes, for the benches' ``--trace``.

``python -m tests.bench.worker_trace OUT.json worker [worker args]`` runs the worker as
``loopwatch worker`` does (``... OUT.json gateway [args]``: the gateway, of which only the
collector's probe applies), with three probes added in this process only (product code is
not changed):

* ``gc.callbacks``: every collection of the cyclic garbage collector, its generation, when
  it started and how long it took;
* the bulk sink's ``process``: every fetched batch of the input topic, when applying it began
  and ended (wall clock, comparable with the broker's ``LogAppendTime``) and its size;
* the run processor's ``_publish``: when the outputs of each event were handed to the producer.

They are written to ``OUT.json`` when the worker exits (SIGTERM), with a census of the
objects the collector tracks at that point.
"""

from __future__ import annotations

import atexit
import gc
import json
import sys
import time
from collections import Counter
from typing import Any


def install(out: str) -> None:
    from loopwatch.streams.kafka.run_processor import RunProcessor
    from loopwatch.streams.kafka.worker import LoopwatchWorker

    collections: list[tuple[float, float, int]] = []  # (start, seconds, generation)
    batches: list[tuple[float, float, int]] = []  # (start, end, input records)
    published: dict[str, tuple[float, int]] = {}  # event id -> (handed to the producer, batch index)
    started = [0.0]

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            spent = time.perf_counter() - started[0]
            collections.append((time.time() - spent, spent, int(info["generation"])))

    gc.callbacks.append(on_gc)

    process = LoopwatchWorker.process

    async def timed_process(self: LoopwatchWorker, fetched: dict[Any, list[Any]]) -> None:
        count = sum(len(records) for tp, records in fetched.items() if tp.topic == self.topic)
        begin = time.time()
        try:
            await process(self, fetched)
        finally:
            if count:
                batches.append((begin, time.time(), count))

    publish = RunProcessor._publish

    async def timed_publish(
        self: RunProcessor,
        key: bytes,
        state: Any,
        event_id: str,
        encoded: list[bytes],
        with_facts: bool = False,
    ) -> None:
        if encoded:
            published.setdefault(event_id, (time.time(), len(batches)))
        await publish(self, key, state, event_id, encoded, with_facts)

    LoopwatchWorker.process = timed_process  # type: ignore[method-assign]
    RunProcessor._publish = timed_publish  # type: ignore[method-assign]

    def dump() -> None:
        census = Counter(type(o).__qualname__ for o in gc.get_objects())
        tracked = {"total": census.total(), "frozen": gc.get_freeze_count(), **dict(census.most_common(12))}
        gc.callbacks.remove(on_gc)  # the collection below is not the worker's
        gc.unfreeze()
        tracked["cyclic garbage"] = gc.collect()
        with open(out, "w") as file:
            json.dump(
                {"gc": collections, "batches": batches, "published": published, "tracked": tracked}, file
            )

    atexit.register(dump)


def main() -> int:
    out, *args = sys.argv[1:]
    install(out)
    from loopwatch.streams.cli.main import main as loopwatch

    return loopwatch(args)


if __name__ == "__main__":
    raise SystemExit(main())
