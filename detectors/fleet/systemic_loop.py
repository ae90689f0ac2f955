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

**Bounded state** (one fleet-table value and changelog record per agent: under 64 KB whatever
the agent does; loopwatch's deviation, docs/fleet-rules.md):

* Active runs: per bucket, the 63-bit hashes of the runs (exact) while the window holds at
  most :data:`ACTIVE_EXACT` (run, bucket) pairs; past it, every bucket of the agent becomes a
  HyperLogLog of 2^:data:`ACTIVE_PRECISION` registers (:mod:`detectors.fleet.cardinality`,
  union by register maximum, 1.6 % standard error) until the last sketched bucket leaves the
  window.
* Loop runs: per subject and bucket, run id → its first verdict there (exact: counts,
  samples, ``since_ts`` and ``ts`` as above; the ids are kept because the samples must be
  the window's earliest runs) while the agent's loop entries take at most
  :data:`LOOP_EXACT_BYTES`; past it the subject with the most entries becomes a sketch (per
  bucket a HyperLogLog of 2^:data:`LOOP_PRECISION` registers, 2.3 %; its samples the
  earliest five runs seen since, dropped with their bucket; ``ts`` the latest verdict that
  raised the sketch) until its last sketched bucket leaves the window. At most
  :data:`MAX_SKETCHED` subjects are sketched at a time: past that, once the exact budget is
  spent, a new loop entry of another subject is not kept (its count stops growing).
* Subjects (tool × detector, by hash): at most :data:`MAX_SUBJECTS`; a new one forgets the one
  whose newest loop run is oldest (with its alert mark: it may alert again as new).

States of the previous release (strings in every bucket, ``buckets`` / ``marks``) still
decode, and are converted on their next fact.
"""

from __future__ import annotations

from typing import Final

import msgspec

from loopwatch.config.fleet_rules import SystemicLoopRule
from loopwatch.detectors.fleet.alerts import FleetAlert, alert_id
from loopwatch.detectors.fleet.cardinality import hll_add, hll_estimate, hll_union, new_hll
from loopwatch.detectors.fleet.chain_sketch import id_hash, sampled
from loopwatch.detectors.fleet.facts import CallFact, LoopFact
from loopwatch.detectors.fleet.tool_outage import samples
from loopwatch.detectors.input_limits import MAX_ID_BYTES

__all__ = ["ACTIVE_EXACT", "LOOP_EXACT_BYTES", "MAX_SKETCHED", "MAX_SUBJECTS", "AgentLoops", "step"]

#: (run, bucket) pairs of active runs kept exactly in the window, before the agent's sketch.
ACTIVE_EXACT: Final = 2048
ACTIVE_PRECISION: Final = 12
#: What an agent's exact loop entries may take (id bytes + :data:`_ENTRY_BYTES` each).
LOOP_EXACT_BYTES: Final = 6144
LOOP_PRECISION: Final = 11
MAX_SKETCHED: Final = 2
MAX_SUBJECTS: Final = 64
_ENTRY_BYTES: Final = 12  # an entry's timestamp and string header, encoded
_BUCKET_BYTES: Final = 8  # a bucket of a subject's exact entries: its number and map header
#: No run has this id (longer than any id the doors let in): samples ordered by time, then id.
_NO_ROOT: Final = "\x00" * (MAX_ID_BYTES + 1)


class LoopBucket(msgspec.Struct, array_like=True):
    """A bucket of the previous release's state (read only, converted on the next fact)."""

    active: dict[str, None] = msgspec.field(default_factory=dict)
    loops: dict[str, dict[str, int]] = msgspec.field(default_factory=dict)  # "tool\x1fdetector" -> run -> ts


class Mark(msgspec.Struct, array_like=True):
    """A subject's alert mark in the previous release's state (read only)."""

    alerted_runs: int
    last_bucket: int


class Subject(msgspec.Struct, array_like=True):
    """One (tool, detector) of the agent: its alert mark and its loop runs in the window."""

    alerted_runs: int = 0  # loop runs at the subject's last alert (0: never alerted)
    last_bucket: int = -1  # the newest bucket with a loop run of the subject
    exact: dict[int, dict[str, int]] = msgspec.field(default_factory=dict)  # bucket -> run -> ts
    sketch: dict[int, bytearray] = msgspec.field(default_factory=dict)  # bucket -> HLL (sketched)
    samples: list[tuple[str, int]] = msgspec.field(default_factory=list)  # sketched: earliest runs
    latest: int = 0  # sketched: the latest verdict that raised the sketch
    union: bytearray = msgspec.field(default_factory=bytearray)  # sketched: the window's registers


class AgentLoops(msgspec.Struct, array_like=True):
    agent: str
    top: int = -1
    buckets: dict[int, LoopBucket] = msgspec.field(default_factory=dict)  # previous release only
    marks: dict[str, Mark] = msgspec.field(default_factory=dict)  # previous release only
    active: dict[int, set[int]] = msgspec.field(default_factory=dict)  # bucket -> run hashes
    active_sketch: dict[int, bytearray] = msgspec.field(default_factory=dict)  # bucket -> HLL
    subjects: dict[int, Subject] = msgspec.field(default_factory=dict)  # hash of "tool\x1fdetector"
    loop_bytes: int = 0  # what the exact loop entries take (see LOOP_EXACT_BYTES)
    active_union: bytearray = msgspec.field(default_factory=bytearray)  # the window's registers


def _message(agent: str, runs: int, active: int, share: float, detector: str, tool: str, minutes: int) -> str:
    return (
        f"Agent {agent}: {runs} of {active} runs ({share:.0%}) hit {detector} on {tool} "
        f"in the last {minutes} min."
    )


def step(state: AgentLoops, fact: CallFact | LoopFact, rule: SystemicLoopRule) -> list[FleetAlert]:
    """Apply one fact of ``state.agent``; the alerts it gives (at most one)."""
    if state.buckets or state.marks:
        _upgrade(state, rule.window_buckets)
    bucket = fact.ts // (rule.bucket_s * 1000)
    size = rule.window_buckets
    if bucket > state.top:
        state.top = bucket
        _expire(state, bucket - size + 1, size, rule.bucket_s * 1000)
    if bucket <= state.top - size:
        return []  # older than the window
    if type(fact) is CallFact:
        _add_active(state, bucket, id_hash(fact.run))
        return []
    assert type(fact) is LoopFact
    key = id_hash(f"{fact.tool}\x1f{fact.detector}")
    subject = _subject(state, key)
    if not _add_loop(state, key, subject, bucket, fact.run, fact.ts):
        return []  # already a loop run of this subject in this bucket
    if subject.last_bucket >= 0 and bucket - subject.last_bucket >= size:
        subject.alerted_runs = 0  # a whole window without a loop run: the next alert is a new one
    subject.last_bucket = max(subject.last_bucket, bucket)
    return _maybe_alert(state, subject, fact, bucket, rule)


def _expire(state: AgentLoops, low: int, size: int, bucket_ms: int) -> None:
    for old in [b for b in state.active if b < low]:
        del state.active[old]
    expired = [b for b in state.active_sketch if b < low]
    for old in expired:
        del state.active_sketch[old]
    if expired:
        state.active_union = hll_union(state.active_sketch.values())
    for key, subject in list(state.subjects.items()):
        if subject.last_bucket < low - size:
            _forget(state, key)  # a whole window without loop runs: forgotten anyway
            continue
        for old in [b for b in subject.exact if b < low]:
            state.loop_bytes -= _bucket_cost(subject.exact.pop(old))
        expired = [b for b in subject.sketch if b < low]
        for old in expired:
            del subject.sketch[old]
        if expired:
            subject.union = hll_union(subject.sketch.values())
        if subject.sketch:
            subject.samples[:] = [(run, ts) for run, ts in subject.samples if ts // bucket_ms >= low]
        else:  # every sketched bucket left the window: exact again, from nothing
            subject.samples.clear()
            subject.latest = 0


def _cost(run: str) -> int:
    return len(run.encode("utf-8", "surrogatepass")) + _ENTRY_BYTES


def _bucket_cost(runs: dict[str, int]) -> int:
    return _BUCKET_BYTES + sum(_cost(run) for run in runs)


def _exact_cost(subject: Subject) -> int:
    return sum(_bucket_cost(runs) for runs in subject.exact.values())


def _add_active(state: AgentLoops, bucket: int, run: int) -> None:
    if state.active_sketch:
        sketch = state.active_sketch.get(bucket)
        if sketch is None:
            sketch = state.active_sketch[bucket] = new_hll(ACTIVE_PRECISION)
        if hll_add(sketch, run):
            hll_add(state.active_union, run)
        return
    runs = state.active.get(bucket)
    if runs is None:
        runs = state.active[bucket] = set()
    if run in runs:
        return
    runs.add(run)
    if sum(len(r) for r in state.active.values()) > ACTIVE_EXACT:  # the agent's runs become a sketch
        for b, hashes in state.active.items():
            sketch = state.active_sketch[b] = new_hll(ACTIVE_PRECISION)
            for value in hashes:
                hll_add(sketch, value)
        state.active_union = hll_union(state.active_sketch.values())
        state.active.clear()


def _subject(state: AgentLoops, key: int) -> Subject:
    subject = state.subjects.get(key)
    if subject is None:
        if len(state.subjects) >= MAX_SUBJECTS:  # forget the one whose newest loop run is oldest
            _forget(state, min(state.subjects, key=lambda k: (state.subjects[k].last_bucket, k)))
        subject = state.subjects[key] = Subject()
    return subject


def _forget(state: AgentLoops, key: int) -> None:
    subject = state.subjects.pop(key)
    state.loop_bytes -= _exact_cost(subject)


def _add_loop(state: AgentLoops, key: int, subject: Subject, bucket: int, run: str, ts: int) -> bool:
    """Count a verdict of ``run``; whether it may have added a loop run to the bucket."""
    if subject.sketch:
        sketch = subject.sketch.get(bucket)
        if sketch is None:
            sketch = subject.sketch[bucket] = new_hll(LOOP_PRECISION)
        sampled(subject.samples, _NO_ROOT, run, ts)
        value = id_hash(run)
        if not hll_add(sketch, value):
            return False
        hll_add(subject.union, value)
        subject.latest = max(subject.latest, ts)
        return True
    runs = subject.exact.get(bucket)
    if runs is None:
        runs = subject.exact[bucket] = {}
        state.loop_bytes += _BUCKET_BYTES
    seen = runs.get(run)
    if seen is not None:
        if ts < seen:
            runs[run] = ts  # an earlier verdict arriving late: the sample order holds
        return False
    runs[run] = ts
    state.loop_bytes += _cost(run)
    if state.loop_bytes > LOOP_EXACT_BYTES:
        return _make_room(state, key, run, bucket)
    return True


def _make_room(state: AgentLoops, key: int, run: str, bucket: int) -> bool:
    """Over the exact budget: the subjects with the most entries become sketches while a sketch
    is free; else the entry just added is not kept. Whether it was kept (exactly or in a sketch)."""
    while state.loop_bytes > LOOP_EXACT_BYTES:
        if sum(1 for s in state.subjects.values() if s.sketch) >= MAX_SKETCHED:
            runs = state.subjects[key].exact.get(bucket)
            if runs is not None and run in runs:
                del runs[run]
                state.loop_bytes -= _cost(run)
                if not runs:
                    del state.subjects[key].exact[bucket]
                    state.loop_bytes -= _BUCKET_BYTES
                return False
            return True
        costs = {k: _exact_cost(s) for k, s in state.subjects.items() if s.exact}
        _to_sketch(state, state.subjects[max(costs, key=lambda k: (costs[k], k))])
    return True  # room made by sketching (the entry's subject may be among them)


def _to_sketch(state: AgentLoops, subject: Subject) -> None:
    first: dict[str, int] = {}
    state.loop_bytes -= _exact_cost(subject)
    for b, runs in subject.exact.items():
        sketch = subject.sketch[b] = new_hll(LOOP_PRECISION)
        for name, ts in runs.items():
            hll_add(sketch, id_hash(name))
            if name not in first or ts < first[name]:
                first[name] = ts
    for name, ts in first.items():
        sampled(subject.samples, _NO_ROOT, name, ts)
    subject.latest = max(first.values(), default=0)
    subject.union = hll_union(subject.sketch.values())
    subject.exact.clear()


def _maybe_alert(
    state: AgentLoops, subject: Subject, fact: LoopFact, bucket: int, rule: SystemicLoopRule
) -> list[FleetAlert]:
    if subject.sketch:
        sample_ids = [run for run, _ in subject.samples]
        count = max(round(hll_estimate(subject.union)), len(sample_ids))
        since_ts = subject.samples[0][1]
        last_ts = max(subject.latest, since_ts)
    else:
        loop_runs: dict[str, int] = {}
        for runs in subject.exact.values():
            for run, ts in runs.items():
                known = loop_runs.get(run)
                if known is None or ts < known:
                    loop_runs[run] = ts
        count = len(loop_runs)
        if count < rule.min_runs:
            return []
        sample_ids = samples(loop_runs)
        since_ts = min(loop_runs.values())
        last_ts = max(loop_runs.values())  # when the last counted run began to loop: arrival-proof
    if count < rule.min_runs:
        return []
    if subject.alerted_runs and count < 2 * subject.alerted_runs:
        return []
    active = _active_runs(state)
    if not active:
        return []
    share = count / active
    if share < rule.min_share:
        return []
    subject.alerted_runs = count
    key = f"agent:{state.agent}:tool:{fact.tool}:{fact.detector}"
    return [
        FleetAlert(
            alert_id=alert_id("systemic_loop", key, bucket, count),
            kind="systemic_loop",
            subject=key,
            tool=fact.tool,
            agent_id=state.agent,
            runs=count,
            active_runs=active,
            share=round(share, 4),
            detector=fact.detector,
            sample_run_ids=sample_ids,
            since_ts=since_ts,
            ts=last_ts,
            message=_message(
                state.agent, count, active, share, fact.detector, fact.tool, rule.window_minutes
            ),
        )
    ]


def _active_runs(state: AgentLoops) -> int:
    """The distinct active runs of the window: exact, or the estimate of the agent's sketch."""
    if state.active_sketch:
        return max(round(hll_estimate(state.active_union)), 1)
    return len(set().union(*state.active.values()))


def _upgrade(state: AgentLoops, size: int) -> None:
    """Convert a state of the previous release (run ids in every bucket) to this one."""
    for name, mark in state.marks.items():
        subject = _subject(state, id_hash(name))
        subject.alerted_runs = mark.alerted_runs
        subject.last_bucket = max(subject.last_bucket, mark.last_bucket)
    for b in sorted(state.buckets):
        if b <= state.top - size:
            continue
        entry = state.buckets[b]
        for run in entry.active:
            _add_active(state, b, id_hash(run))
        for name, runs in entry.loops.items():
            key = id_hash(name)
            subject = _subject(state, key)
            subject.last_bucket = max(subject.last_bucket, b)
            for run, ts in runs.items():
                _add_loop(state, key, subject, b, run, ts)
    state.buckets.clear()
    state.marks.clear()
