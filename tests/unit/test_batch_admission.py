"""Batch admission (docs/openclaw-rules.md §7.6): one model turn's calls admitted or refused
together, against a projection of the run's history (:mod:`detectors.batch_admission`).

Expected verdicts come from the single-call core fed the same input, or from the scenario's
arithmetic spelled out in each test (checked against OpenClaw 2026.9.6 by the differential
test ``tests/differential/test_batch_admission_oracle.py``)."""

from __future__ import annotations

import itertools
import json
import random
from collections import Counter
from typing import Any

import pytest

from loopwatch.config import FleetConfig, parse_config_text
from loopwatch.config.settings import DetectorSettings
from loopwatch.detectors import batch_admission
from loopwatch.detectors.batch_admission import SIBLING_MESSAGE, BatchOutcome, admit_batch, batch_problem
from loopwatch.detectors.conformance import run_vector
from loopwatch.detectors.engine import Engine
from loopwatch.detectors.events import Abort, Output, RunEnd, ToolCall, ToolResult, Usage, Verdict
from loopwatch.detectors.facade import LoopDetector, ProposedCall, batch_decision_of, in_words
from loopwatch.detectors.outcomes import VETO
from loopwatch.detectors.rules.base import CallContext, Detection, Rule
from loopwatch.detectors.rules.registry import registered
from loopwatch.detectors.run_engine import FleetHooks
from loopwatch.detectors.state import RunState
from loopwatch.detectors.step import Prepared, prepare_for, record_outcome
from tests.helpers import ROOT

SAME = {"content": [{"type": "text", "text": "same"}]}
RUNNING = {"content": [{"type": "text", "text": "still running"}]}
READ = ("read", {"path": "a.txt"})
LS = ("ls", {"dir": "."})
POLL = ("command_status", {"id": "job-1"})
_ids = itertools.count()


def step_batch(engine: Engine, calls: list[ToolCall], ts: int | None = None) -> BatchOutcome:
    """What the engine's step of one batch did to its calls."""
    outcome = engine.step_batch(calls, ts).batch
    assert outcome is not None
    return outcome


def fleet(revision: str = "2026-08", **settings: Any) -> FleetConfig:
    return FleetConfig({"enabled": True}, {}, DetectorSettings(openclaw_revision=revision, **settings))  # type: ignore[arg-type]


def call(tool_params: tuple[str, Any], call_id: str, run: str = "r1", **fields: Any) -> ToolCall:
    tool, params = tool_params
    return ToolCall(
        event_id=f"e{next(_ids)}", run_id=run, tool=tool, params=params, tool_call_id=call_id, **fields
    )


def result(
    tool_params: tuple[str, Any], call_id: str, value: Any = SAME, run: str = "r1", **fields: Any
) -> ToolResult:
    """The call's outcome: ``value`` returned, or the text of ``ERROR(text)`` raised."""
    tool, params = tool_params
    outcome = {"error": value.text} if isinstance(value, ERROR) else {"result": value}
    return ToolResult(
        event_id=f"e{next(_ids)}",
        run_id=run,
        tool=tool,
        params=params,
        tool_call_id=call_id,
        **outcome,
        **fields,
    )


class ERROR:
    def __init__(self, text: str) -> None:
        self.text = text


def history_of(engine: Engine, tool_params: tuple[str, Any], times: int, value: Any = SAME) -> None:
    """``times`` calls of one tool, each with its outcome, through the single step."""
    for _ in range(times):
        call_id = f"h{next(_ids)}"
        engine.process(call(tool_params, call_id))
        engine.process(result(tool_params, call_id, value))


def tail(engine: Engine, count: int, run: str = "r1") -> list[tuple[str | None, bool, str | None]]:
    """(call id, has a result hash, kind) of the run's newest ``count`` records."""
    records = list(engine.states[run].history.records)[-count:]
    return [(r.tool_call_id, r.result_hash is not None, r.kind) for r in records]


def verdicts(outputs: list[Output]) -> list[tuple[str, str, int]]:
    return [(o.action, o.detector, o.count) for o in outputs if isinstance(o, Verdict)]


# -- refusal ---------------------------------------------------------------------------------


def test_a_critical_refuses_the_whole_batch_and_vetoes_every_call_with_its_action_key() -> None:
    engine = Engine(fleet())
    history_of(engine, READ, 19)
    before = tail(engine, 19)
    batch = [call(READ, "b1"), call(LS, "b2"), call(READ, "b3"), call(READ, "b4"), call(LS, "b5")]
    outcome = step_batch(engine, batch)
    assert outcome.refused_by == 2  # 19 outcomes + the first read, projected as a veto: 20
    assert verdicts(outcome.outputs[2]) == [("block", "generic_repeat", 20)]
    assert outcome.evaluated == [True, True, True, False, False]  # nothing after the trigger
    assert outcome.outputs[3] == outcome.outputs[4] == []
    # the reads (before and after the trigger) leave veto records, in assistant order; ls nothing
    assert tail(engine, 22)[:19] == before
    assert tail(engine, 3) == [("b1", False, VETO), ("b3", False, VETO), ("b4", False, VETO)]
    assert len(engine.states["r1"].history) == 22
    # and they count: the next read is critical again, at 19 outcomes + 3 vetoes
    assert verdicts(engine.process(call(READ, "c1")))[0] == ("block", "generic_repeat", 22)


def test_the_same_calls_one_by_one_would_all_have_run() -> None:
    """The difference batch admission makes (§7.6): singly, the third call sees the first as a
    pending call (no outcome), counts 19 and runs; nothing is refused."""
    engine = Engine(fleet())
    history_of(engine, READ, 19)
    outputs = [engine.process(c) for c in (call(READ, "b1"), call(LS, "b2"), call(READ, "b3"))]
    assert all(action != "block" for out in outputs for action, _, _ in verdicts(out))
    assert tail(engine, 3) == [("b1", False, None), ("b2", False, None), ("b3", False, None)]


def test_revision_2026_05_refuses_the_batch_and_records_none_of_it() -> None:
    engine = Engine(fleet("2026-05"))
    history_of(engine, READ, 19)
    before = tail(engine, 19)
    outcome = step_batch(engine, [call(READ, "b1"), call(READ, "b2")])
    assert outcome.refused_by == 1
    assert verdicts(outcome.outputs[1]) == [("block", "generic_repeat", 20)]
    assert tail(engine, 19) == before
    assert len(engine.states["r1"].history) == 19


def test_a_refused_batch_still_updates_the_warning_buckets() -> None:
    """OpenClaw de-duplicates at evaluation, on the session's buckets: the first read's warning
    (19, bucket 1) is published and its bucket kept although the batch is refused."""
    config = fleet()
    resolved = config.for_agent("default")
    state = RunState("r1", "default", "r1")
    for _ in range(19):  # calls and outcomes recorded without detection: no bucket yet
        proposed = call(READ, f"h{next(_ids)}")
        args_hash = prepare_for(proposed, config, resolved).args_hash
        state.history.append("read", args_hash, proposed.tool_call_id, None, None, None, 30)
        outcome = result(READ, proposed.tool_call_id or "")
        record_outcome(
            state, "read", outcome.tool_call_id, None, prepare_for(outcome, config, resolved), resolved
        )
    assert state.buckets == {}
    admitted = admit_batch(state, [call(READ, "b1"), call(READ, "b2")], config)
    assert admitted.refused_by == 1
    assert verdicts(admitted.outputs[0]) == [("warn", "generic_repeat", 19)]
    assert list(state.buckets.values()) == [1]


def test_observe_only_refuses_nothing() -> None:
    engine = Engine(fleet(observe_only=True))
    history_of(engine, READ, 19)
    outcome = step_batch(engine, [call(READ, "b1"), call(READ, "b2"), call(READ, "b3")])
    assert outcome.refused_by is None
    assert [
        [(o.action, o.count, o.enforced) for o in out if isinstance(o, Verdict)] for out in outcome.outputs
    ][1:] == [[("block", 20, False)], [("block", 21, False)]]
    assert tail(engine, 3) == [("b1", False, None), ("b2", False, None), ("b3", False, None)]


# -- admission -------------------------------------------------------------------------------


def test_an_admitted_batch_collects_its_warnings_and_commits_its_calls_in_order() -> None:
    engine = Engine(fleet())
    history_of(engine, READ, 10)
    history_of(engine, POLL, 9, RUNNING)
    assert engine.states["r1"].buckets == {}  # each call saw 9 before it at most
    batch = [call(READ, "b1"), call(POLL, "b2"), call(POLL, "b3"), call(READ, "b4")]
    outcome = step_batch(engine, batch)
    assert outcome.refused_by is None
    assert [verdicts(out) for out in outcome.outputs] == [
        [("warn", "generic_repeat", 10)],
        [],  # 9 polls
        [("warn", "known_poll_no_progress", 10)],  # 9 + the first poll, projected as a veto
        [],  # read at 11 (10 + the first read, projected): the bucket of the first read's 10
    ]
    assert [f.count if f is not None else None for f in outcome.found] == [10, None, 10, 11]
    assert tail(engine, 4) == [
        ("b1", False, None),
        ("b2", False, None),
        ("b3", False, None),
        ("b4", False, None),
    ]
    assert len(engine.states["r1"].buckets) == 2


def test_a_full_window_is_projected_untrimmed_and_trimmed_at_commit() -> None:
    engine = Engine(fleet())
    history_of(engine, READ, 10)
    for index in range(20):
        history_of(engine, ("ls", {"dir": f"d{index}"}), 1)
    outcome = step_batch(engine, [call(READ, "b1"), call(READ, "b2"), call(READ, "b3")])
    # the oldest reads still count, and each earlier sibling adds one: 10, 11, 12 (one by one,
    # each recorded and the window trimmed first: 10, 10, 10)
    assert [f.count if f is not None else None for f in outcome.found] == [10, 11, 12]
    assert [verdicts(out) for out in outcome.outputs] == [[("warn", "generic_repeat", 10)], [], []]
    history = engine.states["r1"].history
    assert len(history) == 30
    assert sum(1 for r in history if r.tool == "read" and r.result_hash is not None) == 7


def test_evaluation_leaves_the_run_history_as_it_was_even_when_a_rule_fails() -> None:
    class Failing(Rule):
        def on_call(self, ctx: CallContext, found: Detection | None) -> Detection | None:
            if ctx.event.tool_call_id == "b2":
                raise RuntimeError("rule failed")
            return found

    engine = Engine(fleet())
    history_of(engine, READ, 5)
    state = engine.states["r1"]
    history, records = state.history, list(state.history.records)
    with registered(Failing("failing")), pytest.raises(RuntimeError, match="rule failed"):
        step_batch(engine, [call(READ, "b1"), call(READ, "b2"), call(READ, "b3")])
    assert state.history is history
    assert list(state.history.records) == records


def test_a_batch_of_one_is_the_single_step_exactly() -> None:
    """Random runs (loops of every kind, own rules on, both revisions): each call through the
    single step in one engine and as a batch of one in another; same outputs, same state."""
    rng = random.Random(22)
    document = {
        "tools": {"loopDetection": {"enabled": True}},
        "loopwatch": {
            "detectors": {
                "runNoProgress": {"enabled": True},
                "editUndo": {"enabled": True},
                "loopBudget": {"usd": 0.1},
            },
        },
    }
    writes = [("write", {"path": "f", "content": text}) for text in ("x", "y")]
    pool = [READ, ("read", {"path": "b.txt"}), LS, POLL, *writes]
    results = [SAME, RUNNING, {"content": [{"type": "text", "text": "other"}]}, ERROR("ENOENT")]
    clock = itertools.count(step=10_000)  # event time: 10 s an event (the churn lease's clock)
    seen: Counter[str] = Counter()
    for revision in ("2026-08", "2026-05"):
        document["loopwatch"]["openclawRevision"] = revision  # type: ignore[index]
        config = parse_config_text(json.dumps(document))
        single, batched = Engine(config), Engine(config)
        for _ in range(40):
            run = f"run-{next(_ids)}"
            favourite, second, usual = *rng.sample(pool, 2), rng.choice(results)
            budget = rng.random() < 0.3  # a run whose turns cost something
            churn = rng.random() < 0.2  # a run cycling through two failing reads (argument churn)
            if churn:
                favourite, second, usual = READ, pool[1], results[-1]
            for _ in range(rng.randint(5, 60)):
                draw = rng.random()  # mostly the favourite, or it and a second call in turn
                if churn:
                    tool_params = favourite if draw < 0.5 else second
                else:
                    tool_params = favourite if draw < 0.6 else second if draw < 0.85 else rng.choice(pool)
                usage = Usage(cost_usd=0.01) if budget else None
                proposed = call(tool_params, f"c{next(_ids)}", run, usage=usage, ts=next(clock))
                expected = single.process(proposed)
                seen.update(f"{o.action} {o.detector}" for o in expected)
                got = step_batch(batched, [proposed])
                assert got.all_outputs() == expected
                value = usual if rng.random() < 0.9 else rng.choice(results)
                outcome = result(tool_params, proposed.tool_call_id or "", value, run, ts=next(clock))
                assert batched.process(outcome) == single.process(outcome)
                assert batched.states[run] == single.states[run]
    for kind in ("generic_repeat", "known_poll_no_progress", "edit_undo", "run_no_progress", "loop_budget"):
        assert seen[f"block {kind}"] > 0, (kind, seen)
    for reason in ("tool_loop_recovery_exhausted", "loop_budget_exhausted", "argument_churn_stale"):
        assert seen[f"abort {reason}"] > 0, (reason, seen)


class Hooks(FleetHooks):
    """Fleet hooks that block nothing and write down what they were asked, and with what."""

    def __init__(self) -> None:
        self.asked: list[tuple[Any, ...]] = []

    def fail_fast(self, scope: str, event: ToolCall, ts: int, config: FleetConfig) -> Output | None:
        self.asked.append(("fail_fast", scope, event.event_id, ts))
        return None

    def chain_block(
        self, state: RunState, event: ToolCall, ts: int, prepared: Prepared, config: FleetConfig
    ) -> Output | None:
        self.asked.append(("chain_block", state.scope, event.event_id, ts, prepared.args_hash))
        return None

    def noted(
        self,
        scope: str,
        event: ToolCall | ToolResult,
        ts: int,
        prepared: Prepared,
        outputs: list[Output],
        config: FleetConfig,
        state: RunState | None = None,
    ) -> None:
        kept = state.scope if state is not None else None
        ids = [output.verdict_id for output in outputs]
        self.asked.append(("noted", scope, event.event_id, ts, prepared.args_hash, ids, kept))


def test_a_batch_of_one_asks_the_fleet_hooks_as_the_single_step_does() -> None:
    single_hooks, batch_hooks = Hooks(), Hooks()
    single, batched = Engine(fleet(), fleet=single_hooks), Engine(fleet(), fleet=batch_hooks)
    for index in range(25):
        proposed = call(READ, f"c{index}", ts=1000 * index)
        assert step_batch(batched, [proposed]).all_outputs() == single.process(proposed)
        outcome = result(READ, f"c{index}", ts=1000 * index + 500)
        assert batched.process(outcome) == single.process(outcome)
    assert batch_hooks.asked == single_hooks.asked
    assert [entry[0] for entry in single_hooks.asked[:4]] == ["fail_fast", "chain_block", "noted", "noted"]


# -- bookkeeping -----------------------------------------------------------------------------


def test_event_ids_already_seen_are_passed_over() -> None:
    engine = Engine(fleet())
    history_of(engine, READ, 19)
    batch = [call(READ, "b1"), call(LS, "b2")]
    first = step_batch(engine, batch)
    assert first.applied == [True, True]
    snapshot = engine.states["r1"].to_bytes()
    again = step_batch(engine, batch)
    assert again.applied == [False, False]
    assert again.all_outputs() == []
    assert engine.states["r1"].to_bytes() == snapshot


def test_batch_problems_are_named() -> None:
    assert batch_problem([]) == "a batch holds at least one call"
    assert "share one run" in (batch_problem([call(READ, "a"), call(READ, "b", run="other")]) or "")
    mixed = [call(READ, "a", batch_id="t1"), call(READ, "b"), call(READ, "c", batch_id="t2")]
    assert "call 2: batch_id 't2' differs" in (batch_problem(mixed) or "")
    assert batch_problem([call(READ, "a", batch_id="t1"), call(READ, "b")]) is None
    with pytest.raises(ValueError, match="share one run"):
        step_batch(Engine(fleet()), [call(READ, "a"), call(READ, "b", run="other")])


def test_an_ended_run_ignores_a_batch_it_had_and_starts_afresh_for_a_new_one() -> None:
    from loopwatch.detectors.events import RunEnd

    engine = Engine(fleet())
    batch = [call(READ, "b1"), call(READ, "b2")]
    step_batch(engine, batch)
    engine.process(RunEnd(event_id="end", run_id="r1"))
    assert step_batch(engine, batch).kind == "late"
    assert engine.late == 2
    fresh = step_batch(engine, [call(READ, "b3")])
    assert fresh.kind == "applied"
    assert tail(engine, 5) == [("b3", False, None)]


# -- decisions -------------------------------------------------------------------------------


def test_decisions_block_every_call_of_a_refused_batch() -> None:
    engine = Engine(fleet())
    history_of(engine, READ, 19)
    batch = [call(READ, "b1"), call(LS, "b2"), call(READ, "b3")]
    outcome = step_batch(engine, batch)
    decided = batch_decision_of(outcome, engine.aborted("r1"))
    assert decided.refused
    assert decided.refused_by == 2
    trigger = decided.decisions[2]
    assert (trigger.action, trigger.reason, trigger.refused_by) == ("block", "generic_repeat", None)
    assert trigger.message is not None
    assert trigger.message.startswith("CRITICAL")
    for sibling in decided.decisions[:2]:
        assert (sibling.action, sibling.message, sibling.reason) == (
            "block",
            SIBLING_MESSAGE,
            "generic_repeat",
        )
        assert sibling.refused_by == batch[2].event_id
    # the first read's warning (19) was withheld: the history's own warning at 10 holds its bucket
    assert decided.decisions[0].outputs == ()
    assert outcome.found[0] is not None
    assert outcome.found[0].count == 19


def test_a_second_refusal_aborts_the_run_and_every_call_answers_the_abort() -> None:
    engine = Engine(fleet())
    history_of(engine, READ, 19)
    step_batch(engine, [call(READ, "b1"), call(READ, "b2")])  # the run's first critical
    outcome = step_batch(engine, [call(LS, "b3"), call(READ, "b4")])
    assert outcome.refused_by == 1
    assert [type(o) for o in outcome.outputs[1]] == [Verdict, Abort]
    decided = batch_decision_of(outcome, engine.aborted("r1"))
    assert [d.action for d in decided.decisions] == ["abort", "abort"]
    assert [d.sticky for d in decided.decisions] == [True, False]
    later = batch_decision_of(step_batch(engine, [call(LS, "b5")]), engine.aborted("r1"))
    assert [(d.action, d.sticky) for d in later.decisions] == [("abort", True)]


def test_the_facade_decides_a_batch_as_the_engine_does() -> None:
    detector = LoopDetector(fleet())
    engine = Engine(fleet())
    for index in range(19):
        detector.before_tool_call("r1", *READ, tool_call_id=f"h{index}")
        detector.after_tool_call("r1", *READ, result=SAME, tool_call_id=f"h{index}")
    history_of(engine, READ, 19)
    decided = detector.before_tool_calls(
        "r1", [ProposedCall(*READ, "b1"), ProposedCall(*LS, "b2"), ProposedCall(*READ, "b3")]
    )
    expected = batch_decision_of(step_batch(engine, [call(READ, "b1"), call(LS, "b2"), call(READ, "b3")]))
    assert decided.refused_by == expected.refused_by == 2
    assert [d.action for d in decided.decisions] == [d.action for d in expected.decisions] == ["block"] * 3
    # the facade speaks loopwatch's words (the verdicts keep OpenClaw's sentences)
    assert [d.message for d in decided.decisions] == [in_words(d).message for d in expected.decisions]
    assert all(str(d.message).startswith("loopwatch ") for d in decided.decisions)
    assert [[o.message for o in d.outputs] for d in decided.decisions] == [
        [o.message for o in d.outputs] for d in expected.decisions
    ]
    assert detector.before_tool_calls("r1", []).decisions == ()
    admitted = detector.before_tool_calls("r2", [ProposedCall(*LS), ProposedCall(*POLL)])
    assert [d.action for d in admitted.decisions] == ["allow", "allow"]
    assert not admitted.refused


# -- the conformance vectors -----------------------------------------------------------------

VECTORS = ROOT / "tests" / "data" / "loopwatch-batch.jsonl"


def _vectors() -> list[dict[str, Any]]:
    return [json.loads(line) for line in VECTORS.read_text().splitlines() if line.strip()]


def test_the_batch_vectors_pass() -> None:
    vectors = _vectors()
    assert [v["name"] for v in vectors] == [
        "batch_on_full_history_projects_siblings_untrimmed",
        "batch_refused_by_its_third_call",
        "batch_admitted_with_warnings",
    ]
    for vector in vectors:
        assert run_vector(vector) is None, vector["name"]


def _batch_expectations(vector: dict[str, Any]) -> list[dict[str, Any]]:
    return [s["expect"] for s in vector["steps"] if s["op"] == "invoke_batch"]


@pytest.mark.parametrize(
    ("key", "wrong"),
    [("refused", "flip"), ("refusedBy", 0), ("count", "plus one"), ("emitted", "flip"), ("action", "allow")],
)
def test_every_batch_vector_fails_when_an_expectation_is_wrong(key: str, wrong: Any) -> None:
    for vector in _vectors():
        expect = _batch_expectations(vector)[0]
        if key in ("refused", "refusedBy"):
            expect[key] = (not expect[key]) if wrong == "flip" else wrong
        else:
            first = expect["calls"][0]
            if wrong == "flip":
                first[key] = not first[key]
            elif wrong == "plus one":
                first[key] += 1
            else:
                first[key] = "allow" if first[key] != "allow" else "warn"
        failure = run_vector(vector)
        assert failure is not None, (vector["name"], key)
        assert "invoke_batch" in failure.reason


def test_the_vectors_fail_when_the_projection_is_trimmed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The full-history vector pins the untrimmed projection (OpenClaw pushes past historySize)."""
    monkeypatch.setattr(batch_admission, "_UNBOUNDED", 30)
    failure = run_vector(_vectors()[0])
    assert failure is not None
    assert "expected count=11, got 10" in failure.reason


def test_the_runner_refuses_what_it_cannot_evaluate() -> None:
    vector = _vectors()[2]
    step = next(s for s in vector["steps"] if s["op"] == "invoke_batch")
    step["expect"]["calls"][0]["vibes"] = True
    assert "cannot evaluate expectation key 'vibes'" in str(run_vector(vector))
    vector = _vectors()[2]
    step = next(s for s in vector["steps"] if s["op"] == "invoke_batch")
    step["expect"]["calls"].pop()
    assert "one expectation per call" in str(run_vector(vector))
    vector = _vectors()[2]
    step = next(s for s in vector["steps"] if s["op"] == "invoke_batch")
    step["calls"] = []
    assert "non-empty list" in str(run_vector(vector))


def test_batch_id_is_an_identity_field_of_the_wire() -> None:
    from loopwatch.detectors.decoding import decode_event
    from loopwatch.detectors.events import InvalidEvent, encode_event
    from tests.poison import POISON

    for kind, reason in (
        ("surrogate batch_id", "batch_id: must be valid Unicode"),
        ("batch_id 600 bytes", "batch_id: holds 600 bytes"),
        ("batch_id a number", "batch_id"),
    ):
        with pytest.raises(InvalidEvent, match=reason):
            decode_event(POISON[kind]("r", 0))
    given = call(READ, "c", batch_id="turn-1")
    assert decode_event(encode_event(given)) == given
    assert b"batch_id" not in encode_event(call(READ, "c"))  # absent on the wire unless given


def test_a_batch_of_an_ended_run_leaves_out_the_calls_the_run_had_seen() -> None:
    """As one event at a time: a call the ended run had is late; the others start a new run."""
    one_by_one, batched = Engine(FleetConfig.enabled_default()), Engine(FleetConfig.enabled_default())
    seen, fresh = call(("read", {"path": "a"}), "c1"), call(("read", {"path": "b"}), "c2")
    for engine in (one_by_one, batched):
        engine.process(seen)
        engine.process(RunEnd(event_id="end", run_id="r1"))
    for event in (seen, fresh):
        one_by_one.process(event)
    outcome = step_batch(batched, [seen, fresh])
    assert outcome.applied == [False, True]
    assert batched.late == one_by_one.late == 1
    assert batched.states["r1"].to_bytes() == one_by_one.states["r1"].to_bytes()
