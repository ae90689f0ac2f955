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
* F6 counts a chain's *distinct runs* and its results, in the order the events were applied
  (never sorted by time: the chain's expiry compares each fact with the facts before it, so
  sorting would make the alerts depend on where a fetch ends). A run's later events fold into
  its :class:`ChainRunFact` (its first event's place and time, the latest time as ``last``)
  within a stretch of the chain's events in which none comes ``chainTtlS`` or more after every
  event before it (such an event may expire the chain: a new stretch starts there); an event
  older than its run's fact stays a fact of its own. Every counted result stays, in place.
  Applied one after the other, these give the alerts of every event's facts, however the
  events were cut into batches.

F1 and F2 facts are handed on in event-time order per subject (a batch holds several
partitions), in arrival order among equal times.
"""

from __future__ import annotations

from typing import Any

from loopwatch.detectors.events import Output
from loopwatch.detectors.fleet.facts import (
    CallFact,
    ChainResultFact,
    ChainRunFact,
    Fact,
    ResultFact,
    facts_of_outputs,
    subject_of,
)

__all__ = ["FactBatch"]


def _time_then_arrival(item: tuple[int, int, Fact]) -> tuple[int, int]:
    return item[0], item[1]


def _first(item: tuple[int, str, ResultFact | None]) -> int:
    return item[0]


def _first_two_of_five(item: tuple[int, int, str, str, Fact | None]) -> tuple[int, int]:
    return item[0], item[1]


class FactBatch:
    __slots__ = (
        "_calls",
        "_chain_events",
        "_chain_results",
        "_loops",
        "_results",
        "_seq",
        "chain_ttl_ms",
        "loop_bucket_ms",
        "outage_bucket_ms",
    )

    def __init__(self, outage_bucket_s: int = 60, loop_bucket_s: int = 300, chain_ttl_s: int = 3600) -> None:
        self.outage_bucket_ms = outage_bucket_s * 1000
        self.loop_bucket_ms = loop_bucket_s * 1000
        self.chain_ttl_ms = chain_ttl_s * 1000
        # root -> (ts, arrival, run, agent) of each event of its runs; root -> (ts, arrival, result)
        self._chain_events: dict[str, list[tuple[int, int, str, str]]] = {}
        self._chain_results: dict[str, list[tuple[int, int, Fact]]] = {}
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

    def chain_run(self, root: str, run: str, agent: str, ts: int) -> None:
        """An applied call or result of ``run``, in the delegation chain of ``root``."""
        self._seq += 1
        events = self._chain_events.get(root)
        if events is None:
            events = self._chain_events[root] = []
        events.append((ts, self._seq, run, agent))

    def chain_result(self, fact: ChainResultFact) -> None:
        self._seq += 1
        results = self._chain_results.get(fact.root)
        if results is None:
            results = self._chain_results[fact.root] = []
        results.append((fact.ts, self._seq, fact))

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
        for root in {**self._chain_events, **self._chain_results}:
            out[f"chain:{root}"] = self._chain(root)
        self._calls, self._results, self._loops, self._seq = {}, {}, {}, 0
        self._chain_events, self._chain_results = {}, {}
        return out

    def _chain(self, root: str) -> list[Fact]:
        """A chain's facts in arrival order: per stretch, a run's later events folded into its fact."""
        items: list[tuple[int, int, str, str, Fact | None]] = [
            (seq, ts, run, agent, None) for ts, seq, run, agent in self._chain_events.get(root, [])
        ]
        items += [(seq, ts, "", "", fact) for ts, seq, fact in self._chain_results.get(root, [])]
        items.sort(key=_first_two_of_five)
        out: list[Fact | list[Any]] = []
        stretch: dict[str, list[Any]] = {}  # run -> its fact being built: [run, agent, first, last]
        newest: int | None = None
        for _, ts, run, agent, result in items:
            if result is not None:
                out.append(result)
                continue
            if newest is not None and ts - newest >= self.chain_ttl_ms:
                stretch = {}
            newest = ts if newest is None else max(newest, ts)
            kept = stretch.get(run)
            if kept is not None and ts >= kept[2]:
                kept[3] = max(kept[3], ts)
                continue
            built = [run, agent, ts, ts]
            stretch[run] = built
            out.append(built)
        return [
            ChainRunFact(root, item[0], item[1], item[2], item[3]) if isinstance(item, list) else item
            for item in out
        ]

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
