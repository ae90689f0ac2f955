"""F1 (tool outage, recovery, fail-fast) and F2 (systemic loop): the pure aggregators."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import msgspec
import pytest

from loopwatch.config import parse_config_text
from loopwatch.config.errors import ConfigError
from loopwatch.config.fleet_rules import FleetRules, SystemicLoopRule, ToolOutageRule, fleet_rules
from loopwatch.detectors.events import Abort, Event, Output, ToolCall, ToolResult, Verdict
from loopwatch.detectors.fleet.alerts import FleetAlert, decode_alert, encode_alert
from loopwatch.detectors.fleet.facts import CallFact, LoopFact, error_class, facts_of_outputs
from loopwatch.detectors.fleet.watch import FleetWatch
from loopwatch.detectors.hashing import digester_for
from loopwatch.detectors.stable_json import from_python
from loopwatch.detectors.step import prepare

T0 = 1_780_000_020_000  # 20 s into a minute bucket
MIN = 60_000
DIGESTER = digester_for("xxh3")
_ids = itertools.count()


def result(
    tool: str, run: str, ts: int, args: Any = None, error: str | None = None, agent: str = "a"
) -> ToolResult:
    return ToolResult(
        event_id=f"e{next(_ids)}",
        run_id=run,
        agent_id=agent,
        ts=ts,
        tool=tool,
        params=from_python(args if args is not None else {"q": run}),
        result=from_python({"content": [{"type": "text", "text": "ok"}]}) if error is None else msgspec.UNSET,
        error=error if error is not None else msgspec.UNSET,
    )


def call(tool: str, run: str, ts: int, agent: str = "a") -> ToolCall:
    return ToolCall(
        event_id=f"e{next(_ids)}", run_id=run, agent_id=agent, ts=ts, tool=tool, params=from_python({})
    )


def feed(
    watch: FleetWatch, events: Sequence[Event], outputs: dict[str, list[Output]] | None = None
) -> list[FleetAlert]:
    alerts: list[FleetAlert] = []
    for event in events:
        prepared = None
        if isinstance(event, (ToolCall, ToolResult)):
            prepared = prepare(event, DIGESTER, frozenset())
        assert event.ts is not None
        assert event.run_id is not None
        outs = (outputs or {}).get(event.event_id, [])
        alerts += watch.observe(event, event.run_id, event.ts, prepared, outs)
    return alerts


def watch(**outage: Any) -> FleetWatch:
    return FleetWatch(FleetRules(ToolOutageRule(**outage)), DIGESTER)


def failures(
    tool: str, runs: int, args: int, start: int = T0, step: int = 5_000, error: str = "connection refused"
) -> list[Event]:
    return [result(tool, f"r{i}", start + i * step, {"q": i % args}, error) for i in range(runs)]


# -- F1: opening ------------------------------------------------------------------------------


def test_outage_opens_once_at_the_fifth_run_with_three_argument_sets() -> None:
    w = watch()
    alerts = feed(w, failures("search", 5, 3))
    assert [a.kind for a in alerts] == ["tool_outage"]
    alert = alerts[0]
    assert alert.runs == 5
    assert alert.agents == 1
    assert alert.distinct_args == 3
    assert alert.subject == "tool:search"
    assert alert.tool == "search"
    assert alert.agent_id is None
    assert alert.sample_run_ids == ["r0", "r1", "r2", "r3", "r4"]
    assert alert.since_ts == T0
    assert alert.ts == T0 + 20_000
    assert alert.alert_id == f"tool_outage:tool:search:{(T0 + 20_000) // MIN}"
    assert alert.message == (
        "Tool search is failing across the fleet: 5 runs of 1 agents, 3 different argument sets, "
        "same error, no success since 2026-05-28 20:27:00 UTC."
    )
    assert alert.active_runs is None
    assert alert.share is None
    assert alert.detector is None
    assert decode_alert(encode_alert(alert)) == alert
    assert feed(w, failures("search", 8, 4, start=T0 + 30_000)) == []  # no second outage while open


def test_outage_never_opens_on_one_run_retrying() -> None:
    events = [result("search", "r1", T0 + i * 1000, {"q": i}, "connection refused") for i in range(30)]
    assert feed(watch(), events) == []


def test_outage_never_opens_on_many_runs_passing_the_same_bad_arguments() -> None:
    assert feed(watch(), failures("search", 20, 2)) == []


def test_outage_never_opens_while_the_tool_succeeds_for_others() -> None:
    events = failures("search", 4, 3)
    events.append(result("search", "ok-run", T0 + 21_000))
    events += failures("search", 3, 3, start=T0 + 22_000, error="connection refused")
    assert feed(watch(), events) == []


def test_a_success_before_the_first_failure_does_not_prevent_the_outage() -> None:
    events = [result("search", "ok-run", T0 - 1000), *failures("search", 5, 3)]
    assert [a.kind for a in feed(watch(), events)] == ["tool_outage"]


def test_different_errors_are_counted_apart() -> None:
    refused = [result("search", f"x{i}", T0 + i, {"q": i}, "connection refused") for i in range(3)]
    denied = [result("search", f"y{i}", T0 + 10 + i, {"q": i}, "permission denied") for i in range(3)]
    assert feed(watch(), refused + denied) == []


def test_other_agents_count_and_are_reported() -> None:
    events = [result("search", f"r{i}", T0 + i, {"q": i}, "boom", agent=f"agent-{i % 2}") for i in range(5)]
    (alert,) = feed(watch(), events)
    assert alert.agents == 2


def test_thresholds_come_from_the_config() -> None:
    rules = fleet_rules(
        parse_config_text(
            "{loopwatch: {detectors: {toolOutage: {minRuns: 2, minDistinctArgs: 1}}}}"
        ).global_rules
    )
    assert rules.tool_outage.min_runs == 2
    assert rules.tool_outage.bucket_s == 60
    w = FleetWatch(rules, DIGESTER)
    assert [a.kind for a in feed(w, failures("search", 2, 1))] == ["tool_outage"]


def test_fleet_rules_are_refused_per_agent_with_their_path() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config_text(
            '{agents: {list: [{id: "x", loopwatch: {detectors: {toolOutage: {minRuns: 2}}}}]},'
            " loopwatch: {detectors: {systemicLoop: {minShare: 2}}}}"
        )
    text = str(caught.value)
    assert "loopwatch.detectors.toolOutage" in text
    assert "global" in text
    assert "loopwatch.detectors.systemicLoop.minShare" in text


def test_disabled_outage_rule_gives_nothing() -> None:
    assert feed(watch(enabled=False), failures("search", 10, 5)) == []


# -- F1: buckets --------------------------------------------------------------------------------


def test_failures_older_than_the_window_do_not_count() -> None:
    bucket = (T0 // MIN) * MIN
    early = [result("search", f"old{i}", bucket + i, {"q": i}, "boom") for i in range(3)]
    # 5 buckets later the early bucket is out of the window: 2 + 2 runs only
    late = [result("search", f"new{i}", bucket + 5 * MIN + i, {"q": i}, "boom") for i in range(2)]
    assert feed(watch(), early + late) == []


def test_failures_at_the_window_s_oldest_bucket_still_count() -> None:
    bucket = (T0 // MIN) * MIN
    early = [result("search", f"old{i}", bucket + i, {"q": i}, "boom") for i in range(3)]
    late = [result("search", f"new{i}", bucket + 5 * MIN - 1 + i * 0, {"q": 9 + i}, "boom") for i in range(2)]
    (alert,) = feed(watch(), early + late)
    assert alert.runs == 5
    assert alert.since_ts == bucket


def test_bucket_edges_are_event_time_floors() -> None:
    bucket = (T0 // MIN) * MIN
    events = [
        result("search", f"r{i}", bucket + 4 * MIN + 59_999 if i < 4 else bucket + 5 * MIN, {"q": i}, "boom")
        for i in range(5)
    ]
    (alert,) = feed(watch(), events)
    assert alert.alert_id.endswith(f":{bucket // MIN + 5}")


# -- F1: recovery -----------------------------------------------------------------------------


def test_recovery_at_the_first_success_counts_runs_failed_while_open() -> None:
    w = watch()
    events = failures("search", 5, 3)
    events.append(result("search", "r9", T0 + 2 * MIN, {"q": 1}, "connection refused"))
    events.append(result("search", "r10", T0 + 4 * MIN))
    events.append(result("search", "r11", T0 + 4 * MIN + 1))
    alerts = feed(w, events)
    assert [a.kind for a in alerts] == ["tool_outage", "tool_recovered"]
    recovered = alerts[1]
    assert recovered.runs == 6
    assert recovered.subject == "tool:search"
    assert recovered.message == "Tool search works again after 4 min."
    assert recovered.alert_id == alerts[0].alert_id.replace("tool_outage", "tool_recovered")
    assert w.open_outages() == {}


def test_a_late_success_from_before_the_outage_does_not_close_it() -> None:
    w = watch()
    feed(w, failures("search", 5, 3))
    assert feed(w, [result("search", "old", T0 - 10_000)]) == []
    assert set(w.open_outages()) == {"search"}


def test_the_same_events_give_the_same_alert_ids() -> None:
    events = [*failures("search", 6, 3), result("search", "ok", T0 + 3 * MIN)]
    first = [a.alert_id for a in feed(watch(), events)]
    second = [a.alert_id for a in feed(watch(), events)]
    assert first == second
    assert len(first) == 2


def test_redelivered_failures_change_nothing() -> None:
    events = failures("search", 4, 3)
    assert feed(watch(), events + events) == []


# -- F1: error classes ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("connect ECONNREFUSED 127.0.0.1:5432", "connect ECONNREFUSED 10.0.3.17:6543"),
        ("request req_8f14e45fceea167a failed", "request req_c9f0f895fb98ab91 failed"),
        ("timed out after 30012 ms", "timed out after 29987 ms"),
        ("Rate limited at 2026-12-03T10:00:01Z", "rate limited at 2026-12-03T11:42:09Z"),
        ("trace DEADBEEFCAFE0001", "trace 00112233aabbccdd"),
        ("request 70ba78037343 failed", "request 0934ffe1b2c5 failed"),  # hex runs before digit runs
        (
            "id 123e4567-e89b-12d3-a456-426614174000 gone",
            "id 9f8b7c6d-1a2b-4c3d-8e9f-0a1b2c3d4e5f gone",
        ),
    ],
)
def test_error_classes_ignore_ports_request_ids_durations_and_case(one: str, other: str) -> None:
    assert error_class(one, DIGESTER) == error_class(other, DIGESTER)


def test_the_error_class_follows_the_spec_s_example() -> None:
    from loopwatch.detectors.hashing import digester_for

    sha = digester_for("sha256")
    text = "ECONNREFUSED 10.1.2.3:8001 request 70ba78037343 after 685 ms"
    assert error_class(text, sha) == "error:" + sha.digest_text("econnrefused 0.0.0.0:0 request x after 0 ms")


def test_an_outage_whose_errors_carry_random_request_ids_opens_once() -> None:
    import random

    rng = random.Random(7)
    events: list[Event] = []
    for run in range(6):
        request = "".join(rng.choice("0123456789abcdef") for _ in range(12))
        error = f"upstream 503 request {request} after {rng.randrange(900)} ms"
        events.append(result("search", f"r{run}", T0 + run * 5_000, {"q": run % 3}, error))
    alerts = feed(watch(), events)
    assert [a.kind for a in alerts] == ["tool_outage"]


def test_error_classes_keep_different_errors_apart() -> None:
    assert error_class("connection refused", DIGESTER) != error_class("permission denied", DIGESTER)
    assert error_class("abc", DIGESTER).startswith("error:")


def test_digest_only_failures_use_their_digest_as_the_class() -> None:
    events: list[Event] = [
        ToolResult(
            event_id=f"d{i}",
            run_id=f"r{i}",
            ts=T0 + i,
            tool="search",
            args_digest=f"a{i % 3}",
            result_digest="error:abc",
        )
        for i in range(5)
    ]
    (alert,) = feed(watch(), events)
    assert alert.error_class == "error:abc"
    assert alert.distinct_args == 3


# -- F1: fail-fast ------------------------------------------------------------------------------


def test_fail_fast_blocks_calls_while_the_last_failure_is_recent() -> None:
    w = watch(block=True, block_s=60)
    feed(w, failures("search", 5, 3))
    last = T0 + 20_000
    blocked = w.fail_fast("run-x", call("search", "run-x", last + 59_999), last + 59_999, False)
    assert blocked is not None
    assert (blocked.level, blocked.action, blocked.detector, blocked.count) == (
        "critical",
        "block",
        "tool_outage",
        5,
    )
    assert blocked.message == (
        "CRITICAL: search is failing for the whole fleet right now (5 runs, same error). Do not call it "
        "again; continue without it or report that it is unavailable."
    )
    assert (
        w.fail_fast("run-x", call("search", "run-x", last + 60_000), last + 60_000, False) is None
    )  # a probe
    assert w.fail_fast("run-x", call("other", "run-x", last), last, False) is None


def test_fail_fast_is_off_by_default() -> None:
    w = watch()
    feed(w, failures("search", 5, 3))
    assert w.fail_fast("run-x", call("search", "run-x", T0 + 21_000), T0 + 21_000, False) is None


# -- F2 ---------------------------------------------------------------------------------------


def loop_watch(**rule: Any) -> FleetWatch:
    return FleetWatch(FleetRules(systemic_loop=SystemicLoopRule(**rule)), DIGESTER)


def loop_facts(
    w: FleetWatch,
    active: int,
    looping: list[int],
    ts: int = T0,
    detector: str = "generic_repeat",
    agent: str = "coder",
) -> list[FleetAlert]:
    from loopwatch.detectors.fleet.watch import apply_fact

    alerts: list[FleetAlert] = []
    for i in range(active):
        alerts += apply_fact(CallFact(agent, f"run-{i}", ts + i), w.rules, w.outages, w.agents)
    for i in looping:
        alerts += apply_fact(
            LoopFact(agent, "read", detector, f"run-{i}", ts + 1000 + i), w.rules, w.outages, w.agents
        )
    return alerts


def test_systemic_loop_alerts_at_the_tenth_loop_run() -> None:
    alerts = loop_facts(loop_watch(), 40, list(range(10)))
    (alert,) = alerts
    assert alert.kind == "systemic_loop"
    assert alert.runs == 10
    assert alert.active_runs == 40
    assert alert.share == 0.25
    assert alert.subject == "agent:coder:tool:read:generic_repeat"
    assert alert.agent_id == "coder"
    assert alert.message == "Agent coder: 10 of 40 runs (25%) hit generic_repeat on read in the last 60 min."
    assert alert.sample_run_ids == [f"run-{i}" for i in range(5)]


def test_systemic_loop_needs_min_runs_and_min_share() -> None:
    assert loop_facts(loop_watch(), 40, list(range(9))) == []
    assert loop_facts(loop_watch(), 60, list(range(11))) == []  # 11 of 60 is under 20 %


def test_systemic_loop_re_alerts_at_twice_the_last_count() -> None:
    w = loop_watch()
    first = loop_facts(w, 40, list(range(19)))
    assert [a.runs for a in first] == [10]
    assert [a.runs for a in loop_facts(w, 0, [19])] == [20]
    assert loop_facts(w, 0, list(range(20, 39))) == []


def test_systemic_loop_re_alerts_after_a_whole_window_without_loop_runs() -> None:
    w = loop_watch()
    assert len(loop_facts(w, 40, list(range(10)))) == 1
    later = T0 + 12 * 5 * MIN
    assert [a.runs for a in loop_facts(w, 40, list(range(10)), ts=later)] == [10]


def test_systemic_loop_one_bucket_short_of_a_window_is_no_new_alert() -> None:
    w = loop_watch()
    assert len(loop_facts(w, 40, list(range(10)))) == 1
    later = T0 + 11 * 5 * MIN
    assert loop_facts(w, 40, list(range(10, 19)), ts=later) == []  # 19 in the window: under twice 10


def test_aborts_count_under_their_detector_and_outage_blocks_do_not_count() -> None:
    def verdict(detector: str) -> Verdict:
        return Verdict(
            verdict_id="v",
            run_id="r",
            agent_id="a",
            session_id=None,
            tool_call_id=None,
            trigger_event_id="e",
            level="critical",
            action="block",
            detector=detector,
            count=1,
            message="",
            warning_key="",
            paired_tool=None,
            tool="read",
            ts=None,
        )

    def abort(reason: str) -> Abort:
        return Abort(
            verdict_id="v",
            run_id="r",
            agent_id="a",
            session_id=None,
            trigger_event_id="e",
            reason=reason,
            tool="read",
            count=None,
            message="",
            ts=None,
        )

    facts = facts_of_outputs([verdict("ping_pong"), abort("tool_loop_recovery_exhausted")], "r", 1)
    assert [f.detector for f in facts if isinstance(f, LoopFact)] == ["ping_pong"]
    facts = facts_of_outputs([abort("compaction_loop_persisted"), verdict("tool_outage")], "r", 1)
    assert [f.detector for f in facts if isinstance(f, LoopFact)] == ["compaction_loop_persisted"]
