"""loopwatch inside a real Vercel AI SDK agent loop (``generateText`` / ``streamText``), offline.

Node runs ``integrations/vercel-ai/test/agent-driver.mjs``: ``ai`` 7.0.185 with
``@ai-sdk/openai`` 4.0.126 (``runtimes/vercel-ai.sh``, pinned, from npm) against a scripted
fake of the OpenAI Responses API (``fake_model``), the tools under ``@loopwatch/ai-sdk``
(``integrations/vercel-ai``) asking a real ``loopwatch gateway``. The driver prints what the
SDK did: the tools' own record of their executions, each step's tool calls, denials and
results, why the run ended.

Every assertion is about what the SDK did and what the model was sent; the expected warn,
block and abort positions and texts come from the in-process core (``LoopDetector``) fed the
same calls and the results the tools returned. Without npm or the registry this fails: it
never skips.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from loopwatch.detectors.facade import Decision
from tests.gateway_process import gateway_process
from tests.helpers import ROOT
from tests.integration.fake_model import (
    Conversation,
    FakeModel,
    RepeatTool,
    Reply,
    ResponsesApi,
    Router,
    Script,
    Steps,
    ToolCall,
)
from tests.integration.runtimes.loopwatch_checks import (
    core_decisions,
    first_with_action,
    hook_text,
    repeated_call_decisions,
    run_page,
    unreachable_gateway_url,
)
from tests.integration.runtimes.process import install

PACKAGE = ROOT / "integrations/vercel-ai"
DRIVER = PACKAGE / "test/agent-driver.mjs"
WIRE_TESTS = PACKAGE / "test/wire.test.mjs"
DOCS = ROOT / "docs/vercel-ai.md"
INSTALL = ROOT / "tests/integration/runtimes/vercel-ai.sh"
CALL = {"path": "PLAN.md"}
CALLS = 40
FINAL_TEXT = "Done."
COULD_NOT_CHECK = "loopwatch could not check this call, so it was not run: "


@dataclass(frozen=True)
class AiSdk:
    node: str
    modules: str


@pytest.fixture(scope="module")
def ai_sdk() -> AiSdk:
    node, modules = install(INSTALL)
    return AiSdk(node, modules)


@pytest.fixture(scope="module")
def gateway_url() -> Iterator[str]:
    with gateway_process() as gateway:
        yield gateway.url


def test_the_packages_node_tests_pass(ai_sdk: AiSdk) -> None:
    """What the package sends a gateway and does with each answer (``wire.test.mjs``, Node's test
    runner against a stand-in gateway that answers as each test tells it)."""
    done = subprocess.run(
        [ai_sdk.node, "--test", "--test-reporter=tap", str(WIRE_TESTS)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    written = len(re.findall(r"^test\(", WIRE_TESTS.read_text(), re.M))
    assert written >= 15
    assert f"# pass {written}" in done.stdout  # every test written ran (none skipped)
    assert "# fail 0" in done.stdout


@dataclass
class AgentRun:
    """What the driver printed, and the requests the fake model answered."""

    out: dict[str, Any]
    conversations: list[Conversation]

    @property
    def calls(self) -> list[dict[str, Any]]:
        """The run's tool calls, in order (one a step here)."""
        return [call for step in self.out["steps"] for call in step["toolCalls"]]

    @property
    def executed(self) -> list[str]:
        """The tool call ids the tools ran, in order (the tools' own record)."""
        return [execution["toolCallId"] for execution in self.out["executions"]]

    def returned(self, call_id: str) -> Any:
        """What the tool returned for ``call_id`` (it must have run)."""
        found = [e["returned"] for e in self.out["executions"] if e["toolCallId"] == call_id]
        assert len(found) == 1, f"the tool ran {len(found)} times for {call_id}"
        return found[0]

    def denied(self, call_id: str) -> str | None:
        """The reason the SDK's approval denied ``call_id`` with, if it did."""
        reasons = [
            d["reason"] for step in self.out["steps"] for d in step["denied"] if d["toolCallId"] == call_id
        ]
        return reasons[0] if reasons else None

    def result(self, call_id: str) -> Any:
        """The output the SDK recorded for ``call_id`` (the tool's, as the model reads it)."""
        found = [
            r["output"] for step in self.out["steps"] for r in step["results"] if r["toolCallId"] == call_id
        ]
        assert len(found) == 1, f"{len(found)} results for {call_id}"
        return found[0]

    def sent_after(self, index: int) -> str:
        """The tool result text the model read in the request after call ``index``'s step."""
        (outcome,) = self.conversations[index + 1].last_outcomes
        assert outcome.call_id == self.calls[index]["toolCallId"]
        return outcome.text

    def decisions(self) -> list[Decision]:
        """The in-process core's decision for each call, fed the results the tools returned."""
        calls = self.calls
        return core_decisions(
            [(call["toolName"], call["input"]) for call in calls],
            lambda index: {"result": self.returned(calls[index]["toolCallId"])},
        )


def run_agent(ai_sdk: AiSdk, script: Script, gateway: Mapping[str, Any], **config: Any) -> AgentRun:
    """The driver's agent loop against a fake model answering ``script``; ``gateway``: the
    Loopwatch options; ``config``: the driver's own (api, approval, output, delegate, steps)."""
    with FakeModel(script, ResponsesApi) as model:
        settings = {
            "modules": ai_sdk.modules,
            "baseURL": model.url + "/v1",
            "gateway": dict(gateway),
            **config,
        }
        done = subprocess.run(
            [ai_sdk.node, str(DRIVER), json.dumps(settings)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=300,
        )
        conversations = model.conversations()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return AgentRun(json.loads(done.stdout), conversations)


def looping() -> RepeatTool:
    return RepeatTool("read", CALL, max_calls=CALLS, final_text=FINAL_TEXT)


def live(gateway_url: str) -> dict[str, Any]:
    # a generous timeout: on a busy machine a slow answer would fail open and skew the counts
    return {"gatewayUrl": gateway_url, "timeoutMs": 20_000}


def check_looping_run(ran: AgentRun, gateway_url: str) -> None:
    decisions = ran.decisions()
    calls = ran.calls
    ids = [call["toolCallId"] for call in calls]
    assert all(call["toolName"] == "read" and call["input"] == CALL for call in calls)
    assert ran.out["failures"] == []
    assert ran.out["warnings"] == []
    warned = first_with_action(decisions, "warn") - 1
    blocked = first_with_action(decisions, "block") - 1
    aborted = first_with_action(decisions, "abort") - 1
    assert warned < blocked < aborted

    # the tools ran exactly the calls the core lets proceed; the blocked one did not run
    assert ran.executed == [ids[i] for i, decision in enumerate(decisions) if decision.proceed]
    assert ids[blocked] not in ran.executed

    # the warned call ran; its result carries loopwatch's warning, which the model read next
    warning = hook_text(decisions[warned])
    assert warning.startswith("loopwatch warning: ")
    noted = f"{ran.returned(ids[warned])}\n\n{warning}"
    assert ran.result(ids[warned]) == noted
    assert ran.sent_after(warned) == noted
    assert ran.sent_after(warned - 1) == ran.returned(ids[warned - 1])  # (no warning before)

    # the blocked call was denied with loopwatch's reason, and the model's next request said it
    reason = hook_text(decisions[blocked])
    assert reason.startswith("loopwatch blocked this read call")
    assert ran.denied(ids[blocked]) == reason
    assert ran.sent_after(blocked) == reason

    # the run ended at the abort: the call denied with its reason, the stop condition held,
    # the model was not asked again
    assert aborted == len(calls) - 1
    assert ran.denied(ids[aborted]) == hook_text(decisions[aborted])
    assert ran.out["stoppedBy"] == "stop-condition"
    assert ran.out["finishReason"] == "tool-calls"
    assert len(ran.conversations) == aborted + 1
    (run,) = ran.out["runs"]
    assert run["aborted"] == {"reason": decisions[aborted].reason, "message": hook_text(decisions[aborted])}

    # the gateway saw the run as the SDK ran it: every call, the results of those that ran, its end
    page = run_page(gateway_url, run["runId"])
    assert (page["status"], page["calls"], page["results"]) == ("ended", len(calls), len(ran.executed))


@pytest.mark.parametrize("api", ["generate", "stream"])
def test_a_looping_agent_is_warned_blocked_then_stopped(ai_sdk: AiSdk, gateway_url: str, api: str) -> None:
    ran = run_agent(ai_sdk, looping(), live(gateway_url), api=api)
    check_looping_run(ran, gateway_url)


def test_without_the_approval_function_the_tool_refuses_at_the_same_calls(
    ai_sdk: AiSdk, gateway_url: str
) -> None:
    """``toolApproval`` left out: the wrapped ``execute`` asks, and a refused call's result is
    loopwatch's reason (the tool itself did not run)."""
    ran = run_agent(ai_sdk, looping(), live(gateway_url), approval=False)
    decisions = ran.decisions()
    ids = [call["toolCallId"] for call in ran.calls]
    blocked = first_with_action(decisions, "block") - 1
    aborted = first_with_action(decisions, "abort") - 1
    assert ran.executed == [ids[i] for i, decision in enumerate(decisions) if decision.proceed]
    assert ran.result(ids[blocked]) == ran.sent_after(blocked) == hook_text(decisions[blocked])
    assert ran.result(ids[aborted]) == hook_text(decisions[aborted])
    assert aborted == len(ids) - 1
    assert len(ran.conversations) == aborted + 1
    assert ran.out["stoppedBy"] == "stop-condition"


def test_a_warning_reaches_the_model_after_a_result_that_is_not_text(ai_sdk: AiSdk, gateway_url: str) -> None:
    """An object result stays the tool's own; the model reads it, then the warning."""
    ran = run_agent(ai_sdk, looping(), live(gateway_url), output="object")
    decisions = ran.decisions()
    ids = [call["toolCallId"] for call in ran.calls]
    warned = first_with_action(decisions, "warn") - 1
    returned = ran.returned(ids[warned])
    assert returned == {"page": "the same page"}
    assert ran.result(ids[warned]) == returned
    page = json.dumps(returned, separators=(",", ":"))
    assert ran.sent_after(warned) == f"{page}\n{hook_text(decisions[warned])}"
    assert ran.sent_after(warned - 1) == page
    assert first_with_action(decisions, "abort") == len(ids)
    assert ran.out["stoppedBy"] == "stop-condition"


def test_a_failing_tool_is_reported_as_its_error(ai_sdk: AiSdk, gateway_url: str) -> None:
    """A tool that throws: its error is reported (the rules see failures), the model reads it,
    and a warned call's error carries the warning."""
    ran = run_agent(ai_sdk, looping(), live(gateway_url), output="error")
    ids = [call["toolCallId"] for call in ran.calls]
    failures = {e["toolCallId"]: e["error"] for e in ran.out["executions"]}
    decisions = core_decisions(
        [(call["toolName"], call["input"]) for call in ran.calls],
        lambda index: {"error": failures[ids[index]]},
    )
    warned = first_with_action(decisions, "warn") - 1
    blocked = first_with_action(decisions, "block") - 1
    aborted = first_with_action(decisions, "abort") - 1
    assert ran.executed == [ids[i] for i, decision in enumerate(decisions) if decision.proceed]
    errors = {e["toolCallId"]: e["error"] for step in ran.out["steps"] for e in step["errors"]}
    assert sorted(errors) == sorted(ran.executed)
    # the model reads a tool's error as the SDK writes it (its toString) in a JSON object
    failure = f"Error: {failures[ids[0]]}"
    assert errors[ids[0]] == failure
    assert ran.sent_after(0) == json.dumps({"error": failure}, separators=(",", ":"))
    noted = f"{failure}\n\n{hook_text(decisions[warned])}"
    assert errors[ids[warned]] == noted
    assert ran.sent_after(warned) == json.dumps({"error": noted}, separators=(",", ":"))
    assert ran.denied(ids[blocked]) == ran.sent_after(blocked) == hook_text(decisions[blocked])
    assert aborted == len(ids) - 1
    assert ran.out["stoppedBy"] == "stop-condition"
    page = run_page(gateway_url, ran.out["runs"][0]["runId"])
    assert (page["results"], page["errors"]) == (len(ran.executed), len(ran.executed))


def test_a_subagent_run_names_the_run_whose_tool_started_it(ai_sdk: AiSdk, gateway_url: str) -> None:
    outer = Steps(
        Reply(calls=(ToolCall("delegate", {"task": "summarise the notes"}),)), final_text=FINAL_TEXT
    )
    inner = Steps(Reply(calls=(ToolCall("read", {"path": "NOTES.md"}),)), final_text="The notes say hi.")
    ran = run_agent(
        ai_sdk,
        Router({"summarise the notes": inner, "read the plan": outer}),
        live(gateway_url),
        delegate=True,
    )
    parent, child = ran.out["runs"]
    assert parent["parentRunId"] is None
    assert child["parentRunId"] == parent["runId"] != child["runId"]
    assert [e["tool"] for e in ran.out["executions"]] == ["read", "delegate"]
    assert ran.out["text"] == FINAL_TEXT
    # the gateway keeps the chain: the subagent's run is the first run's child
    page = run_page(gateway_url, child["runId"])
    assert (page["parent_run_id"], page["root_run_id"], page["depth"]) == (
        parent["runId"],
        parent["runId"],
        1,
    )


def test_an_unreachable_gateway_fails_open(ai_sdk: AiSdk) -> None:
    url = unreachable_gateway_url()
    ran = run_agent(
        ai_sdk, RepeatTool("read", CALL, max_calls=25, final_text=FINAL_TEXT), {"gatewayUrl": url}
    )
    assert len(ran.executed) == 25
    assert ran.out["text"] == FINAL_TEXT
    assert ran.out["stoppedBy"] == "model"
    assert all(step["denied"] == [] for step in ran.out["steps"])
    # every decision and every report failed, and was kept; the log said so once
    assert len(ran.out["failures"]) == 25 * 2 + 1  # (the run's end too)
    assert all(url in failure for failure in ran.out["failures"])
    (warning,) = ran.out["warnings"]
    assert "the call goes on (fail open)" in warning


def test_an_unreachable_gateway_refuses_every_call_when_failing_closed(ai_sdk: AiSdk) -> None:
    url = unreachable_gateway_url()
    script = RepeatTool("read", CALL, max_calls=3, final_text=FINAL_TEXT)
    ran = run_agent(ai_sdk, script, {"gatewayUrl": url, "failOpen": False})
    assert ran.executed == []
    ids = [call["toolCallId"] for call in ran.calls]
    assert len(ids) == 3
    for index, call_id in enumerate(ids):
        reason = ran.denied(call_id)
        assert reason is not None
        assert reason.startswith(COULD_NOT_CHECK)
        assert url in reason
        assert ran.sent_after(index) == reason
    assert ran.out["text"] == FINAL_TEXT


def docs_snippet() -> str:
    """The JavaScript of docs/vercel-ai.md (its one ``js`` block)."""
    (snippet,) = re.findall(r"```js\n(.*?)```", DOCS.read_text(), re.S)
    return str(snippet)


def link_packages(ai_sdk: AiSdk, folder: Path) -> None:
    """``folder/node_modules``: the installed packages and ``@loopwatch/ai-sdk`` (this checkout's),
    as ``npm install`` would lay them out for a project in ``folder``."""
    modules = folder / "node_modules"
    for entry in Path(ai_sdk.modules).iterdir():
        if entry.name.startswith("."):
            continue
        if entry.name.startswith("@"):
            for package in entry.iterdir():
                (modules / entry.name).mkdir(parents=True, exist_ok=True)
                (modules / entry.name / package.name).symlink_to(package)
        else:
            modules.mkdir(exist_ok=True)
            (modules / entry.name).symlink_to(entry)
    (modules / "@loopwatch").mkdir(exist_ok=True)
    (modules / "@loopwatch/ai-sdk").symlink_to(PACKAGE)


def test_the_docs_snippet_runs_as_written(ai_sdk: AiSdk, gateway_url: str, tmp_path: Path) -> None:
    """docs/vercel-ai.md's snippet, word for word, with the model and the gateway it reads from
    the environment (OpenAI's SDK variables, ``LOOPWATCH_GATEWAY_URL``) on this machine."""
    link_packages(ai_sdk, tmp_path)
    plan = "1. Read the plan.\n"
    (tmp_path / "PLAN.md").write_text(plan)
    (tmp_path / "agent.mjs").write_text(docs_snippet())
    script = RepeatTool("readFile", {"path": "PLAN.md"}, max_calls=CALLS, final_text=FINAL_TEXT)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("LOOPWATCH_", "OPENAI_"))}
    with FakeModel(script, ResponsesApi) as model:
        env.update(
            OPENAI_API_KEY="test-key", OPENAI_BASE_URL=model.url + "/v1", LOOPWATCH_GATEWAY_URL=gateway_url
        )
        done = subprocess.run(
            [ai_sdk.node, "agent.mjs"], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300
        )
        conversations = model.conversations()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    decisions = repeated_call_decisions("readFile", {"path": "PLAN.md"}, CALLS, result=plan)
    aborted = first_with_action(decisions, "abort")
    # the loop was stopped at the core's abort, and the snippet printed loopwatch's reason
    assert len(conversations) == aborted
    assert done.stdout == hook_text(decisions[aborted - 1]) + "\n"
    assert conversations[-1].mentions(hook_text(decisions[first_with_action(decisions, "block") - 1]))
