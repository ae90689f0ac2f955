"""loopwatch inside a real LangChain 1.x agent (``create_agent`` on LangGraph), offline.

The model is langchain_core's scripted chat model; its answers propose the same tool call
again and again. What the agent did is read from the agent's own messages and from the tool
function's own record of its executions; the expected block and abort come from the
in-process core fed the same calls and results.
"""

from __future__ import annotations

import asyncio
import json
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Annotated, Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import BaseTool, InjectedToolCallId, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command, interrupt

from loopwatch.detectors.facade import LoopDetector
from loopwatch.integrations import Call
from loopwatch.integrations.langchain import LoopAborted, LoopwatchMiddleware
from tests.gateway_process import gateway_process

RESULT = "the same page"
CALLS = 40


class ScriptedModel(FakeMessagesListChatModel):
    """Answers from a script; tools are bound by the agent but the script decides."""

    calls: int = 0

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self

    def _generate(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return super()._generate(*args, **kwargs)


def repeating(n: int, tool_name: str = "read", args: dict[str, Any] | None = None) -> ScriptedModel:
    steps: list[BaseMessage] = [
        AIMessage(
            content="",
            tool_calls=[{"name": tool_name, "args": args or {"path": "PLAN.md"}, "id": f"call-{i}"}],
        )
        for i in range(n)
    ]
    return ScriptedModel(responses=[*steps, AIMessage(content="finished")])


class Reader:
    """A tool that records every execution (the proof a call ran or did not)."""

    def __init__(self) -> None:
        self.executed: list[str] = []

        @tool
        def read(path: str) -> str:
            """Read a file."""
            self.executed.append(path)
            return RESULT

        self.tool: BaseTool = read


def expected_indices(n: int) -> tuple[int, int]:
    """The first call the core blocks and the first it aborts, fed the same calls and results."""
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


def tool_messages(messages: list[Any]) -> dict[str, ToolMessage]:
    return {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}


def check_looping_run(messages: list[Any], model: ScriptedModel, reader: Reader) -> None:
    block, abort = expected_indices(CALLS)
    answers = tool_messages(messages)
    # every call up to the abort was answered, and none after it was proposed (the run ended)
    assert sorted(answers) == sorted(f"call-{i}" for i in range(abort + 1))
    blocked = answers[f"call-{block}"]
    assert blocked.status == "error"
    assert str(blocked.content).startswith("loopwatch blocked this read call")
    assert "[generic_repeat]" in str(blocked.content)
    aborted = answers[f"call-{abort}"]
    assert str(aborted.content).startswith("loopwatch stopped this turn")
    # the tool ran for every call but the blocked one and the aborted one
    assert len(reader.executed) == abort - 1
    # the run ended on the abort: its last message says why, and the model was not asked again
    final = messages[-1]
    assert isinstance(final, AIMessage)
    assert "[tool_loop_recovery_exhausted]" in str(final.content)
    assert model.calls == abort + 1
    # the warning before the block reached the model with a result
    assert any("loopwatch warning" in str(m.content) for m in answers.values())


def test_a_looping_agent_is_blocked_then_stopped_in_process() -> None:
    model, reader = repeating(CALLS), Reader()
    agent = create_agent(model, tools=[reader.tool], middleware=[LoopwatchMiddleware()])
    out = agent.invoke({"messages": [{"role": "user", "content": "read the plan"}]}, {"recursion_limit": 500})
    check_looping_run(out["messages"], model, reader)


def test_the_async_agent_is_stopped_the_same_way() -> None:
    model, reader = repeating(CALLS), Reader()
    agent = create_agent(model, tools=[reader.tool], middleware=[LoopwatchMiddleware()])
    out = asyncio.run(
        agent.ainvoke({"messages": [{"role": "user", "content": "read the plan"}]}, {"recursion_limit": 500})
    )
    check_looping_run(out["messages"], model, reader)


def test_a_looping_agent_is_blocked_then_stopped_through_a_gateway() -> None:
    model, reader = repeating(CALLS), Reader()
    with gateway_process() as gateway:
        middleware = LoopwatchMiddleware(gateway_url=gateway.url)
        agent = create_agent(model, tools=[reader.tool], middleware=[middleware])
        out = agent.invoke(
            {"messages": [{"role": "user", "content": "read the plan"}]}, {"recursion_limit": 500}
        )
    assert middleware.guard.failures == []
    check_looping_run(out["messages"], model, reader)


def test_on_abort_error_raises_with_the_reason() -> None:
    model, reader = repeating(CALLS), Reader()
    agent = create_agent(model, tools=[reader.tool], middleware=[LoopwatchMiddleware(on_abort="error")])
    with pytest.raises(LoopAborted) as raised:
        agent.invoke({"messages": [{"role": "user", "content": "read the plan"}]}, {"recursion_limit": 500})
    _block, abort = expected_indices(CALLS)
    assert raised.value.reason == "tool_loop_recovery_exhausted"
    assert len(reader.executed) == abort - 1


def test_a_healthy_run_is_untouched() -> None:
    def run(middleware: list[Any]) -> list[Any]:
        steps: list[BaseMessage] = [
            AIMessage(
                content="", tool_calls=[{"name": "read", "args": {"path": f"f{i}.md"}, "id": f"call-{i}"}]
            )
            for i in range(8)
        ]
        agent = create_agent(
            ScriptedModel(responses=[*steps, AIMessage(content="finished")]),
            tools=[Reader().tool],
            middleware=middleware,
        )
        out = agent.invoke({"messages": [{"role": "user", "content": "read all"}]})
        return [(type(m).__name__, m.content, getattr(m, "status", None)) for m in out["messages"]]

    assert run([LoopwatchMiddleware()]) == run([])


def test_an_unreachable_gateway_fails_open() -> None:
    with gateway_process() as gateway:
        url = gateway.url
    middleware = LoopwatchMiddleware(gateway_url=url, timeout_s=1)  # the gateway is gone
    model, reader = repeating(25), Reader()
    agent = create_agent(model, tools=[reader.tool], middleware=[middleware])
    out = agent.invoke({"messages": [{"role": "user", "content": "read the plan"}]}, {"recursion_limit": 500})
    assert len(reader.executed) == 25
    assert out["messages"][-1].content == "finished"
    assert middleware.guard.failures


class RecordingDetector(LoopDetector):
    """The core, recording the run, session and parent each call was asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[tuple[str, str, str | None, str | None]] = []

    def before_tool_call(self, run_id: str, tool: str, params: Any, **kwargs: Any) -> Any:
        self.asked.append((run_id, tool, kwargs.get("session_id"), kwargs.get("parent_run_id")))
        return super().before_tool_call(run_id, tool, params, **kwargs)


def test_runs_are_invocations_of_a_thread_and_subagents_name_their_parent() -> None:
    detector = RecordingDetector()
    middleware = LoopwatchMiddleware(detector)
    reader = Reader()
    inner = create_agent(repeating(1), tools=[reader.tool], middleware=[middleware])

    @tool
    def delegate(task: str) -> str:
        """Hand a task to a subagent."""
        out = inner.invoke({"messages": [{"role": "user", "content": task}]})
        return str(out["messages"][-1].content)

    outer = create_agent(
        repeating(1, "delegate", {"task": "read"}),
        tools=[delegate],
        middleware=[middleware],
        checkpointer=InMemorySaver(),
    )
    outer.invoke({"messages": [{"role": "user", "content": "go"}]}, {"configurable": {"thread_id": "t-1"}})
    (outer_run, tool1, session1, parent1), (inner_run, tool2, _session2, parent2) = detector.asked
    assert (tool1, session1, parent1) == ("delegate", "t-1", None)
    assert tool2 == "read"
    assert parent2 == outer_run
    assert inner_run != outer_run
    # a second invocation of the thread is a new run of the same session
    outer_again = create_agent(
        repeating(1, "delegate", {"task": "read"}), tools=[delegate], middleware=[middleware]
    )
    outer_again.invoke(
        {"messages": [{"role": "user", "content": "again"}]}, {"configurable": {"thread_id": "t-1"}}
    )
    assert detector.asked[2][0] not in (outer_run, inner_run)
    assert detector.asked[2][2] == "t-1"


def test_a_tool_that_answers_with_a_command_gets_its_warning() -> None:
    """Tools may return a ``Command`` whose update holds the call's ``ToolMessage``: the
    warning goes into that message, as into a plain one."""

    @tool
    def browse(url: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> Command[Any]:
        """Open a page."""
        return Command(update={"messages": [ToolMessage(RESULT, tool_call_id=tool_call_id)]})

    def run(tool_: BaseTool) -> dict[str, ToolMessage]:
        model = ScriptedModel(
            responses=[
                *[
                    AIMessage(
                        content="", tool_calls=[{"name": tool_.name, "args": {"url": "u"}, "id": f"c{i}"}]
                    )
                    for i in range(12)
                ],
                AIMessage(content="finished"),
            ]
        )
        agent = create_agent(model, tools=[tool_], middleware=[LoopwatchMiddleware()])
        return tool_messages(agent.invoke({"messages": [{"role": "user", "content": "go"}]})["messages"])

    @tool
    def plain(url: str) -> str:
        """Open a page."""
        return RESULT

    commanded, plained = run(browse), run(plain)
    warned = [i for i in range(12) if "loopwatch warning" in str(plained[f"c{i}"].content)]
    assert warned
    assert [i for i in range(12) if "loopwatch warning" in str(commanded[f"c{i}"].content)] == warned


def test_an_interrupted_call_is_decided_once_and_is_no_failure() -> None:
    """``interrupt()`` in a tool pauses the call; on resume the tool runs again from its start.
    The call is one call: asked about once, never reported as an error."""
    detector = RecordingDetector()
    reported: list[str] = []
    after = detector.after_tool_call

    def record(run_id: str, tool: str, params: Any, **kwargs: Any) -> Any:
        reported.append("error" if kwargs.get("error") is not None else "result")
        return after(run_id, tool, params, **kwargs)

    detector.after_tool_call = record  # type: ignore[method-assign]

    @tool
    def deploy(target: str) -> str:
        """Deploy, once a human approved."""
        approved = interrupt({"approve": target})
        return f"deployed {target}: {approved}"

    calls = [
        AIMessage(content="", tool_calls=[{"name": "deploy", "args": {"target": "prod"}, "id": f"c{i}"}])
        for i in range(3)
    ]
    model = ScriptedModel(responses=[*calls, AIMessage(content="finished")])
    agent = create_agent(
        model, tools=[deploy], middleware=[LoopwatchMiddleware(detector)], checkpointer=InMemorySaver()
    )
    config: Any = {"configurable": {"thread_id": "t1"}}
    out = agent.invoke({"messages": [{"role": "user", "content": "deploy"}]}, config)
    while "__interrupt__" in out:
        out = agent.invoke(Command(resume="yes"), config)
    assert len(detector.asked) == 3
    assert reported == ["result"] * 3


def test_a_run_that_ends_on_its_abort_error_is_forgotten() -> None:
    detector = LoopDetector()
    model, reader = repeating(CALLS), Reader()
    middleware = LoopwatchMiddleware(detector, on_abort="error")
    agent = create_agent(model, tools=[reader.tool], middleware=[middleware])
    with pytest.raises(LoopAborted):
        agent.invoke({"messages": [{"role": "user", "content": "read the plan"}]}, {"recursion_limit": 500})
    assert detector._engine.states == {}  # the detector forgot the run
    (run_id,) = middleware._aborted  # the middleware keeps its abort (bounded): a call of the
    call = Call(run_id, "read", {"path": "x"}, "parallel")  # run still in flight is refused
    assert middleware._abort_of(call) is middleware._aborted[run_id]


def test_an_unreachable_gateway_refuses_every_call_when_failing_closed() -> None:
    with gateway_process() as gateway:
        url = gateway.url
    middleware = LoopwatchMiddleware(gateway_url=url, timeout_s=1, fail_open=False)
    model, reader = repeating(3), Reader()
    agent = create_agent(model, tools=[reader.tool], middleware=[middleware])
    out = agent.invoke({"messages": [{"role": "user", "content": "read the plan"}]}, {"recursion_limit": 500})
    assert reader.executed == []
    refusals = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert len(refusals) == 3
    assert all(str(m.content).startswith("loopwatch could not check this call") for m in refusals)


def test_the_async_agent_ends_an_aborted_run_off_its_event_loop() -> None:
    import threading

    class EndRecording(LoopDetector):
        def __init__(self) -> None:
            super().__init__()
            self.ended_on: list[threading.Thread] = []

        def end_run(self, run_id: str) -> None:
            self.ended_on.append(threading.current_thread())
            super().end_run(run_id)

    detector = EndRecording()
    model, reader = repeating(CALLS), Reader()
    agent = create_agent(
        model, tools=[reader.tool], middleware=[LoopwatchMiddleware(detector, on_abort="error")]
    )
    with pytest.raises(LoopAborted):
        asyncio.run(
            agent.ainvoke(
                {"messages": [{"role": "user", "content": "read the plan"}]}, {"recursion_limit": 500}
            )
        )
    assert detector.ended_on  # the run was ended, on a worker thread: a gateway's slow answer
    assert all(thread is not threading.main_thread() for thread in detector.ended_on)  # blocks no loop


def expected_positions(
    n: int, tool_name: str, args: dict[str, Any], result: str, ids: str = "call-{i}"
) -> tuple[int, int]:
    """The first call the core blocks and the one it aborts, fed each call once (``ids``: the
    call ids, ``{i}`` the call's number)."""
    detector = LoopDetector()
    block = -1
    for i in range(n):
        call_id = ids.format(i=i)
        decision = detector.before_tool_call("expected", tool_name, args, tool_call_id=call_id)
        if decision.action == "block" and block < 0:
            block = i
        if decision.action == "abort":
            assert block >= 0
            return block, i
        if decision.proceed:
            detector.after_tool_call("expected", tool_name, args, result=result, tool_call_id=call_id)
    raise AssertionError("the core should block, then abort, this loop")


def test_a_call_resumed_by_another_process_counts_once_through_a_gateway() -> None:
    """A tool that asks a human (``interrupt()``) runs again from its start when the graph
    resumes, here each time by a new middleware (another process, after a restart: nothing of
    the first ask is remembered in it), through the same gateway: the call is asked about
    twice, and counted once. The block and the abort come where the core, fed each call once,
    gives them."""
    started: list[str] = []
    deployed: list[str] = []

    @tool
    def deploy(target: str) -> str:
        """Deploy, once a human approved."""
        started.append(target)
        approved = interrupt({"approve": target})
        deployed.append(target)
        return f"deployed {target}: {approved}"

    model = repeating(CALLS, "deploy", {"target": "prod"})
    saver = InMemorySaver()
    config: Any = {"configurable": {"thread_id": "t-deploy"}, "recursion_limit": 500}
    asked: list[str] = []

    def agent(url: str) -> Any:
        middleware = LoopwatchMiddleware(gateway_url=url)
        before = middleware.guard.before

        def counted(call: Call) -> Any:
            asked.append(str(call.tool_call_id))
            return before(call)

        middleware.guard.before = counted  # type: ignore[method-assign]
        return create_agent(model, tools=[deploy], middleware=[middleware], checkpointer=saver)

    with gateway_process() as gateway:
        out = agent(gateway.url).invoke({"messages": [{"role": "user", "content": "deploy"}]}, config)
        while "__interrupt__" in out:
            out = agent(gateway.url).invoke(Command(resume="yes"), config)
        run_id = agent(gateway.url).get_state(config).values["loopwatch_run_id"]
        with urllib.request.urlopen(f"{gateway.url}/fleet/run?id={urllib.parse.quote(run_id)}") as page:
            run = json.loads(page.read())

    block, abort = expected_positions(CALLS, "deploy", {"target": "prod"}, "deployed prod: yes")
    answers = tool_messages(out["messages"])
    assert sorted(answers) == sorted(f"call-{i}" for i in range(abort + 1))
    assert str(answers[f"call-{block}"].content).startswith("loopwatch blocked this deploy call")
    assert all(answers[f"call-{i}"].status != "error" for i in range(block))
    assert "[tool_loop_recovery_exhausted]" in str(out["messages"][-1].content)
    assert len(deployed) == abort - 1
    # every call that ran was asked about twice (first ask, then its resume by a new middleware)
    ran = [f"call-{i}" for i in range(abort) if i != block]
    assert all(asked.count(call_id) == 2 for call_id in ran)
    assert len(started) == 2 * len(ran)
    # ...and counted once by the gateway's core
    assert (run["calls"], run["results"]) == (abort + 1, abort - 1)


def test_a_model_that_names_every_call_alike_has_every_call_counted() -> None:
    """A call id used again once its call is over is a new call: a model that names every
    call ``call_0`` is blocked and stopped where the core, fed the same calls, does it."""
    steps: list[BaseMessage] = [
        AIMessage(content="", tool_calls=[{"name": "read", "args": {"path": "PLAN.md"}, "id": "call_0"}])
        for _ in range(CALLS)
    ]
    model, reader = ScriptedModel(responses=[*steps, AIMessage(content="finished")]), Reader()
    agent = create_agent(model, tools=[reader.tool], middleware=[LoopwatchMiddleware()])
    out = agent.invoke({"messages": [{"role": "user", "content": "read the plan"}]}, {"recursion_limit": 500})
    block, abort = expected_positions(CALLS, "read", {"path": "PLAN.md"}, RESULT, ids="call_0")
    answers = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert len(answers) == abort + 1
    assert str(answers[block].content).startswith("loopwatch blocked this read call")
    assert len(reader.executed) == abort - 1
    assert "[tool_loop_recovery_exhausted]" in str(out["messages"][-1].content)
