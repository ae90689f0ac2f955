"""loopwatch's own in-run rules: run_no_progress, edit_undo, loop_budget, and their config."""

from typing import Any

import msgspec
import pytest

from loopwatch.config import ConfigError, FleetConfig, parse_config_text
from loopwatch.config.own_rules import DEFAULT_OWN_RULES
from loopwatch.config.rule_sections import rule_set
from loopwatch.detectors.engine import Engine
from loopwatch.detectors.events import Abort, Output, ToolCall, Usage, Verdict
from loopwatch.detectors.rules import edit_undo, loop_budget, run_no_progress
from loopwatch.detectors.rules.edit_undo import FileVersions
from loopwatch.detectors.rules.run_no_progress import OutcomeRepeats
from loopwatch.detectors.state import RunState
from tests.helpers import Trace, text_result


def config(rules: dict[str, Any], **loopwatch: Any) -> FleetConfig:
    import json

    document = {
        "tools": {"loopDetection": {"enabled": True}},
        "loopwatch": {"detectors": rules, **loopwatch},
    }
    return parse_config_text(json.dumps(document))


def run(trace: Trace, fleet: FleetConfig) -> list[Output]:
    engine = Engine(fleet)
    return [out for event in trace.events for out in engine.process(event)]


def verdicts(outputs: list[Output], detector: str) -> list[tuple[str, int]]:
    return [(o.action, o.count) for o in outputs if isinstance(o, Verdict) and o.detector == detector]


# -- config ----------------------------------------------------------------------------------


def test_rules_merge_per_agent_key_by_key() -> None:
    fleet = parse_config_text(
        """{
          tools: {loopDetection: {enabled: true}},
          loopwatch: {detectors: {runNoProgress: {enabled: true, windowSize: 40}, loopBudget: {usd: 2}}},
          agents: {
            list: [{id: "coder", loopwatch: {detectors: {
              runNoProgress: {warningThreshold: 25}, editUndo: {enabled: true},
            }}}],
            entries: {ops: {loopwatch: {detectors: {loopBudget: {usd: 0.5}}}}},
          },
        }"""
    )
    coder = fleet.for_agent("coder").rules
    assert (
        coder.get(run_no_progress.SECTION).enabled,
        coder.get(run_no_progress.SECTION).warning_threshold,
        coder.get(run_no_progress.SECTION).window_size,
    ) == (
        True,
        25,
        40,
    )
    assert coder.get(edit_undo.SECTION).enabled
    assert coder.get(loop_budget.SECTION).usd == 2.0
    assert fleet.for_agent("ops").rules.get(loop_budget.SECTION).usd == 0.5
    default = fleet.for_agent("default").rules
    assert (
        default.get(run_no_progress.SECTION).warning_threshold,
        default.get(edit_undo.SECTION).enabled,
    ) == (20, False)


def test_defaults_leave_every_rule_off() -> None:
    rules = FleetConfig.enabled_default().for_agent("x").rules
    assert rules == DEFAULT_OWN_RULES
    assert [section.explain(rules.get(section)) for section in rule_set().sections] == [None] * 6


def test_every_problem_of_the_section_is_listed_with_its_path() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config_text(
            """{
              loopwatch: {detectors: {
                runNoProgress: {enabled: "yes", windowSize: 5000},
                editUndo: {warningThreshold: 0, sharpness: 1},
                loopBudget: {usd: -1},
                toolOutage: {minShare: 2},
                vibes: {},
              }},
              agents: {list: [{id: "a", loopwatch: {digest: "sha256", detectors: {systemicLoop: {}}}}]},
            }"""
        )
    text = str(caught.value)
    for expected in (
        "loopwatch.detectors.runNoProgress.enabled: must be a boolean",
        "loopwatch.detectors.runNoProgress.windowSize: must be a positive integer of at most 1000",
        "loopwatch.detectors.editUndo.warningThreshold: must be a positive integer",
        "loopwatch.detectors.editUndo.sharpness: unknown key",
        "loopwatch.detectors.loopBudget.usd: must be a positive number (USD) or null",
        "loopwatch.detectors.toolOutage.minShare: unknown key",
        "loopwatch.detectors.vibes: unknown rule",
        "agents.list[0].loopwatch.digest: only detectors and preset can be set per agent",
        "agents.list[0].loopwatch.detectors.systemicLoop: a fleet-wide rule",
    ):
        assert expected in text


def test_a_warning_threshold_must_stay_below_the_critical_one_also_after_merging() -> None:
    with pytest.raises(
        ConfigError, match=r"editUndo\.warningThreshold: must be lower than criticalThreshold"
    ):
        config({"editUndo": {"warningThreshold": 5}})
    with pytest.raises(ConfigError) as refused:
        parse_config_text(
            "{loopwatch: {detectors: {runNoProgress: {warningThreshold: 25}}},"
            " agents: {list: [{id: 'a', loopwatch: {detectors: {runNoProgress: {windowSize: 24}}}}]}}"
        )
    assert [str(problem) for problem in refused.value.problems] == [
        "agents.list[0].loopwatch.detectors.runNoProgress.warningThreshold: must be lower than "
        "windowSize (this agent's rules merged over loopwatch.detectors)"
    ]


@pytest.mark.parametrize(
    ("global_rules", "agent_rules"),
    [
        ("{editUndo: {enabled: true, warningThreshold: 1}}", "{editUndo: {criticalThreshold: 2}}"),
        ("{editUndo: {criticalThreshold: 10}}", "{editUndo: {warningThreshold: 8}}"),
        ("{runNoProgress: {windowSize: 100}}", "{runNoProgress: {warningThreshold: 50}}"),
    ],
)
def test_an_agent_s_thresholds_are_ordered_once_merged_not_against_the_defaults(
    global_rules: str, agent_rules: str
) -> None:
    """An agent that sets one threshold of a pair gets the global other one: the pair is valid
    (the agent's object alone, over the built-in defaults, would not be)."""
    parsed = parse_config_text(
        f"{{loopwatch: {{detectors: {global_rules}}},"
        f" agents: {{list: [{{id: 'coder', loopwatch: {{detectors: {agent_rules}}}}}]}}}}"
    )
    assert parsed.for_agent("coder").rules != parsed.for_agent("other").rules


def test_every_problem_at_once_the_merged_order_and_an_order_beside_a_wrong_type_included() -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config_text(
            "{loopwatch: {digest: 'md5', detectors: {editUndo: {warningThreshold: 4, criticalThreshold: 6},"
            " runNoProgress: {enabled: 'yes', warningThreshold: 40, windowSize: 30}}},"
            " agents: {list: [{id: 'coder', loopwatch: {detectors: {editUndo: {criticalThreshold: 4}}}}]}}"
        )
    text = [str(problem) for problem in refused.value.problems]
    assert "loopwatch.detectors.runNoProgress.enabled: must be a boolean" in text
    assert "loopwatch.detectors.runNoProgress.warningThreshold: must be lower than windowSize" in text
    assert any(problem.startswith("loopwatch.digest:") for problem in text)
    # the global rules had a problem of their own: no merge is judged over them
    assert len(text) == 3, text
    with pytest.raises(ConfigError) as refused:
        parse_config_text(
            "{loopwatch: {digest: 'md5', detectors: {editUndo: {warningThreshold: 4, criticalThreshold: 6}}},"
            " agents: {list: [{id: 'coder', loopwatch: {detectors: {editUndo: {criticalThreshold: 4}}}}]}}"
        )
    text = [str(problem) for problem in refused.value.problems]
    assert any(problem.startswith("loopwatch.digest:") for problem in text)
    assert (
        "agents.list[0].loopwatch.detectors.editUndo.warningThreshold: must be lower than "
        "criticalThreshold (this agent's rules merged over loopwatch.detectors)"
    ) in text


def test_an_agent_s_detectors_given_twice_is_an_error_as_a_loop_detection_block_twice_is() -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config_text(
            "{agents: {list: [{id: 'coder', loopwatch: {detectors: {loopBudget: {usd: 10}}}},"
            " {id: 'coder', loopwatch: {detectors: {loopBudget: {usd: 1000}}}}],"
            " entries: {coder: {loopwatch: {detectors: {loopBudget: {usd: 5}}}}}}}"
        )
    assert [str(problem) for problem in refused.value.problems] == [
        "agents.list[1].loopwatch.detectors: agent 'coder' has loopwatch.detectors twice "
        "(also at agents.list[0].loopwatch.detectors)",
        "agents.entries.coder.loopwatch.detectors: agent 'coder' has loopwatch.detectors twice "
        "(also at agents.list[0].loopwatch.detectors)",
    ]


@pytest.mark.parametrize("usd", ["Infinity", "-Infinity", "NaN"])
def test_a_loop_budget_that_is_no_finite_number_is_refused(usd: str) -> None:
    with pytest.raises(ConfigError, match=r"loopBudget\.usd: must be a positive number"):
        parse_config_text(f"{{loopwatch: {{detectors: {{loopBudget: {{usd: {usd}}}}}}}}}")


# -- run_no_progress ---------------------------------------------------------------------------


def rotator(calls: int) -> Trace:
    """Three tools in turn, each call with new arguments, each tool always the same answer."""
    trace = Trace()
    tools = ("read", "grep", "list_dir")
    for n in range(calls):
        tool = tools[n % 3]
        trace.both(tool, {"path": f"p{n % 12}"}, text_result(f"{tool}: nothing there"))
    return trace


def test_a_tool_rotator_is_caught_only_with_run_no_progress_on() -> None:
    outputs = run(rotator(40), config({"runNoProgress": {"enabled": True}}))
    found = verdicts(outputs, "run_no_progress")
    assert found[0] == ("warn", 20)  # call 24: 3 new outcomes, then 20 repeats
    assert ("block", 30) in found
    block = next(o for o in outputs if isinstance(o, Verdict) and o.action == "block")
    assert "across 3 tools" in block.message
    assert run(rotator(40), FleetConfig.enabled_default()) == []


def test_a_poll_whose_output_grows_never_trips_run_no_progress() -> None:
    trace = Trace()
    for n in range(80):
        trace.both(
            "process", {"action": "poll", "sessionId": "s"}, text_result(f"line {n}", status="running")
        )
    assert verdicts(run(trace, config({"runNoProgress": {"enabled": True}})), "run_no_progress") == []


# -- edit_undo ---------------------------------------------------------------------------------


def writes(*contents: str, tool: str = "write", key: str = "path") -> Trace:
    trace = Trace()
    for content in contents:
        trace.both(tool, {key: "src/app.py", "content": content}, text_result("ok"))
    return trace


EDIT_UNDO = {"editUndo": {"enabled": True}}


def test_writes_back_and_forth_warn_then_block() -> None:
    outputs = run(writes(*"ABABABA"), config(EDIT_UNDO))
    # A B A(1) B(2) A(3: warn) B(4: same bucket as 3) A(5: block)
    assert verdicts(outputs, "edit_undo") == [("warn", 3), ("block", 5)]
    assert "src/app.py was changed back to an earlier version 5 times" in outputs[-1].message


def test_claude_code_write_with_file_path_counts_too() -> None:
    trace = writes(*"ABABABA", tool="Write", key="file_path")
    assert verdicts(run(trace, config(EDIT_UNDO)), "edit_undo") == [("warn", 3), ("block", 5)]


@pytest.mark.parametrize("contents", ["ABCDEFG", "AAAAAAA", "AABBCCDD"])
def test_new_versions_and_rewrites_of_the_same_version_are_no_reverts(contents: str) -> None:
    assert verdicts(run(writes(*contents), config(EDIT_UNDO)), "edit_undo") == []


def test_an_edit_and_its_reverse_are_an_undo_an_unrelated_edit_is_not() -> None:
    trace = Trace()
    for n in range(6):
        trace.both("edit", {"path": "a.md", "oldText": "x", "newText": "y"}, text_result("ok"))
        trace.both("edit", {"path": "a.md", "oldText": "z", "newText": f"w{n}"}, text_result("ok"))
        trace.both("edit", {"path": "a.md", "oldText": "y", "newText": "x"}, text_result("ok"))
    found = verdicts(run(trace, config(EDIT_UNDO)), "edit_undo")
    assert found[0] == ("warn", 3)
    assert ("block", 5) in found
    unrelated = Trace()
    for n in range(10):
        unrelated.both(
            "edit", {"path": "a.md", "old_string": f"x{n}", "new_string": f"y{n}"}, text_result("ok")
        )
        unrelated.both(
            "edit", {"path": "a.md", "old_string": f"z{n}", "new_string": f"x{n}"}, text_result("ok")
        )
    assert verdicts(run(unrelated, config(EDIT_UNDO)), "edit_undo") == []


def test_reverts_of_other_paths_are_counted_apart() -> None:
    trace = Trace()
    for content in "ABABAB":
        for path in ("a.py", "b.py"):
            trace.both("write", {"path": path, "content": content}, text_result("ok"))
    found = [o for o in run(trace, config(EDIT_UNDO)) if isinstance(o, Verdict)]
    assert [(o.count, o.warning_key) for o in found] == [(3, "edit-undo:a.py"), (3, "edit-undo:b.py")]


# -- loop_budget -------------------------------------------------------------------------------


def costly_loop(calls: int, cost: float) -> Trace:
    trace = Trace()
    for _ in range(calls):
        trace.both("read", {"path": "/missing"}, error="ENOENT")
        call = trace.events[-2]
        assert isinstance(call, ToolCall)
        trace.events[-2] = msgspec.structs.replace(
            call, usage=Usage(input_tokens=900, output_tokens=60, cost_usd=cost)
        )
    return trace


def test_the_budget_blocks_exactly_at_the_limit_and_aborts_at_twice() -> None:
    # first warning at call 11: loop spend 0.25 (call 11), 0.50, 0.75, 1.00 at call 14
    trace = costly_loop(19, 0.25)
    calls = [e.event_id for e in trace.events if isinstance(e, ToolCall)]
    outputs = run(trace, config({"loopBudget": {"usd": 1}}))
    budget = [o for o in outputs if isinstance(o, Verdict) and o.detector == "loop_budget"]
    assert [(o.action, o.count) for o in budget] == [("block", 100)]
    assert calls.index(budget[0].trigger_event_id) == 13
    aborts = [o for o in outputs if isinstance(o, Abort) and o.reason == "loop_budget_exhausted"]
    assert [(calls.index(a.trigger_event_id), a.count) for a in aborts] == [(17, 200)]


def test_just_below_the_budget_nothing_happens() -> None:
    outputs = run(costly_loop(14, 0.2499), config({"loopBudget": {"usd": 1}}))
    assert not [o for o in outputs if getattr(o, "detector", None) == "loop_budget"]


def test_spend_is_counted_without_a_budget() -> None:
    engine = Engine(FleetConfig.enabled_default())
    for event in costly_loop(14, 0.25).events:
        engine.process(event)
    state = engine.states["run-1"]
    assert (state.spend_usd, state.loop_spend_usd) == (3.5, 1.0)
    assert (state.input_tokens, state.output_tokens) == (14 * 900, 14 * 60)
    assert state.first_detector == "generic_repeat"
    assert RunState.from_bytes(state.to_bytes()) == state


def test_the_rules_state_survives_the_state_bytes() -> None:
    engine = Engine(config({"runNoProgress": {"enabled": True}, **EDIT_UNDO}))
    for event in [*rotator(25).events, *writes(*"ABABA").events]:
        engine.process(event)
    state = engine.states["run-1"]
    versions = state.rule_states["edit_undo"]
    repeats = state.rule_states["run_no_progress"]
    assert isinstance(versions, FileVersions)
    assert versions.paths
    assert isinstance(repeats, OutcomeRepeats)
    assert repeats.since_new > 0
    again = RunState.from_bytes(state.to_bytes())
    assert again == state
    loaded = again.rule_states["edit_undo"]
    assert isinstance(loaded, FileVersions)
    assert loaded.paths["src/app.py"].count == versions.paths["src/app.py"].count == 3


def test_the_in_process_api_takes_usage_and_refuses_bad_usage() -> None:
    from loopwatch.detectors.events import InvalidEvent
    from loopwatch.detectors.facade import LoopDetector

    detector = LoopDetector(config({"loopBudget": {"usd": 0.5}}))
    actions = []
    for _ in range(14):
        actions.append(
            detector.before_tool_call("r", "read", {"path": "/x"}, usage={"cost_usd": 0.125}).action
        )
        detector.after_tool_call("r", "read", {"path": "/x"}, error="ENOENT")
    assert actions[10:14] == ["warn", "allow", "allow", "block"]  # 0.125 x 4 = 0.50 at call 14
    with pytest.raises(InvalidEvent, match=r"usage: .*cost_usd"):
        detector.before_tool_call("r", "read", {}, usage={"cost_usd": "a lot"})


def test_the_ledger_agrees_with_the_run_states() -> None:
    from loopwatch.streams.fleet_view.spend_ledger import SpendLedger

    engine = Engine(FleetConfig.enabled_default())
    ledger = SpendLedger()
    trace = costly_loop(25, 0.1)
    healthy = Trace("run-2")
    for n in range(5):
        healthy.both("read", {"path": f"/f{n}"}, text_result(str(n)))
    call = healthy.events[0]
    assert isinstance(call, ToolCall)
    healthy.events[0] = msgspec.structs.replace(call, usage=Usage(cost_usd=0.3))
    for event in [*trace.events, *healthy.events]:
        ledger.event(event)
        for output in engine.process(event):
            ledger.output(output)
    summary = ledger.summary()
    looped = engine.states["run-1"]
    assert summary["loop_spend_usd"] == pytest.approx(looped.loop_spend_usd)
    assert summary["spend_usd"] == pytest.approx(looped.spend_usd + 0.3)
    assert [row["name"] for row in summary["per_tool"]] == ["read"]
    assert summary["per_detector"][0]["name"] == "generic_repeat"
    # the run was aborted at call 22 (second critical): the 3 calls after it are what stopping saves
    assert summary["saved_usd"] == pytest.approx(0.3)
    assert [r["run"] for r in summary["runs"]] == ["run-1"]


def test_the_ledger_does_not_depend_on_which_topic_is_read_first() -> None:
    from loopwatch.streams.fleet_view.spend_ledger import SpendLedger

    engine = Engine(FleetConfig.enabled_default())
    trace = costly_loop(25, 0.1)
    outputs = [out for event in trace.events for out in engine.process(event)]
    in_order, verdicts_first, events_first = SpendLedger(), SpendLedger(), SpendLedger()
    engine = Engine(FleetConfig.enabled_default())
    for event in trace.events:
        in_order.event(event)
        for output in engine.process(event):
            in_order.output(output)
    for output in outputs:
        verdicts_first.output(output)
    for event in trace.events:
        verdicts_first.event(event)
        events_first.event(event)
    for output in outputs:
        events_first.output(output)
    assert in_order.summary() == verdicts_first.summary() == events_first.summary()
    assert in_order.summary()["loop_spend_usd"] == pytest.approx(1.5)  # calls 11-25


def test_two_aborts_of_one_call_have_their_own_ids() -> None:
    # budget $0.50 at $0.10 a turn from call 11: the budget blocks call 15 (the first critical);
    # call 20 is the second critical (recovery abort) and reaches twice the budget (abort)
    outputs = run(costly_loop(25, 0.1), config({"loopBudget": {"usd": 0.5}}))
    ids = [o.verdict_id for o in outputs]
    assert len(ids) == len(set(ids))
    by_trigger: dict[str, list[str]] = {}
    for o in outputs:
        if isinstance(o, Abort):
            by_trigger.setdefault(o.trigger_event_id, []).append(o.reason)
    assert ["tool_loop_recovery_exhausted", "loop_budget_exhausted"] in by_trigger.values()
