"""loopwatch inside a real OpenAI Agents SDK run (``Runner.run``), offline.

The model is a scripted implementation of the SDK's ``Model`` interface whose answers
propose the same function call again and again; tracing is disabled, so nothing is
exported. What the run did is read from what the SDK sent the model, from the exception it
raised and from the tool function's own record of its executions; the expected block and
abort come from the in-process core fed the same calls and results.
"""

from __future__ import annotations

import asyncio
import datetime
import gc
import json
import os
import urllib.parse
import urllib.request
from typing import Any

import pytest
from agents import (
    Agent,
    FunctionTool,
    RunConfig,
    Runner,
    Tool,
    ToolInputGuardrailTripwireTriggered,
    ToolOutputImage,
    function_tool,
    set_tracing_disabled,
)
from agents.run_config import ToolExecutionConfig
from agents.testing.model import ScriptedModel, assistant_message, function_call

from loopwatch.detectors.facade import LoopDetector
from loopwatch.integrations import Call, Ruling
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


def test_a_new_runner_run_in_the_same_trace_starts_clean() -> None:
    """Several ``Runner.run`` calls under one trace are one conversation: each is a run of its
    own, so the abort of a looping turn does not refuse the next turn's first call."""
    guardrails = LoopwatchGuardrails()
    config = RunConfig(trace_id="trace_conversation", group_id="chat-1")
    model, reader = repeating(CALLS), Reader()
    agent = Agent(name="coder", model=model, tools=guardrails.attach(reader.tool))
    with pytest.raises(ToolInputGuardrailTripwireTriggered):
        asyncio.run(Runner.run(agent, "read the plan", max_turns=200, run_config=config))
    ran = len(reader.executed)
    steps: list[Any] = [[function_call("read", {"path": "OTHER.md"}, call_id="next-0")]]
    agent.model = ScriptedModel([*steps, [assistant_message("done")]])
    result = asyncio.run(Runner.run(agent, "now the other file", run_config=config))
    assert result.final_output == "done"
    assert reader.executed[ran:] == ["OTHER.md"]


def test_a_finished_run_is_forgotten_by_the_in_process_detector() -> None:
    guardrails = LoopwatchGuardrails()
    reader = Reader()
    tools = guardrails.attach(reader.tool)
    for n in range(5):
        steps: list[Any] = [[function_call("read", {"path": "a.md"}, call_id=f"r{n}-{i}")] for i in range(3)]
        model = ScriptedModel([*steps, [assistant_message("finished")]])
        result = asyncio.run(Runner.run(Agent(name="coder", model=model, tools=tools), "go"))
        assert result.final_output == "finished"
    del result
    gc.collect()
    detector = guardrails.guard.detector
    assert detector is not None
    guardrails._end_finished()  # (done at the next guardrail call)
    assert detector._engine.states == {}


def test_an_output_json_cannot_hold_is_reported_and_the_run_goes_on() -> None:
    guardrails = LoopwatchGuardrails()

    @function_tool
    def counts(day: str) -> dict[Any, int]:
        """Counts by date."""
        return {datetime.date(2024, 1, 1): 3}

    steps: list[Any] = [[function_call("counts", {"day": "x"}, call_id="c-0")]]
    model = ScriptedModel([*steps, [assistant_message("finished")]])
    agent = Agent(name="coder", model=model, tools=guardrails.attach(counts))
    assert asyncio.run(Runner.run(agent, "go")).final_output == "finished"


def test_a_warned_image_stays_an_image_and_its_warning_comes_with_the_next_text() -> None:
    """A warning replaces the warned output with text plus the warning: for an image that
    would lose the image, so the image goes as it is and the warning with the next text."""
    guardrails = LoopwatchGuardrails()
    pixel = "data:image/png;base64,iVBORw0KGgo="

    @function_tool
    def screenshot() -> ToolOutputImage:
        """Take a screenshot."""
        return ToolOutputImage(image_url=pixel)

    reader = Reader()
    steps: list[Any] = [[function_call("screenshot", {}, call_id=f"s-{i}")] for i in range(14)]
    steps.append([function_call("read", {"path": "notes.md"}, call_id="after")])
    model = ScriptedModel([*steps, [assistant_message("finished")]])
    agent = Agent(name="coder", model=model, tools=guardrails.attach(screenshot, reader.tool))
    assert asyncio.run(Runner.run(agent, "go", max_turns=50)).final_output == "finished"
    outputs: dict[str, Any] = {}
    for call in model.calls:
        for item in call.input if isinstance(call.input, list) else []:
            if isinstance(item, dict) and item.get("type") == "function_call_output":
                outputs[str(item["call_id"])] = item["output"]
    for i in range(14):  # a screenshot among them was warned (the read alone cannot be)
        shown = outputs[f"s-{i}"]
        assert isinstance(shown, list)
        assert shown[0]["type"] == "input_image"
    assert "loopwatch warning" in str(outputs["after"])
    assert str(outputs["after"]).startswith(RESULT)


# -- a call that needs approval: asked about before the approval and after it -----------------


def run_with_approvals(
    guardrails: LoopwatchGuardrails, pre_approval: bool
) -> tuple[ScriptedModel, Reader, ToolInputGuardrailTripwireTriggered, dict[str, int]]:
    """The looping run with a tool that needs approval: each call pauses the run, a human
    approves it, and the run resumes from its ``RunState`` (``Runner.run(agent, state)``).
    With ``pre_approval`` the SDK runs the input guardrail before the approval too, and again
    after it. The count of times loopwatch was asked about each call id comes back too."""
    model, reader = repeating(CALLS), Reader()
    reader.tool.needs_approval = True
    asked: dict[str, int] = {}
    before = guardrails.guard.before

    def counted(call: Call) -> Ruling:
        asked[str(call.tool_call_id)] = asked.get(str(call.tool_call_id), 0) + 1
        return before(call)

    guardrails.guard.before = counted  # type: ignore[method-assign]
    agent = Agent(name="coder", model=model, tools=guardrails.attach(reader.tool))
    config = RunConfig(tool_execution=ToolExecutionConfig(pre_approval_tool_input_guardrails=pre_approval))

    async def approving() -> None:
        result = await Runner.run(agent, "read the plan", max_turns=200, run_config=config)
        while result.interruptions:
            state = result.to_state()
            for item in result.interruptions:
                state.approve(item)
            del result  # (the paused Runner.run is over: its context goes)
            gc.collect()
            result = await Runner.run(agent, state, run_config=config)

    with pytest.raises(ToolInputGuardrailTripwireTriggered) as raised:
        asyncio.run(approving())
    return model, reader, raised.value, asked


@pytest.mark.parametrize("pre_approval", [True, False], ids=["guardrail-before-and-after", "guardrail-after"])
def test_a_call_asked_about_before_and_after_its_approval_counts_once_in_process(pre_approval: bool) -> None:
    """The block and the abort come at the calls where the core, fed each call once, gives
    them: a call asked twice (before and after its approval) is counted once, and the
    ``Runner.run`` that resumes a paused run continues its run (not a run of its own)."""
    model, reader, tripped, asked = run_with_approvals(LoopwatchGuardrails(), pre_approval)
    check_looping_run(model, reader, tripped)
    block, abort = expected_indices(CALLS)
    # the SDK did ask twice for every call that ran (before its approval, then after it), once
    # for the blocked one (refused before any approval) and the aborting one
    ran = [i for i in range(abort) if i != block]
    twice = 2 if pre_approval else 1
    assert asked == {**{f"call-{i}": twice for i in ran}, f"call-{block}": 1, f"call-{abort}": 1}


def test_a_call_asked_about_before_and_after_its_approval_counts_once_through_a_gateway() -> None:
    with gateway_process() as gateway:
        guardrails = LoopwatchGuardrails(gateway_url=gateway.url)
        model, reader, tripped, asked = run_with_approvals(guardrails, pre_approval=True)
        run_id = tripped.output.output_info["run_id"]
        with urllib.request.urlopen(f"{gateway.url}/fleet/run?id={urllib.parse.quote(run_id)}") as page:
            run = json.loads(page.read())
    assert guardrails.guard.failures == []
    check_looping_run(model, reader, tripped)
    block, abort = expected_indices(CALLS)
    assert asked[f"call-{block - 1}"] == 2  # asked twice...
    assert run["calls"] == abort + 1  # ...counted once: one call of the run per call id
    assert run["results"] == abort - 1


def test_a_run_paused_for_an_approval_is_not_ended_when_its_first_runner_run_is_over() -> None:
    """The paused ``Runner.run``'s context goes before the resume: its run is kept (not
    ended), and ended once the resumed ``Runner.run`` is over."""
    guardrails = LoopwatchGuardrails()
    detector = guardrails.guard.detector
    assert detector is not None
    reader = Reader()
    reader.tool.needs_approval = True
    steps: list[Any] = [[function_call("read", {"path": "a.md"}, call_id=f"p-{i}")] for i in range(3)]
    model = ScriptedModel([*steps, [assistant_message("finished")]])
    agent = Agent(name="coder", model=model, tools=guardrails.attach(reader.tool))
    config = RunConfig(tool_execution=ToolExecutionConfig(pre_approval_tool_input_guardrails=True))

    async def approving() -> str:
        result = await Runner.run(agent, "go", run_config=config)
        runs: set[str] = set()
        while result.interruptions:
            state = result.to_state()
            state.approve(result.interruptions[0])
            del result
            gc.collect()
            guardrails._end_finished()  # (done at the next guardrail call)
            runs |= set(detector._engine.states)
            assert len(runs) == 1  # the one run, kept while paused
            result = await Runner.run(agent, state, run_config=config)
        return str(result.final_output)

    assert asyncio.run(approving()) == "finished"
    assert reader.executed == ["a.md"] * 3
    gc.collect()
    guardrails._end_finished()
    assert detector._engine.states == {}
