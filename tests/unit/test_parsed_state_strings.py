"""A run state parsed from its bytes keeps one string per hash and per tool name, as the state
stepped in memory does: the hashes and tools the rules keep are the history's own objects
(``RunState.from_snapshot``), and parsing changes nothing a snapshot holds."""

from __future__ import annotations

from loopwatch.config import parse_config_text
from loopwatch.detectors.engine import Engine
from loopwatch.detectors.events import ToolCall, ToolResult
from loopwatch.detectors.rules.call_cycle import RecentCalls
from loopwatch.detectors.rules.same_call_streak import Streak
from loopwatch.detectors.state import RunState

AGENTS = parse_config_text('{"loopwatch": {"preset": "agents"}}')


def stepped(calls: int) -> RunState:
    """A run of ``calls`` reads of different files (and their results) under the agents preset."""
    engine = Engine(AGENTS)
    for n in range(calls):
        params = {"path": f"/src/file_{n}.py"}
        engine.process(
            ToolCall(event_id=f"c{n}", run_id="run-1", tool="read", params=params, tool_call_id=f"t{n}")
        )
        engine.process(
            ToolResult(
                event_id=f"r{n}",
                run_id="run-1",
                tool="read",
                params=params,
                tool_call_id=f"t{n}",
                result={"content": f"{n} lines"},
            )
        )
    return engine.states["run-1"]


def test_the_rules_hashes_and_tools_are_the_historys_own_strings() -> None:
    state = stepped(30)
    parsed = RunState.from_bytes(state.to_bytes())
    assert parsed.snapshot() == state.snapshot()
    records = {record.args_hash: record for record in parsed.history.records}
    recent = parsed.rule_states["call_cycle"]
    assert isinstance(recent, RecentCalls)
    assert len(recent.hashes) == 20
    assert all(records[digest].args_hash is digest for digest in recent.hashes)
    tools = {id(record.tool) for record in parsed.history.records} | {id(tool) for tool in recent.tools}
    assert len(tools) == 1
    streak = parsed.rule_states["same_call_streak"]
    assert isinstance(streak, Streak)
    assert records[streak.args_hash].args_hash is streak.args_hash
    assert parsed.run_id is parsed.scope


def test_a_parsed_state_steps_on_as_the_one_kept_in_memory() -> None:
    state = stepped(28)
    parsed = RunState.from_bytes(state.to_bytes())
    answers = []
    for kept in (state, parsed):  # the last two calls again, twice: a cycle under the preset
        engine = Engine(AGENTS)
        engine.states["run-1"] = kept
        outputs = []
        for index, n in enumerate((26, 27, 26, 27)):
            call = ToolCall(
                event_id=f"again-{index}", run_id="run-1", tool="read", params={"path": f"/src/file_{n}.py"}
            )
            outputs += engine.process(call)
        answers.append(outputs)
    assert answers[0] == answers[1]
    assert answers[0]  # (a cycle: verdicts to compare)
    assert parsed.snapshot() == state.snapshot()
