from loopwatch.config import FleetConfig
from loopwatch.detectors.engine import Engine
from loopwatch.streams.fleet_view.fleet_stats import FleetStats
from tests.helpers import Trace


def feed(stats: FleetStats, traces: list[Trace], start_ms: int = 0, step_ms: int = 100) -> int:
    engine = Engine(FleetConfig.enabled_default())
    ts = start_ms
    for trace in traces:
        for event in trace.events:
            ts += step_ms
            stats.event(event, ts)
            for output in engine.process(event):
                stats.output(output, ts)
    return ts


def test_fleet_view_counts_verdicts_per_agent_tool_and_detector() -> None:
    looping = Trace("loop-1", agent_id="coder")
    for _ in range(22):
        looping.both("read", {"path": "/missing"}, error="ENOENT")
    healthy = Trace("ok-1", agent_id="ops")
    for n in range(5):
        healthy.both("read", {"path": f"/f{n}"}, {"content": [{"type": "text", "text": str(n)}]})
    stats = FleetStats()
    now = feed(stats, [looping, healthy])
    summary = stats.summary(now)
    assert summary["active_runs"] == 2
    assert summary["events"] == {"tool_call": 27, "tool_result": 27}
    assert summary["verdicts"] == {"warn": 1, "block": 2, "abort": 1}
    assert summary["per_agent"] == {"coder": {"warn": 1, "block": 2, "abort": 1}}
    assert summary["per_detector"] == {"generic_repeat": 3, "tool_loop_recovery_exhausted": 1}
    assert summary["top_looping_tools"] == [("read", 3)]


def test_a_tool_failing_across_runs_is_a_fleet_signal() -> None:
    traces = []
    for n in range(4):
        trace = Trace(f"r{n}")
        trace.both("web_search", {"q": str(n)}, error="503 upstream")
        traces.append(trace)
    stats = FleetStats(failing_runs=3)
    now = feed(stats, traces)
    assert stats.summary(now)["failing_tools"] == ["web_search"]
    assert FleetStats(failing_runs=5).summary(now)["failing_tools"] == []


def test_windows_beyond_the_horizon_are_dropped() -> None:
    stats = FleetStats(window_s=60, horizon_s=120)
    old = Trace("old")
    old.both("read", {"p": 1}, {"content": []})
    feed(stats, [old], start_ms=0)
    new = Trace("new")
    new.both("read", {"p": 1}, {"content": []})
    now = feed(stats, [new], start_ms=600_000)
    assert min(stats.windows) >= 600_000 - 180_000
    assert stats.summary(now)["active_runs"] == 1


def test_events_per_second_counts_only_the_time_the_fleet_was_seen() -> None:
    stats = FleetStats()
    trace = Trace("r")
    for n in range(60):
        trace.both("read", {"p": n}, {"content": []})
    now = feed(stats, [trace], start_ms=1_000_000, step_ms=100)  # 120 events over 12 s
    assert stats.summary(now + 100)["events_per_s"] == 10.0
    assert stats.summary(now + 108_100)["events_per_s"] == 1.0  # 120 s later, 5-minute view
    assert stats.summary(now + 108_100, minutes=1)["events_per_s"] == 0.0  # nothing in the last minute


def test_timeline_lists_every_window_oldest_first() -> None:
    stats = FleetStats()
    looping = Trace("loop", agent_id="coder")
    for _ in range(22):
        looping.both("read", {"path": "/missing"}, error="ENOENT")
    now = feed(stats, [looping], start_ms=3_600_000, step_ms=1000)  # 44 events over 44 s
    timeline = stats.timeline(now, 3)
    assert [w["start_ms"] for w in timeline] == [3_480_000, 3_540_000, 3_600_000]
    assert sum(w["events"] for w in timeline) == 44
    assert sum(w["warn"] + w["block"] + w["abort"] for w in timeline) == 4
