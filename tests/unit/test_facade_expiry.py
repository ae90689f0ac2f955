"""The in-process detector forgets a run that sends nothing for ``state_ttl_s`` (its abort
too), as the worker and the gateway do: memory stays bounded when ``end_run`` never comes."""

from __future__ import annotations

from collections import OrderedDict

import pytest

from loopwatch import LoopDetector
from loopwatch.detectors.facade import STATE_TTL_S, ProposedCall

MISSING = {"path": "/missing"}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _abort(detector: LoopDetector, run_id: str) -> None:
    for _ in range(40):
        decision = detector.before_tool_call(run_id, "read", MISSING)
        if decision.action == "abort":
            return
        if decision.proceed:
            detector.after_tool_call(run_id, "read", MISSING, error="ENOENT")
    raise AssertionError("the run never aborted")


def test_a_run_idle_past_the_ttl_is_forgotten_with_its_abort() -> None:
    clock = Clock()
    detector = LoopDetector(state_ttl_s=60, clock=clock)
    _abort(detector, "stuck")
    assert detector.before_tool_call("stuck", "write", {"path": "x"}).sticky
    clock.now += 59
    assert detector.before_tool_call("stuck", "write", {"path": "x"}).action == "abort"  # (it sent: alive)
    clock.now += 60.5
    assert detector.before_tool_call("stuck", "write", {"path": "x"}).action == "allow"
    assert detector.expired == 1


def test_only_the_idle_runs_go_oldest_first() -> None:
    clock = Clock()
    detector = LoopDetector(state_ttl_s=10, clock=clock)
    for index in range(5):
        detector.before_tool_call(f"run-{index}", "read", {"path": str(index)})
        clock.now += 3
    # run-0 sent at 1000, run-4 at 1012; now 1015: run-0 and run-1 are past 10 s
    detector.before_tool_calls("run-4", [ProposedCall("read", {"path": "again"})])
    assert sorted(detector._engine.states) == ["run-2", "run-3", "run-4"]
    assert detector.expired == 2


def test_an_ended_run_is_not_counted_as_expired() -> None:
    clock = Clock()
    detector = LoopDetector(state_ttl_s=10, clock=clock)
    detector.before_tool_call("done", "read", {"path": "a"})
    detector.end_run("done")
    clock.now += 100
    detector.before_tool_call("other", "read", {"path": "a"})
    assert (detector.expired, sorted(detector._engine.states)) == (0, ["other"])


def test_without_a_ttl_a_run_lives_until_it_ends() -> None:
    clock = Clock()
    detector = LoopDetector(state_ttl_s=None, clock=clock)
    _abort(detector, "stuck")
    clock.now += 10 * STATE_TTL_S
    assert detector.before_tool_call("stuck", "read", {"path": "b"}).sticky
    assert detector.expired == 0


def test_the_default_is_the_worker_s_hour() -> None:
    assert LoopDetector().state_ttl_s == STATE_TTL_S == 3600.0


@pytest.mark.parametrize("bad", [0, -1, True, "60", float("nan"), 10**400])
def test_a_ttl_that_is_no_number_of_seconds_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="state_ttl_s must be a number of seconds above 0"):
        LoopDetector(state_ttl_s=bad)  # type: ignore[arg-type]


def test_an_int_ttl_is_kept_as_float_seconds() -> None:
    assert LoopDetector(state_ttl_s=60).state_ttl_s == 60.0


def test_finding_the_oldest_run_stays_cheap_while_runs_take_turns() -> None:
    """Runs that send in turn move to the end again and again: the order stays that of their
    last events, kept in an ``OrderedDict`` (its oldest entry is found by looking at one; a
    plain dict walked every slot those moves left at its front). Speed itself is for benches."""
    clock = Clock()
    detector = LoopDetector(state_ttl_s=1_000.5, clock=clock)
    for step in range(20_000):
        clock.now = float(step)
        detector.before_tool_call(f"r{step % 1000}", "read", {"path": f"/{step}"})
    engine = detector._engine
    assert detector.expired == 0
    assert len(engine.states) == 1000
    assert type(engine.runs.idle) is OrderedDict
    assert next(iter(engine.runs.idle)) == "r0"  # (r0 sent at 19,000: the oldest of the last round)
    clock.now = 20_000.0  # r0 idle for 1,000 s, r1 for 999 s
    assert engine.expire(clock.now - 1_000.0) == 1
    assert "r0" not in engine.states
    assert "r1" in engine.states
