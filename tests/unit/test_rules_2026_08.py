"""Revision 2026-08: outcome classification, exec failure identity, veto records, churn liveness."""

from dataclasses import replace
from typing import Any

import pytest
from msgspec import UNSET

from loopwatch.config import DetectorSettings, FleetConfig
from loopwatch.detectors.decoding import decode_event
from loopwatch.detectors.engine import Engine
from loopwatch.detectors.events import Abort, InvalidEvent, Output, ToolCall, ToolResult, Verdict
from loopwatch.detectors.exec_failures import failure_shape
from loopwatch.detectors.hashing import Digester
from loopwatch.detectors.outcomes import MISSING, TERMINAL_EXEC_FAILURE, VETO, ErrorMessage, hash_outcome
from loopwatch.detectors.rules.argument_churn_stale import ChurnLease
from loopwatch.detectors.stable_json import from_python
from loopwatch.detectors.state import RunState
from tests.helpers import Trace, text_result, with_revision

SHA = Digester("sha256")


def classify(tool: str, result: Any = MISSING, error: Any = MISSING, newest: bool = True) -> tuple[Any, ...]:
    value = from_python(result) if result is not MISSING else MISSING
    return hash_outcome(tool, {}, value, error, SHA, revision="2026-08" if newest else "2026-05")


def failed(output: str, exit_code: Any = 1, **details: Any) -> dict[str, Any]:
    return text_result("", status="failed", exitCode=exit_code, aggregated=output, **details)


# -- failure identity ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("at 2026-08-30T12:00:01.123Z: refused", "at 2026-08-31 07:59:59+02:00: refused"),  # ISO date-time
        ("12:00:01 refused", "9:41:07.5 refused"),  # clock time
        ("attempt 3 refused", "Attempt #12 refused"),  # attempt counter
        ("retry=1 refused", "RETRY: 7 refused"),  # retry counter
        ("refused after 350ms", "refused after 1.5 s"),  # duration
        ("refused after 2 minutes", "refused after 3 hours"),  # duration, words
        ("worker pid 4411 refused", "worker PID=9 refused"),  # process id
        ("ppid: 1 refused", "ppid 777 refused"),  # parent process id
    ],
)
def test_volatile_diagnostics_do_not_change_the_identity(first: str, second: str) -> None:
    assert failure_shape(first) == failure_shape(second)
    one, two = classify("exec", failed(first)), classify("exec", failed(second))
    assert one[0] != two[0]  # the result hashes still differ
    assert one[2] == two[2] == TERMINAL_EXEC_FAILURE
    assert one[4] == two[4]


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("backup of 2026-08-30 failed", "backup of 2026-08-31 failed"),  # a calendar date
        ("connect: errno 111", "connect: errno 113"),
        ("HTTP 502 from upstream", "HTTP 503 from upstream"),
        ("bind 127.0.0.1:8080 refused", "bind 127.0.0.1:8081 refused"),  # a port
        ("3 tests failed", "4 tests failed"),  # a count
        ("try 1 failed", "try 2 failed"),  # not an attempt/retry counter
        ("thread 5 panicked", "thread 6 panicked"),  # not a process id
        ("rapid 3 failed", "rapid 4 failed"),  # "pid" inside a word is not a pid
    ],
)
def test_meaningful_differences_keep_failures_apart(first: str, second: str) -> None:
    assert failure_shape(first) != failure_shape(second)
    assert classify("exec", failed(first))[4] != classify("exec", failed(second))[4]


def test_exit_code_and_status_are_part_of_the_identity() -> None:
    base = classify("exec", failed("boom"))[4]
    assert classify("exec", failed("boom", exit_code=2))[4] != base
    completed = text_result("", status="completed", exitCode=1, aggregated="boom")
    assert classify("exec", completed)[4] != base


@pytest.mark.parametrize(
    "result",
    [
        text_result("ok", status="completed", exitCode=0),
        failed("boom", timedOut=True),
        failed("boom", exit_code=None),
        failed("boom", exit_code="1"),
        failed("", exit_code=1),
        failed("(Command exited with code 1)", exit_code=1),
        failed("  (Command exited with code 2.5)  ", exit_code=2.5),
        text_result("still going", status="running", tail="..."),
    ],
)
def test_other_exec_outcomes_are_not_terminal_failures(result: dict[str, Any]) -> None:
    assert classify("exec", result)[2:] == (None, False, None)


def test_output_falls_back_to_the_text_and_a_footer_with_other_code_is_output() -> None:
    from_text = text_result("fatal: not a git repository", status="failed", exitCode=128)
    assert classify("exec", from_text)[2] == TERMINAL_EXEC_FAILURE
    other_footer = failed("(Command exited with code 2)", exit_code=1)
    assert classify("exec", other_footer)[2] == TERMINAL_EXEC_FAILURE


# -- outcome classification ------------------------------------------------------------------


def test_errors_are_flagged_no_progress_only_under_2026_08() -> None:
    assert classify("read", error=ErrorMessage("ENOENT"))[3] is True
    assert classify("read", error=ErrorMessage("ENOENT"), newest=False)[3] is False


def test_a_noop_write_ignores_its_echoed_path() -> None:
    one = classify("write", text_result("a.md: no changes", changed=False, bytes=1))
    two = classify("write", text_result("b.md: no changes", changed=False, bytes=2))
    assert one == two
    assert one[3] is True
    old = classify("write", text_result("a.md: no changes", changed=False), newest=False)
    assert old[0] != one[0]
    assert old[3] is False
    assert classify("write", text_result("written", changed=True))[3] is False


def test_the_loop_veto_is_a_record_without_hash() -> None:
    veto = text_result("blocked", status="blocked", deniedReason="tool-loop")
    assert classify("read", veto) == (None, None, VETO, False, None)
    assert classify("read", veto, newest=False) == (None, None, None, False, None)
    plugin = text_result("blocked", status="blocked", deniedReason="plugin")
    assert classify("read", plugin)[0] is not None


# -- digest-only wire fields -----------------------------------------------------------------


def digested(**fields: Any) -> bytes:
    import json

    base = {"type": "tool_result", "event_id": "e", "run_id": "r", "tool": "exec", "args_digest": "d"}
    return json.dumps({**base, **fields}).encode()


def test_digest_only_outcome_fields_are_validated() -> None:
    event = decode_event(
        digested(result_digest="h", outcome_kind="terminal-exec-failure", failure_digest="f")
    )
    assert isinstance(event, ToolResult)
    assert event.failure_digest == "f"
    decode_event(digested(result_digest=None, outcome_kind="tool-loop-veto"))
    decode_event(digested(result_digest="h", no_progress=True))
    for fields, where in (
        ({"result": {}, "no_progress": True}, "only with result_digest"),
        ({"result_digest": "h", "outcome_kind": "tool-loop-veto"}, "must be null"),
        ({"result_digest": "h", "outcome_kind": "terminal-exec-failure"}, "failure_digest"),
        ({"result_digest": "h", "failure_digest": "f"}, "failure_digest"),
        (
            {"result_digest": None, "outcome_kind": "terminal-exec-failure", "failure_digest": "f"},
            "result_digest",
        ),
        ({"result_digest": "h", "outcome_kind": "sideways"}, "outcome_kind"),
    ):
        with pytest.raises(InvalidEvent, match=where):
            decode_event(digested(**fields))


def test_digest_only_events_give_the_verdicts_of_full_events() -> None:
    from loopwatch.detectors.digest_only import digest_only
    from loopwatch.detectors.events import encode_event

    trace = Trace()
    for n in range(12):
        trace.both("write", {"path": ("a", "b")[(n // 2) % 2]}, text_result("no changes", changed=False))
    for n in range(25):
        command = f"make target{n}"
        trace.both("exec", {"command": command}, failed(f"{n % 60:02d}:00:01 build failed (pid {n})"))
    trace.both("read", {"path": "x"}, text_result("blocked", status="blocked", deniedReason="tool-loop"))
    full = run(trace)
    settings = DetectorSettings()
    digested = [
        decode_event(encode_event(digest_only(e, settings))) if isinstance(e, ToolResult | ToolCall) else e
        for e in trace.events
    ]
    assert all(getattr(e, "params", None) is UNSET for e in digested)
    assert run(Trace.of(digested)) == full
    assert {o.detector for o in full if isinstance(o, Verdict)} >= {"argument_churn", "generic_repeat"}


# -- run-level behaviour ---------------------------------------------------------------------


def run(trace: Trace, config: FleetConfig | None = None) -> list[Output]:
    engine = Engine(config or FleetConfig.enabled_default())
    return [out for event in trace.events for out in engine.process(event)]


def test_changing_exec_commands_failing_alike_are_blocked_only_under_2026_08() -> None:
    trace = Trace()
    for n in range(21):
        trace.both("exec", {"command": f"./build.sh --try {n}"}, failed(f"build failed after {n}s"))
    new = [o for o in run(trace) if isinstance(o, Verdict)]
    assert [(o.level, o.detector, o.count) for o in new] == [("critical", "generic_repeat", 20)]
    assert run(trace, with_revision("2026-05")) == []


def cycling_writes(trace: Trace, start_ms: int, calls: int, step_ms: int = 10_000) -> None:
    for n in range(calls):
        path = ("a.md", "b.md")[n % 2 if n < 4 else (n // 2) % 2]
        params = {"path": path, "content": "same"}
        ts = start_ms + n * step_ms
        call_id = f"w{start_ms}-{n}"
        trace.call("write", params, call_id, ts)
        trace.result(
            "write", params, text_result(f"{path}: no changes", changed=False), None, call_id, ts + 1
        )


def stale_config(limit_s: int) -> FleetConfig:
    return replace(FleetConfig.enabled_default(), settings=DetectorSettings(churn_stale_after_s=limit_s))


def test_churn_warns_with_the_liveness_signal_and_a_stale_churn_aborts_once() -> None:
    trace = Trace()
    cycling_writes(trace, 0, 60)
    outputs = run(trace, stale_config(300))
    churn = [o for o in outputs if isinstance(o, Verdict) and o.detector == "argument_churn"]
    assert churn
    assert all(o.liveness_signal == "argument_churn" and o.action == "warn" for o in churn)
    aborts = [o for o in outputs if isinstance(o, Abort)]
    assert [a.reason for a in aborts] == ["argument_churn_stale"]
    first_churn_ts = churn[0].ts
    assert first_churn_ts is not None
    trigger = next(e for e in trace.events if e.event_id == aborts[0].trigger_event_id)
    assert trigger.ts is not None
    assert trigger.ts - first_churn_ts >= 300_000
    assert trigger.ts - first_churn_ts < 300_000 + 10_000  # the first event past the limit
    assert "300 s" in aborts[0].message


def test_stale_churn_abort_is_off_at_zero_and_under_2026_05() -> None:
    trace = Trace()
    cycling_writes(trace, 0, 60)
    assert not any(isinstance(o, Abort) for o in run(trace, stale_config(0)))
    old = with_revision("2026-05", stale_config(300))
    assert not any(isinstance(o, Abort) for o in run(trace, old))


def test_progress_ends_the_lease() -> None:
    trace = Trace()
    cycling_writes(trace, 0, 20)  # churn starts, the lease runs from its first warning
    trace.both("write", {"path": "a.md", "content": "new"}, text_result("written", changed=True))
    cycling_writes(trace, 200_000, 20)  # churn again: a new lease from here
    outputs = run(trace, stale_config(300))
    assert not any(isinstance(o, Abort) for o in outputs)  # 390 s of events, never 300 s on one lease


def test_the_lease_survives_the_state_bytes() -> None:
    trace = Trace()
    cycling_writes(trace, 0, 20)
    engine = Engine(stale_config(300))
    for event in trace.events:
        engine.process(event)
    state = engine.states["run-1"]
    lease = state.rule_states["argument_churn_stale"]
    assert isinstance(lease, ChurnLease)
    assert lease.since is not None
    again = RunState.from_bytes(state.to_bytes())
    assert again == state
    loaded = again.rule_states["argument_churn_stale"]
    assert isinstance(loaded, ChurnLease)
    assert loaded.since == lease.since
    assert [(r.kind, r.no_progress) for r in again.history] == [
        (r.kind, r.no_progress) for r in state.history
    ]


def test_a_veto_record_survives_the_state_bytes() -> None:
    trace = Trace()
    for _ in range(21):
        trace.both("read", {"path": "/same"}, text_result("same"))
    engine = Engine(FleetConfig.enabled_default())
    for event in trace.events:
        engine.process(event)
    state = engine.states["run-1"]
    assert any(r.kind == VETO for r in state.history)
    assert RunState.from_bytes(state.to_bytes()) == state
