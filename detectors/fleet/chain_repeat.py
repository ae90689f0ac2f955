"""F6c: the runs of a delegation chain repeating each other's work (``chain_repeat``).

Per root and per (tool, args hash, result hash): the calls whose ``tool_result`` (with a result
hash) was applied, and the distinct runs that made them.

The subject is ``chain:{root}:{tool}:{h12}`` (``h12``: the first 12 characters of the args
hash after its ``{tool}:`` prefix); the alert also carries the full ``args_hash``, which the
blocks are keyed by (two argument sets may share their ``h12``). It alerts at the first result
at which the count is at least ``chainWarningThreshold`` **and** the runs are at least
``minRuns``, and again at ``chainCriticalThreshold`` under the same two conditions; once each
(a result that meets both at once gives both, the warning first). Ids are
``chain_repeat:chain:{root}:{args_hash}:{threshold}`` (unique per argument set). Repeats inside
fewer than ``minRuns`` runs never alert: that is the in-run rules' job.

An alert's ``runs``, ``count`` and ``sample_run_ids`` (five runs, the root first, then by their
first counted call) are those of the (tool, args, result) that crossed; ``since_ts`` and ``ts``
are its first and latest counted calls.

The state is bounded by construction (a chain is one table value and one changelog record):

* a triple keeps numbers — its calls (exact, without end), its runs (exact up to
  :data:`RUNS_KEPT`, the largest ``minRuns`` allowed, by the hashes of their ids; the count
  stays there after), its first and latest call times and up to five sample runs;
* a result counts once. A worker's facts name the input partition and offset of their event;
  a run's events are on one partition, applied in offset order, and their facts reach the
  chain in that order, so the chain keeps per input partition the highest offset counted and
  a redelivered result (at or below it) changes nothing: exact, in a few numbers. A result
  re-published under a new offset (or, in the embedded runtime, twice in the input) is caught
  among the chain's latest :data:`RECENT` results (hashes of run and event id);
* a chain keeps at most :data:`MAX_TRIPLES` triples and :data:`BUDGET_BYTES` of them; past
  that the least counted other triple is forgotten (of equals, the least recently counted; it
  starts from zero if it comes back), so the chain's established repeats stay while newcomers
  compete for the rest; and the alert marks of :data:`MAX_TRIPLES` argument sets, least
  recently alerted forgotten first.

Trace (10 / 20, minRuns 3): r1 reads /spec 8 times, r2 4 times (12 calls, 2 runs: nothing);
r3 reads it once → 13 calls in 3 runs: the warning; 7 more reads → 20: the critical.
"""

from __future__ import annotations

from typing import Final

import msgspec

from loopwatch.config.sections import Delegation
from loopwatch.detectors.fleet.alerts import FleetAlert, alert_id
from loopwatch.detectors.fleet.chain_sketch import id_hash, sampled
from loopwatch.detectors.fleet.facts import ChainResultFact

__all__ = [
    "BUDGET_BYTES",
    "KIND",
    "MAX_TRIPLES",
    "RECENT",
    "RUNS_KEPT",
    "Repeats",
    "args_h12",
    "message",
    "on_result",
    "subject",
]

KIND: Final = "chain_repeat"
#: (tool, args, result) triples kept per chain (the least recently counted forgotten first).
MAX_TRIPLES: Final = 256
#: What the triples of one chain may take, estimated as stored (bytes).
BUDGET_BYTES: Final = 24_000
#: Distinct runs counted exactly per triple: the largest ``minRuns`` allowed.
RUNS_KEPT: Final = 32
#: The latest results remembered per chain, so that one re-published counts once.
RECENT: Final = 256
#: Input partitions whose highest counted offset a chain keeps.
MAX_SOURCES: Final = 256
_WARNING: Final = 1
_CRITICAL: Final = 2
_WORK_BYTES: Final = 64  # a triple's numbers, key and framing
_HASH_BYTES: Final = 9


class Work(msgspec.Struct, array_like=True):
    """The counted calls of one (tool, args, result) in one chain."""

    count: int = 0  # calls counted
    runs: set[int] = msgspec.field(default_factory=set)  # hashes of their runs (≤ RUNS_KEPT)
    samples: list[tuple[str, int]] = msgspec.field(default_factory=list)  # (run, first call)
    since_ts: int = 0
    top_ts: int = 0

    def size(self) -> int:
        named = sum(len(run.encode("utf-8", "surrogatepass")) + 12 for run, _ in self.samples)
        return _WORK_BYTES + _HASH_BYTES * len(self.runs) + named


class Repeats(msgspec.Struct, array_like=True):
    """What F6c keeps of one chain."""

    work: dict[int, Work] = msgspec.field(default_factory=dict)  # triple hash -> calls, oldest first
    marks: dict[int, int] = msgspec.field(default_factory=dict)  # (tool, args) hash -> level alerted
    size: int = 0  # the estimated bytes of ``work``
    offsets: dict[int, int] = msgspec.field(default_factory=dict)  # input partition -> highest offset
    recent: list[int] = msgspec.field(default_factory=list)  # hashes of the latest results


def args_h12(tool: str, args_hash: str) -> str:
    """The first 12 characters of an args hash after its ``{tool}:`` prefix."""
    prefix = f"{tool}:"
    digest = args_hash[len(prefix) :] if args_hash.startswith(prefix) else args_hash
    return digest[:12]


def subject(root: str, tool: str, args_hash: str) -> str:
    return f"chain:{root}:{tool}:{args_h12(tool, args_hash)}"


def message(count: int, tool: str, runs: int, root: str) -> str:
    return (
        f"{count} calls of {tool} with the same arguments and the same result across {runs} runs "
        f"of delegation chain {root}: the agents are repeating each other's work."
    )


def _triple(state: Repeats, key: int) -> Work:
    """The triple's work, now the most recently counted (created if new, within the bounds)."""
    work = state.work.pop(key, None)
    if work is None:
        work = Work()
        state.size += work.size()
    state.work[key] = work
    return work


def _bounded(state: Repeats, current: int) -> None:
    """Within the bounds again: forget the least counted triple other than ``current`` (of
    equals, the least recently counted), so that a chain's established repeats stay while
    newcomers compete for the rest."""
    works = state.work
    while len(works) > 1 and (len(works) > MAX_TRIPLES or state.size > BUDGET_BYTES):
        victim, fewest = current, -1
        for key, work in works.items():  # least recently counted first
            if key != current and (fewest < 0 or work.count < fewest):
                victim, fewest = key, work.count
        state.size -= works.pop(victim).size()


def on_result(state: Repeats, root: str, fact: ChainResultFact, rule: Delegation) -> list[FleetAlert]:
    """Count one result of a call in the chain; the alerts it gives (at most two)."""
    if fact.offset >= 0:
        highest = state.offsets.get(fact.partition)
        if highest is not None and fact.offset <= highest:
            return []  # counted before: redelivered
        state.offsets[fact.partition] = fact.offset
        if len(state.offsets) > MAX_SOURCES:
            del state.offsets[next(iter(state.offsets))]
    call = id_hash(f"{fact.run}\x1f{fact.event}")
    if call in state.recent:
        return []  # counted before: re-published
    state.recent.append(call)
    if len(state.recent) > RECENT:
        del state.recent[0]
    triple = id_hash(f"{fact.tool}\x1f{fact.args}\x1f{fact.result}")
    work = _triple(state, triple)
    before = work.size()
    work.count += 1
    if work.count == 1 or fact.ts < work.since_ts:
        work.since_ts = fact.ts
    if work.count == 1 or fact.ts > work.top_ts:
        work.top_ts = fact.ts
    run = id_hash(fact.run)
    if run not in work.runs and len(work.runs) < RUNS_KEPT:
        work.runs.add(run)
    sampled(work.samples, root, fact.run, fact.ts)
    state.size += work.size() - before
    _bounded(state, triple)
    count, runs = work.count, len(work.runs)
    if runs < rule.min_runs or count < rule.chain_warning_threshold:
        return []
    marks = state.marks
    mark_key = id_hash(f"{fact.tool}\x1f{fact.args}")
    level = marks.pop(mark_key, 0)
    alerts: list[FleetAlert] = []
    for threshold, reached in (
        (rule.chain_warning_threshold, _WARNING),
        (rule.chain_critical_threshold, _CRITICAL),
    ):
        if level < reached and count >= threshold:
            level = reached
            alerts.append(_alert(root, fact, work, threshold))
    if level:
        marks[mark_key] = level  # the most recently alerted last
        while len(marks) > MAX_TRIPLES:
            del marks[next(iter(marks))]
    return alerts


def _alert(root: str, fact: ChainResultFact, work: Work, threshold: int) -> FleetAlert:
    where = subject(root, fact.tool, fact.args)
    count, runs = work.count, len(work.runs)
    return FleetAlert(
        alert_id=alert_id(KIND, f"chain:{root}:{fact.args}", threshold),
        kind=KIND,
        subject=where,
        tool=fact.tool,
        args_hash=fact.args,
        runs=runs,
        count=count,
        sample_run_ids=[run for run, _ in work.samples],
        since_ts=work.since_ts,
        ts=work.top_ts,
        message=message(count, fact.tool, runs, root),
    )
