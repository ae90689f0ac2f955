"""F6b: a delegation chain that keeps starting runs (``chain_runaway``).

Per root, the distinct runs seen in its chain (the root's own included). When their count
reaches ``maxRuns``, one ``fleet_alert``, subject ``chain:{root}``; again at 2×, 4×, …
``maxRuns``, without end. The count grows by one run at a time, so an alert's ``runs`` is the
threshold it crossed, and its id is ``chain_runaway:chain:{root}:{threshold}``: the same in
every runtime and in a replay.

The state is bounded whatever the chain does: runs are known by a 63-bit hash of their id,
exactly for the first :data:`EXACT_RUNS` (``maxRuns`` may not exceed it, so the first alert is
exact), then through a fixed Bloom filter (:data:`~detectors.fleet.chain_sketch.BLOOM_BYTES`),
which may take a new run for one seen before (rarely: about 1 % at 10,000 runs), never the
reverse; the count itself is a number and keeps growing, so the re-alerts go on. Agents are
counted exactly up to :data:`MAX_AGENTS` (then the count stays there).

An alert's ``since_ts`` is the earliest event time of its counted runs and its ``ts`` the
first event time of the latest new run; ``sample_run_ids`` are the five earliest runs, the
root first. With ``block: true`` every later call of a run of the chain whose first event is
later than the alert's ``ts`` is blocked (:mod:`detectors.fleet.chain_blocks`); the runs
counted by then finish their work.

Trace (maxRuns 3): root r0 calls at t0, it starts r1 (t0+1 s) and r2 (t0+2 s) → alert at r2,
runs 3, samples [r0, r1, r2], ts t0+2 s; r3…r5 → the second alert at r5 (runs 6).
"""

from __future__ import annotations

from typing import Final

import msgspec

from loopwatch.config.sections import Delegation
from loopwatch.detectors.fleet.alerts import FleetAlert, alert_id
from loopwatch.detectors.fleet.chain_sketch import bloom_add, id_hash, new_bloom, sampled
from loopwatch.detectors.fleet.facts import ChainRunFact

__all__ = ["EXACT_RUNS", "KIND", "MAX_AGENTS", "Runaway", "message", "on_run"]

KIND: Final = "chain_runaway"
#: Runs counted exactly per chain (by their ids' hashes); ``maxRuns`` may not exceed it.
EXACT_RUNS: Final = 1024
#: Distinct agents counted per chain (the count stays there).
MAX_AGENTS: Final = 256


class Runaway(msgspec.Struct, array_like=True):
    """What F6b keeps of one chain."""

    count: int = 0  # the distinct runs counted
    runs: set[int] = msgspec.field(default_factory=set)  # their hashes, the first EXACT_RUNS
    bloom: bytearray | None = None  # every run's hash, once the exact set is full
    agents: set[int] = msgspec.field(default_factory=set)  # hashes of the agents (≤ MAX_AGENTS)
    samples: list[tuple[str, int]] = msgspec.field(default_factory=list)  # (run, first ts), root first
    since_ts: int = 0  # the earliest event time of a counted run
    top_ts: int = 0  # the latest first event time of a counted run
    alerted: int = 0  # the threshold of the chain's latest alert (0: none yet)


def message(root: str, runs: int, agents: int) -> str:
    return (
        f"Delegation chain {root} has started {runs} runs of {agents} agents; it is likely "
        "recursing or fanning out without end."
    )


def _is_new(state: Runaway, run: str) -> bool:
    key = id_hash(run)
    runs = state.runs
    if key in runs:
        return False
    if len(runs) < EXACT_RUNS:
        runs.add(key)
        return True
    bloom = state.bloom
    if bloom is None:
        bloom = state.bloom = new_bloom()
        for known in runs:
            bloom_add(bloom, known)
    return bloom_add(bloom, key)


def on_run(state: Runaway, root: str, fact: ChainRunFact, rule: Delegation) -> list[FleetAlert]:
    """Apply a run's fact to its chain; the alert it gives (at most one)."""
    if not _is_new(state, fact.run):
        if fact.ts < state.since_ts:
            state.since_ts = fact.ts
        if state.samples and any(run == fact.run for run, _ in state.samples):
            sampled(state.samples, root, fact.run, fact.ts)  # an earlier event arriving late
        return []
    state.count += 1
    if state.count == 1 or fact.ts < state.since_ts:
        state.since_ts = fact.ts
    if state.count == 1 or fact.ts > state.top_ts:
        state.top_ts = fact.ts
    if len(state.agents) < MAX_AGENTS:
        state.agents.add(id_hash(fact.agent))
    sampled(state.samples, root, fact.run, fact.ts)
    count = state.count
    threshold = rule.max_runs if state.alerted == 0 else state.alerted * 2
    if count < threshold:
        return []
    state.alerted = threshold
    agents = len(state.agents)
    subject = f"chain:{root}"
    return [
        FleetAlert(
            alert_id=alert_id(KIND, subject, threshold),
            kind=KIND,
            subject=subject,
            runs=count,
            agents=agents,
            sample_run_ids=[run for run, _ in state.samples],
            since_ts=state.since_ts,
            ts=state.top_ts,
            message=message(root, count, agents),
        )
    ]
