"""The agents preset's rules on random traffic: their state survives the run snapshot at every
event, and stays as small as their docstrings say.

* (a) stepped straight through, or snapshotted and restored (a new engine) after every event:
  the same outputs, output for output;
* (b) after every event: ``call_cycle`` keeps at most maxPeriod x (criticalThreshold + 1)
  calls, ``same_failure`` at most two signatures per streak, and no streak is longer than the
  calls or outcomes the run has had.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from loopwatch.config import FleetConfig, parse_config_value
from loopwatch.detectors.engine import Engine
from loopwatch.detectors.events import Event, Output, ToolCall, ToolResult, Verdict
from loopwatch.detectors.rules.call_cycle import RecentCalls
from loopwatch.detectors.rules.same_call_streak import Streak
from loopwatch.detectors.rules.same_failure import FailureStreaks
from loopwatch.detectors.state import RunState
from tests.helpers import Trace, text_result

TOOLS = ["exec", "read", "search_dir", "poll"]
PARAMS: list[dict[str, Any]] = [
    {"command": "ls"},
    {"path": "a"},
    {"search_term": "build env"},
    {"search_term": "setup"},
    {},
]
#: (result, error): successes, failures of two or three ways, echoes of the arguments, exit
#: statuses, a file named like an exception, OpenClaw-shaped results, marked failures
OUTCOMES: list[tuple[Any, str | None]] = [
    ("ok", None),
    ("", None),
    (None, None),
    ("/bin/bash: line 3: foo: command not found", None),
    ("/bin/bash: line 9: bar: command not found", None),
    ("bash: line 2: unexpected EOF", None),
    ('No matches found for "build env"', None),
    ('No matches found for "setup"', None),
    ("<returncode>1</returncode>\nmake: leaving", None),
    ("<returncode>0</returncode>\nerror: but it passed", None),
    ("src/IOException.java", None),
    (text_result("error: cannot find symbol"), None),
    (text_result("done", status="completed"), None),
    (None, "ENOENT"),
    (None, "Permission denied"),
]

# one step: (kind, tool, params, outcome); a call alone is a blocked (or unanswered) call, an
# outcome alone one whose call was not seen
step = st.tuples(
    st.sampled_from(["call", "outcome", "both", "both", "both"]),
    st.integers(0, len(TOOLS) - 1),
    st.integers(0, len(PARAMS) - 1),
    st.integers(0, len(OUTCOMES) - 1),
)
#: random steps, and a few steps going round a few times (the traffic of streaks and cycles)
plans = st.lists(step, max_size=60) | st.lists(
    st.tuples(st.lists(step, min_size=1, max_size=5), st.integers(1, 7)), min_size=1, max_size=4
).map(lambda parts: [s for pattern, times in parts for _ in range(times) for s in pattern])


@dataclass(frozen=True)
class Rules:
    config: FleetConfig
    max_period: int
    cycle_critical: int


PRESET = Rules(
    parse_config_value({"loopwatch": {"preset": "agents"}}),
    max_period=5,  # docs/real-loops.md: the preset's callCycle
    cycle_critical=3,
)


@st.composite
def tuned(draw: st.DrawFn) -> Rules:
    """The three rules on, at random (ordered) thresholds, with random exempt tools."""

    def pair(low: int, high: int, top: int) -> tuple[int, int]:
        warning = draw(st.integers(low, high))
        return warning, draw(st.integers(warning + 1, top))

    def exempt() -> list[str]:
        return sorted(draw(st.sets(st.sampled_from(TOOLS), max_size=2)))

    streak = pair(1, 4, 7)
    max_period = draw(st.integers(2, 8))
    cycle = pair(1, 4, 16)
    failure = pair(1, 4, 7)
    sweep = pair(1, 5, 9)
    detectors = {
        "sameCallStreak": {
            "enabled": True,
            "warningThreshold": streak[0],
            "criticalThreshold": streak[1],
            "exemptTools": exempt(),
        },
        "callCycle": {
            "enabled": True,
            "maxPeriod": max_period,
            "warningThreshold": cycle[0],
            "criticalThreshold": cycle[1],
            "exemptTools": exempt(),
        },
        "sameFailure": {
            "enabled": True,
            "warningThreshold": failure[0],
            "criticalThreshold": failure[1],
            "sweepWarningThreshold": sweep[0],
            "sweepCriticalThreshold": sweep[1],
            "exemptTools": exempt(),
        },
    }
    recovery = draw(st.booleans())
    document = {
        "tools": {"loopDetection": {"enabled": draw(st.booleans())}},
        "loopwatch": {"detectors": detectors, "recoveryAbort": recovery},
    }
    return Rules(parse_config_value(document), max_period, cycle[1])


rules = st.just(PRESET) | tuned()


def build(plan: list[tuple[str, int, int, int]]) -> list[Event]:
    trace = Trace("run-p")
    for n, (kind, t, p, o) in enumerate(plan):
        tool, params = TOOLS[t], PARAMS[p]
        result, error = OUTCOMES[o]
        call_id = f"c{n}"
        if kind in ("call", "both"):
            trace.call(tool, params, call_id)
        if kind in ("outcome", "both"):
            trace.result(tool, params, result, error, call_id if kind == "both" else None)
    return trace.events


def restored(engine: Engine) -> Engine:
    fresh = Engine(engine.config)
    for scope, state in engine.states.items():
        fresh.states[scope] = RunState.from_bytes(state.to_bytes(), engine.config.seen_event_ids)
    return fresh


def check_bounds(state: RunState, rules: Rules, calls: int, outcomes: int) -> None:
    kept = state.rule_states
    recent = kept.get("call_cycle")
    if recent is not None:
        assert isinstance(recent, RecentCalls)
        assert len(recent.hashes) == len(recent.tools) <= rules.max_period * (rules.cycle_critical + 1)
        assert len(recent.hashes) <= calls
    streaks = kept.get("same_failure")
    if streaks is not None:
        assert isinstance(streaks, FailureStreaks)
        for streak in (streaks.same, streaks.sweep):
            assert len(streak.classes) <= 2
            assert len(set(streak.classes)) == len(streak.classes)
            assert 0 <= streak.last_run <= streak.count <= outcomes
            assert (streak.count == 0) == (not streak.classes)
            if streak.count:
                assert streak.last in streak.classes
    streak_of_calls = kept.get("same_call_streak")
    if streak_of_calls is not None:
        assert isinstance(streak_of_calls, Streak)
        assert 1 <= streak_of_calls.count <= calls


@given(plans, rules)
@settings(max_examples=400)
def test_the_rules_give_the_same_outputs_through_a_snapshot_at_every_event_and_stay_bounded(
    plan: list[tuple[str, int, int, int]], rules: Rules
) -> None:
    events = build(plan)
    straight = Engine(rules.config)
    through = Engine(rules.config)
    expected: list[Output] = []
    got: list[Output] = []
    calls = outcomes = 0
    for event in events:
        calls += isinstance(event, ToolCall)
        outcomes += isinstance(event, ToolResult)
        expected.extend(straight.process(event))
        got.extend(through.process(event))
        through = restored(through)
        for engine in (straight, through):
            state = engine.states.get("run-p")
            if state is not None:
                check_bounds(state, rules, calls, outcomes)
        assert got == expected
    assert straight.states.keys() == through.states.keys()
    for scope, state in straight.states.items():
        assert through.states[scope] == state


def test_the_traffic_reaches_every_rule() -> None:
    """The strategy is not vacuous: a plan of its kind makes each of the three rules speak."""
    plan = [
        *[("both", 0, 0, 3)] * 3,  # exec ls, command not found: a streak and the same failure
        *[("both", 1, 1, 0), ("both", 2, 2, 0)] * 3,  # read a / search_dir: a cycle of two
        *[("both", 2, 2, 6), ("both", 2, 3, 7)] * 3,  # echoes of the searched terms: a sweep
    ]
    outputs = Engine(PRESET.config)
    detectors = {
        o.detector for event in build(plan) for o in outputs.process(event) if isinstance(o, Verdict)
    }
    assert {"same_call_streak", "call_cycle", "same_failure"} <= detectors
