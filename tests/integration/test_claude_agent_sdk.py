"""loopwatch inside real Claude Agent SDK runs (``claude-agent-sdk`` 0.2.184), offline.

The SDK runs the pinned Claude Code CLI (``runtimes/claude-code.sh``, given as ``cli_path``;
not the CLI the SDK bundles) against a scripted model on 127.0.0.1 (``tests.integration.fake_model``)
whose answers ask for the same Bash command again and again; loopwatch's callbacks are the
options' hooks (``LoopwatchHooks.options``). Every execution of the command appends a line to a
file: the proof a call ran or did not. Every assertion is about what the SDK and Claude Code did:
the messages ``query()`` yielded, the files the command wrote, and what the model was sent (the
fake model's recorded requests). The expected warning, block and abort come from the in-process
core (``LoopDetector``) fed the same calls and the results Claude Code reported.
Without npm or the registry this fails: it never skips.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from claude_agent_sdk import (
    AssistantMessage,
    ClaudeAgentOptions,
    ClaudeSDKClient,
    HookMatcher,
    ResultMessage,
    SystemMessage,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
    query,
)

from loopwatch.detectors.facade import Decision
from loopwatch.integrations import Ruling
from loopwatch.integrations.claude_agent_sdk import LoopwatchHooks
from tests.gateway_process import gateway_process
from tests.helpers import ROOT
from tests.integration.fake_model import (
    Conversation,
    FakeModel,
    RepeatTool,
    Reply,
    Router,
    Steps,
    ToolCall,
)
from tests.integration.runtimes.claude_code_env import offline_claude_env
from tests.integration.runtimes.loopwatch_checks import (
    core_decisions,
    hook_text,
    run_page,
    unreachable_gateway_url,
)
from tests.integration.runtimes.process import install

INSTALL = ROOT / "tests" / "integration" / "runtimes" / "claude-code.sh"
PROMPT = "Keep the log going."
LOG = "runs.log"
#: the same command each time; each execution appends a line to runs.log
SAME = {"command": f"echo same >> {LOG}; echo same"}
CALLS = 40  # more than the core lets through
SDK_TIMEOUT_S = 180
GATEWAY_TIMEOUT_S = 10.0  # a slow answer on a busy machine would fail open and skew the counts


# Claude Code's own words (2.1.332) around a hook's text, as the model gets it
def denied(tool: str) -> str:
    return f"PreToolUse:{tool} hook error: "


def context(tool: str) -> str:
    return f"PreToolUse:{tool} hook additional context: "


@pytest.fixture(scope="module")
def claude() -> str:
    return install(INSTALL)[-1]


@pytest.fixture(autouse=True)
def _no_inherited_claude_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK gives Claude Code this process's environment under the options' ``env``: none of
    Claude Code's own variables reach past the test's settings."""
    for key in list(os.environ):
        if key.startswith(("ANTHROPIC_", "CLAUDE")):
            monkeypatch.delenv(key)


@dataclass(frozen=True)
class Outcome:
    text: str
    is_error: bool


class ToolResponses:
    """A ``PostToolUse`` hook of the test's own, beside loopwatch's: the ``tool_response`` Claude
    Code gave the hooks for each call that ran, by ``tool_use_id`` (a subagent's too, which the
    SDK's messages do not carry)."""

    def __init__(self) -> None:
        self.by_id: dict[str, Any] = {}

    async def post_tool_use(self, data: Any, tool_use_id: str | None, context: Any) -> Any:
        self.by_id[str(data["tool_use_id"])] = data["tool_response"]
        return {}


@dataclass
class SdkRun:
    """What one SDK run yielded, and the folder its tools worked in."""

    messages: list[Any]
    project: Path
    responses: ToolResponses
    stderr: list[str] = field(default_factory=list)

    @property
    def result(self) -> ResultMessage:
        results = [m for m in self.messages if isinstance(m, ResultMessage)]
        assert results, f"the SDK gave no result: {self.stderr[-40:]}"
        return results[-1]

    def uses(self, name: str, parent: str | None = None) -> list[ToolUseBlock]:
        """The calls of ``name`` Claude Code got from the model (a subagent's: ``parent``, the
        Agent call's id), in order."""
        return [
            block
            for m in self.messages
            if isinstance(m, AssistantMessage) and m.parent_tool_use_id == parent
            for block in m.content
            if isinstance(block, ToolUseBlock) and block.name == name
        ]

    def outcomes(self) -> dict[str, Outcome]:
        """The tool results Claude Code gave back, by call id."""
        found = {}
        for m in self.messages:
            if not isinstance(m, UserMessage) or not isinstance(m.content, list):
                continue
            for block in m.content:
                if isinstance(block, ToolResultBlock):
                    content = block.content
                    if isinstance(content, list):
                        content = "\n".join(str(part.get("text", "")) for part in content)
                    found[block.tool_use_id] = Outcome(str(content), bool(block.is_error))
        return found

    def system_texts(self) -> list[str]:
        return [str(m.data.get("content", "")) for m in self.messages if isinstance(m, SystemMessage)]

    def lines(self, name: str) -> list[str]:
        """The lines the commands wrote to ``name`` (one per execution)."""
        path = self.project / name
        return path.read_text().splitlines() if path.exists() else []


def sdk_options(
    claude: str, workdir: Path, model: FakeModel, stderr: list[str], responses: ToolResponses
) -> ClaudeAgentOptions:
    """Options for an offline run of the pinned Claude Code in a home and project of its own,
    with the test's own ``PostToolUse`` hook (``responses``)."""
    env, project = offline_claude_env(workdir, model.url)
    return ClaudeAgentOptions(
        cli_path=claude,
        cwd=project,
        env=env,
        allowed_tools=["Bash", "Agent"],
        setting_sources=[],  # no settings files: the hooks are the options' alone
        stderr=stderr.append,
        hooks={"PostToolUse": [HookMatcher(hooks=[responses.post_tool_use])]},
    )


def run_query(claude: str, workdir: Path, model: FakeModel, loopwatch: LoopwatchHooks) -> SdkRun:
    """One ``query()`` of :data:`PROMPT`, with loopwatch's hooks, against ``model``."""
    stderr: list[str] = []
    responses = ToolResponses()

    async def collect(options: ClaudeAgentOptions) -> list[Any]:
        return [message async for message in query(prompt=PROMPT, options=options)]

    with model:  # (its URL is known once it listens)
        options = loopwatch.options(sdk_options(claude, workdir, model, stderr, responses))
        messages = asyncio.run(asyncio.wait_for(collect(options), SDK_TIMEOUT_S))
    return SdkRun(messages, workdir / "project", responses, stderr)


def main_turns(model: FakeModel) -> list[Conversation]:
    """The main agent's requests to the model (not a subagent's), in order."""
    return [c for c in model.conversations() if c.prompt == PROMPT]


def expected(run: SdkRun, uses: list[ToolUseBlock]) -> list[Decision]:
    """The core's decisions for the calls Claude Code got, fed the results it gave the hooks (a
    call that did not run gets the first call's result)."""
    responses = run.responses.by_id
    first = responses[uses[0].id]

    def outcome(index: int) -> dict[str, Any]:
        return {"result": responses.get(uses[index].id, first)}

    return core_decisions([(use.name, use.input) for use in uses], outcome)


def index_of(decisions: list[Decision], action: str) -> int:
    actions = [d.action for d in decisions]
    assert action in actions, actions
    return actions.index(action)


def check_looping_run(run: SdkRun, model: FakeModel, loopwatch: LoopwatchHooks) -> None:
    uses = run.uses("Bash")
    assert uses, run.stderr[-40:]
    assert all(use.input == SAME for use in uses)
    decisions = expected(run, uses)
    warned, blocked, aborted = (index_of(decisions, action) for action in ("warn", "block", "abort"))
    assert warned < blocked < aborted
    outcomes = run.outcomes()

    # the command ran for every call the core let through, all before the block, and no other
    ran = [n for n, d in enumerate(decisions) if d.proceed]
    assert len(run.lines(LOG)) == len(ran)
    assert max(ran) < blocked
    assert [n for n, use in enumerate(uses) if use.id in run.responses.by_id] == ran
    assert all(outcomes[uses[n].id] == Outcome("same", False) for n in ran)
    # the blocked and the aborting call were refused with loopwatch's reason as their result
    for n in (blocked, aborted):
        assert outcomes[uses[n].id] == Outcome(denied("Bash") + hook_text(decisions[n]), True)
    assert "[generic_repeat]" in outcomes[uses[blocked].id].text

    turns = main_turns(model)
    # the model read the block's reason as the call's result in its next request
    refusal = turns[blocked + 1].last_outcomes
    assert [(o.call_id, o.text, o.is_error) for o in refusal] == [
        (uses[blocked].id, outcomes[uses[blocked].id].text, True)
    ]
    # the warning reached the model with the warned call's result, not before
    warning = context("Bash") + hook_text(decisions[warned])
    assert turns[warned + 1].mentions(warning)
    assert not turns[warned].mentions(warning)
    # and the user saw it only when asked to (show_warnings)
    shown = [text for text in run.system_texts() if hook_text(decisions[warned]) in text]
    assert len(shown) == (1 if loopwatch.show_warnings else 0), run.system_texts()

    # the run ended at the abort: no call after it, the model not asked again, the reason given
    assert len(uses) == aborted + 1
    assert len(turns) == aborted + 1
    assert turns[-1] is model.conversations()[-1]
    result = run.result
    assert result.terminal_reason == "hook_stopped"
    assert {d["tool_use_id"] for d in result.permission_denials or []} == {
        uses[blocked].id,
        uses[aborted].id,
    }
    stop = hook_text(decisions[aborted])
    assert "[tool_loop_recovery_exhausted]" in stop
    assert any(stop in text for text in run.system_texts()), run.system_texts()
    ruling = loopwatch.abort_of(result.session_id)
    assert ruling is not None
    assert (ruling.action, ruling.reason, ruling.text) == ("abort", "tool_loop_recovery_exhausted", stop)


def test_a_looping_agent_is_warned_blocked_then_stopped_in_process(claude: str, tmp_path: Path) -> None:
    loopwatch = LoopwatchHooks(show_warnings=True)
    model = FakeModel(RepeatTool("Bash", SAME, max_calls=CALLS))
    run = run_query(claude, tmp_path, model, loopwatch)
    check_looping_run(run, model, loopwatch)
    assert loopwatch.guard.failures == []


def test_a_looping_agent_is_warned_blocked_then_stopped_through_a_gateway(
    claude: str, tmp_path: Path
) -> None:
    model = FakeModel(RepeatTool("Bash", SAME, max_calls=CALLS))
    with gateway_process() as gateway:
        loopwatch = LoopwatchHooks(gateway_url=gateway.url, timeout_s=GATEWAY_TIMEOUT_S)
        run = run_query(claude, tmp_path, model, loopwatch)
        # the gateway's run is the SDK session, each call under Claude Code's tool_use_id
        page = run_page(gateway.url, run.result.session_id)
    assert loopwatch.guard.failures == []
    check_looping_run(run, model, loopwatch)
    uses = run.uses("Bash")
    assert (page["calls"], page["results"]) == (len(uses), len(run.lines(LOG))), page


def test_with_the_gateway_down_every_call_runs(claude: str, tmp_path: Path) -> None:
    nobody = unreachable_gateway_url()
    loopwatch = LoopwatchHooks(gateway_url=nobody)
    model = FakeModel(RepeatTool("Bash", SAME, max_calls=25))
    run = run_query(claude, tmp_path, model, loopwatch)
    uses = run.uses("Bash")
    assert len(uses) == 25
    # the core would have refused some of these calls
    assert not all(d.proceed for d in expected(run, uses))
    # Claude Code ran them all, and the model read each result as it was
    assert len(run.lines(LOG)) == 25
    outcomes = run.outcomes()
    assert all(outcomes[use.id] == Outcome("same", False) for use in uses)
    assert not any(c.mentions("loopwatch") for c in model.conversations())
    result = run.result
    assert result.terminal_reason == "completed"
    assert not result.permission_denials
    # each call loopwatch could not decide was kept on the guard
    assert loopwatch.guard.failure_count >= 25
    assert all(nobody in failure for failure in loopwatch.guard.failures), loopwatch.guard.failures[:3]


def test_a_subagent_is_a_run_of_its_own_linked_to_the_session(claude: str, tmp_path: Path) -> None:
    task = ToolCall(
        "Agent",
        {
            "description": "keep the log",
            "prompt": "SUBAGENT-LOOP: keep the log going",
            "subagent_type": "general-purpose",
            "run_in_background": False,
        },
    )
    main_call = {"command": "echo main >> main.log; echo main"}
    script = Router(
        {"SUBAGENT-LOOP": RepeatTool("Bash", SAME, max_calls=CALLS)},
        default=Steps(Reply(calls=(task,)), Reply(calls=(ToolCall("Bash", main_call),))),
    )
    model = FakeModel(script)
    with gateway_process() as gateway:
        loopwatch = LoopwatchHooks(gateway_url=gateway.url, timeout_s=GATEWAY_TIMEOUT_S)
        run = run_query(claude, tmp_path, model, loopwatch)
        session = run.result.session_id
        (agent_call,) = run.uses("Agent")
        agent_result = run.responses.by_id[agent_call.id]
        subagent = f"{session}/{agent_result['agentId']}"
        sub_page = run_page(gateway.url, subagent)
        main_page = run_page(gateway.url, session)
    assert loopwatch.guard.failures == []

    # the subagent looped, was blocked, then stopped where the core says
    uses = run.uses("Bash", parent=agent_call.id)
    decisions = expected(run, uses)
    blocked, aborted = index_of(decisions, "block"), index_of(decisions, "abort")
    assert len(uses) == aborted + 1
    assert len(run.lines(LOG)) == sum(d.proceed for d in decisions)
    outcomes = run.outcomes()
    assert outcomes[uses[blocked].id].text == denied("Bash") + hook_text(decisions[blocked])
    sub_turns = [c for c in model.conversations() if "SUBAGENT-LOOP" in c.prompt]
    assert sub_turns[blocked + 1].last_outcomes[0].text == outcomes[uses[blocked].id].text
    assert len(sub_turns) == aborted + 1
    ruling = loopwatch.abort_of(subagent)
    assert ruling is not None
    assert ruling.reason == "tool_loop_recovery_exhausted"

    # the main agent is a run of its own: it read the subagent's report and went on
    (main_use,) = run.uses("Bash")
    assert outcomes[main_use.id] == Outcome("main", False)
    assert run.lines("main.log") == ["main"]
    assert loopwatch.abort_of(session) is None
    assert run.result.terminal_reason == "completed"
    # the gateway holds both runs, the subagent's linked to the session's
    assert sub_page["parent_run_id"] == session, sub_page
    assert sub_page["calls"] == len(uses), sub_page
    assert (main_page["calls"], main_page["verdict_list"]) == (2, []), main_page


class TwoPrompts:
    """The loop for the first prompt; after the second prompt, one other command, then done."""

    second = "SECOND PROMPT: write the next log"

    def __init__(self) -> None:
        self.next_call = {"command": "echo next >> next.log; echo next"}
        self.loop = RepeatTool("Bash", SAME, max_calls=CALLS)

    def reply(self, conversation: Conversation) -> Reply:
        if not conversation.mentions(self.second):
            return self.loop.reply(conversation)
        if any(o.input == self.next_call for o in conversation.outcomes):
            return Reply(text="Done.")
        return Reply(calls=(ToolCall("Bash", self.next_call),))


def test_the_next_prompt_of_an_aborted_session_starts_afresh(claude: str, tmp_path: Path) -> None:
    loopwatch = LoopwatchHooks()
    script = TwoPrompts()
    model = FakeModel(script)
    stderr: list[str] = []
    responses = ToolResponses()

    async def converse(options: ClaudeAgentOptions) -> tuple[list[Any], list[Any], Ruling | None]:
        async with ClaudeSDKClient(options) as client:
            await client.query(PROMPT)
            first = [message async for message in client.receive_response()]
            result = next((m for m in first if isinstance(m, ResultMessage)), None)
            aborted = loopwatch.abort_of(result.session_id) if result is not None else None
            await client.query(script.second)
            second = [message async for message in client.receive_response()]
        return first, second, aborted

    with model:
        options = loopwatch.options(sdk_options(claude, tmp_path, model, stderr, responses))
        first, second, aborted = asyncio.run(asyncio.wait_for(converse(options), SDK_TIMEOUT_S))
    project = tmp_path / "project"
    one, two = SdkRun(first, project, responses, stderr), SdkRun(second, project, responses, stderr)
    assert one.result.terminal_reason == "hook_stopped"
    assert aborted is not None
    assert aborted.action == "abort"
    assert one.result.session_id == two.result.session_id
    # the same session's next prompt is not refused by the last prompt's abort
    (use,) = two.uses("Bash")
    assert two.outcomes()[use.id].text == "next"
    assert two.lines("next.log") == ["next"]
    assert two.result.terminal_reason == "completed"
    assert loopwatch.abort_of(two.result.session_id) is None
    assert loopwatch.guard.failures == []


def test_options_keep_hooks_of_their_own() -> None:
    async def mine(data: Any, tool_use_id: str | None, context: Any) -> Any:
        return {}

    own = HookMatcher(matcher="Bash", hooks=[mine])
    loopwatch = LoopwatchHooks()
    options = loopwatch.options(ClaudeAgentOptions(hooks={"PreToolUse": [own]}, max_turns=3))
    assert options.max_turns == 3
    assert options.hooks is not None
    pre = options.hooks["PreToolUse"]
    assert pre[0] is own
    assert [m.hooks for m in pre[1:]] == [[loopwatch.pre_tool_use]]
    assert set(options.hooks) == {
        "UserPromptSubmit",
        "PreToolUse",
        "PostToolUse",
        "PostToolUseFailure",
        "SubagentStop",
    }
