"""F6c: the runs of a delegation chain repeating each other's work (``chain_repeat``).

Per root and per (tool, args hash, result hash): the calls whose ``tool_result`` (with a result
hash) was applied, each counted once (named by its run and the result's event id, so a
redelivered fact changes nothing), and the distinct runs that made them.

The subject is ``chain:{root}:{tool}:{h12}`` (``h12``: the first 12 characters of the args
hash after its ``{tool}:`` prefix). It alerts at the first result at which the count is at
least ``chainWarningThreshold`` **and** the runs are at least ``minRuns``, and again at
``chainCriticalThreshold`` under the same two conditions; once each (a result that meets both
at once gives both, the warning first). Ids are ``chain_repeat:{subject}:{threshold}``.
Repeats inside fewer than ``minRuns`` runs never alert: that is the in-run rules' job.

An alert's ``runs``, ``count`` and ``sample_run_ids`` (five runs, the root first, then by their
first counted call) are those of the (tool, args, result) that crossed; ``since_ts`` and ``ts``
are its first and latest counted calls. With ``block: true``, from the critical alert on, every
further call with that tool and args hash in the chain is blocked
(:mod:`detectors.fleet.chain_blocks`).

Trace (10 / 20, minRuns 3): r1 reads /spec 8 times, r2 4 times (12 calls, 2 runs: nothing);
r3 reads it once → 13 calls in 3 runs: the warning; 7 more reads → 20: the critical.
"""

from __future__ import annotations

from typing import Final

import msgspec

from loopwatch.config.sections import Delegation
from loopwatch.detectors.fleet.alerts import FleetAlert, alert_id
from loopwatch.detectors.fleet.chain_runaway import root_first
from loopwatch.detectors.fleet.facts import ChainResultFact

__all__ = ["KIND", "Repeats", "args_h12", "message", "on_result", "subject"]

KIND: Final = "chain_repeat"
#: (tool, args, result) triples remembered per chain; later ones are not counted.
MAX_WORK: Final = 10_000
#: Calls and runs remembered per triple (its counts saturate there).
MAX_CALLS: Final = 1_000
_WARNING: Final = 1
_CRITICAL: Final = 2


class Work(msgspec.Struct, array_like=True):
    """The counted calls of one (tool, args, result) in one chain."""

    calls: dict[str, int] = msgspec.field(default_factory=dict)  # "run\x1fevent id" -> event time
    runs: dict[str, int] = msgspec.field(default_factory=dict)  # run -> its first counted call


class Repeats(msgspec.Struct, array_like=True):
    """What F6c keeps of one chain."""

    work: dict[str, Work] = msgspec.field(default_factory=dict)  # "tool\x1fargs\x1fresult" -> calls
    marks: dict[str, int] = msgspec.field(default_factory=dict)  # "tool\x1fargs" -> level alerted


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


def on_result(state: Repeats, root: str, fact: ChainResultFact, rule: Delegation) -> list[FleetAlert]:
    """Count one result of a call in the chain; the alerts it gives (at most two)."""
    key = f"{fact.tool}\x1f{fact.args}\x1f{fact.result}"
    work = state.work.get(key)
    if work is None:
        if len(state.work) >= MAX_WORK:
            return []
        work = state.work[key] = Work()
    call = f"{fact.run}\x1f{fact.event}"
    if call in work.calls or len(work.calls) >= MAX_CALLS:
        return []  # counted before (a redelivery), or saturated
    work.calls[call] = fact.ts
    seen = work.runs.get(fact.run)
    if seen is None:
        if len(work.runs) < MAX_CALLS:
            work.runs[fact.run] = fact.ts
    elif fact.ts < seen:
        work.runs[fact.run] = fact.ts
    count, runs = len(work.calls), len(work.runs)
    if runs < rule.min_runs or count < rule.chain_warning_threshold:
        return []
    mark_key = f"{fact.tool}\x1f{fact.args}"
    level = state.marks.get(mark_key, 0)
    alerts: list[FleetAlert] = []
    for threshold, reached in (
        (rule.chain_warning_threshold, _WARNING),
        (rule.chain_critical_threshold, _CRITICAL),
    ):
        if level < reached and count >= threshold:
            level = reached
            alerts.append(_alert(root, fact, work, threshold))
    if alerts:
        state.marks[mark_key] = level
    return alerts


def _alert(root: str, fact: ChainResultFact, work: Work, threshold: int) -> FleetAlert:
    where = subject(root, fact.tool, fact.args)
    count, runs = len(work.calls), len(work.runs)
    return FleetAlert(
        alert_id=alert_id(KIND, where, threshold),
        kind=KIND,
        subject=where,
        tool=fact.tool,
        runs=runs,
        count=count,
        sample_run_ids=root_first(root, work.runs),
        since_ts=min(work.calls.values()),
        ts=max(work.calls.values()),
        message=message(count, fact.tool, runs, root),
    )
