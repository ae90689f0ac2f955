"""Rules as units: the registry's order, a rule of one's own, and states written before rules
kept their own."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, get_type_hints

import msgspec
import pytest

from loopwatch.config.fleet import FleetConfig, parse_config_text
from loopwatch.detectors.decoding import decode_event
from loopwatch.detectors.engine import Engine
from loopwatch.detectors.events import Output, Verdict, encode_output
from loopwatch.detectors.rule_state import KeptState, RuleState
from loopwatch.detectors.rules.base import WARNING, CallContext, Detection, Rule, stronger
from loopwatch.detectors.rules.edit_undo import FileVersions
from loopwatch.detectors.rules.loop_budget import BudgetSpent
from loopwatch.detectors.rules.post_compaction_guard import PostCompactionGuard
from loopwatch.detectors.rules.registry import REGISTRY, registered
from loopwatch.detectors.rules.run_no_progress import OutcomeRepeats
from loopwatch.detectors.snapshot import DECODER, RunSnapshot
from loopwatch.detectors.state import RunState
from loopwatch.streams.kafka.run_table import unpack
from tests.helpers import Trace, text_result
from tests.unit.test_run_processor import Broker, feed, processor, records

SNAPSHOTS = Path(__file__).parents[1] / "data" / "snapshots"


# -- a rule of one's own, as a user (or a test) adds it ---------------------------------------


class ToolCounts(RuleState):
    __slots__ = ("calls",)

    def __init__(self, calls: dict[str, int] | None = None) -> None:
        self.calls = calls if calls is not None else {}

    def dump(self) -> Any:
        return sorted(self.calls.items())


class ThirdCall(Rule):
    """Warns at the third call of the same tool in a run, whatever its arguments."""

    def __init__(self) -> None:
        super().__init__("third_call")

    def on_call(self, ctx: CallContext, found: Detection | None) -> Detection | None:
        counts = ctx.state.rule_states.setdefault(self.name, ToolCounts())
        assert isinstance(counts, ToolCounts)
        count = counts.calls[ctx.tool] = counts.calls.get(ctx.tool, 0) + 1
        if count != 3:
            return found
        text = f"WARNING: {ctx.tool} called {count} times."
        own = Detection(WARNING, self.name, count, text, f"third:{ctx.tool}", bucket=3)
        return stronger(found, own)

    def load_state(self, raw: Any) -> ToolCounts:
        return ToolCounts(dict(raw))


def varied_reads(n: int) -> Trace:
    trace = Trace()
    for i in range(n):
        trace.both("read", {"path": f"/file-{i}"}, text_result(f"content {i}"))
    return trace


def test_a_rule_registered_from_a_test_runs_embedded_in_the_worker_and_survives_the_snapshot() -> None:
    trace = varied_reads(4)
    fleet = FleetConfig.enabled_default()
    with registered(ThirdCall()):
        engine = Engine(fleet)
        embedded = [out for event in trace.events for out in engine.process(event)]
        assert [(o.detector, o.count, o.action) for o in embedded if isinstance(o, Verdict)] == [
            ("third_call", 3, "warn")
        ]
        state = engine.states["run-1"]
        again = RunState.from_bytes(state.to_bytes())
        assert again == state
        loaded = again.rule_states["third_call"]
        assert isinstance(loaded, ToolCounts)
        assert loaded.calls == {"read": 4}

        async def worker() -> tuple[list[bytes], dict[bytes, bytes]]:
            broker = Broker()
            data: dict[bytes, bytes] = {}
            proc = processor(broker, data)
            proc.cursors.start(0, 0)
            await feed(proc, records(trace.events))
            return broker.on("v"), data

        published, table = asyncio.run(worker())
        assert published == [encode_output(o) for o in embedded]
        stored = RunState.from_bytes(unpack(table[b"run-1"]).state)
        assert isinstance(stored.rule_states["third_call"], ToolCounts)

    # without the rule, nothing of it runs, and its stored state passes through unchanged
    engine = Engine(fleet)
    assert not [out for event in trace.events for out in engine.process(event)]
    kept = RunState.from_bytes(state.to_bytes())
    assert isinstance(kept.rule_states["third_call"], KeptState)
    assert kept.to_bytes() == state.to_bytes()


def test_the_registry_keeps_openclaws_first_match_order_then_loopwatchs_rules() -> None:
    names = [(rule.name, rule.openclaw) for rule in REGISTRY.rules]
    assert names == [
        ("unknown_tool_repeat", True),
        ("global_circuit_breaker", True),
        ("known_poll_no_progress", True),
        ("ping_pong", True),
        ("generic_repeat", True),  # its critical (rule 7)
        ("argument_churn", True),  # 7a, revision 2026-08
        ("generic_repeat", True),  # its warning (rule 8)
        ("compaction_loop_persisted", False),
        ("argument_churn_stale", False),
        ("run_no_progress", False),
        ("edit_undo", False),
        ("same_call_streak", False),
        ("call_cycle", False),
        ("same_failure", False),
        ("delegation_depth", False),
        ("loop_budget", False),
    ]
    # each hook is asked of the rules that have it, in the same order
    hooks = REGISTRY.all
    assert [rule.name for rule in hooks.after_call] == [
        "argument_churn_stale",
        "same_call_streak",
        "call_cycle",
        "loop_budget",
    ]
    assert [rule.name for rule in hooks.after_record] == ["argument_churn_stale"]
    assert [rule.name for rule in hooks.on_result] == [
        "compaction_loop_persisted",
        "argument_churn_stale",
        "run_no_progress",
        "same_failure",
    ]
    assert [rule.name for rule in hooks.on_compaction_retry] == ["compaction_loop_persisted"]
    assert len(hooks.on_call) == 14
    # under the defaults (2026-08, loopwatch's own rules off) only the rules that can speak
    active = REGISTRY.for_config(FleetConfig.enabled_default().for_agent("default"))
    assert [rule.name for rule in active.on_result] == ["compaction_loop_persisted", "argument_churn_stale"]
    assert [rule.name for rule in active.on_call][-1] == "loop_budget"
    assert "run_no_progress" not in [rule.name for rule in active.on_call]


def test_a_first_match_rule_after_loopwatchs_own_is_refused() -> None:
    class LateOpenClawRule(Rule):
        def __init__(self) -> None:
            super().__init__("late", openclaw=True)

    with pytest.raises(ValueError, match="come before"), registered(LateOpenClawRule()):
        pass
    assert [rule.name for rule in REGISTRY.rules][-1] == "loop_budget"  # nothing registered


# -- a state written by the code before rules kept their own ---------------------------------


def legacy_config() -> FleetConfig:
    """The configuration ``make-run-state-55edc0a.py.txt`` wrote the state with."""
    document = {
        "tools": {"loopDetection": {"enabled": True, "postCompactionGuard": {"windowSize": 3}}},
        "loopwatch": {
            "churnStaleAfterS": 300,
            "detectors": {
                "runNoProgress": {"enabled": True},
                "editUndo": {"enabled": True},
                "loopBudget": {"usd": 1},
            },
        },
    }
    return parse_config_text(json.dumps(document))


def test_a_state_written_before_rules_kept_their_own_loads_and_goes_on_as_it_did() -> None:
    blob = (SNAPSHOTS / "run-state-55edc0a.msgpack").read_bytes()
    state = RunState.from_bytes(blob)
    rules = state.rule_states
    guard, repeats, versions = (
        rules["compaction_loop_persisted"],
        rules["run_no_progress"],
        rules["edit_undo"],
    )
    assert isinstance(guard, PostCompactionGuard)
    assert (guard.remaining, guard.window) == (2, 3)
    assert isinstance(repeats, OutcomeRepeats)
    assert len(repeats.tools) == 23
    assert isinstance(versions, FileVersions)
    assert versions.paths["src/app.py"].count == 2
    assert rules["argument_churn_stale"].dump() == [110_000, False]
    assert "loop_budget" not in rules  # the budget had not spoken yet
    assert (state.first_detector, state.events, state.outbox) == ("argument_churn", 47, {"pending-1": [b"x"]})

    # the events after it give exactly what the old code gave them
    engine = Engine(legacy_config())
    engine.states["run-1"] = state
    lines = (SNAPSHOTS / "run-state-55edc0a.after.jsonl").read_bytes().splitlines()
    outputs: list[Output] = [out for line in lines for out in engine.process(decode_event(line))]
    recorded = json.loads((SNAPSHOTS / "run-state-55edc0a.outputs.json").read_text())
    assert [json.loads(encode_output(o)) for o in outputs] == recorded
    assert {o.get("detector") or o.get("reason") for o in recorded} >= {
        "argument_churn_stale",
        "compaction_loop_persisted",
        "edit_undo",
        "loop_budget",
        "loop_budget_exhausted",
    }
    spent = engine.states["run-1"].rule_states["loop_budget"]
    assert isinstance(spent, BudgetSpent)
    assert (spent.fired, spent.aborted) == (True, True)


@pytest.mark.parametrize("compact_first", [False, True])
def test_a_state_written_before_the_compact_form_goes_on_as_it_did_through_it(compact_first: bool) -> None:
    """The 55edc0a state through this release's compact form (written, read back) gives the
    same outputs on the events after it as the old code gave, and the form is stable."""
    state = RunState.from_bytes((SNAPSHOTS / "run-state-55edc0a.msgpack").read_bytes())
    if compact_first:
        blob = state.to_bytes()
        assert DECODER.decode(blob).version == 2
        state = RunState.from_bytes(blob)
        assert state.to_bytes() == blob
    engine = Engine(legacy_config())
    engine.states["run-1"] = state
    lines = (SNAPSHOTS / "run-state-55edc0a.after.jsonl").read_bytes().splitlines()
    outputs: list[Output] = [out for line in lines for out in engine.process(decode_event(line))]
    recorded = json.loads((SNAPSHOTS / "run-state-55edc0a.outputs.json").read_text())
    assert [json.loads(encode_output(o)) for o in outputs] == recorded


def test_a_release_before_the_compact_form_refuses_it_and_starts_the_run_afresh() -> None:
    """A worker of 55edc0a (27 snapshot fields) that is handed a compact state cannot misread
    it: its decoder refuses the longer array (its worker then logs "unreadable run state
    replaced" and starts the run afresh; docs/upgrading.md says so)."""
    hints = get_type_hints(RunSnapshot)
    # 55edc0a's records could not be None
    hints["records"] = list[tuple[str, str, str | None, str | None, str | None, int | None]]
    old_layout = msgspec.defstruct(
        "OldRunSnapshot",
        [(name, hints[name]) for name in RunSnapshot.__struct_fields__[:27]],
        array_like=True,
        frozen=True,
    )
    written_by_old = (SNAPSHOTS / "run-state-55edc0a.msgpack").read_bytes()
    assert msgspec.msgpack.decode(written_by_old, type=old_layout)  # the old layout reads its own
    written_by_new = RunState.from_bytes(written_by_old).to_bytes()
    with pytest.raises(msgspec.ValidationError):
        msgspec.msgpack.decode(written_by_new, type=old_layout)
