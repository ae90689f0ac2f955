"""The agents preset's three rules through the real in-process core (the embedded Engine),
one at a time, and the functions of detectors/outcome_signature.py.

Every expectation is worked out by hand from the rules as their module docstrings and
docs/real-loops.md state them: calls are numbered from 1, a verdict is published at the call
it judges, a warning once per bucket of its key (spec §7.2), a second critical aborts the run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pytest

from loopwatch import LoopDetector
from loopwatch.config import FleetConfig, parse_config_text, parse_config_value
from loopwatch.detectors.engine import Engine
from loopwatch.detectors.events import Event, Output, ToolCall, Verdict
from loopwatch.detectors.outcome_signature import (
    SIGNATURE_LINES,
    TEXT_CHARS,
    outcome_text,
    preview,
    signature,
    unproductive,
)
from loopwatch.detectors.rules.call_cycle import RecentCalls
from loopwatch.detectors.rules.same_call_streak import Streak
from loopwatch.detectors.rules.same_failure import FailureStreaks
from loopwatch.detectors.state import RunState
from tests.helpers import Trace, text_result

STREAK, CYCLE, FAILURE = "same_call_streak", "call_cycle", "same_failure"
RECOVERY = "tool_loop_recovery_exhausted"
OWN = (STREAK, CYCLE, FAILURE)

# -- running a trace -------------------------------------------------------------------------


def fleet(detectors: dict[str, Any] | None = None, preset: str | None = None) -> FleetConfig:
    """OpenClaw's detectors on (as the preset has them), with ``detectors`` / ``preset``."""
    document: dict[str, Any] = {"tools": {"loopDetection": {"enabled": True}}}
    loopwatch: dict[str, Any] = {}
    if detectors is not None:
        loopwatch["detectors"] = detectors
    if preset is not None:
        loopwatch["preset"] = preset
    if loopwatch:
        document["loopwatch"] = loopwatch
    return parse_config_value(document)


def only(rule: str, **keys: Any) -> FleetConfig:
    """One of the three rules on (its file name), at its defaults unless ``keys`` say otherwise."""
    return fleet({rule: {"enabled": True, **keys}})


def restored(engine: Engine) -> Engine:
    """A new engine holding the runs' states as their snapshots give them back (a restart)."""
    fresh = Engine(engine.config)
    for scope, state in engine.states.items():
        fresh.states[scope] = RunState.from_bytes(state.to_bytes(), engine.config.seen_event_ids)
    return fresh


def outputs_of(
    events: Iterable[Event], config: FleetConfig, restore: Callable[[int], bool] = lambda index: False
) -> list[Output]:
    """Every output of the events, one engine (``restore(i)``: restored after event ``i``)."""
    engine = Engine(config)
    outputs: list[Output] = []
    for index, event in enumerate(events):
        outputs.extend(engine.process(event))
        if restore(index):
            engine = restored(engine)
    return outputs


Said = tuple[int, str, str, int | None]


def said(trace: Trace, outputs: list[Output]) -> list[Said]:
    """(call number, action, detector or abort reason, count) of every output."""
    numbers = {
        event.event_id: number
        for number, event in enumerate((e for e in trace.events if isinstance(e, ToolCall)), 1)
    }
    return [(numbers[o.trigger_event_id], o.action, o.detector, o.count) for o in outputs]


def run(trace: Trace, config: FleetConfig) -> list[Said]:
    return said(trace, outputs_of(trace.events, config))


def messages(outputs: list[Output], detector: str) -> list[str]:
    return [o.message for o in outputs if isinstance(o, Verdict) and o.detector == detector]


def blocks(found: list[Said]) -> list[Said]:
    return [s for s in found if s[1] == "block"]


class Calls:
    """A trace built call by call: ``call`` alone (a blocked call has no result), ``both``."""

    def __init__(self) -> None:
        self.trace = Trace()
        self.count = 0

    def call(self, tool: str, params: Any) -> None:
        self.count += 1
        self.trace.call(tool, params, f"c{self.count}")

    def both(self, tool: str, params: Any, result: Any = None, error: str | None = None) -> None:
        self.call(tool, params)
        self.trace.result(tool, params, result, error, f"c{self.count}")


# == same_call_streak ===========================================================================

CD = {"command": "cd fastjson/"}


def cd_loop(results: int, proposals: int = 0) -> Calls:
    """``cd fastjson/`` with an answer that differs by its line counter, then more proposals
    without a result (blocked calls)."""
    calls = Calls()
    for n in range(1, results + 1):
        calls.both("exec", CD, f"/bin/bash: line {n}: cd: fastjson/: No such file or directory")
    for _ in range(proposals):
        calls.call("exec", CD)
    return calls


def test_the_same_call_warns_at_the_3rd_in_a_row_and_blocks_at_the_5th() -> None:
    calls = cd_loop(4, 1)
    outputs = outputs_of(calls.trace.events, only("sameCallStreak"))
    # read a, read a, read a (3: warning), read a (4), read a (5: blocked); results are not read
    assert said(calls.trace, outputs) == [(3, "warn", STREAK, 3), (5, "block", STREAK, 5)]
    warning, critical = messages(outputs, STREAK)
    assert warning.startswith("WARNING: exec ")
    assert "3 times in a row with the same arguments" in warning
    assert critical == (
        "CRITICAL: exec was called 5 times in a row with the same arguments. Repeating it will not "
        "change the result; change the approach or stop and report the task as failed."
    )
    blocked = [o for o in outputs if isinstance(o, Verdict) and o.action == "block"]
    assert [(o.tool, o.level) for o in blocked] == [("exec", "critical")]


def test_a_blocked_call_proposed_again_counts_and_the_second_critical_aborts_the_run() -> None:
    calls = cd_loop(4, 2)
    assert run(calls.trace, only("sameCallStreak")) == [
        (3, "warn", STREAK, 3),
        (5, "block", STREAK, 5),
        (6, "block", STREAK, 6),  # the blocked 5th counted: this is the 6th in a row
        (6, "abort", RECOVERY, None),
    ]


def test_the_thresholds_are_the_config_s() -> None:
    calls = cd_loop(3, 1)
    assert run(calls.trace, only("sameCallStreak", warningThreshold=2, criticalThreshold=4)) == [
        (2, "warn", STREAK, 2),
        (4, "block", STREAK, 4),
    ]


def test_arguments_in_another_key_order_are_the_same_call() -> None:
    calls = Calls()
    for n in range(3):
        params = {"path": "a.py", "limit": 50} if n % 2 else {"limit": 50, "path": "a.py"}
        calls.both("read", params, f"content {n}")
    assert run(calls.trace, only("sameCallStreak")) == [(3, "warn", STREAK, 3)]


@pytest.mark.parametrize(
    "breaker",
    [
        ("read", {"path": "b.py"}),  # a different argument
        ("list", {"path": "a.py"}),  # the same arguments to another tool
        ("list", {}),  # the docstring's trace: read a, read a, list, read a (1)
    ],
)
def test_another_call_breaks_the_streak(breaker: tuple[str, dict[str, Any]]) -> None:
    calls = Calls()
    read_a = ("read", {"path": "a.py"})
    for tool, params in (read_a, read_a, breaker, read_a, read_a):
        calls.both(tool, params, "x = 1")
    assert run(calls.trace, only("sameCallStreak")) == []  # 1, 2, (1), 1, 2
    calls.both(*read_a, "x = 1")
    assert run(calls.trace, only("sameCallStreak")) == [(6, "warn", STREAK, 3)]


def test_an_exempt_tool_neither_counts_nor_breaks_a_streak() -> None:
    config = only("sameCallStreak", exemptTools=["poll"])
    calls = Calls()
    read_a = ("read", {"path": "a.py"})
    poll = ("poll", {"sessionId": "s"})
    for tool, params in (read_a, read_a, poll, read_a, poll, poll, read_a):
        calls.both(tool, params, "same")
    # read a: 1, 2, 3 (call 4: warning), 4 (call 7)
    assert run(calls.trace, config) == [(4, "warn", STREAK, 3)]
    # the exempt tool's own repeats are not a streak (and without the exemption they are)
    polls = Calls()
    for _ in range(7):
        polls.both(*poll, "(no new output)")
    assert run(polls.trace, config) == []
    assert run(polls.trace, only("sameCallStreak"))[:2] == [(3, "warn", STREAK, 3), (5, "block", STREAK, 5)]


# == call_cycle =================================================================================

OPEN = ("open", {"path": "src/Parser.java"})
SEARCH_FILE = ("search_file", {"term": "parseObject"})
SEARCH_DIR = ("search_dir", {"term": "parseObject"})


def going_round(cycle: list[tuple[str, dict[str, Any]]], calls_made: int, results: bool = True) -> Calls:
    calls = Calls()
    for n in range(calls_made):
        tool, params = cycle[n % len(cycle)]
        if results:
            calls.both(tool, params, f"{tool}: the same answer")
        else:
            calls.call(tool, params)
    return calls


def test_three_calls_going_round_warn_at_the_2nd_round_and_block_at_the_3rd() -> None:
    calls = going_round([OPEN, SEARCH_FILE, SEARCH_DIR], 8)
    calls.call(*SEARCH_DIR)
    outputs = outputs_of(calls.trace.events, only("callCycle"))
    # a b c a b c (2 rounds: warning at the second c) a b c (3 rounds: the third c is blocked)
    assert said(calls.trace, outputs) == [(6, "warn", CYCLE, 2), (9, "block", CYCLE, 3)]
    warning, critical = messages(outputs, CYCLE)
    assert "(open → search_file → search_dir)" in warning
    assert "2 times" in warning
    assert critical.startswith(
        "CRITICAL: the same 3 calls (open → search_file → search_dir) have now been made 3 times over, "
        "in the same order. "
    )


def test_two_calls_going_round() -> None:
    calls = going_round([OPEN, SEARCH_FILE], 6)
    outputs = outputs_of(calls.trace.events, only("callCycle"))
    # a b a b (2 rounds) a (2 and a half: the same bucket) b (3 rounds)
    assert said(calls.trace, outputs) == [(4, "warn", CYCLE, 2), (6, "block", CYCLE, 3)]
    assert messages(outputs, CYCLE)[1].startswith("CRITICAL: the same 2 calls (open → search_file) ")


def test_a_period_may_hold_one_call_twice() -> None:
    read_a = ("read", {"path": "a"})
    calls = going_round([read_a, read_a, ("grep", {"pattern": "x"})], 9)
    assert run(calls.trace, only("callCycle")) == [(6, "warn", CYCLE, 2), (9, "block", CYCLE, 3)]


def test_one_call_repeated_is_no_cycle() -> None:
    calls = going_round([("read", {"path": "a"})], 9)
    assert run(calls.trace, only("callCycle")) == []


@pytest.mark.parametrize(
    "sequence",
    [
        # a b c a b d: the cycle is broken by its last call
        [OPEN, SEARCH_FILE, SEARCH_DIR, OPEN, SEARCH_FILE, ("search_dir", {"term": "other"})],
        # the same tools, the searched term different each round
        [OPEN, SEARCH_FILE, OPEN, ("search_file", {"term": "b"}), OPEN, ("search_file", {"term": "c"})],
        # a b a c a b
        [OPEN, SEARCH_FILE, OPEN, SEARCH_DIR, OPEN, SEARCH_FILE],
    ],
)
def test_calls_that_do_not_go_round_in_the_same_order_are_no_cycle(
    sequence: list[tuple[str, dict[str, Any]]],
) -> None:
    calls = Calls()
    for tool, params in sequence:
        calls.both(tool, params, "same")
    assert run(calls.trace, only("callCycle")) == []


def test_a_cycle_longer_than_max_period_is_not_seen() -> None:
    cycle = [(f"tool_{n}", {"n": n}) for n in range(6)]
    calls = going_round(cycle, 12)
    assert run(calls.trace, only("callCycle")) == []  # maxPeriod 5
    outputs = outputs_of(calls.trace.events, only("callCycle", maxPeriod=6))
    assert said(calls.trace, outputs) == [(12, "warn", CYCLE, 2)]
    assert "(tool_0 → tool_1 → tool_2 → tool_3 → tool_4 → tool_5)" in messages(outputs, CYCLE)[0]
    three = going_round([OPEN, SEARCH_FILE, SEARCH_DIR], 9)
    assert run(three.trace, only("callCycle", maxPeriod=2)) == []


def test_a_cycle_of_five_is_seen_at_the_default_max_period() -> None:
    cycle = [(f"tool_{n}", {"n": n}) for n in range(5)]
    assert run(going_round(cycle, 15).trace, only("callCycle")) == [
        (10, "warn", CYCLE, 2),
        (15, "block", CYCLE, 3),
    ]


def test_exempt_calls_are_skipped_in_a_cycle_and_never_judged() -> None:
    config = only("callCycle", exemptTools=["wait"])
    wait = ("wait", {"seconds": 5})
    calls = Calls()
    for tool, params in (
        OPEN,
        wait,
        SEARCH_FILE,
        wait,
        OPEN,
        wait,
        SEARCH_FILE,
        wait,
        OPEN,
        wait,
        SEARCH_FILE,
    ):
        calls.both(tool, params, "same")
    # the calls it sees: open search open search (call 7: 2 rounds) open search (call 11: 3 rounds)
    assert run(calls.trace, config) == [(7, "warn", CYCLE, 2), (11, "block", CYCLE, 3)]
    # without the exemption the waits are calls of the cycle: (open wait search wait), 4 calls
    assert run(calls.trace, only("callCycle"))[0] == (8, "warn", CYCLE, 2)
    # a cycle whose other call is exempt is a repeat of one call: no cycle
    alternating = going_round([OPEN, wait], 9)  # (OpenClaw's ping-pong speaks from 10)
    assert run(alternating.trace, config) == []


def test_the_rounds_thresholds_are_the_config_s() -> None:
    calls = going_round([OPEN, SEARCH_FILE, SEARCH_DIR], 12)
    config = only("callCycle", warningThreshold=3, criticalThreshold=4)
    assert run(calls.trace, config) == [(9, "warn", CYCLE, 3), (12, "block", CYCLE, 4)]


@pytest.mark.parametrize(("max_period", "critical"), [(5, 3), (2, 2), (8, 16), (3, 7)])
def test_the_kept_calls_are_bounded(max_period: int, critical: int) -> None:
    """At most maxPeriod x (criticalThreshold + 1) calls are kept."""
    config = only("callCycle", maxPeriod=max_period, warningThreshold=1, criticalThreshold=critical)
    engine = Engine(config)
    calls = Calls()
    for n in range(300):
        calls.both("read", {"path": f"/f{n}"}, "x")
    bound = max_period * (critical + 1)
    sizes = set()
    for event in calls.trace.events:
        engine.process(event)
        recent = engine.states["run-1"].rule_states.get(CYCLE)
        assert isinstance(recent, RecentCalls)
        assert len(recent.hashes) == len(recent.tools) <= bound
        sizes.add(len(recent.hashes))
    assert max(sizes) > max_period  # enough kept to see a round or more


# == same_failure ================================================================================

PROSE = ["DISCUSSION", "First", "Let", "Now", "I", "We", "The", "This"]


def not_found(n: int) -> str:
    return f"/bin/bash: line {n}: {PROSE[n % len(PROSE)]}: command not found"


def prose_loop(failures: int) -> Calls:
    """Prose sent to a shell, reworded each time, each failing with "command not found"."""
    calls = Calls()
    for n in range(1, failures + 1):
        calls.both("exec", {"command": f"{PROSE[n % len(PROSE)]} I will look at the file {n}"}, not_found(n))
    return calls


def test_the_same_failure_however_the_calls_vary_warns_at_3_and_blocks_at_5() -> None:
    calls = prose_loop(5)
    calls.call("exec", {"command": "Another idea"})
    outputs = outputs_of(calls.trace.events, only("sameFailure"))
    assert said(calls.trace, outputs) == [(4, "warn", FAILURE, 3), (6, "block", FAILURE, 5)]
    warning, critical = messages(outputs, FAILURE)
    assert f'("{not_found(3)}")' in warning  # the latest failure's first line
    assert critical.startswith(
        f'CRITICAL: the last 5 tool calls all failed the same way ("{not_found(5)}"), however they varied. '
    )
    # nothing of OpenClaw's: every call was different
    assert run(calls.trace, FleetConfig.enabled_default()) == []


def test_the_docstring_s_trace_of_two_ways_of_failing() -> None:
    eof = "/bin/bash: -c: line {}: unexpected EOF"
    outcomes = [not_found(1), not_found(2), eof.format(3), not_found(4), eof.format(5)]
    calls = Calls()
    for n, outcome in enumerate(outcomes, 1):
        calls.both("exec", {"command": f"attempt {n}"}, outcome)
    calls.call("exec", {"command": "attempt 6"})
    outputs = outputs_of(calls.trace.events, only("sameFailure"))
    found = said(calls.trace, outputs)
    # x, y (command not found), z (unexpected EOF): 3 warns; w (4), v (5): the next call blocked
    assert found[0] == (4, "warn", FAILURE, 3)
    assert blocks(found) == [(6, "block", FAILURE, 5)]
    assert all(s[1] == "warn" and s[3] in (3, 4) for s in found[:-1])
    assert f'("{eof.format(5)}")' in messages(outputs, FAILURE)[-1]


def test_a_third_way_of_failing_keeps_only_the_latest_way_s_run() -> None:
    a, b, c = not_found, "/bin/sh: line {}: unexpected EOF".format, "cp: {}: Permission denied".format
    outcomes = [a(1), a(2), b(3), c(4), b(5), b(6), b(7)]
    calls = Calls()
    for n, outcome in enumerate(outcomes, 1):
        calls.both("exec", {"command": f"attempt {n}"}, outcome)
    calls.call("exec", {"command": "attempt 8"})
    found = run(calls.trace, only("sameFailure"))
    # A A B (3: warning at call 4); C: a third way, the streak is B C (2: nothing at call 5);
    # B B B: B C B B B (5: the 8th call is blocked), not A A B C B B B (7, blocked at call 6)
    assert found[0] == (4, "warn", FAILURE, 3)
    assert [s for s in found if s[0] == 5] == []
    assert blocks(found) == [(8, "block", FAILURE, 5)]


def test_three_ways_of_failing_in_turn_never_make_a_streak_of_three() -> None:
    ways = [not_found, "/bin/sh: line {}: unexpected EOF".format, "cp: {}: Permission denied".format]
    calls = Calls()
    for n in range(12):
        calls.both("exec", {"command": f"attempt {n}"}, ways[n % 3](n))
    assert run(calls.trace, only("sameFailure")) == []  # each a third way: 2 at most


@pytest.mark.parametrize(
    "success",
    [
        "total 0\n-rw-r--r-- 1 root root 0 a.txt",
        "",  # an empty text is not a failure either
        None,
        "<returncode>0</returncode>\nerror: printed, but the command succeeded",
        {"content": [{"type": "text", "text": "ok"}], "details": {}},
    ],
)
def test_a_success_ends_the_streak(success: Any) -> None:
    def around_the_success(failures_after: int) -> Calls:
        calls = Calls()
        calls.both("exec", {"command": "a"}, not_found(1))
        calls.both("exec", {"command": "b"}, not_found(2))
        calls.both("ls", {"path": "."}, success)
        for n in range(failures_after):
            calls.both("exec", {"command": f"again {n}"}, not_found(3 + n))
        calls.call("exec", {"command": "next"})
        return calls

    assert run(around_the_success(2).trace, only("sameFailure")) == []  # 2 since the success, not 4
    assert run(around_the_success(3).trace, only("sameFailure")) == [(7, "warn", FAILURE, 3)]


def test_marked_failures_count_whatever_their_text() -> None:
    calls = Calls()
    for n in range(5):
        calls.both("read", {"path": f"/missing/{n}"}, error="ENOENT")
    calls.call("read", {"path": "/missing/5"})
    outputs = outputs_of(calls.trace.events, only("sameFailure"))
    assert said(calls.trace, outputs) == [(4, "warn", FAILURE, 3), (6, "block", FAILURE, 5)]
    assert '("ENOENT")' in messages(outputs, FAILURE)[-1]


def test_an_exit_status_other_than_0_is_a_failure_without_any_marker() -> None:
    calls = Calls()
    for n in range(3):
        calls.both("bash", {"cmd": f"make target{n}"}, f"<returncode>2</returncode>\nmake: leaving {n}")
    calls.call("bash", {"cmd": "make target3"})
    assert run(calls.trace, only("sameFailure")) == [(4, "warn", FAILURE, 3)]


def test_a_file_named_like_an_exception_is_no_failure() -> None:
    calls = Calls()
    for n in range(8):
        listing = f"./src/main/java/org/app/IOException.java\n./src/main/java/org/app/Main{n}.java"
        calls.both("find", {"name": f"*{n}.java"}, listing)
    calls.call("find", {"name": "*.java"})
    assert run(calls.trace, only("sameFailure")) == []


def test_a_failure_marker_in_the_middle_of_an_outcome_is_no_failure() -> None:
    calls = Calls()
    for n in range(8):
        calls.both(
            "pytest", {"k": f"test_{n}"}, f"collected 3 items\nrunning\nerror: flaky {n}\nmore\n3 passed"
        )
    calls.call("pytest", {"k": "all"})
    assert run(calls.trace, only("sameFailure")) == []


SEARCHED = [
    "build environment",
    "project setup",
    "development environment",
    "ci config",
    "docker image",
    "make target",
    "tox settings",
    "setup script",
    "lint rules",
]


def sweep(terms: list[str], echo: Callable[[str], str] = lambda term: term) -> Calls:
    calls = Calls()
    for term in terms:
        calls.both("search_dir", {"search_term": term}, f'No matches found for "{echo(term)}" in /repo')
    return calls


def test_a_sweep_of_not_found_echoes_counts_at_the_sweep_thresholds() -> None:
    calls = sweep(SEARCHED[:8])
    calls.call("search_dir", {"search_term": SEARCHED[8]})
    outputs = outputs_of(calls.trace.events, only("sameFailure"))
    # not at the 3rd and 5th failure (each says it differently): at the 5th and the 8th
    assert said(calls.trace, outputs) == [(6, "warn", FAILURE, 5), (9, "block", FAILURE, 8)]
    warning, critical = messages(outputs, FAILURE)
    assert f'("No matches found for "{SEARCHED[4]}" in /repo")' in warning
    assert critical.startswith(
        f'CRITICAL: the last 8 tool calls each came back with nothing ("No matches found for '
        f'"{SEARCHED[7]}" in /repo"), argument after argument. '
    )


def test_a_sweep_s_thresholds_are_the_config_s() -> None:
    calls = sweep(SEARCHED[:4])
    calls.call("search_dir", {"search_term": SEARCHED[4]})
    config = only("sameFailure", sweepWarningThreshold=2, sweepCriticalThreshold=4)
    assert run(calls.trace, config) == [(3, "warn", FAILURE, 2), (5, "block", FAILURE, 4)]


def test_quoted_text_that_is_not_an_echo_of_the_arguments_is_no_sweep() -> None:
    calls = sweep(SEARCHED, echo=lambda term: term[::-1])
    assert run(calls.trace, only("sameFailure")) == []


def test_an_echo_is_found_whatever_its_case() -> None:
    calls = sweep(SEARCHED[:5], echo=str.upper)
    calls.call("search_dir", {"search_term": "x"})
    assert run(calls.trace, only("sameFailure")) == [(6, "warn", FAILURE, 5)]


#: search terms as agents write them for grep: regular expressions, with backslashes
PATTERNS = [r"foo\.bar", r"get\(", r"\bmain\b", r"a\|b", r"x\s+y", r"end\$"]


def test_a_sweep_of_patterns_with_backslashes_is_a_sweep() -> None:
    calls = Calls()
    for pattern in PATTERNS[:5]:
        calls.both("search_dir", {"search_term": pattern}, f'No matches found for "{pattern}" in /repo')
    calls.call("search_dir", {"search_term": PATTERNS[5]})
    assert run(calls.trace, only("sameFailure")) == [(6, "warn", FAILURE, 5)]


def test_an_exempt_tool_s_outcomes_neither_count_nor_end_a_streak_and_its_calls_pass() -> None:
    config = only("sameFailure", exemptTools=["poll"])
    poll = {"sessionId": "s"}
    calls = Calls()
    calls.both("exec", {"command": "a"}, not_found(1))
    calls.both("exec", {"command": "b"}, not_found(2))
    calls.both("poll", poll, "running, 10% done")  # a success, of an exempt tool
    calls.both("exec", {"command": "c"}, not_found(3))
    calls.call("exec", {"command": "d"})
    assert run(calls.trace, config) == [(5, "warn", FAILURE, 3)]
    assert run(calls.trace, only("sameFailure")) == []  # not exempt, the poll's success ends it

    failing_polls = Calls()
    for _ in range(6):
        failing_polls.both("poll", poll, "error: session not found")
    failing_polls.both("exec", {"command": "a"}, not_found(1))
    failing_polls.both("exec", {"command": "b"}, not_found(2))
    failing_polls.call("exec", {"command": "c"})
    assert run(failing_polls.trace, config) == []

    blocked_after = prose_loop(5)
    blocked_after.call("poll", poll)  # the exempt tool's call is not blocked
    blocked_after.call("exec", {"command": "x"})
    assert run(blocked_after.trace, config) == [(4, "warn", FAILURE, 3), (7, "block", FAILURE, 5)]


def test_the_thresholds_of_the_same_failure_are_the_config_s() -> None:
    calls = prose_loop(3)
    calls.call("exec", {"command": "x"})
    config = only("sameFailure", warningThreshold=2, criticalThreshold=3)
    assert run(calls.trace, config) == [(3, "warn", FAILURE, 2), (4, "block", FAILURE, 3)]


SAME_WAY, NOTHING = "all failed the same way", "each came back with nothing"


def test_a_critical_sweep_wins_over_a_same_failure_warning() -> None:
    calls = prose_loop(3)
    calls.call("exec", {"command": "x"})
    config = only(
        "sameFailure",
        warningThreshold=3,
        criticalThreshold=4,
        sweepWarningThreshold=2,
        sweepCriticalThreshold=3,
    )
    outputs = outputs_of(calls.trace.events, config)
    # after 2: the sweep's warning; after 3: the same failure warns, the sweep is critical
    assert said(calls.trace, outputs) == [(3, "warn", FAILURE, 2), (4, "block", FAILURE, 3)]
    warning, critical = messages(outputs, FAILURE)
    assert NOTHING in warning
    assert critical.startswith(f"CRITICAL: the last 3 tool calls {NOTHING}")


def test_the_same_failure_wins_over_the_sweep_between_equals() -> None:
    calls = prose_loop(3)
    calls.call("exec", {"command": "x"})
    config = only(
        "sameFailure",
        warningThreshold=2,
        criticalThreshold=3,
        sweepWarningThreshold=2,
        sweepCriticalThreshold=3,
    )
    outputs = outputs_of(calls.trace.events, config)
    assert said(calls.trace, outputs) == [(3, "warn", FAILURE, 2), (4, "block", FAILURE, 3)]
    warning, critical = messages(outputs, FAILURE)
    assert SAME_WAY in warning
    assert critical.startswith(f"CRITICAL: the last 3 tool calls {SAME_WAY}")


def test_the_loop_detector_reads_the_preset_globally_and_per_agent() -> None:
    config = parse_config_text(
        """{
          "loopwatch": { "preset": "agents" },
          "agents": { "list": [ { "id": "poller", "loopwatch": { "preset": "openclaw" } } ] }
        }"""
    )

    def actions(detector: LoopDetector) -> list[tuple[str, str | None]]:
        decided: list[tuple[str, str | None]] = []
        for n in range(1, 6):
            decision = detector.before_tool_call("r", "exec", CD)
            decided.append((decision.action, decision.reason))
            if decision.proceed:
                answer = f"/bin/bash: line {n}: cd: fastjson/: No such file or directory"
                detector.after_tool_call("r", "exec", CD, result=answer)
        return decided

    # the streak warns at the 3rd, blocks at the 5th; at the 4th, the same failure's warning
    # (3 failures) comes after the streak's (same level: the earlier rule's, already given)
    assert actions(LoopDetector(config)) == [
        ("allow", None),
        ("allow", None),
        ("warn", STREAK),
        ("allow", None),
        ("block", STREAK),
    ]
    assert actions(LoopDetector(config, agent_id="poller")) == [("allow", None)] * 5


def test_the_message_names_the_first_line_of_an_openclaw_shaped_failure() -> None:
    calls = Calls()
    for n in range(1, 6):
        calls.both("exec", {"command": f"{PROSE[n]} again {n}"}, text_result(not_found(n)))
    calls.call("exec", {"command": "x"})
    outputs = outputs_of(calls.trace.events, only("sameFailure"))
    assert said(calls.trace, outputs)[-1] == (6, "block", FAILURE, 5)
    assert f'("{not_found(5)}")' in messages(outputs, FAILURE)[-1]


def test_a_marker_on_the_second_line_of_an_openclaw_shaped_result_is_a_failure() -> None:
    calls = Calls()
    for n in range(1, 4):
        output = f"Compiling module {n}\nerror: cannot find symbol\n  location: class Main\n1 warning"
        calls.both("exec", {"command": f"javac Main{n}.java"}, text_result(output))
    calls.call("exec", {"command": "javac Main.java"})
    assert run(calls.trace, only("sameFailure")) == [(4, "warn", FAILURE, 3)]


def test_the_same_marker_on_the_second_line_of_a_plain_text_result_is_a_failure() -> None:
    """The test above, without the content blocks: what docs/real-loops.md says happens."""
    calls = Calls()
    for n in range(1, 4):
        output = f"Compiling module {n}\nerror: cannot find symbol\n  location: class Main\n1 warning"
        calls.both("exec", {"command": f"javac Main{n}.java"}, output)
    calls.call("exec", {"command": "javac Main.java"})
    assert run(calls.trace, only("sameFailure")) == [(4, "warn", FAILURE, 3)]


# == the snapshot ================================================================================


def streak_trace() -> Calls:
    return cd_loop(4, 2)


def cycle_trace() -> Calls:
    calls = going_round([OPEN, SEARCH_FILE, SEARCH_DIR], 8)
    calls.call(*SEARCH_DIR)
    calls.call(*SEARCH_DIR)
    return calls


def failure_trace() -> Calls:
    calls = Calls()
    eof = "/bin/bash: -c: line {}: unexpected EOF".format
    for n, outcome in enumerate([not_found(1), eof(2), not_found(3), eof(4), not_found(5)], 1):
        calls.both("exec", {"command": f"attempt {n}"}, outcome)
    calls.call("exec", {"command": "attempt 6"})
    calls.call("exec", {"command": "attempt 7"})
    return calls


def sweep_trace() -> Calls:
    calls = sweep(SEARCHED[:8])
    calls.call("search_dir", {"search_term": SEARCHED[8]})
    return calls


CASES = {
    "sameCallStreak": (streak_trace, STREAK),
    "callCycle": (cycle_trace, CYCLE),
    "sameFailure": (failure_trace, FAILURE),
    "sameFailure-sweep": (sweep_trace, FAILURE),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("every_event", [False, True])
def test_each_rule_s_state_survives_the_run_snapshot(case: str, every_event: bool) -> None:
    build, detector = CASES[case]
    config = only(case.split("-")[0])
    events = build().trace.events
    straight = outputs_of(events, config)
    assert any(isinstance(o, Verdict) and o.detector == detector for o in straight)
    assert any(isinstance(o, Verdict) and o.action == "block" for o in straight)
    # restored after every event, or once in the middle of the streak (after the 3rd event)
    again = outputs_of(events, config, (lambda i: True) if every_event else (lambda i: i == 2))
    assert again == straight


def test_the_restored_states_hold_what_the_rules_kept() -> None:
    config = fleet(preset="agents")
    calls = Calls()
    calls.both("exec", {"command": "ls"}, not_found(1))
    calls.both("exec", {"command": "ls"}, not_found(2))
    calls.both("read", {"path": "a"}, 'No matches found for "a"')
    engine = Engine(config)
    for event in calls.trace.events:
        engine.process(event)
    state = RunState.from_bytes(engine.states["run-1"].to_bytes())
    assert state == engine.states["run-1"]
    streak = state.rule_states[STREAK]
    assert isinstance(streak, Streak)
    assert streak.count == 1  # ls, ls, then read a
    recent = state.rule_states[CYCLE]
    assert isinstance(recent, RecentCalls)
    assert list(recent.tools) == ["exec", "exec", "read"]
    failures = state.rule_states[FAILURE]
    assert isinstance(failures, FailureStreaks)
    # two ways of failing: command not found twice, then no matches
    assert (failures.same.count, len(failures.same.classes)) == (3, 2)
    assert (failures.sweep.count, len(failures.sweep.classes)) == (3, 2)
    assert failures.latest == 'No matches found for "a"'


# == with the rules off =========================================================================


def openclaw_loops() -> list[Calls]:
    """Traces on which OpenClaw's own rules speak (so that "the same verdicts" says something)."""
    same = Calls()
    for _ in range(22):
        same.both("read", {"path": "a"}, "same content")
    pong = Calls()
    for n in range(14):
        pong.both(*[OPEN, SEARCH_FILE][n % 2], "the same answer")
    failing = Calls()
    for _ in range(22):
        failing.both("exec", {"command": "javac Main.java"}, error="javac: command not found")
    return [same, pong, failing]


def every_trace() -> list[Calls]:
    cycle5 = going_round([(f"tool_{n}", {"n": n}) for n in range(5)], 15)
    return [
        streak_trace(),
        cycle_trace(),
        failure_trace(),
        sweep_trace(),
        cycle5,
        prose_loop(8),
        *openclaw_loops(),
    ]


RULES_OFF: dict[str, FleetConfig] = {
    "no preset": fleet(),
    "the openclaw preset": fleet(preset="openclaw"),
    "turned off": fleet(
        {
            "sameCallStreak": {"enabled": False, "warningThreshold": 1, "criticalThreshold": 2},
            "callCycle": {"enabled": False, "maxPeriod": 8, "warningThreshold": 1},
            "sameFailure": {"enabled": False, "warningThreshold": 1, "sweepWarningThreshold": 1},
        }
    ),
    "turned off over the preset": fleet(
        {
            "sameCallStreak": {"enabled": False},
            "callCycle": {"enabled": False},
            "sameFailure": {"enabled": False},
        },
        preset="agents",
    ),
}


@pytest.mark.parametrize("name", list(RULES_OFF))
def test_with_the_rules_off_the_verdicts_are_exactly_the_default_config_s(name: str) -> None:
    config = RULES_OFF[name]
    spoke = 0
    for calls in every_trace():
        events = calls.trace.events
        default = outputs_of(events, FleetConfig.enabled_default())
        assert outputs_of(events, config) == default
        assert not {o.detector for o in default} & set(OWN)
        spoke += bool(default)
        engine = Engine(config)
        for event in events:
            engine.process(event)
        assert not set(engine.states["run-1"].rule_states) & set(OWN)
    assert spoke == len(openclaw_loops())  # OpenClaw's rules spoke on their loops, only there


def test_the_preset_stops_openclaw_s_loops_earlier_than_openclaw_s_rules() -> None:
    """The same traces with the preset on: the three rules speak first, OpenClaw's later."""
    for calls in openclaw_loops():
        preset = run(calls.trace, fleet(preset="agents"))
        default = run(calls.trace, FleetConfig.enabled_default())
        assert preset[0][2] in OWN
        assert preset[0][0] < default[0][0]


# == outcome_signature ==========================================================================


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # an exit status other than 0 is a failure, whatever the text says
        ("<returncode>1</returncode>\nall good", True),
        ("<returncode>-9</returncode>", True),
        ("Process finished with exit code 2", True),
        ("exit status 1\nok", True),
        ("Exit Code: 3", True),
        # an exit status of 0 is none, even with a marker in the text
        ("<returncode>0</returncode>\nerror: only a warning really", False),
        ("error: printed on stderr\nexit code 0", False),
        ("EXIT STATUS 0\nFAILED", False),
        # markers in the first two non-blank lines or the last one
        ("Error: no such option --x", True),
        ("compiling\nfatal: not a git repository", True),
        ("\n\n  \nstarting\n\n   bash: foo: command not found\nmore\nlines", True),
        ("a\nb\nc\nd\nPermission denied", True),
        ("Traceback (most recent call last):\n  File x", True),
        ("usage: git [--version]", True),
        ("No matches found for x", True),
        ("ls: cannot access 'x': No such file or directory", True),
        ("java.io.IOException: stream closed", True),
        ("ValueError: bad", True),
        # a marker elsewhere is not read
        ("line one\nline two\nerror: in the middle\nline four", False),
        ("a\nb\nc\nTraceback\nd", False),
        # whole words: a file named after an exception, a word that holds one
        ("src/IOException.java\nsrc/Main.java", False),
        ("terrors of the deep\nall fine", False),
        ("ErrorProne.jar\nok", False),
        # nothing to read
        ("", False),
        ("  \n\n\t\n", False),
        ("all 12 tests passed", False),
    ],
)
def test_unproductive(text: str, expected: bool) -> None:
    assert unproductive(text, False) is expected


@pytest.mark.parametrize("text", ["", "ok", "<returncode>0</returncode>", "all passed"])
def test_a_marked_failure_is_unproductive_whatever_its_text(text: str) -> None:
    assert unproductive(text, True) is True


def test_signature_keeps_what_follows_the_last_colon_space_of_each_line() -> None:
    assert signature("/bin/bash: line 7: DISCUSSION: command not found", "", False) == "command not found"
    assert signature("/bin/sh: 1: killall: not found", "", False) == "not found"
    # no ": " at all: the line as it is (lower-cased); "a:b" is no separator
    assert signature("Segmentation fault (core dumped)", "", False) == "segmentation fault (core dumped)"
    assert signature("key:value", "", False) == "key:value"


def test_signature_removes_line_counters_and_other_numbers() -> None:
    first = signature("/bin/bash: line 7: foo: command not found", "", False)
    other = signature("/bin/bash: line 12: bar: command not found", "", False)
    assert first == other
    assert signature("killed process 4123 after 30s, 2048 KB", "", False) == "killed process 0 after 0s, 0 kb"


def test_signature_removes_uuids_and_long_hex_runs() -> None:
    assert (
        signature("Run 123E4567-E89B-12D3-A456-426614174000 failed", "", False)
        == signature("run 00000000-1111-2222-3333-abcdefabcdef failed", "", False)
        == "run x failed"
    )
    assert signature("commit deadbeef12 missing", "", False) == "commit x missing"
    assert signature("object 0a1b2c3d not found", "", False) == "object x not found"
    # a run under 8 hex characters is not one: its digits are numbers
    assert signature("commit abc1234 missing", "", False) == "commit abc0 missing"
    assert signature("cafe closed", "", False) == "cafe closed"


def test_signature_keeps_the_first_distinct_lines_in_order() -> None:
    assert signature("B\n\n  a \nb\nA\n\nc", "", False) == "b\na\nc"
    # distinct lines without digits (a digit run would be normalised): "problem ab", "problem ac", ...
    lines = [f"problem {chr(97 + n // 26)}{chr(97 + n % 26)}" for n in range(SIGNATURE_LINES + 3)]
    kept = signature("\n".join(lines), "", False).split("\n")
    assert kept == lines[:SIGNATURE_LINES]
    # repeats of one line are one line, and do not use up the lines kept
    repeated = "\n".join(["same"] * 100 + lines)
    assert signature(repeated, "", False).split("\n") == ["same", *lines[: SIGNATURE_LINES - 1]]


@pytest.mark.parametrize(
    "template",
    [
        'No matches found for "{}" in /repo',
        "grep: pattern '{}' not found",
        "ls: cannot access `{}' (No such file)",
        "nothing like `{}` here",
    ],
)
def test_signature_empties_quoted_echoes_of_the_arguments_only_when_echo_free(template: str) -> None:
    first, second = template.format("build env"), template.format("Project Setup")
    args_first, args_second = '{"query":"build env"}', '{"query":"project setup"}'
    echo_free = signature(first, args_first, True), signature(second, args_second, True)
    assert echo_free[0] == echo_free[1]
    assert "build env" not in echo_free[0]
    assert "project setup" not in echo_free[1]
    # not echo-free: the quoted text stays
    as_said = signature(first, args_first, False), signature(second, args_second, False)
    assert as_said[0] != as_said[1]
    assert "build env" in as_said[0]
    # echo-free, but the quoted text is not in the arguments: it stays too
    elsewhere = signature(first, '{"query":"setup"}', True), signature(second, '{"query":"build"}', True)
    assert elsewhere[0] != elsewhere[1]
    assert "build env" in elsewhere[0]
    assert "project setup" in elsewhere[1]


@pytest.mark.parametrize("template", ["grep: can't open '{}'", "Didn't find '{}' anywhere"])
def test_signature_empties_an_echo_after_an_apostrophe(template: str) -> None:
    first = signature(template.format("alpha"), '{"pattern":"alpha"}', True)
    second = signature(template.format("beta"), '{"pattern":"beta"}', True)
    assert "alpha" not in first
    assert first == second


@pytest.mark.parametrize(
    "text",
    [
        "Tests run: 3, Failures: 0, Errors: 0, Skipped: 0",
        "Found 0 errors. Watching for file changes.",
    ],
)
def test_a_report_of_no_errors_is_no_failure(text: str) -> None:
    assert unproductive(text, False) is False


def test_preview_is_the_first_non_blank_line_cut_to_its_limit() -> None:
    assert preview("\n\n   First line: Error  \nsecond") == "First line: Error"
    assert preview("") == ""
    assert preview(" \n\t\n") == ""
    long = "x" * 100
    assert preview(long) == "x" * 79 + "…"
    assert len(preview(long, 20)) == 20
    assert preview("y" * 80) == "y" * 80


def test_outcome_text_is_a_string_as_it_is_else_its_string_leaves_in_order() -> None:
    assert outcome_text("as it is\nsecond") == "as it is\nsecond"
    assert outcome_text(None) == ""
    assert outcome_text({"a": "x", "b": ["y", {"c": "z", "n": 5, "t": True}], "d": None}) == "x\ny\nz"
    assert outcome_text(["one", ["two"], 3]) == "one\ntwo"
    assert outcome_text(12) == ""
    assert outcome_text("a" * (TEXT_CHARS + 10)) == "a" * TEXT_CHARS
    assert outcome_text(["b" * TEXT_CHARS, "c" * 10]) == "b" * TEXT_CHARS
