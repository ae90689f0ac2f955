"""loopwatch inside a real OpenAI Agents SDK run (``Runner.run``), offline.

The model is a scripted implementation of the SDK's ``Model`` interface whose answers
propose the same function call again and again; tracing is disabled, so nothing is
exported. What the run did is read from what the SDK sent the model, from the exception it
raised and from the tool function's own record of its executions; the expected block and
abort come from the in-process core fed the same calls and results.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest
from agents import (
    Agent,
    FunctionTool,
    Runner,
    Tool,
    ToolInputGuardrailTripwireTriggered,
    function_tool,
    set_tracing_disabled,
)
from agents.testing.model import ScriptedModel, assistant_message, function_call

from loopwatch.detectors.facade import LoopDetector
from loopwatch.integrations.openai_agents import LoopwatchGuardrails
from tests.gateway_process import gateway_process

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
set_tracing_disabled(True)

RESULT = "the same page"
CALLS = 40


class Reader:
    """A tool that records every execution (the proof a call ran or did not)."""

    def __init__(self) -> None:
        self.executed: list[str] = []

        @function_tool
        def read(path: str) -> str:
            """Read a file."""
            self.executed.append(path)
            return RESULT

        self.tool: FunctionTool = read


def repeating(n: int) -> ScriptedModel:
    steps: list[Any] = [[function_call("read", {"path": "PLAN.md"}, call_id=f"call-{i}")] for i in range(n)]
    return ScriptedModel([*steps, [assistant_message("finished")]])


def expected_indices(n: int) -> tuple[int, int]:
    detector = LoopDetector()
    block = abort = -1
    for i in range(n):
        decision = detector.before_tool_call(
            "expected", "read", {"path": "PLAN.md"}, tool_call_id=f"call-{i}"
        )
        if decision.action == "block" and block < 0:
            block = i
        if decision.action == "abort":
            abort = i
            break
        if decision.proceed:
            detector.after_tool_call(
                "expected", "read", {"path": "PLAN.md"}, result=RESULT, tool_call_id=f"call-{i}"
            )
    assert 0 <= block < abort, "the core should block, then abort, this loop"
    return block, abort


def outputs_sent(model: ScriptedModel) -> dict[str, str]:
    """The function call outputs the SDK sent the model, by call id."""
    sent: dict[str, str] = {}
    for call in model.calls:
        items = call.input if isinstance(call.input, list) else []
        for item in items:
            if isinstance(item, dict) and item.get("type") == "function_call_output":
                sent[str(item["call_id"])] = str(item["output"])
    return sent


def run_looping(
    guardrails: LoopwatchGuardrails,
) -> tuple[ScriptedModel, Reader, ToolInputGuardrailTripwireTriggered]:
    model, reader = repeating(CALLS), Reader()
    agent = Agent(name="coder", model=model, tools=guardrails.attach(reader.tool))
    with pytest.raises(ToolInputGuardrailTripwireTriggered) as raised:
        asyncio.run(Runner.run(agent, "read the plan", max_turns=200))
    return model, reader, raised.value


def check_looping_run(
    model: ScriptedModel, reader: Reader, tripped: ToolInputGuardrailTripwireTriggered
) -> None:
    block, abort = expected_indices(CALLS)
    sent = outputs_sent(model)
    assert sent[f"call-{block}"].startswith("loopwatch blocked this read call")
    assert "[generic_repeat]" in sent[f"call-{block}"]
    assert any("loopwatch warning" in text for text in sent.values())
    # the tool ran for every call but the blocked one and the aborted one
    assert len(reader.executed) == abort - 1
    # the run ended on the abort (the SDK's tripwire) with the reason; the model was not asked again
    info = tripped.output.output_info
    assert info["reason"] == "tool_loop_recovery_exhausted"
    assert "[tool_loop_recovery_exhausted]" in info["message"]
    assert len(model.calls) == abort + 1


def test_a_looping_agent_is_blocked_then_stopped_in_process() -> None:
    check_looping_run(*run_looping(LoopwatchGuardrails()))


def test_a_looping_agent_is_blocked_then_stopped_through_a_gateway() -> None:
    with gateway_process() as gateway:
        guardrails = LoopwatchGuardrails(gateway_url=gateway.url)
        model, reader, tripped = run_looping(guardrails)
    assert guardrails.guard.failures == []
    check_looping_run(model, reader, tripped)


def test_a_healthy_run_is_untouched() -> None:
    def run(guardrails: LoopwatchGuardrails | None) -> tuple[Any, dict[str, str], int]:
        steps: list[Any] = [
            [function_call("read", {"path": f"f{i}.md"}, call_id=f"call-{i}")] for i in range(8)
        ]
        model, reader = ScriptedModel([*steps, [assistant_message("finished")]]), Reader()
        tools: list[Tool] = guardrails.attach(reader.tool) if guardrails else [reader.tool]
        result = asyncio.run(Runner.run(Agent(name="coder", model=model, tools=tools), "read all"))
        return result.final_output, outputs_sent(model), len(reader.executed)

    assert run(LoopwatchGuardrails()) == run(None) == ("finished", {f"call-{i}": RESULT for i in range(8)}, 8)


def test_runs_are_told_apart_without_tracing() -> None:
    guardrails = LoopwatchGuardrails()
    reader = Reader()
    tools = guardrails.attach(reader.tool)
    # two runs of 15 identical calls each: neither alone reaches the block threshold
    for _ in range(2):
        steps: list[Any] = [[function_call("read", {"path": "PLAN.md"}, call_id=f"c-{i}")] for i in range(15)]
        model = ScriptedModel([*steps, [assistant_message("finished")]])
        result = asyncio.run(Runner.run(Agent(name="coder", model=model, tools=tools), "go", max_turns=50))
        assert result.final_output == "finished"
    assert len(reader.executed) == 30
