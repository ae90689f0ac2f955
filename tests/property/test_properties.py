import json
import random
from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from loopwatch.config import FleetConfig, resolve
from loopwatch.detectors.detection import detect
from loopwatch.detectors.engine import Engine
from loopwatch.detectors.events import Event, Output, Verdict
from loopwatch.detectors.hashing import Digester
from loopwatch.detectors.outcomes import MISSING, ErrorMessage, hash_outcome, is_known_poll
from loopwatch.detectors.stable_json import WIRE_DECODER, canonical_bytes, from_python, stable_stringify
from loopwatch.detectors.state import RunState
from loopwatch.detectors.step import Prepared, record_outcome
from tests.helpers import Trace, text_result, with_revision
from tests.property.reference_model import ReferenceHistory, reference_detect
from tests.property.strategies import PARAMS, TOOLS, focused_steps, json_values, outcome_of, steps

SHA = Digester("sha256")


def build(run_id: str, plan: list[tuple[str, int, int, int]]) -> Trace:
    trace = Trace(run_id)
    for n, (kind, t, p, o) in enumerate(plan):
        tool, params = TOOLS[t], PARAMS[p]
        result, error = outcome_of(o)
        call_id = f"c{n}"
        if kind in ("call", "both"):
            trace.call(tool, params, call_id)
        if kind in ("outcome", "both"):
            trace.result(tool, params, result, error, call_id if kind == "both" else None)
    return trace


def outputs_of(events: list[Event], config: FleetConfig) -> list[Output]:
    engine = Engine(config)
    return [out for event in events for out in engine.process(event)]


def small_config(history: int, warning: int, critical: int, glob: int) -> FleetConfig:
    block = {
        "enabled": True,
        "historySize": history,
        "warningThreshold": warning,
        "criticalThreshold": critical,
        "globalCircuitBreakerThreshold": glob,
        "unknownToolThreshold": warning,
    }
    return FleetConfig(global_block=block)


configs = st.builds(
    small_config, st.integers(1, 12), st.integers(1, 5), st.integers(1, 8), st.integers(1, 12)
)


@given(json_values)
def test_fast_canonical_bytes_equal_the_reference(value: Any) -> None:
    wire = WIRE_DECODER.decode(json.dumps(value).encode())
    assert canonical_bytes(wire) == stable_stringify(wire).encode()
    assert canonical_bytes(from_python(value)) == canonical_bytes(wire)


@given(st.dictionaries(st.text(max_size=5), json_values, max_size=6), st.randoms())
def test_args_hash_ignores_key_order(params: dict[str, Any], rnd: random.Random) -> None:
    items = list(params.items())
    rnd.shuffle(items)
    shuffled = dict(items)
    assert SHA.args_hash("t", from_python(params)) == SHA.args_hash("t", from_python(shuffled))


@given(steps | focused_steps, st.integers(1, 30), st.integers(1, 8), st.integers(1, 30), st.booleans())
@settings(max_examples=600)
def test_incremental_history_matches_a_rescanning_model(
    plan: list[tuple[str, int, int, int]], limit: int, warning: int, critical: int, newest: bool
) -> None:
    """Every detection and every history bound agree with a literal model of the spec.

    Both revisions: 2026-05 (``newest`` false) is the model of the rules as they were before
    2026-08, so random traffic gets exactly the verdicts it got before the new rules existed.
    """
    cfg = resolve(
        {
            "enabled": True,
            "historySize": limit,
            "warningThreshold": warning,
            "criticalThreshold": critical,
            "unknownToolThreshold": warning,
        },
        newest,
    )
    state = RunState("r")
    model = ReferenceHistory(cfg.history_size)
    for n, (kind, t, p, o) in enumerate(plan):
        tool, params = TOOLS[t], from_python(PARAMS[p])
        h = SHA.args_hash(tool, params)
        poll = is_known_poll(tool, params)
        got = detect(state.history, tool, h, poll, cfg)
        want = reference_detect(model.records, tool, h, poll, cfg)
        assert (None if got is None else (got.level, got.detector, got.count, got.liveness_signal)) == want
        call_id = f"c{n}" if kind != "outcome" else None
        if kind in ("call", "both"):
            state.history.append(tool, h, call_id, None, None, None, cfg.history_size)
            model.record_call(tool, h, call_id)
        if kind in ("outcome", "both"):
            result, error = outcome_of(o)
            outcome = hash_outcome(
                tool,
                params,
                from_python(result) if error is None else MISSING,
                ErrorMessage(error) if error else MISSING,
                SHA,
                revision="2026-08" if newest else "2026-05",
            )
            if not newest:
                assert outcome[2:] == (None, False, None)
            record_outcome(state, tool, call_id, None, Prepared.outcome(h, outcome), cfg)
            model.record_outcome(tool, h, call_id, outcome)
        assert len(state.history) <= cfg.history_size
        assert [(r.args_hash, r.result_hash, r.kind, r.no_progress) for r in state.history] == [
            (r.args_hash, r.result_hash, r.kind, r.no_progress) for r in model.records
        ]


@given(steps, configs)
def test_same_events_same_verdicts(plan: list[tuple[str, int, int, int]], config: FleetConfig) -> None:
    events = build("r", plan).events
    assert outputs_of(events, config) == outputs_of(events, config)


@given(st.lists(steps, min_size=2, max_size=4), configs, st.randoms())
@settings(max_examples=100)
def test_interleaving_runs_changes_nothing_per_run(
    plans: list[list[tuple[str, int, int, int]]], config: FleetConfig, rnd: random.Random
) -> None:
    traces = [build(f"run-{i}", plan) for i, plan in enumerate(plans)]
    alone = {t.run_id: outputs_of(t.events, config) for t in traces}
    queues = [list(t.events) for t in traces]
    mixed: list[Event] = []
    while any(queues):
        queue = rnd.choice([q for q in queues if q])
        mixed.append(queue.pop(0))
    together = outputs_of(mixed, config)
    for run_id, expected in alone.items():
        assert [o for o in together if o.run_id == run_id] == expected


def first_block(outputs: list[Output]) -> int | None:
    blocks = [o for o in outputs if isinstance(o, Verdict) and o.action == "block"]
    return int(blocks[0].trigger_event_id.rsplit("e", 1)[1]) if blocks else None


@given(steps, st.integers(1, 12), st.integers(1, 5), st.integers(1, 8), st.integers(0, 5), st.integers(0, 5))
def test_raising_block_thresholds_never_blocks_earlier(
    plan: list[tuple[str, int, int, int]], history: int, warning: int, critical: int, up_c: int, up_g: int
) -> None:
    events = build("r", plan).events
    base = first_block(outputs_of(events, small_config(history, warning, critical, critical + 1)))
    raised = first_block(
        outputs_of(events, small_config(history, warning, critical + up_c, critical + 1 + up_c + up_g))
    )
    if base is None:
        assert raised is None
    elif raised is not None:
        assert raised >= base


# A change is only visible once a signature has two outcomes: a window of 3+ records and a
# critical threshold of 4+ (a ping-pong tail of 3) guarantee that before any critical.
wide_configs = st.builds(
    small_config, st.integers(3, 12), st.integers(1, 5), st.integers(4, 8), st.integers(1, 12)
)


@given(st.integers(1, 60), wide_configs)
def test_changing_outcomes_never_give_a_no_progress_critical(calls: int, config: FleetConfig) -> None:
    trace = Trace("r")
    for n in range(calls):
        tool = ("read", "process")[n % 2]
        params = {"path": "x"} if tool == "read" else {"action": "poll", "sessionId": "s"}
        trace.both(tool, params, {"content": [{"type": "text", "text": f"line {n}"}]})
    criticals = [
        o for o in outputs_of(trace.events, config) if isinstance(o, Verdict) and o.level == "critical"
    ]
    assert not [
        o
        for o in criticals
        if o.detector in ("generic_repeat", "known_poll_no_progress", "global_circuit_breaker", "ping_pong")
    ]


@given(steps, configs)
def test_state_bytes_round_trip(plan: list[tuple[str, int, int, int]], config: FleetConfig) -> None:
    trace = build("r", plan)
    trace.compaction()
    engine = Engine(config)
    for event in trace.events:
        engine.process(event)
    for state in engine.states.values():
        assert RunState.from_bytes(state.to_bytes()) == state


@given(steps, st.integers(1, 12))
def test_history_never_exceeds_history_size(plan: list[tuple[str, int, int, int]], size: int) -> None:
    config = replace(FleetConfig(global_block={"enabled": True, "historySize": size}))
    engine = Engine(config)
    for event in build("r", plan).events:
        engine.process(event)
        assert all(len(s.history) <= size for s in engine.states.values())


@given(
    st.lists(
        st.tuples(st.sampled_from(["exec", "write", "read"]), st.integers(0, 2), st.booleans()), max_size=90
    ),
    wide_configs,
)
def test_changing_outcomes_never_give_churn_or_an_exec_tail_critical(
    plan: list[tuple[str, int, bool]], config: FleetConfig
) -> None:
    """2026-08: every outcome differs from all before it, so nothing is stuck on an outcome."""
    trace = Trace("r")
    for n, (tool, variant, as_error) in enumerate(plan):
        params = {"command": f"make t{variant}"} if tool == "exec" else {"path": f"f{variant}"}
        if as_error:
            trace.both(tool, params, error=f"E{n}: refused")
        elif tool == "exec":
            trace.both(
                tool, params, text_result("", status="failed", exitCode=1, aggregated=f"E{n}: build failed")
            )
        elif tool == "write":
            trace.both(tool, params, text_result(f"wrote revision {n}", changed=True))
        else:
            trace.both(tool, params, text_result(f"line {n}"))
    verdicts = [
        o for o in outputs_of(trace.events, with_revision("2026-08", config)) if isinstance(o, Verdict)
    ]
    assert not [o for o in verdicts if o.detector == "argument_churn" or o.liveness_signal is not None]
    assert not [o for o in verdicts if o.tool == "exec" and o.level == "critical"]


volatile_text = st.lists(
    st.sampled_from(
        [
            *"0123456789:-.tTzZ+ #=_",
            "\u00a0",
            "\n",
            "attempt",
            "Retry",
            "pid",
            "ppid",
            "ms",
            "s",
            "seconds",
            "x",
            "é",
        ]
    ),
    max_size=60,
).map("".join)


@given(st.tuples(volatile_text, st.integers(0, 200), st.booleans()))
@settings(max_examples=2000)
def test_failure_shape_equals_the_five_plain_substitutions(drawn: tuple[str, int, bool]) -> None:
    """Digit-sparse texts (padded with words) take the digit-position path, dense ones the plain."""
    core, padding, before = drawn
    text = "word " * padding + core if before else core + " word" * padding
    from loopwatch.detectors.exec_failures import VOLATILE_PATTERNS, failure_shape

    expected = text
    for pattern in VOLATILE_PATTERNS:
        expected = pattern.sub("#", expected)
    assert failure_shape(text) == expected


def with_usage(events: list[Event], rnd: random.Random) -> list[Event]:
    import msgspec

    from loopwatch.detectors.events import ToolCall, Usage

    return [
        msgspec.structs.replace(e, usage=Usage(rnd.randint(0, 5000), rnd.randint(0, 500), rnd.random()))
        if isinstance(e, ToolCall) and rnd.random() < 0.7
        else e
        for e in events
    ]


@given(steps, configs, st.randoms())
def test_with_the_own_rules_off_usage_and_the_section_change_no_verdict(
    plan: list[tuple[str, int, int, int]], config: FleetConfig, rnd: random.Random
) -> None:
    events = build("r", plan).events
    off = {
        "runNoProgress": {"enabled": False},
        "editUndo": {"enabled": False, "criticalThreshold": 9},
        "loopBudget": {"usd": None},
    }
    explicit = replace(config, global_rules=off)
    today = outputs_of(events, config)
    assert outputs_of(with_usage(events, rnd), config) == today
    assert outputs_of(with_usage(events, rnd), explicit) == today


@given(
    st.lists(st.tuples(st.sampled_from(["read", "exec", "write", "grep"]), st.integers(0, 3)), max_size=120),
    st.integers(1, 25),
    st.integers(2, 40),
)
def test_changing_outcomes_never_give_run_no_progress(
    plan: list[tuple[str, int]], warning: int, window: int
) -> None:
    rules = {
        "runNoProgress": {"enabled": True, "warningThreshold": min(warning, window - 1), "windowSize": window}
    }
    config = replace(FleetConfig.enabled_default(), global_rules=rules)
    trace = Trace("r")
    for n, (tool, variant) in enumerate(plan):
        trace.both(tool, {"path": f"f{variant}"}, text_result(f"output {n}"))
    assert not [
        o for o in outputs_of(trace.events, config) if getattr(o, "detector", None) == "run_no_progress"
    ]
