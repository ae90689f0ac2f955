"""loopwatch inside a real PydanticAI agent (``Agent.run``), offline.

The agent's model is PydanticAI's ``OpenAIResponsesModel``, its provider pointed at the fake
model server (``FakeModel(..., ResponsesApi)`` on 127.0.0.1), whose script proposes the same
tool call again and again. What the run did is read from the requests the fake model received
(the tool results the agent sent back), from the run's result or the exception it raised, and
from the tool function's own record of its executions; the expected verdicts come from the
in-process core fed the same calls (the ids the fake model gave them) and results.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from pydantic_ai import Agent, ToolReturnPart
from pydantic_ai.models.openai import OpenAIResponsesModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.run import AgentRunResult

from loopwatch.detectors.facade import LoopDetector
from loopwatch.integrations.pydantic_ai import LoopAborted, LoopwatchCapability
from tests.gateway_process import gateway_process
from tests.helpers import ROOT
from tests.integration.fake_model import (
    Conversation,
    FakeModel,
    RepeatTool,
    Reply,
    ResponsesApi,
    Router,
    Steps,
    ToolCall,
    When,
    refused_with,
)

RESULT = "the same page"
CALLS = 40
PLAN = {"path": "PLAN.md"}

T = TypeVar("T")


class Reader:
    """A tool that records every execution (the proof a call ran or did not)."""

    def __init__(self) -> None:
        self.executed: list[str] = []

        def read(path: str) -> str:
            """Read a file."""
            self.executed.append(path)
            return RESULT

        self.read = read


def agent_on(model: FakeModel, *capabilities: LoopwatchCapability, tools: list[Any]) -> Agent[None, str]:
    """A PydanticAI agent whose model is the fake model, through the OpenAI Responses API."""
    provider = OpenAIProvider(base_url=f"{model.url}/v1", api_key="test-key")
    return Agent(
        OpenAIResponsesModel("fake-model", provider=provider),
        tools=tools,
        capabilities=list(capabilities),
    )


def run(agent: Agent[None, str], body: Callable[[Agent[None, str]], Awaitable[T]]) -> T:
    """``body(agent)`` on a fresh event loop, the agent entered (its HTTP client closed after)."""

    async def main() -> T:
        async with agent:
            return await body(agent)

    return asyncio.run(main())


def run_once(agent: Agent[None, str], prompt: str) -> AgentRunResult[str]:
    return run(agent, lambda a: a.run(prompt))


def proposed(model: FakeModel) -> list[str]:
    """The ids of the tool calls the fake model proposed, in order."""
    ids: list[str] = []
    for exchange in model.exchanges():
        response = exchange.response if isinstance(exchange.response, dict) else {}
        for item in response.get("output", []):
            if item.get("type") == "function_call":
                ids.append(str(item["call_id"]))
    return ids


def results_read(model: FakeModel) -> dict[str, str]:
    """The tool results the agent sent the model, by call id (the last request holds them all)."""
    conversations = model.conversations()
    return {o.call_id: o.text for o in conversations[-1].outcomes} if conversations else {}


def expected(call_ids: list[str], tool: str = "read", params: Any = None, result: Any = RESULT) -> list[Any]:
    """The core's decision for each call, fed the same calls and results, up to its abort."""
    detector = LoopDetector()
    decisions: list[Any] = []
    for call_id in call_ids:
        decision = detector.before_tool_call("expected", tool, params or PLAN, tool_call_id=call_id)
        decisions.append(decision)
        if decision.action == "abort":
            break
        if decision.proceed:
            detector.after_tool_call("expected", tool, params or PLAN, result=result, tool_call_id=call_id)
    return decisions


def check_each_result(model: FakeModel, decisions: list[Any]) -> None:
    """Each call's result as the model read it is what the core's decision says it should be."""
    read = results_read(model)
    for call_id, decision in zip(proposed(model), decisions, strict=False):
        if decision.action == "abort":
            assert call_id not in read  # the run ended: nothing went back to the model
            continue
        text = read[call_id]
        if decision.action == "allow":
            assert text == RESULT
        elif decision.action == "warn":
            assert text.startswith(f"{RESULT}\n\nloopwatch warning")
            assert f"[{decision.reason}]" in text
        else:
            assert decision.action == "block"
            assert text.startswith("loopwatch blocked this read call")
            assert f"[{decision.reason}]" in text


def run_looping(capability: LoopwatchCapability) -> tuple[FakeModel, Reader, LoopAborted]:
    reader = Reader()
    with FakeModel(RepeatTool("read", PLAN, max_calls=CALLS), ResponsesApi) as model:
        agent = agent_on(model, capability, tools=[reader.read])
        with pytest.raises(LoopAborted) as raised:
            run_once(agent, "read the plan")
    return model, reader, raised.value


def check_looping_run(model: FakeModel, reader: Reader, aborted: LoopAborted) -> None:
    decisions = expected(proposed(model))
    actions = [d.action for d in decisions]
    assert "warn" in actions, "the core should warn on this loop"
    assert "block" in actions, "the core should block this loop"
    assert actions[-1] == "abort", "the core should abort this loop"
    assert len(proposed(model)) == len(decisions)
    check_each_result(model, decisions)
    # the tool ran exactly for the calls the core let through
    assert len(reader.executed) == sum(1 for d in decisions if d.proceed)
    # the run ended on the abort, with its reason; the model was not asked again
    assert aborted.reason == decisions[-1].reason == "tool_loop_recovery_exhausted"
    assert "[tool_loop_recovery_exhausted]" in str(aborted)
    assert len(model.conversations()) == len(decisions)


def test_a_looping_agent_is_warned_blocked_then_stopped_in_process() -> None:
    capability = LoopwatchCapability()
    model, reader, aborted = run_looping(capability)
    check_looping_run(model, reader, aborted)
    assert capability.guard.failures == []
    detector = capability.guard.detector
    assert detector is not None
    assert detector._engine.states == {}  # the aborted run was ended and forgotten


def test_a_looping_agent_is_warned_blocked_then_stopped_through_a_gateway() -> None:
    with gateway_process() as gateway:
        capability = LoopwatchCapability(gateway_url=gateway.url)
        model, reader, aborted = run_looping(capability)
    assert capability.guard.failures == []
    check_looping_run(model, reader, aborted)


def test_a_blocked_call_is_recorded_as_denied_and_the_run_can_finish() -> None:
    """The model gives up once blocked: the run ends normally, its history holds the refusal."""
    reader = Reader()
    script = RepeatTool("read", PLAN, max_calls=CALLS, stop_when=refused_with("loopwatch blocked"))
    with FakeModel(script, ResponsesApi) as model:
        result = run_once(agent_on(model, LoopwatchCapability(), tools=[reader.read]), "read the plan")
    decisions = expected(proposed(model))
    assert decisions[-1].action == "block"
    check_each_result(model, decisions)
    assert result.output == "Done."
    assert len(reader.executed) == len(decisions) - 1
    returns = {
        part.tool_call_id: part
        for message in result.all_messages()
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    }
    blocked = returns[proposed(model)[-1]]
    assert blocked.outcome == "denied"
    assert str(blocked.content).startswith("loopwatch blocked this read call")
    assert {p.outcome for p in returns.values()} == {"success", "denied"}


def test_a_healthy_run_is_untouched() -> None:
    def healthy(capabilities: list[LoopwatchCapability]) -> tuple[str, dict[str, str], list[str]]:
        steps = [Reply(calls=(ToolCall("read", {"path": f"f{i}.md"}),)) for i in range(8)]
        reader = Reader()
        with FakeModel(Steps(*steps, final_text="finished"), ResponsesApi) as model:
            result = run_once(agent_on(model, *capabilities, tools=[reader.read]), "read all")
        read = results_read(model)
        return (
            result.output,
            {str(i): read[call_id] for i, call_id in enumerate(proposed(model))},
            reader.executed,
        )

    untouched = healthy([])
    assert healthy([LoopwatchCapability()]) == untouched
    assert untouched == ("finished", {str(i): RESULT for i in range(8)}, [f"f{i}.md" for i in range(8)])


class RecordingDetector(LoopDetector):
    """The core, recording the run, call id, session and parent each call was asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[dict[str, Any]] = []

    def before_tool_call(self, run_id: str, tool: str, params: Any, **kwargs: Any) -> Any:
        self.asked.append({"run_id": run_id, "tool": tool, "params": params, **kwargs})
        return super().before_tool_call(run_id, tool, params, **kwargs)


def test_each_agent_run_is_a_run_and_call_ids_are_pydantic_ais() -> None:
    detector = RecordingDetector()
    reader = Reader()
    # two runs of 15 identical calls each: neither alone reaches the block
    with FakeModel(RepeatTool("read", PLAN, max_calls=15), ResponsesApi) as model:
        agent = agent_on(model, LoopwatchCapability(detector), tools=[reader.read])
        first, second = run(agent, lambda a: asyncio.gather(a.run("read the plan"), a.run("read it again")))
    assert first.output == second.output == "Done."
    assert len(reader.executed) == 30
    runs = {first.run_id: first.conversation_id, second.run_id: second.conversation_id}
    assert len(runs) == 2
    assert {asked["run_id"] for asked in detector.asked} == set(runs)
    for asked in detector.asked:
        assert asked["session_id"] == runs[asked["run_id"]]
        assert asked["parent_run_id"] is None
        assert asked["params"] == PLAN
    # the event ids are the tool call ids PydanticAI read from the model's answers
    assert sorted(asked["tool_call_id"] for asked in detector.asked) == sorted(proposed(model))
    assert detector._engine.states == {}  # both runs ended


def test_a_subagent_is_its_callers_child_and_its_abort_ends_only_it() -> None:
    """A tool that runs another agent (agent delegation): the inner run names the calling run
    as its parent; its abort ends it, and the calling agent's model reads why."""
    detector = RecordingDetector()
    reader = Reader()
    script = Router(
        {"read the plan": RepeatTool("read", PLAN, max_calls=CALLS)},
        default=Steps(Reply(calls=(ToolCall("delegate", {"task": "read the plan"}),)), final_text="finished"),
    )
    with FakeModel(script, ResponsesApi) as model:
        capability = LoopwatchCapability(detector)
        worker = agent_on(model, capability, tools=[reader.read])

        async def delegate(task: str) -> str:
            """Give a task to the worker agent."""
            return (await worker.run(task)).output

        lead = agent_on(model, capability, tools=[delegate])

        async def main() -> AgentRunResult[str]:
            async with worker, lead:
                return await lead.run("coordinate the work")

        result = asyncio.run(main())
    assert result.output == "finished"
    lead_runs = {a["run_id"] for a in detector.asked if a["tool"] == "delegate"}
    assert lead_runs == {result.run_id}
    worker_calls = [a for a in detector.asked if a["tool"] == "read"]
    assert {a["parent_run_id"] for a in worker_calls} == {result.run_id}
    assert len({a["run_id"] for a in worker_calls}) == 1
    assert worker_calls[0]["run_id"] != result.run_id
    # the worker was stopped where the core stops it; the lead's model read the abort's reason
    worker_ids = [str(a["tool_call_id"]) for a in worker_calls]
    decisions = expected(worker_ids)
    assert decisions[-1].action == "abort"
    assert len(reader.executed) == sum(1 for d in decisions if d.proceed)
    lead_turns = [c for c in model.conversations() if c.prompt == "coordinate the work"]
    assert len(lead_turns) == 2
    (answer,) = lead_turns[-1].last_outcomes
    assert answer.name == "delegate"
    assert "[tool_loop_recovery_exhausted]" in answer.text
    assert detector._engine.states == {}


def test_a_warning_goes_with_a_structured_result_which_stays_as_it_was() -> None:
    """A result that is not text keeps its value; the warning is sent with it to the model."""
    stats = {"files": 3, "lines": 120}
    executed: list[int] = []

    def count() -> dict[str, int]:
        """Count the files."""
        executed.append(1)
        return stats

    def warned(conversation: Conversation) -> bool:
        return conversation.mentions("loopwatch warning")

    # (the warning comes as a message of its own after the result: the script stops once it has it)
    script = When(warned, Steps(), RepeatTool("count", {}, max_calls=CALLS))
    with FakeModel(script, ResponsesApi) as model:
        result = run_once(agent_on(model, LoopwatchCapability(), tools=[count]), "count the files")
    decisions = expected(proposed(model), tool="count", params={}, result=stats)
    assert [d.action for d in decisions].index("warn") == len(decisions) - 1  # it stopped at the warning
    assert result.output == "Done."
    assert len(executed) == len(decisions)
    read = results_read(model)
    assert all(json.loads(text) == stats for text in read.values())
    last_request = model.exchanges()[-1].body
    items = last_request["input"]
    answer = max(i for i, item in enumerate(items) if item.get("type") == "function_call_output")
    after = json.dumps(items[answer + 1 :])
    assert "loopwatch warning" in after
    assert f"[{decisions[-1].reason}]" in after
    assert "loopwatch warning" not in json.dumps(items[:answer])


def test_an_unreachable_gateway_fails_open() -> None:
    with gateway_process() as gateway:
        url = gateway.url
    capability = LoopwatchCapability(gateway_url=url, timeout_s=1)  # the gateway is gone
    reader = Reader()
    with FakeModel(RepeatTool("read", PLAN, max_calls=25), ResponsesApi) as model:
        result = run_once(agent_on(model, capability, tools=[reader.read]), "read the plan")
    assert len(reader.executed) == 25
    assert result.output == "Done."
    assert set(results_read(model).values()) == {RESULT}
    assert capability.guard.failures


def test_an_unreachable_gateway_with_fail_open_false_refuses_the_call() -> None:
    with gateway_process() as gateway:
        url = gateway.url
    capability = LoopwatchCapability(gateway_url=url, timeout_s=1, fail_open=False)
    reader = Reader()
    script = RepeatTool("read", PLAN, max_calls=5, stop_when=refused_with("loopwatch could not check"))
    with FakeModel(script, ResponsesApi) as model:
        result = run_once(agent_on(model, capability, tools=[reader.read]), "read the plan")
    assert reader.executed == []
    assert result.output == "Done."
    (refusal,) = results_read(model).values()
    assert refusal.startswith("loopwatch could not check this call, so it was not run")


def test_the_quick_start_of_the_docs_runs_as_pasted(tmp_path: Path) -> None:
    page = (ROOT / "docs" / "pydantic-ai.md").read_text()
    snippet = re.search(r"```python\n(.*?)```", page, re.S)
    assert snippet, "docs/pydantic-ai.md has a python quick start"
    script = tmp_path / "quick_start.py"
    script.write_text(snippet.group(1))
    done = subprocess.run(
        [sys.executable, "-W", "error", str(script)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("tool_loop_recovery_exhausted")
