"""F2: the same loop in many runs of one agent (``systemic_loop``); an alert, never a block.

One :class:`AgentLoops` per agent, stepped with the agent's :class:`CallFact` s and
:class:`LoopFact` s in arrival order. Buckets of ``bucketSeconds`` by event time; the window
is the last ``windowBuckets`` buckets up to the newest the agent has seen.

For a (tool, detector) subject: *loop runs* = distinct runs with a verdict of that detector
on that tool in the window; *active runs* = distinct runs of the agent with a ``tool_call``
in the window. A loop fact alerts when loop runs ≥ ``minRuns`` and loop runs / active runs
≥ ``minShare``, unless the subject alerted before: then only when loop runs reach twice the
count of its last alert, or when a whole window passed without any loop run of the subject.

An alert's ``since_ts`` / ``ts`` are the first verdicts (in the window) of the first and the
last counted run, and its sample runs the earliest ones: independent of arrival order.

Trace (defaults): 40 runs of ``coder`` active in the hour; the tenth run to hit
``generic_repeat`` on ``read`` alerts (10 of 40, 25%); the twentieth alerts again.
"""

from __future__ import annotations

from typing import Final

import msgspec

from loopwatch.config.fleet_rules import SystemicLoopRule
from loopwatch.detectors.fleet.alerts import FleetAlert, alert_id
from loopwatch.detectors.fleet.facts import CallFact, LoopFact
from loopwatch.detectors.fleet.tool_outage import samples

__all__ = ["AgentLoops", "step"]

MAX_RUNS: Final = 100_000


class LoopBucket(msgspec.Struct, array_like=True):
    active: dict[str, None] = msgspec.field(default_factory=dict)
    loops: dict[str, dict[str, int]] = msgspec.field(default_factory=dict)  # "tool\x1fdetector" -> run -> ts


class Mark(msgspec.Struct, array_like=True):
    alerted_runs: int  # loop runs at the subject's last alert (0: never alerted)
    last_bucket: int  # the newest bucket with a loop run of the subject


class AgentLoops(msgspec.Struct, array_like=True):
    agent: str
    top: int = -1
    buckets: dict[int, LoopBucket] = msgspec.field(default_factory=dict)
    marks: dict[str, Mark] = msgspec.field(default_factory=dict)


def _message(agent: str, runs: int, active: int, share: float, detector: str, tool: str, minutes: int) -> str:
    return (
        f"Agent {agent}: {runs} of {active} runs ({share:.0%}) hit {detector} on {tool} "
        f"in the last {minutes} min."
    )


def step(state: AgentLoops, fact: CallFact | LoopFact, rule: SystemicLoopRule) -> list[FleetAlert]:
    """Apply one fact of ``state.agent``; the alerts it gives (at most one)."""
    bucket = fact.ts // (rule.bucket_s * 1000)
    size = rule.window_buckets
    if bucket > state.top:
        state.top = bucket
        low = bucket - size + 1
        for old in [b for b in state.buckets if b < low]:
            del state.buckets[old]
        for key in [k for k, mark in state.marks.items() if mark.last_bucket < low - size]:
            del state.marks[key]  # a whole window without loop runs: forgotten anyway
    if bucket <= state.top - size:
        return []  # older than the window
    entry = state.buckets.get(bucket)
    if entry is None:
        entry = state.buckets[bucket] = LoopBucket()
    if type(fact) is CallFact:
        if len(entry.active) < MAX_RUNS:
            entry.active[fact.run] = None
        return []
    assert type(fact) is LoopFact
    key = f"{fact.tool}\x1f{fact.detector}"
    runs = entry.loops.get(key)
    if runs is None:
        runs = entry.loops[key] = {}
    seen = runs.get(fact.run)
    if seen is not None:
        if fact.ts < seen:
            runs[fact.run] = fact.ts  # an earlier verdict arriving late: the sample order holds
        return []  # already a loop run of this subject in this bucket
    if len(runs) < MAX_RUNS:
        runs[fact.run] = fact.ts
    mark = state.marks.get(key)
    if mark is not None and bucket - mark.last_bucket >= size:
        mark.alerted_runs = 0  # a whole window without a loop run: the next alert is a new one
    if mark is None:
        mark = state.marks[key] = Mark(0, bucket)
    mark.last_bucket = max(mark.last_bucket, bucket)
    return _maybe_alert(state, key, mark, fact, bucket, rule)


def _maybe_alert(
    state: AgentLoops, key: str, mark: Mark, fact: LoopFact, bucket: int, rule: SystemicLoopRule
) -> list[FleetAlert]:
    loop_runs: dict[str, int] = {}
    active: set[str] = set()
    for b in sorted(state.buckets):
        entry = state.buckets[b]
        active.update(entry.active)
        for run, ts in entry.loops.get(key, {}).items():
            known = loop_runs.get(run)
            if known is None or ts < known:
                loop_runs[run] = ts
    count = len(loop_runs)
    if count < rule.min_runs or not active:
        return []
    share = count / len(active)
    if share < rule.min_share:
        return []
    if mark.alerted_runs and count < 2 * mark.alerted_runs:
        return []
    mark.alerted_runs = count
    subject = f"agent:{state.agent}:tool:{fact.tool}:{fact.detector}"
    return [
        FleetAlert(
            alert_id=alert_id("systemic_loop", subject, bucket, count),
            kind="systemic_loop",
            subject=subject,
            tool=fact.tool,
            agent_id=state.agent,
            runs=count,
            active_runs=len(active),
            share=round(share, 4),
            detector=fact.detector,
            sample_run_ids=samples(loop_runs),
            since_ts=min(loop_runs.values()),
            ts=max(loop_runs.values()),  # when the last counted run began to loop: arrival-proof
            message=_message(
                state.agent, count, len(active), share, fact.detector, fact.tool, rule.window_minutes
            ),
        )
    ]
