"""loopwatch inside the real Claude Code CLI, offline.

Claude Code (npm ``@anthropic-ai/claude-code`` and its native platform package, pinned in
``tests/integration/runtimes/claude-code.sh``) runs headless (``claude -p``) against a scripted
model on 127.0.0.1 (``tests.integration.fake_model``) with loopwatch's hooks in a settings
file: the ``loopwatch hook claude-code`` command hook, or the HTTP hook type pointing at the
gateway's ``/v1/hooks/claude-code``. A real ``loopwatch gateway`` decides.

Every assertion is about what Claude Code did — what the model received (the fake model's
recorded requests), Claude Code's ``stream-json`` output and its session transcript. The
expected call counts and texts come from the in-process core (``LoopDetector``) fed with
the same calls and outcomes. Without npm or the registry this fails: it never skips.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from loopwatch.streams.gateway.hooks import claude_code as claude_code_hook
from tests.helpers import ROOT
from tests.integration.fake_model import (
    Conversation,
    FakeModel,
    RepeatTool,
    Reply,
    Router,
    Steps,
    ToolCall,
    When,
    refused_with,
)
from tests.integration.runtimes.claude_code_env import offline_claude_env
from tests.integration.runtimes.loopwatch_checks import (
    FAILING_COMMAND,
    MISSING,
    PROMPT,
    first_refused,
    first_with_action,
    gateway_json,
    hook_command,
    hook_text,
    repeated_call_decisions,
    run_page,
    unreachable_gateway_url,
)
from tests.integration.runtimes.process import install, run_bounded

INSTALL = ROOT / "tests" / "integration" / "runtimes" / "claude-code.sh"
TOOL_EVENTS = ("PreToolUse", "PostToolUse", "PostToolUseFailure")
FAILING = {"command": FAILING_COMMAND}
CLAUDE_TIMEOUT_S = 120


# Claude Code's own words (2.1.332) around a hook's text, as the model and the transcript get it
def denied(tool: str) -> str:
    return f"PreToolUse:{tool} hook error: "


def context(tool: str) -> str:
    return f"PreToolUse:{tool} hook additional context: "


def stopped(tool: str) -> str:
    return f"PreToolUse:{tool} hook stopped continuation: "


@pytest.fixture(scope="module")
def claude() -> str:
    return install(INSTALL)[-1]


def hook_settings(kind: str, gateway_url: str) -> dict[str, Any]:
    """loopwatch's hooks for every event it maps, as command hooks or HTTP hooks."""
    if kind == "command":
        hook: dict[str, Any] = {
            "type": "command",
            "command": hook_command("claude-code", gateway_url),
            "timeout": 30,
        }
    else:
        hook = {"type": "http", "url": f"{gateway_url}/v1/hooks/claude-code", "timeout": 30}
    hooks: dict[str, Any] = {}
    for event in claude_code_hook.EVENTS:
        entry: dict[str, Any] = {"hooks": [hook]}
        if event in TOOL_EVENTS:
            entry["matcher"] = "*"
        hooks[event] = [entry]
    return {"hooks": hooks}


@dataclass(frozen=True)
class Use:
    id: str
    name: str
    input: Any
    parent: str | None  # the Agent call whose subagent made this call


@dataclass(frozen=True)
class Outcome:
    content: str
    is_error: bool


@dataclass
class ClaudeRun:
    returncode: int
    lines: list[dict[str, Any]]
    stderr: str
    config_dir: Path

    @property
    def result(self) -> dict[str, Any]:
        results = [line for line in self.lines if line.get("type") == "result"]
        assert results, f"claude printed no result (exit {self.returncode}): {self.stderr[-2000:]}"
        return results[-1]

    def uses(self, name: str | None = None) -> list[Use]:
        """The tool calls Claude Code got from the model, in order."""
        found = []
        for line in self.lines:
            if line.get("type") != "assistant":
                continue
            for block in line["message"].get("content", []):
                if block.get("type") == "tool_use" and name in (None, block["name"]):
                    found.append(
                        Use(block["id"], block["name"], block["input"], line.get("parent_tool_use_id"))
                    )
        return found

    def outcomes(self) -> dict[str, Outcome]:
        """Claude Code's tool results by call id (also those it never sent to the model)."""
        found = {}
        for line in self.lines:
            if line.get("type") != "user" or not isinstance(line["message"].get("content"), list):
                continue
            for block in line["message"]["content"]:
                if block.get("type") == "tool_result":
                    content = block.get("content")
                    if isinstance(content, list):
                        content = "\n".join(part.get("text", "") for part in content)
                    found[block["tool_use_id"]] = Outcome(str(content), bool(block.get("is_error")))
        return found

    def hook_responses(self, event: str) -> list[dict[str, Any]]:
        """What the hooks of ``event`` answered (``--include-hook-events``)."""
        return [
            line
            for line in self.lines
            if line.get("subtype") == "hook_response" and line.get("hook_event") == event
        ]

    def transcript_texts(self) -> list[str]:
        session = self.result["session_id"]
        paths = list((self.config_dir / "projects").glob(f"*/{session}.jsonl"))
        assert len(paths) == 1, f"no transcript of session {session}"
        return paths[0].read_text().splitlines()

    def subagent_ids(self) -> list[str]:
        session = self.result["session_id"]
        found = (self.config_dir / "projects").glob(f"*/{session}/subagents/agent-*.jsonl")
        return sorted(path.stem.removeprefix("agent-") for path in found)


def run_claude(
    claude: str, workdir: Path, model: FakeModel, settings: dict[str, Any], tools: tuple[str, ...]
) -> ClaudeRun:
    env, project = offline_claude_env(workdir, model.url)
    (workdir / "settings.json").write_text(json.dumps(settings, indent=2))
    env |= {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "LOOPWATCH_HOOK_STATE_DIR": str(workdir / "hook-state"),
    }
    command = [
        *(claude, "-p", PROMPT, "--output-format", "stream-json", "--verbose", "--include-hook-events"),
        *("--settings", str(workdir / "settings.json"), "--allowedTools", *tools),
    ]
    done = run_bounded(command, env=env, cwd=project, timeout=CLAUDE_TIMEOUT_S)
    assert not done.timed_out, done.describe()
    lines = []
    for text in done.stdout.splitlines():
        try:
            value = json.loads(text)
        except ValueError:
            continue
        if isinstance(value, dict):
            lines.append(value)
    return ClaudeRun(done.returncode, lines, done.stderr, Path(env["CLAUDE_CONFIG_DIR"]))


def _main(model: FakeModel) -> list[Conversation]:
    """The main conversation's requests (not a subagent's), in order: those whose prompt is the
    run's. (Its first line: on this machine, the second Claude Code process of a pytest session
    and every later one append "/bin/bash: line 1: unalias: unsetenv: not found" to the ``-p``
    prompt they send, whatever the hooks, as the same tests at the previous release's commit do.)"""
    return [c for c in model.conversations() if c.prompt.split("\n", 1)[0] == PROMPT]


def _last_reply(model: FakeModel) -> Reply:
    exchanges = [e for e in model.exchanges() if e.conversation is not None]
    assert exchanges[-1].reply is not None
    return exchanges[-1].reply


HOOK_KINDS = ["command", "http"]


@pytest.mark.parametrize("kind", HOOK_KINDS)
def test_a_loop_of_failing_commands_is_refused_at_the_core_s_count_and_the_warning_reaches_the_model(
    claude: str, gateway_url: str, tmp_path: Path, kind: str
) -> None:
    model = FakeModel(RepeatTool("Bash", FAILING, stop_when=refused_with(denied("Bash")), max_calls=40))
    with model:
        run = run_claude(claude, tmp_path, model, hook_settings(kind, gateway_url), ("Bash", "Read"))
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.result["subtype"] == "success"
    uses, outcomes = run.uses("Bash"), run.outcomes()
    assert uses
    assert all(use.input == FAILING for use in uses)
    failure = outcomes[uses[0].id]
    assert failure.is_error
    assert MISSING in failure.content

    decisions = repeated_call_decisions("Bash", FAILING, len(uses), error=failure.content)
    refused = first_refused(decisions)
    warned = first_with_action(decisions, "warn")
    # Claude Code ran every call before the refusal and refused exactly that one
    assert len(uses) == refused, (len(uses), refused)
    assert [outcomes[use.id] for use in uses[:-1]] == [failure] * (refused - 1)
    last = outcomes[uses[-1].id]
    assert last.is_error
    assert last.content == denied("Bash") + hook_text(decisions[refused - 1])

    main = _main(model)
    # the model got each result, the refusal in the request after the refused call; then it stopped
    assert [c.turn for c in main] == list(range(refused + 1))
    assert main[refused].last_outcomes[0].text == last.content
    assert main[-1] is model.conversations()[-1]
    # the warning of the first warned call reached the model with that call's result, not before
    warning = context("Bash") + hook_text(decisions[warned - 1])
    assert main[warned].mentions(warning)
    assert not main[warned - 1].mentions(warning)
    pre = run.hook_responses("PreToolUse")
    assert len(pre) == refused  # loopwatch answered every call (none failed open)
    assert all(r["outcome"] == "success" and "fail open" not in r.get("stderr", "") for r in pre), pre


@pytest.mark.parametrize("kind", HOOK_KINDS)
def test_an_abort_ends_claude_s_turn_and_refuses_the_run_s_next_calls(
    claude: str, gateway_url: str, tmp_path: Path, kind: str
) -> None:
    # the model ignores the block and tries harder: three calls in the turn after a refusal
    again = RepeatTool("Bash", FAILING, max_calls=60)
    harder = RepeatTool("Bash", FAILING, max_calls=60, per_turn=3)
    model = FakeModel(When(refused_with(denied("Bash")), then=harder, otherwise=again))
    with model:
        run = run_claude(claude, tmp_path, model, hook_settings(kind, gateway_url), ("Bash", "Read"))
    assert run.returncode == 0, run.stderr[-2000:]
    uses, outcomes = run.uses("Bash"), run.outcomes()
    failure = outcomes[uses[0].id]
    decisions = repeated_call_decisions("Bash", FAILING, len(uses), error=failure.content)
    actions = [d.action for d in decisions]
    aborted = first_with_action(decisions, "abort")
    # the abort came in the turn of three calls: two more calls of the run followed it
    assert len(uses) == aborted + 2, (len(uses), actions)
    assert actions[aborted:] == ["abort", "abort"]

    # Claude Code refused the aborting call and the next ones, with the abort's reason
    for n in range(aborted, len(uses) + 1):
        assert outcomes[uses[n - 1].id] == Outcome(denied("Bash") + hook_text(decisions[n - 1]), True)
    # and stopped: the turn ended on the hook's "continue": false, the model got nothing more
    result = run.result
    assert result["terminal_reason"] == "hook_stopped"
    denials = {d["tool_use_id"] for d in result["permission_denials"]}
    assert {use.id for use in uses[aborted - 1 :]} <= denials
    main = _main(model)
    assert main[-1] is model.conversations()[-1]
    assert len(_last_reply(model).calls) == 3
    sent = {o.call_id for c in model.conversations() for o in c.outcomes}
    assert not sent & {use.id for use in uses[aborted - 1 :]}
    # the stop reason is in the session's transcript (what a resumed session shows the model)
    stop = stopped("Bash") + hook_text(decisions[aborted - 1])
    assert any(json.dumps(stop)[1:-1] in line for line in run.transcript_texts())


@pytest.mark.parametrize("kind", HOOK_KINDS)
def test_with_the_gateway_down_the_hooks_let_every_call_through(
    claude: str, tmp_path: Path, kind: str
) -> None:
    nobody = unreachable_gateway_url()
    model = FakeModel(RepeatTool("Bash", FAILING, max_calls=4))
    with model:
        run = run_claude(claude, tmp_path, model, hook_settings(kind, nobody), ("Bash", "Read"))
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.result["subtype"] == "success"
    assert run.result["terminal_reason"] == "completed"
    uses, outcomes = run.uses("Bash"), run.outcomes()
    assert len(uses) == 4
    for use in uses:
        assert outcomes[use.id].is_error
        assert MISSING in outcomes[use.id].content
    results = [o.text for c in _main(model) for o in c.last_outcomes]
    assert results == [outcomes[use.id].content for use in uses]
    pre = run.hook_responses("PreToolUse")
    assert len(pre) == 4  # the hooks ran, and failed open
    if kind == "command":  # loopwatch's hook exits 0 and says why
        assert all(r["exit_code"] == 0 and "fail open" in r["stderr"] for r in pre), pre
    else:  # Claude Code's HTTP hook fails, and a failed hook does not refuse the call
        assert all(r["outcome"] == "error" and "ECONNREFUSED" in r["stderr"] for r in pre), pre


@pytest.mark.parametrize("kind", HOOK_KINDS)
def test_parallel_subagents_are_runs_of_their_own(
    claude: str, gateway_url: str, tmp_path: Path, kind: str
) -> None:
    notes = tmp_path / "project" / "notes.txt"
    notes.parent.mkdir(parents=True)
    notes.write_text("the build needs libfoo\n")
    read = {"file_path": str(notes)}
    # as many reads each as give a verdict when both subagents' reads are one run, and none alone
    together = repeated_call_decisions("Read", read, 40, result="the build needs libfoo")
    first = next(n for n, d in enumerate(together, 1) if d.action != "allow")
    each = first // 2 + 1
    assert all(d.action == "allow" for d in together[:each])

    def task(name: str) -> ToolCall:
        prompt = f"SUBAGENT-{name}: read notes.txt"
        agent = {"description": f"read {name}", "prompt": prompt, "subagent_type": "general-purpose"}
        return ToolCall("Agent", {**agent, "run_in_background": False})

    routes = {f"SUBAGENT-{name}": RepeatTool("Read", read, max_calls=each) for name in "AB"}
    model = FakeModel(Router(routes, default=Steps(Reply(calls=(task("A"), task("B"))))))
    with model:
        run = run_claude(claude, tmp_path, model, hook_settings(kind, gateway_url), ("Bash", "Read", "Agent"))
    assert run.returncode == 0, run.stderr[-2000:]
    stats = run.result["subagent_stats"]
    assert (stats["spawned"], stats["completed"]) == (2, 2), stats
    agent_calls = [use.id for use in run.uses("Agent")]
    reads = run.uses("Read")
    assert sorted(use.parent or "" for use in reads) == sorted(agent_calls * each)
    outcomes = run.outcomes()
    assert all(not outcomes[use.id].is_error for use in reads)
    assert not any(c.mentions(context("Read")) for c in model.conversations())

    session = run.result["session_id"]
    agents = run.subagent_ids()
    assert len(agents) == 2
    overview = gateway_json(gateway_url, "/fleet/overview")
    assert overview["totals"]["runs_tracked"] == 3, overview["totals"]
    prompt_run = f"{session}#1"
    main = run_page(gateway_url, prompt_run)
    assert main["calls"] == 2
    for agent in agents:
        sub = run_page(gateway_url, f"{prompt_run}/{agent}")
        assert (sub["calls"], sub["results"], sub["parent_run_id"]) == (each, each, prompt_run), sub
        assert sub["verdict_list"] == []
