"""loopwatch inside a real Google ADK agent (``LlmAgent`` on ``InMemoryRunner``), offline.

google-adk's pins conflict with the dev environment's, so the agent runs in the environment of
its own that ``runtimes/python-framework.sh google-adk`` makes: ``runtimes/google_adk_driver.py``
builds the agent with a real ``Gemini`` model whose base URL is the fake model here (Gemini
API, scripted to propose the same call again and again), registers the plugin, runs one
invocation and prints what happened as JSON. What the run did is read from the tool function's
own record of its executions, the runner's events and the requests the fake model received;
the expected decisions come from the in-process core fed the same calls and results.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loopwatch.detectors.facade import LoopDetector
from tests.gateway_process import gateway_process
from tests.helpers import ROOT
from tests.integration.fake_model import (
    Conversation,
    FakeModel,
    GeminiApi,
    RepeatTool,
    Reply,
    Steps,
    ToolCall,
)
from tests.integration.runtimes.process import child_env, run_bounded

RESULT = "the same page"  # what the driver's read tool returns
CALLS = 40
SETUP = ROOT / "tests" / "integration" / "runtimes" / "python-framework.sh"


@pytest.fixture(scope="module")
def adk_python() -> str:
    """The python of the google-adk environment (made once, under .tools/)."""
    done = subprocess.run([str(SETUP), "google-adk"], capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, f"python-framework.sh google-adk failed:\n{done.stderr[-3000:]}"
    return done.stdout.split()[-1]


def drive(python: str, model: FakeModel, prompt: str, plugin: dict[str, Any] | None, **spec: Any) -> Any:
    """One invocation of the driver's agent against ``model``: its JSON report."""
    body = {"model_url": model.url, "prompt": prompt, "plugin": plugin, **spec}
    env = child_env({"GOOGLE_API_KEY": "loopwatch-test"}, drop_prefixes=("GOOGLE_", "GEMINI_", "OTEL_"))
    args = [python, "-m", "tests.integration.runtimes.google_adk_driver", json.dumps(body)]
    finished = run_bounded(args, env=env, cwd=ROOT, timeout=300)
    finished.assert_succeeded()
    return json.loads(finished.stdout.splitlines()[-1])


def responses(report: Any) -> list[dict[str, Any]]:
    """The function responses of the run's events, in order."""
    return [
        part["function_response"]
        for event in report["events"]
        for part in event["parts"]
        if "function_response" in part
    ]


def action_of(response: dict[str, Any]) -> str:
    """What loopwatch did to a call, read from the response the model was given."""
    answer = response["response"]
    error = str(answer.get("error", ""))
    if error.startswith("loopwatch stopped this turn"):
        return "abort"
    if error.startswith("loopwatch blocked"):
        return "block"
    if str(answer.get("loopwatch", "")).startswith("loopwatch warning"):
        return "warn"
    return "allow"


def expected_actions(n: int) -> list[str]:
    """The core's decision for each of ``n`` identical reads, fed the same calls and results,
    up to and including its abort."""
    detector = LoopDetector()
    actions: list[str] = []
    for i in range(n):
        decision = detector.before_tool_call("expected", "read", {"path": "PLAN.md"}, tool_call_id=f"c{i}")
        actions.append(decision.action)
        if decision.action == "abort":
            break
        if decision.proceed:
            detector.after_tool_call(
                "expected", "read", {"path": "PLAN.md"}, result=RESULT, tool_call_id=f"c{i}"
            )
    assert "block" in actions, "the core should block, then abort, this loop"
    assert actions[-1] == "abort"
    return actions


def check_looping_run(report: Any, model: FakeModel) -> None:
    expected = expected_actions(CALLS)
    block, abort = expected.index("block"), len(expected) - 1
    answers = responses(report)
    # each call was answered as the core decided, and none was proposed after the abort
    assert [action_of(answer) for answer in answers] == expected
    # the tool ran for every call the core let through, and for no other
    assert len(report["executed"]) == sum(action in ("allow", "warn") for action in expected)
    assert report["executed"] == [["coder", "PLAN.md"]] * len(report["executed"])
    # what the model read: the block's reason as the call's function response, the warning with a result
    conversations = model.conversations()
    assert len(conversations) == abort + 1  # the model was not asked again after the abort
    read = conversations[-1].outcomes
    assert len(read) == abort
    assert read[block].is_error
    assert read[block].text.startswith("loopwatch blocked this read call")
    assert "[generic_repeat]" in read[block].text
    warned = [i for i, action in enumerate(expected) if action == "warn"]
    assert warned
    for i in warned:
        assert read[i].text.startswith(RESULT)
        assert "loopwatch warning" in read[i].text
    # the run ended at the abort: its last event is the final response, with the reason
    last = report["events"][-1]
    assert last["final"]
    assert last["parts"][-1]["text"].startswith("loopwatch stopped this turn")
    assert "[tool_loop_recovery_exhausted]" in last["parts"][-1]["text"]
    # the calls the model was sent back are the ones it proposed, by their function call ids
    proposed = [
        part["function_call"]["id"]
        for event in report["events"]
        for part in event["parts"]
        if "function_call" in part
    ]
    assert [answer["id"] for answer in answers] == proposed


def test_a_looping_agent_is_warned_blocked_then_stopped_in_process(adk_python: str) -> None:
    with FakeModel(RepeatTool("read", {"path": "PLAN.md"}, max_calls=CALLS), GeminiApi) as model:
        report = drive(adk_python, model, "read the plan", {})
    assert report["failures"] == []
    check_looping_run(report, model)


def test_a_looping_agent_is_warned_blocked_then_stopped_through_a_gateway(adk_python: str) -> None:
    with (
        gateway_process() as gateway,
        FakeModel(RepeatTool("read", {"path": "PLAN.md"}, max_calls=CALLS), GeminiApi) as model,
    ):
        report = drive(adk_python, model, "read the plan", {"gateway_url": gateway.url})
    assert report["failures"] == []
    check_looping_run(report, model)


def test_an_unreachable_gateway_fails_open(adk_python: str) -> None:
    with gateway_process() as gateway:
        url = gateway.url  # the gateway is gone after this block
    with FakeModel(RepeatTool("read", {"path": "PLAN.md"}, max_calls=25), GeminiApi) as model:
        report = drive(adk_python, model, "read the plan", {"gateway_url": url, "timeout_s": 1})
    assert len(report["executed"]) == 25
    assert [action_of(answer) for answer in responses(report)] == ["allow"] * 25
    assert report["events"][-1]["parts"] == [{"text": "Done."}]
    assert report["failures"]


def test_an_unreachable_gateway_refuses_every_call_when_failing_closed(adk_python: str) -> None:
    with gateway_process() as gateway:
        url = gateway.url
    plugin = {"gateway_url": url, "timeout_s": 1, "fail_open": False}
    with FakeModel(RepeatTool("read", {"path": "PLAN.md"}, max_calls=3), GeminiApi) as model:
        report = drive(adk_python, model, "read the plan", plugin)
    assert report["executed"] == []
    answers = responses(report)
    assert len(answers) == 3
    assert all(a["response"]["error"].startswith("loopwatch could not check this call") for a in answers)


def test_a_healthy_run_is_untouched(adk_python: str) -> None:
    def run(plugin: dict[str, Any] | None) -> tuple[Any, ...]:
        steps = [Reply(calls=(ToolCall("read", {"path": f"f{i}.md"}),)) for i in range(8)]
        with FakeModel(Steps(*steps, final_text="finished"), GeminiApi) as model:
            report = drive(adk_python, model, "read all", plugin)
        answers = [(a["name"], a["response"]) for a in responses(report)]
        read = [(o.name, o.text, o.is_error) for o in model.conversations()[-1].outcomes]
        return answers, report["executed"], report["events"][-1]["parts"], read

    with_plugin, without = run({}), run(None)
    assert with_plugin == without
    assert with_plugin[0] == [("read", {"result": RESULT})] * 8
    assert with_plugin[2] == [{"text": "finished"}]
    assert with_plugin[3] == [("read", RESULT, False)] * 8  # what the model read


class Delegating:
    """The coder reads, hands a task to ``inner`` (an ``AgentTool``), then transfers to its
    sub-agent ``helper``; ``inner`` reads the same file until loopwatch stops it; ``helper``
    reads once."""

    def __init__(self) -> None:
        self.inner = RepeatTool("read", {"path": "INNER.md"}, max_calls=CALLS)
        self.coder = Steps(
            Reply(calls=(ToolCall("read", {"path": "coder.md"}),)),
            Reply(calls=(ToolCall("inner", {"request": "inner task"}),)),
            Reply(calls=(ToolCall("transfer_to_agent", {"agent_name": "helper"}),)),
        )

    def reply(self, conversation: Conversation) -> Reply:
        if "inner task" in conversation.prompt:
            return self.inner.reply(conversation)
        if 'internal name is "helper"' in conversation.system:
            if any(o.input == {"path": "helper.md"} for o in conversation.outcomes):
                return Reply(text="helper done")
            return Reply(calls=(ToolCall("read", {"path": "helper.md"}),))
        return self.coder.reply(conversation)


@pytest.fixture(scope="module")
def delegated(adk_python: str) -> Iterator[tuple[Any, FakeModel]]:
    with FakeModel(Delegating(), GeminiApi) as model:
        yield drive(adk_python, model, "start", {}, record=True, tree=True), model


def test_agents_run_by_tools_and_sub_agents_are_runs_linked_to_their_parent(
    delegated: tuple[Any, FakeModel],
) -> None:
    report, model = delegated
    asked = report["asked"]
    outer = asked[0][0]
    session = report["session_id"]
    assert asked[0] == [outer, "read", session, None, asked[0][4]]
    assert outer == report["events"][0]["invocation_id"]  # the run is the invocation
    assert asked[1][:4] == [outer, "inner", session, None]
    inner_calls = [entry for entry in asked if entry[0] not in (outer, f"{outer}/helper")]
    inner = inner_calls[0][0]
    assert inner != outer
    assert all(entry[0] == inner and entry[3] == outer for entry in inner_calls)  # a child of the coder
    assert inner_calls[0][2] not in (None, session)  # AgentTool runs it in a session of its own
    assert [entry[1] for entry in asked if entry[0] == outer] == ["read", "inner", "transfer_to_agent"]
    assert [entry[:4] for entry in asked if entry[0] == f"{outer}/helper"] == [
        [f"{outer}/helper", "read", session, outer]
    ]
    # the tool call ids are the function call ids the model gave
    given = [
        call["functionCall"]["id"]
        for exchange in model.exchanges()
        if exchange.response is not None
        for candidate in exchange.response["candidates"]
        for call in candidate["content"]["parts"]
        if "functionCall" in call
    ]
    assert sorted(entry[4] for entry in asked) == sorted(given)
    # every run was ended when its invocation was over
    assert sorted(report["ended"]) == sorted({outer, inner, f"{outer}/helper"})


def test_a_sub_agent_run_by_a_tool_is_stopped_and_its_caller_reads_why(
    delegated: tuple[Any, FakeModel],
) -> None:
    report, _model = delegated
    expected = expected_actions(CALLS)
    inner_reads = [entry for entry in report["executed"] if entry[0] == "inner"]
    assert len(inner_reads) == sum(action in ("allow", "warn") for action in expected)
    # the inner agent's abort ended its own run only: the coder read the reason as the tool's
    # answer, then went on (transferred to its helper, which read once and finished)
    (answer,) = [a for a in responses(report) if a["name"] == "inner"]
    assert answer["response"]["result"].startswith("loopwatch stopped this turn")
    assert "[tool_loop_recovery_exhausted]" in answer["response"]["result"]
    assert ["helper", "helper.md"] in report["executed"]
    assert report["events"][-1]["parts"] == [{"text": "helper done"}]


def test_results_failures_and_exceptions_are_reported_and_a_crashed_run_is_ended(adk_python: str) -> None:
    steps = [
        Reply(calls=(ToolCall("read", {"path": "a.md"}),)),
        Reply(calls=(ToolCall("chmod", {"path": "a.md"}),)),  # answers {"error": ...}: a failure
        Reply(calls=(ToolCall("read", {"path": "b.md"}),)),
        Reply(calls=(ToolCall("explode", {"path": "a.md"}),)),  # raises: the run ends with it
    ]
    with FakeModel(Steps(*steps), GeminiApi) as model:
        report = drive(adk_python, model, "go", {}, record=True)
    (run,) = {entry[0] for entry in report["asked"]}
    assert report["reported"] == [
        [run, "read", "result", RESULT],
        [run, "chmod", "error", "permission denied"],
        [run, "read", "result", RESULT],
        [run, "explode", "error", "disk on fire"],
    ]
    assert "disk on fire" in report["raised"]  # ADK raised the tool's exception as it would
    assert report["ended"] == [run]  # the run was ended all the same (on_run_error_callback)
    # the failure went to the model as the tool gave it
    chmod = [o for o in model.conversations()[-1].outcomes if o.name == "chmod"]
    assert [(o.text, o.is_error) for o in chmod] == [("permission denied", True)]


def test_the_quick_start_of_the_docs_runs_as_written(adk_python: str, tmp_path: Path) -> None:
    """docs/google-adk.md's snippet, pasted as it is (no API key, no network), prints what the
    page says it prints."""
    page = (ROOT / "docs" / "google-adk.md").read_text()
    snippet = re.search(r"```python\n(.*?)```", page, re.S)
    said = re.search(r"It prints `(.*?)…`", page, re.S)
    assert snippet is not None
    assert said is not None
    (tmp_path / "quick_start.py").write_text(snippet.group(1))
    env = child_env({}, drop_prefixes=("GOOGLE_", "GEMINI_", "OTEL_"))
    finished = run_bounded([adk_python, "quick_start.py"], env=env, cwd=tmp_path, timeout=300)
    finished.assert_succeeded()
    assert finished.stdout.startswith(" ".join(said.group(1).split()))
    assert finished.stderr == ""  # (no warning either)


def test_a_call_paused_for_a_confirmation_is_decided_once_and_its_run_goes_on(adk_python: str) -> None:
    """ADK asks for a confirmation (``require_confirmation``) after the before-tool callbacks
    ran, and the invocation pauses; the confirmation resumes it, and the call is asked about
    again. It is one call, decided once, and the pause does not end the run."""
    deploy = Reply(calls=(ToolCall("deploy", {"target": "prod"}),))
    with FakeModel(Steps(deploy, final_text="finished"), GeminiApi) as model:
        report = drive(adk_python, model, "deploy", {}, record=True)
    assert report["raised"] is None
    (run,) = {entry[0] for entry in report["asked"]}
    assert [entry[1] for entry in report["asked"]] == ["deploy"]  # the core was asked once
    assert report["ended_at_pause"] == []  # the paused invocation's run was not ended
    assert report["executed"] == [["coder", "deploy prod"]]
    assert report["reported"] == [[run, "deploy", "result", "deployed prod"]]
    assert report["ended"] == [run]  # ended once, when the resumed invocation was over
    assert report["events"][-1]["parts"] == [{"text": "finished"}]
    assert {event["invocation_id"] for event in report["events"]} == {run}  # resumed, not a new one
