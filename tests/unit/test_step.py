from dataclasses import replace

from loopwatch.config import DetectorSettings, FleetConfig
from loopwatch.detectors.engine import Engine
from loopwatch.detectors.events import Abort, Output, ToolCall, Verdict
from loopwatch.detectors.facade import LoopDetector
from loopwatch.detectors.state import RunState
from tests.helpers import Trace, text_result, with_revision


def run(trace: Trace, config: FleetConfig | None = None) -> list[Output]:
    engine = Engine(config or FleetConfig.enabled_default())
    return [out for event in trace.events for out in engine.process(event)]


def read_loop(calls: int) -> Trace:
    trace = Trace()
    for _ in range(calls):
        trace.both("read", {"path": "/missing"}, error="ENOENT: no such file")
    return trace


def test_warning_then_block_then_recovery_abort() -> None:
    outputs = run(read_loop(22), with_revision("2026-05"))
    kinds = [(type(o).__name__, getattr(o, "action", None), getattr(o, "count", None)) for o in outputs]
    assert kinds == [
        ("Verdict", "warn", 10),
        ("Verdict", "block", 20),
        ("Verdict", "block", 21),  # the blocked call's result still arrived (E5)
        ("Abort", "abort", None),
    ]
    abort = outputs[-1]
    assert isinstance(abort, Abort)
    assert abort.reason == "tool_loop_recovery_exhausted"
    assert abort.trigger_event_id == outputs[-2].trigger_event_id


def test_under_2026_08_a_blocked_call_leaves_a_veto_record_that_counts() -> None:
    outputs = run(read_loop(22))
    kinds = [(type(o).__name__, getattr(o, "action", None), getattr(o, "count", None)) for o in outputs]
    # the 21st call's veto record and the result that arrived anyway (E5) both count
    assert kinds == [
        ("Verdict", "warn", 10),
        ("Verdict", "block", 20),
        ("Verdict", "block", 22),
        ("Abort", "abort", None),
    ]


def blocked_retries(config: FleetConfig) -> tuple[int, list[int]]:
    trace = Trace()
    for _ in range(20):
        trace.both("read", {"path": "/same"}, text_result("same"))
    for _ in range(3):
        trace.call("read", {"path": "/same"})
    engine = Engine(config)
    counts = [o.count for event in trace.events for o in engine.process(event) if isinstance(o, Verdict)]
    return len(engine.states["run-1"].history), counts[-3:]


def test_blocked_calls_are_not_recorded_so_the_block_is_sticky() -> None:
    assert blocked_retries(with_revision("2026-05")) == (20, [20, 20, 20])


def test_blocked_retries_climb_under_2026_08() -> None:
    assert blocked_retries(FleetConfig.enabled_default()) == (23, [20, 21, 22])


def test_abort_budget_is_configurable_and_can_be_switched_off() -> None:
    base = FleetConfig.enabled_default()
    zero = replace(base, settings=DetectorSettings(critical_blocks_before_abort=0))
    outputs = run(read_loop(21), zero)
    assert [type(o).__name__ for o in outputs] == ["Verdict", "Verdict", "Abort"]
    off = replace(base, settings=DetectorSettings(recovery_abort=False))
    assert not any(isinstance(o, Abort) for o in run(read_loop(25), off))


def test_duplicate_events_never_count_twice() -> None:
    trace = read_loop(12)
    doubled = Trace()
    for event in trace.events:
        doubled.events.extend([event, event])
    assert run(doubled) == run(trace)


def test_observe_only_records_everything_and_never_enforces() -> None:
    config = replace(FleetConfig.enabled_default(), settings=DetectorSettings(observe_only=True))
    outputs = run(read_loop(35), config)
    assert outputs
    assert all(not o.enforced for o in outputs)
    criticals = [o for o in outputs if isinstance(o, Verdict) and o.level == "critical"]
    # recorded calls keep counting: generic 20..29, then the global breaker at 30
    assert [o.count for o in criticals][:3] == [20, 21, 22]
    assert criticals[-1].detector == "global_circuit_breaker"


def test_results_of_blocked_calls_are_recorded() -> None:
    trace = read_loop(24)
    for config, size in ((with_revision("2026-05"), 24), (FleetConfig.enabled_default(), 28)):
        engine = Engine(config)
        for event in trace.events:
            engine.process(event)
        assert len(engine.states["run-1"].history) == size  # 2026-08: plus 4 veto records


def test_run_end_drops_state_and_runs_are_separate() -> None:
    trace = read_loop(9)
    trace.end()
    other = Trace("run-2")
    other.both("read", {"path": "/missing"}, error="ENOENT: no such file")
    engine = Engine(FleetConfig.enabled_default())
    for event in [*trace.events, *other.events]:
        engine.process(event)
    assert list(engine.states) == ["run-2"]


def test_events_after_run_end_are_ignored_and_counted() -> None:
    trace = read_loop(15)
    tail = trace.events[-24:]  # redelivered after the run ended
    detected_afresh = Engine(FleetConfig.enabled_default())
    assert [out for event in tail for out in detected_afresh.process(event)] != []
    trace.end()
    engine = Engine(FleetConfig.enabled_default())
    for event in trace.events:
        engine.process(event)
    assert [out for event in tail for out in engine.process(event)] == []
    assert engine.late == 24
    assert "run-1" not in engine.states
    engine.process(ToolCall(event_id="never-seen", run_id="run-1", tool="read", params={}))
    assert "run-1" in engine.states  # an event the ended run never had starts a new run


def test_ended_runs_are_remembered_up_to_a_limit_and_not_after_expiry() -> None:
    from loopwatch.detectors.events import EXPIRY_EVENT_PREFIX, RunEnd, ToolCall

    engine = Engine(FleetConfig.enabled_default(), ended_limit=2)
    for run_id in ("a", "b", "c"):
        engine.process(RunEnd(event_id=f"{run_id}-end", run_id=run_id))
    assert list(engine.ended) == ["b", "c"]
    engine.process(RunEnd(event_id=f"{EXPIRY_EVENT_PREFIX}d:1", run_id="d"))
    assert "d" not in engine.ended  # an idle run that expired may resume
    engine.process(ToolCall(event_id="d1", run_id="d", tool="read", params={}))
    assert "d" in engine.states
    reusable = Engine(FleetConfig.enabled_default(), ended_limit=0)
    reusable.process(RunEnd(event_id="x", run_id="a"))
    reusable.process(ToolCall(event_id="a1", run_id="a", tool="read", params={}))
    assert "a" in reusable.states
    assert reusable.late == 0


def test_verdict_ids_are_deterministic() -> None:
    first = run(read_loop(21))
    second = run(read_loop(21))
    assert [o.verdict_id for o in first] != []
    assert [o.trigger_event_id for o in first] != [o.trigger_event_id for o in second]
    replay = Engine(FleetConfig.enabled_default())
    trace = read_loop(21)
    again = [o for e in trace.events for o in replay.process(e)]
    assert [o.verdict_id for o in again] == [o.verdict_id for o in run(trace)]


def test_post_compaction_guard_aborts_on_identical_window() -> None:
    trace = Trace()
    trace.compaction()
    for _ in range(3):
        trace.both("read", {"path": "/x"}, error="nope")
    outputs = run(trace)
    assert len(outputs) == 1
    abort = outputs[0]
    assert isinstance(abort, Abort)
    assert abort.reason == "compaction_loop_persisted"
    assert abort.count == 3
    assert abort.message.startswith("CRITICAL: tool read repeated 3 times")


def test_state_round_trips_through_bytes_mid_stream() -> None:
    trace = read_loop(15)
    trace.compaction()
    engine = Engine(FleetConfig.enabled_default())
    for event in trace.events:
        engine.process(event)
    state = engine.states["run-1"]
    restored = RunState.from_bytes(state.to_bytes())
    assert restored == state
    more = read_loop(10).events
    a = Engine(FleetConfig.enabled_default())
    a.states["run-1"] = state
    b = Engine(FleetConfig.enabled_default())
    b.states["run-1"] = restored
    assert [a.process(e) for e in more] == [b.process(e) for e in more]


def test_facade_decisions() -> None:
    detector = LoopDetector()
    actions = []
    for _ in range(22):
        decision = detector.before_tool_call("r", "read", {"path": "/x", "n": 1.0})
        actions.append(decision.action)
        if decision.proceed:
            detector.after_tool_call("r", "read", {"path": "/x", "n": 1}, error=FileNotFoundError("gone"))
    assert actions[:10] == ["allow"] * 10
    assert actions[10] == "warn"
    assert actions[20] == "block"
    assert actions[21] == "abort"
    detector.end_run("r")
    assert detector.before_tool_call("r", "read", {"path": "/x"}).action == "allow"
