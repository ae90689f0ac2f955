"""F2's per-agent state stays small whatever the agent does (one fleet-table value and changelog
record per agent), is exact below its caps, and reads the previous release's states.

The exact reference below is the previous release's algorithm, state layout included (run ids
as strings in every bucket): what F2 gave before its state was bounded, and the format of the
states the previous release left in the changelogs.
"""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from loopwatch.config.fleet_rules import SystemicLoopRule
from loopwatch.detectors.fleet import systemic_loop
from loopwatch.detectors.fleet.alerts import FleetAlert, alert_id
from loopwatch.detectors.fleet.chain_sketch import id_hash
from loopwatch.detectors.fleet.facts import CallFact, LoopFact
from loopwatch.streams.kafka import fleet_processor as fleet_module

KB64 = 64 * 1024
RULE = SystemicLoopRule()
HOUR = 3_600_000
T0 = 1_780_000_200_000  # the start of a 5-minute bucket
ENCODER = msgspec.msgpack.Encoder()


# -- the exact reference: the previous release ------------------------------------------------


class OldBucket(msgspec.Struct, array_like=True):
    active: dict[str, None] = msgspec.field(default_factory=dict)
    loops: dict[str, dict[str, int]] = msgspec.field(default_factory=dict)


class OldMark(msgspec.Struct, array_like=True):
    alerted_runs: int
    last_bucket: int


class OldLoops(msgspec.Struct, array_like=True):
    agent: str
    top: int = -1
    buckets: dict[int, OldBucket] = msgspec.field(default_factory=dict)
    marks: dict[str, OldMark] = msgspec.field(default_factory=dict)


def reference(state: OldLoops, fact: CallFact | LoopFact, rule: SystemicLoopRule) -> list[FleetAlert]:
    """Every run id of the window, every count exact."""
    bucket = fact.ts // (rule.bucket_s * 1000)
    size = rule.window_buckets
    if bucket > state.top:
        state.top = bucket
        low = bucket - size + 1
        state.buckets = {b: e for b, e in state.buckets.items() if b >= low}
        state.marks = {k: m for k, m in state.marks.items() if m.last_bucket >= low - size}
    if bucket <= state.top - size:
        return []
    entry = state.buckets.setdefault(bucket, OldBucket())
    if isinstance(fact, CallFact):
        entry.active[fact.run] = None
        return []
    key = f"{fact.tool}\x1f{fact.detector}"
    runs = entry.loops.setdefault(key, {})
    if fact.run in runs:
        runs[fact.run] = min(runs[fact.run], fact.ts)
        return []
    runs[fact.run] = fact.ts
    mark = state.marks.get(key)
    if mark is not None and bucket - mark.last_bucket >= size:
        mark.alerted_runs = 0
    if mark is None:
        mark = state.marks[key] = OldMark(0, bucket)
    mark.last_bucket = max(mark.last_bucket, bucket)
    first: dict[str, int] = {}
    active: set[str] = set()
    for e in state.buckets.values():
        active.update(e.active)
        for run, ts in e.loops.get(key, {}).items():
            first[run] = min(ts, first.get(run, ts))
    count = len(first)
    if count < rule.min_runs or not active or count / len(active) < rule.min_share:
        return []
    if mark.alerted_runs and count < 2 * mark.alerted_runs:
        return []
    mark.alerted_runs = count
    share = count / len(active)
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
            sample_run_ids=[run for _, run in sorted((ts, run) for run, ts in first.items())[:5]],
            since_ts=min(first.values()),
            ts=max(first.values()),
            message=(
                f"Agent {state.agent}: {count} of {len(active)} runs ({share:.0%}) hit {fact.detector} "
                f"on {fact.tool} in the last {rule.window_minutes} min."
            ),
        )
    ]


def both(facts: list[CallFact | LoopFact], rule: SystemicLoopRule = RULE) -> tuple[list[Any], list[Any]]:
    """The alerts of the new step and of the reference, fact by fact (one agent)."""
    agent = facts[0].agent if facts else "a"
    new, old = systemic_loop.AgentLoops(agent), OldLoops(agent)
    got = [a for f in facts for a in systemic_loop.step(new, f, rule)]
    want = [a for f in facts for a in reference(old, f, rule)]
    return got, want


def stream(
    runs: int, every: int = 4, span: int = HOUR, start: int = T0, prefix: str = "run"
) -> list[CallFact | LoopFact]:
    """``runs`` runs of ``coder`` in ``span`` ms, every ``every``-th looping on ``read``."""
    facts: list[CallFact | LoopFact] = []
    for i in range(runs):
        ts = start + i * span // runs
        facts.append(CallFact("coder", f"{prefix}-{i}", ts))
        if i % every == 0:
            facts.append(LoopFact("coder", "read", "generic_repeat", f"{prefix}-{i}", ts + 1))
    return facts


def size(state: systemic_loop.AgentLoops) -> int:
    """The agent's table value as the fleet processor stores it."""
    return len(
        fleet_module._ENCODER.encode(fleet_module.SubjectState(offset=2**62, loops={state.agent: state}))
    )


# -- below the caps: exact ---------------------------------------------------------------------


def test_below_the_caps_every_alert_is_the_exact_one() -> None:
    facts = stream(1500, every=3, span=2 * HOUR)  # 1,500 runs over two hours: buckets expire
    got, want = both(facts)
    assert len(want) >= 3
    assert got == want


fact_lists = st.lists(
    st.tuples(
        st.integers(0, 3),  # 0: a call, else a verdict
        st.integers(0, 15),  # run
        st.sampled_from(["read", "exec"]),
        st.sampled_from(["generic_repeat", "ping_pong"]),
        st.integers(-12_000, 6_000),  # time step (late facts too)
    ),
    min_size=30,
    max_size=250,
)


def facts_of(drawn: list[tuple[int, int, str, str, int]]) -> list[CallFact | LoopFact]:
    facts: list[CallFact | LoopFact] = []
    ts = T0
    for kind, run, tool, detector, step in drawn:
        ts = max(T0, ts + step)
        if kind == 0:
            facts.append(CallFact("a", f"r{run}", ts))
        else:
            facts.append(LoopFact("a", tool, detector, f"r{run}", ts))
    return facts


SMALL = SystemicLoopRule(bucket_s=10, window_buckets=3, min_runs=2, min_share=0.2)


@settings(max_examples=300, deadline=None)
@given(fact_lists)
def test_below_the_caps_the_step_gives_the_reference_s_alerts(drawn: list[Any]) -> None:
    got, want = both(facts_of(drawn), SMALL)
    assert got == want


@settings(max_examples=150, deadline=None)
@given(fact_lists, st.integers(0, 250))
def test_a_state_of_the_previous_release_goes_on_as_if_never_converted(drawn: list[Any], cut: int) -> None:
    facts = facts_of(drawn)
    old = OldLoops("a")
    want = [a for f in facts for a in reference(old, f, SMALL)]
    old = OldLoops("a")
    got = [a for f in facts[:cut] for a in reference(old, f, SMALL)]
    # as the previous release stored it: the agent's SubjectState, read by this release
    blob = ENCODER.encode([7, {}, {"a": old}, [], {}])
    loaded = fleet_module._DECODER.decode(blob)
    assert loaded.offset == 7
    new = loaded.loops["a"]
    got += [a for f in facts[cut:] for a in systemic_loop.step(new, f, SMALL)]
    assert got == want
    if facts[cut:]:
        assert not new.buckets
        assert not new.marks


# -- past the caps: bounded, approximate -------------------------------------------------------


def check_stream(runs: int, tolerance: float) -> None:
    state = systemic_loop.AgentLoops("coder")
    largest = 0
    alerts: list[tuple[FleetAlert, int, int]] = []  # alert, true active runs, true loop runs
    active: set[str] = set()
    looping: set[str] = set()
    for n, fact in enumerate(stream(runs)):
        if isinstance(fact, CallFact):
            active.add(fact.run)
        else:
            looping.add(fact.run)
        alerts += [(a, len(active), len(looping)) for a in systemic_loop.step(state, fact, RULE)]
        if n % 5000 == 0:
            largest = max(largest, size(state))
    largest = max(largest, size(state))
    assert largest <= KB64
    assert len(alerts) >= 10  # 10, 20, 40, … of a quarter of the runs: the re-alerts go on
    for alert, true_active, true_loops in alerts:
        assert alert.active_runs is not None
        assert abs(alert.active_runs - true_active) <= tolerance * true_active
        assert abs(alert.runs - true_loops) <= tolerance * true_loops
        assert alert.sample_run_ids == ["run-0", "run-4", "run-8", "run-12", "run-16"]
        assert alert.since_ts == T0 + 1
    final, true_active, _ = alerts[-1]
    assert final.runs >= runs // 4 // 2  # the last alert is at least half the loop runs
    assert state.active_sketch
    assert not state.active


def test_100k_runs_of_one_agent_in_an_hour_stay_under_64_kb_and_within_4_percent() -> None:
    check_stream(100_000, 0.04)


def test_1m_runs_of_one_agent_in_an_hour_stay_under_64_kb_and_within_4_percent() -> None:
    check_stream(1_000_000, 0.04)


def long_id(prefix: str, n: int) -> str:
    head = f"{prefix}-{n}-"
    return head + "x" * (512 - len(head))


def test_the_worst_case_long_ids_many_subjects_two_sketches_stays_under_64_kb() -> None:
    """Every id at 512 bytes, two subjects sketched over the whole hour, 100 more subjects
    churning through the exact budget and the subject cap."""
    agent = "a" * 512
    state = systemic_loop.AgentLoops(agent)
    runs = 30_000
    largest = 0
    for i in range(runs):
        ts = T0 + i * HOUR // runs
        run = long_id("run", i)
        systemic_loop.step(state, CallFact(agent, run, ts), RULE)
        systemic_loop.step(state, LoopFact(agent, "t" * 500 + "-big", f"d{i % 2}", run, ts), RULE)
        if i > 40:
            systemic_loop.step(state, LoopFact(agent, "t" * 500 + str(i % 100), "d", run, ts), RULE)
        if i % 500 == 0:
            largest = max(largest, size(state))
    largest = max(largest, size(state))
    sketched = [s for s in state.subjects.values() if s.sketch]
    assert len(sketched) == systemic_loop.MAX_SKETCHED
    assert all(len(s.sketch) == RULE.window_buckets for s in sketched)
    assert len(state.subjects) == systemic_loop.MAX_SUBJECTS
    assert state.loop_bytes <= systemic_loop.LOOP_EXACT_BYTES
    assert largest <= KB64, largest


def test_a_huge_state_of_the_previous_release_is_converted_to_a_bounded_one() -> None:
    old = OldLoops("coder", top=T0 // 300_000 + 5)  # 60,000 runs in half an hour, a quarter looping
    for i in range(60_000):
        ts = T0 + i * 30
        entry = old.buckets.setdefault(ts // 300_000, OldBucket())
        entry.active[f"run-{i}"] = None
        if i % 4 == 0:
            entry.loops.setdefault("read\x1fgeneric_repeat", {})[f"run-{i}"] = ts + 1
    old.marks["read\x1fgeneric_repeat"] = OldMark(8_000, old.top)  # it alerted at 8,000
    blob = ENCODER.encode([3, {}, {"coder": old}, [], {}])
    assert len(blob) > fleet_module.MAX_VALUE_BYTES  # the previous release could not even store it
    state = fleet_module._DECODER.decode(blob).loops["coder"]
    ts = T0 + HOUR // 2 - 1
    alerts: list[tuple[FleetAlert, int]] = []  # an alert, the true loop runs
    for k in range(2_000):  # 15,000 loop runs, then new ones: it alerts again at twice 8,000
        fact = LoopFact("coder", "read", "generic_repeat", f"new-{k}", ts)
        alerts += [(alert, 15_001 + k) for alert in systemic_loop.step(state, fact, RULE)]
    ((alert, truth),) = alerts
    assert truth > 15_000 * 0.96  # not at once: the alert mark was converted too
    assert alert.runs >= 16_000
    assert abs(alert.runs - truth) <= 0.04 * truth
    assert alert.active_runs is not None
    assert abs(alert.active_runs - 60_000) <= 0.04 * 60_000
    assert alert.sample_run_ids[:2] == ["run-0", "run-4"]
    assert not state.buckets
    assert not state.marks
    assert size(state) <= KB64


def test_a_sketched_subject_is_exact_again_a_window_after_its_burst() -> None:
    burst = stream(20_000)
    later = T0 + 3 * HOUR
    calm: list[CallFact | LoopFact] = []
    for i in range(200):
        calm.append(CallFact("coder", f"calm-{i}", later + i * 1000))
        if i % 2:
            calm.append(LoopFact("coder", "read", "generic_repeat", f"calm-{i}", later + i * 1000 + 1))
    state, old = systemic_loop.AgentLoops("coder"), OldLoops("coder")
    for fact in burst:
        systemic_loop.step(state, fact, RULE)
        reference(old, fact, RULE)
    assert state.active_sketch
    assert any(s.sketch for s in state.subjects.values())
    got = [a for f in calm for a in systemic_loop.step(state, f, RULE)]
    want = [a for f in calm for a in reference(old, f, RULE)]
    assert [a.runs for a in want] == [10, 20, 40, 80]
    assert got == want
    assert not state.active_sketch
    assert not any(s.sketch for s in state.subjects.values())


def test_past_the_subject_cap_the_subject_looping_least_recently_is_forgotten() -> None:
    state = systemic_loop.AgentLoops("coder")
    cap = systemic_loop.MAX_SUBJECTS
    for k in range(cap + 6):
        ts = T0 + (k >= 6) * 600_000  # six subjects, then 64 others two buckets later
        systemic_loop.step(state, LoopFact("coder", f"tool{k}", "generic_repeat", "r", ts), RULE)
    assert len(state.subjects) == cap
    kept = {id_hash(f"tool{k}\x1fgeneric_repeat") for k in range(6, cap + 6)}
    assert set(state.subjects) == kept


def test_a_sketched_subject_s_counts_and_samples_follow_the_window() -> None:
    """20k runs in one hour, then 80k in the next: the re-alerts of the second hour count the
    runs of its window only, and name runs of that window."""
    facts = stream(20_000) + stream(80_000, start=T0 + HOUR, prefix="later")
    state = systemic_loop.AgentLoops("coder")
    started: dict[str, int] = {}  # run -> its call's time
    looped: dict[str, int] = {}
    alerts = []
    for fact in facts:
        if isinstance(fact, CallFact):
            started[fact.run] = fact.ts
        else:
            looped[fact.run] = fact.ts
        for alert in systemic_loop.step(state, fact, RULE):
            low = (fact.ts // 300_000 - RULE.window_buckets + 1) * 300_000
            true_active = sum(1 for ts in started.values() if ts >= low)
            true_loops = sum(1 for ts in looped.values() if ts >= low)
            alerts.append((alert, low, true_active, true_loops))
    late = [a for a in alerts if a[1] > T0]  # alerts whose window left the first buckets behind
    assert late
    for alert, low, true_active, true_loops in late:
        assert alert.since_ts >= low
        assert alert.sample_run_ids
        assert alert.active_runs is not None
        assert abs(alert.active_runs - true_active) <= 0.04 * true_active
        assert abs(alert.runs - true_loops) <= 0.04 * true_loops


def test_an_entry_dropped_for_want_of_room_is_not_counted_as_a_new_loop_run() -> None:
    """Both sketches taken and the exact budget full: a new subject's loop run is not kept, so the
    subject has no loop run at all (no newest bucket, nothing exact) and no alert is weighed."""
    agent = "coder"
    state = systemic_loop.AgentLoops(agent)
    systemic_loop.step(state, CallFact(agent, "run-1", T0), RULE)
    for key in (1, 2):
        state.subjects[key] = systemic_loop.Subject(
            sketch={T0 // 300_000: bytearray(2**systemic_loop.LOOP_PRECISION)}
        )
    state.loop_bytes = systemic_loop.LOOP_EXACT_BYTES
    assert systemic_loop.step(state, LoopFact(agent, "exec", "generic_repeat", "run-1", T0), RULE) == []
    fresh = state.subjects[id_hash("exec\x1fgeneric_repeat")]
    assert fresh.exact == {}
    assert fresh.last_bucket == -1
    assert state.loop_bytes == systemic_loop.LOOP_EXACT_BYTES
