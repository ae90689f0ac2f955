"""F6b: a delegation chain that keeps starting runs (``chain_runaway``).

Per root, the distinct runs seen in its chain (the root's own included), each with the agent
and the event time it was first seen with. When their count reaches ``maxRuns``, one
``fleet_alert``, subject ``chain:{root}``; again at 2×, 4×, … ``maxRuns``. The count grows by
one run at a time, so an alert's ``runs`` is the threshold it crossed, and its id is
``chain_runaway:chain:{root}:{threshold}``: the same in every runtime and in a replay.

An alert's ``since_ts`` is the first event time of the earliest counted run and its ``ts``
the first event time of the latest one (the run that made the count reach the threshold, in
time order); ``sample_run_ids`` are the five earliest counted runs, the root first. With
``block: true`` every later call of a run of the chain whose first event is later than the
alert's ``ts`` is blocked (:mod:`detectors.fleet.chain_blocks`); the runs counted by then
finish their work.

Trace (maxRuns 3): root r0 calls at t0, it starts r1 (t0+1 s) and r2 (t0+2 s) → alert at r2,
runs 3, samples [r0, r1, r2], ts t0+2 s; r3…r5 → the second alert at r5 (runs 6).
"""

from __future__ import annotations

from typing import Final

import msgspec

from loopwatch.config.sections import Delegation
from loopwatch.detectors.fleet.alerts import FleetAlert, alert_id
from loopwatch.detectors.fleet.facts import ChainRunFact

__all__ = ["KIND", "MAX_RUNS", "Runaway", "message", "on_run", "root_first"]

KIND: Final = "chain_runaway"
#: Runs remembered per chain (the count saturates there: 2⁷ × the default maxRuns).
MAX_RUNS: Final = 10_000
SAMPLES: Final = 5


class Runaway(msgspec.Struct, array_like=True):
    """What F6b keeps of one chain."""

    runs: dict[str, tuple[str, int]] = msgspec.field(default_factory=dict)  # run -> (agent, first ts)
    alerted: int = 0  # the threshold of the chain's latest alert (0: none yet)


def root_first(root: str, first: dict[str, int]) -> list[str]:
    """Up to five runs: the root first, then the earliest (event time, then id); the same
    whatever order the facts arrived in."""
    ordered = sorted((run != root, ts, run) for run, ts in first.items())
    return [run for _, _, run in ordered[:SAMPLES]]


def message(root: str, runs: int, agents: int) -> str:
    return (
        f"Delegation chain {root} has started {runs} runs of {agents} agents; it is likely "
        "recursing or fanning out without end."
    )


def on_run(state: Runaway, root: str, fact: ChainRunFact, rule: Delegation) -> list[FleetAlert]:
    """Apply a run's fact to its chain; the alert it gives (at most one)."""
    runs = state.runs
    seen = runs.get(fact.run)
    if seen is not None:
        if fact.ts < seen[1]:
            runs[fact.run] = (seen[0], fact.ts)  # an earlier event arriving late: the order holds
        return []
    if len(runs) >= MAX_RUNS:
        return []
    runs[fact.run] = (fact.agent, fact.ts)
    count = len(runs)
    threshold = rule.max_runs if state.alerted == 0 else state.alerted * 2
    if count < threshold:
        return []
    state.alerted = threshold
    first = {run: ts for run, (_, ts) in runs.items()}
    agents = len({agent for agent, _ in runs.values()})
    subject = f"chain:{root}"
    return [
        FleetAlert(
            alert_id=alert_id(KIND, subject, threshold),
            kind=KIND,
            subject=subject,
            runs=count,
            agents=agents,
            sample_run_ids=root_first(root, first),
            since_ts=min(first.values()),
            ts=max(first.values()),
            message=message(root, count, agents),
        )
    ]
