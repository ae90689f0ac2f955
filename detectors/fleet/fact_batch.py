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
* F6 counts a chain's *distinct runs* and its results: a run's events collapse to one
  :class:`ChainRunFact` (its first and last event time) per stretch of the chain's events
  without a gap of ``chainTtlS`` (a gap that long expires the chain, so the stretches stay
  apart); every counted result stays.

Facts are handed on in event-time order per subject (a batch holds several partitions),
in arrival order among equal times.
"""

from __future__ import annotations

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


def _first_two(item: tuple[int, int, str, str]) -> tuple[int, int]:
    return item[0], item[1]


def _first_three(item: tuple[int, int, int, Fact]) -> tuple[int, int, int]:
    return item[0], item[1], item[2]


def _run_facts(root: str, stretch: dict[str, tuple[int, int, int, str]]) -> list[tuple[int, int, int, Fact]]:
    return [
        (first, 0, seq, ChainRunFact(root, run, agent, first, last))
        for run, (first, seq, last, agent) in stretch.items()
    ]


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
        """A chain's facts: per stretch without a ``chainTtlS`` gap, one run fact per run (at its
        first event), then the results, in event-time order (run facts first at equal times)."""
        events = self._chain_events.get(root, [])
        events.sort(key=_first_two)
        ordered: list[tuple[int, int, int, Fact]] = []
        stretch: dict[str, tuple[int, int, int, str]] = {}  # run -> (first ts, arrival, last ts, agent)
        newest: int | None = None
        for ts, seq, run, agent in events:
            if newest is not None and ts - newest >= self.chain_ttl_ms:
                ordered += _run_facts(root, stretch)
                stretch = {}
            newest = ts if newest is None else max(newest, ts)
            kept = stretch.get(run)
            stretch[run] = (ts, seq, ts, agent) if kept is None else (kept[0], kept[1], ts, kept[3])
        ordered += _run_facts(root, stretch)
        ordered += [(ts, 1, seq, fact) for ts, seq, fact in self._chain_results.get(root, [])]
        ordered.sort(key=_first_three)
        return [fact for _, _, _, fact in ordered]

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
