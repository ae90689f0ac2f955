"""The facts of a batch of events, collected cheaply and handed on compacted, per subject.

A worker sends the facts of each batch it applies to the facts topic (one record per
subject). Most events are healthy calls and successes, so the batch keeps only what the
rules can tell apart, which changes no alert:

* F2 counts *distinct runs per bucket*: a run's calls collapse to its first call in each
  bucket of ``systemicLoop.bucketSeconds``.
* F1 uses successes for the latest success of each bucket (to refuse opening) and for the
  first success after a failure (to close): of successes that follow each other in a
  tool's time order with no failure between them, in one bucket, the first and the last
  are kept. (Exact for streams in time order; only a success older than an outage's first
  failure, arriving in a later batch than that failure, could close it one success later.)

Facts are handed on in event-time order per subject (a batch holds several partitions),
in arrival order among equal times.
"""

from __future__ import annotations

from loopwatch.detectors.events import Output
from loopwatch.detectors.fleet.facts import CallFact, Fact, ResultFact, facts_of_outputs, subject_of

__all__ = ["FactBatch"]


def _time_then_arrival(item: tuple[int, int, Fact]) -> tuple[int, int]:
    return item[0], item[1]


def _first(item: tuple[int, str, ResultFact | None]) -> int:
    return item[0]


class FactBatch:
    __slots__ = ("_calls", "_loops", "_results", "_seq", "loop_bucket_ms", "outage_bucket_ms")

    def __init__(self, outage_bucket_s: int = 60, loop_bucket_s: int = 300) -> None:
        self.outage_bucket_ms = outage_bucket_s * 1000
        self.loop_bucket_ms = loop_bucket_s * 1000
        # agent -> (run, bucket) -> (first ts, arrival): F2's facts keep their arrival order
        self._calls: dict[str, dict[tuple[str, int], tuple[int, int]]] = {}
        # tool -> its results: (ts, run, None) for a success, (ts, run, fact) for a failure
        self._results: dict[str, list[tuple[int, str, ResultFact | None]]] = {}
        self._loops: dict[str, list[tuple[int, int, Fact]]] = {}  # agent -> (ts, arrival, fact)
        self._seq = 0

    def call(self, agent: str, run: str, ts: int) -> None:
        calls = self._calls.get(agent)
        if calls is None:
            calls = self._calls[agent] = {}
        key = (run, ts // self.loop_bucket_ms)
        if key not in calls:
            self._seq += 1
            calls[key] = (ts, self._seq)

    def success(self, tool: str, run: str, ts: int) -> None:
        results = self._results.get(tool)
        if results is None:
            results = self._results[tool] = []
        results.append((ts, run, None))

    def failure(self, fact: ResultFact) -> None:
        results = self._results.get(fact.tool)
        if results is None:
            results = self._results[fact.tool] = []
        results.append((fact.ts, fact.run, fact))

    def outputs(self, outputs: list[Output], run: str, ts: int) -> None:
        for fact in facts_of_outputs(outputs, run, ts):
            self.loop(fact)

    def loop(self, fact: Fact) -> None:
        self._seq += 1
        self._loops.setdefault(subject_of(fact), []).append((fact.ts, self._seq, fact))

    def drain(self) -> dict[str, list[Fact]]:
        """Subject → its facts in event-time order, compacted; the batch is empty afterwards."""
        ordered: dict[str, list[tuple[int, int, Fact]]] = {}
        for agent, calls in self._calls.items():
            ordered[f"agent:{agent}"] = [
                (ts, seq, CallFact(agent, run, ts)) for (run, _), (ts, seq) in calls.items()
            ]
        for subject, loops in self._loops.items():
            ordered.setdefault(subject, []).extend(loops)
        out: dict[str, list[Fact]] = {}
        for subject, items in ordered.items():
            items.sort(key=_time_then_arrival)
            out[subject] = [fact for _, _, fact in items]
        for tool, results in self._results.items():
            results.sort(key=_first)
            out[f"tool:{tool}"] = self._compact(tool, results)
        self._calls, self._results, self._loops, self._seq = {}, {}, {}, 0
        return out

    def _compact(self, tool: str, results: list[tuple[int, str, ResultFact | None]]) -> list[Fact]:
        kept: list[Fact] = []
        size = self.outage_bucket_ms
        last = len(results) - 1
        for index, (ts, run, failure) in enumerate(results):
            if failure is not None:
                kept.append(failure)
                continue
            if 0 < index < last:
                before, after = results[index - 1], results[index + 1]
                bucket = ts // size
                if before[2] is None and after[2] is None and before[0] // size == bucket == after[0] // size:
                    continue  # between two successes of its bucket: they stand for it
            kept.append(ResultFact(tool, "", run, ts))
        return kept
