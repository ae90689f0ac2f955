"""``loopwatch hook claude-code`` against a real ``loopwatch gateway`` process, configured by
the README's ``~/.claude/settings.json`` snippet."""

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.gateway_process import gateway_process
from tests.helpers import ROOT


def readme_settings() -> dict[str, Any]:
    """The hooks the docs configure (docs/claude-code.md), the same as the shipped example's."""
    text = (ROOT / "docs" / "claude-code.md").read_text()
    block = re.search(r"```json\n(.*?)```", text, re.DOTALL)
    assert block is not None
    settings: dict[str, Any] = json.loads(block.group(1))
    assert json.loads((ROOT / "examples" / "claude-code-settings.json").read_text()) == settings
    return settings


@pytest.fixture(scope="module")
def gateway_url() -> Iterator[str]:
    with gateway_process(env={"LOOPWATCH_GATEWAY_TOKENS": "hook-token"}) as started:
        yield started.url


def call_hook(event: str, hook: dict[str, Any], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run the command the README configures for ``event``, as Claude Code does."""
    settings = readme_settings()["hooks"][event]
    command = shlex.split(settings[0]["hooks"][0]["command"])
    assert command[:3] == ["loopwatch", "hook", "claude-code"]
    return subprocess.run(
        [sys.executable, "-m", "loopwatch", *command[1:]],
        input=json.dumps({"hook_event_name": event, **hook}),
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )


def test_the_readme_snippet_wires_every_hook_event() -> None:
    hooks = readme_settings()["hooks"]
    assert set(hooks) == {
        "UserPromptSubmit",
        "PreToolUse",
        "PostToolUse",
        "PostToolUseFailure",
        "SubagentStop",
        "SessionStart",
        "SessionEnd",
    }
    assert hooks["SessionStart"][0]["matcher"] == "compact"


def test_a_looping_session_is_warned_blocked_and_stopped(gateway_url: str, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "LOOPWATCH_GATEWAY_URL": gateway_url,
        "LOOPWATCH_GATEWAY_TOKEN": "hook-token",
        "LOOPWATCH_HOOK_STATE_DIR": str(tmp_path),
    }
    session = {"session_id": "sess-1", "transcript_path": "/dev/null", "cwd": "/repo"}
    assert call_hook("UserPromptSubmit", {**session, "prompt": "fix the build"}, env).returncode == 0
    answers: list[Any] = []
    for n in range(22):
        call = {
            **session,
            "tool_name": "Read",
            "tool_input": {"file_path": "/repo/PLAN.md"},
            "tool_use_id": f"t{n}",
        }
        pre = call_hook("PreToolUse", call, env)
        assert pre.returncode == 0, pre.stderr
        answers.append(json.loads(pre.stdout) if pre.stdout.strip() else None)
        post = call_hook("PostToolUse", {**call, "tool_response": {"error": "File does not exist."}}, env)
        assert post.returncode == 0, post.stderr
    assert answers[:10] == [None] * 10
    warning = answers[10]["hookSpecificOutput"]
    assert warning["additionalContext"].startswith(
        "loopwatch warning: Read was called 10 times with identical arguments [generic_repeat]."
    )
    block = answers[20]
    assert block["hookSpecificOutput"]["permissionDecision"] == "deny"
    reason = block["hookSpecificOutput"]["permissionDecisionReason"]
    assert reason.startswith("loopwatch blocked this Read call: Read was called 20 times")
    assert "OpenClaw" not in reason
    assert "Session execution" not in reason
    assert "continue" not in block
    stop = answers[21]
    assert stop["continue"] is False
    assert stop["stopReason"].startswith("loopwatch stopped this turn: ")
    assert stop["stopReason"].endswith("[tool_loop_recovery_exhausted]. No blocked tool action was executed.")
    assert stop["hookSpecificOutput"]["permissionDecision"] == "deny"
    # the run stays aborted: any later call of it is denied and ends the turn again
    later = call_hook(
        "PreToolUse",
        {**session, "tool_name": "Write", "tool_input": {"file_path": "/x"}, "tool_use_id": "w"},
        env,
    )
    assert json.loads(later.stdout) == stop
    # a new prompt is a new run: the same call is allowed again
    assert call_hook("UserPromptSubmit", {**session, "prompt": "try again"}, env).returncode == 0
    again = call_hook(
        "PreToolUse",
        {**session, "tool_name": "Read", "tool_input": {"file_path": "/repo/PLAN.md"}, "tool_use_id": "x"},
        env,
    )
    assert again.stdout.strip() == ""


def test_an_unreachable_gateway_fails_open_or_closed(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "LOOPWATCH_GATEWAY_URL": "http://127.0.0.1:9",
        "LOOPWATCH_HOOK_STATE_DIR": str(tmp_path),
    }
    hook = {"session_id": "s", "tool_name": "Bash", "tool_input": {"command": "ls"}, "tool_use_id": "t"}
    open_ = call_hook("PreToolUse", hook, env)
    assert (open_.returncode, open_.stdout) == (0, "")
    assert "allowing (fail open)" in open_.stderr
    closed = subprocess.run(
        [sys.executable, "-m", "loopwatch", "hook", "claude-code", "--fail-closed"],
        input=json.dumps({"hook_event_name": "PreToolUse", **hook}),
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )
    assert closed.returncode == 2
    assert "refusing the tool call" in closed.stderr


def _env(gateway_url: str, tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "LOOPWATCH_GATEWAY_URL": gateway_url,
        "LOOPWATCH_GATEWAY_TOKEN": "hook-token",
        "LOOPWATCH_HOOK_STATE_DIR": str(tmp_path),
    }


def _core_refusal(tool: str, params: dict[str, Any], error: str, calls: int) -> list[str]:
    """The decisions the in-process core gives the same failing calls."""
    from loopwatch import LoopDetector

    detector = LoopDetector()
    actions: list[str] = []
    for _ in range(calls):
        decision = detector.before_tool_call("r", tool, params)
        actions.append(decision.action)
        if decision.proceed:
            detector.after_tool_call("r", tool, params, error=error)
    return actions


def test_a_command_that_keeps_failing_is_blocked_through_post_tool_use_failure(
    gateway_url: str, tmp_path: Path
) -> None:
    env = _env(gateway_url, tmp_path)
    session = {"session_id": "sess-fail", "cwd": "/repo"}
    assert call_hook("UserPromptSubmit", {**session, "prompt": "build it"}, env).returncode == 0
    command = {"command": "make build"}
    error = "Exit code 2\nmake: *** No rule to make target 'build'.  Stop."
    actions: list[str] = []
    for n in range(32):
        call = {**session, "tool_name": "Bash", "tool_input": command, "tool_use_id": f"b{n}"}
        pre = call_hook("PreToolUse", call, env)
        answer = json.loads(pre.stdout) if pre.stdout.strip() else None
        specific = (answer or {}).get("hookSpecificOutput", {})
        if specific.get("permissionDecision") == "deny":
            actions.append("abort" if answer and answer.get("continue") is False else "block")
            continue
        actions.append("warn" if "additionalContext" in specific else "allow")
        failure = {**call, "error": error, "is_interrupt": False}
        assert call_hook("PostToolUseFailure", failure, env).returncode == 0
    assert actions == _core_refusal("Bash", command, error, 32)
    assert "block" in actions


def test_an_interrupted_call_records_no_outcome(gateway_url: str, tmp_path: Path) -> None:
    env = _env(gateway_url, tmp_path)
    session = {"session_id": "sess-int"}
    call_hook("UserPromptSubmit", {**session, "prompt": "p"}, env)
    call = {**session, "tool_name": "Bash", "tool_input": {"command": "sleep 100"}, "tool_use_id": "i"}
    call_hook("PreToolUse", call, env)
    call_hook("PostToolUseFailure", {**call, "error": "interrupted", "is_interrupt": True}, env)
    run = _run_page(gateway_url, "sess-int#1")
    assert (run["calls"], run["results"]) == (1, 0)


def _run_page(gateway_url: str, run_id: str) -> dict[str, Any]:
    import urllib.parse
    import urllib.request

    request = urllib.request.Request(
        f"{gateway_url}/fleet/run?id={urllib.parse.quote(run_id)}",
        headers={"Authorization": "Bearer hook-token"},
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        page: dict[str, Any] = json.loads(answer.read())
    return page


def test_parallel_subagents_are_runs_of_their_own_linked_to_the_prompt(
    gateway_url: str, tmp_path: Path
) -> None:
    env = _env(gateway_url, tmp_path)
    session = {"session_id": "sess-sub"}
    call_hook("UserPromptSubmit", {**session, "prompt": "research"}, env)
    warned = []
    for n in range(8):  # two subagents read the same file 8 times each: 16 calls, none warned
        for agent in ("a1", "a2"):
            call = {
                **session,
                "agent_id": agent,
                "agent_type": "general-purpose",
                "tool_name": "Read",
                "tool_input": {"file_path": "/repo/README.md"},
                "tool_use_id": f"{agent}-{n}",
            }
            pre = call_hook("PreToolUse", call, env)
            warned.append(bool(pre.stdout.strip()))
            call_hook("PostToolUse", {**call, "tool_response": {"content": "same"}}, env)
    assert warned == [False] * 16
    for agent in ("a1", "a2"):
        run = _run_page(gateway_url, f"sess-sub#1/{agent}")
        assert (run["calls"], run["parent_run_id"], run["root_run_id"], run["depth"]) == (
            8,
            "sess-sub#1",
            "sess-sub#1",
            1,
        )
        assert (
            call_hook(
                "SubagentStop", {**session, "agent_id": agent, "agent_type": "general-purpose"}, env
            ).returncode
            == 0
        )
        assert _run_page(gateway_url, f"sess-sub#1/{agent}")["status"] == "ended"


def test_the_gateway_http_hook_answers_as_the_command_hook_does(gateway_url: str, tmp_path: Path) -> None:
    from tests.helpers import post_json

    env = _env(gateway_url, tmp_path)
    auth = {"Authorization": "Bearer hook-token"}
    url = f"{gateway_url}/v1/hooks/claude-code"
    answers: dict[str, list[Any]] = {"command": [], "http": []}
    for mode in ("command", "http"):
        session = {"session_id": f"sess-{mode}"}

        def send(
            event: str, hook: dict[str, Any], mode: str = mode, session: dict[str, Any] = session
        ) -> Any:
            body = {"hook_event_name": event, **session, **hook}
            if mode == "http":
                status, answer = post_json(url, body, auth)
                assert status == 200
                return answer or None
            done = call_hook(event, {**session, **hook}, env)
            return json.loads(done.stdout) if done.stdout.strip() else None

        send("UserPromptSubmit", {"prompt": "p"})
        for n in range(23):
            call = {"tool_name": "Grep", "tool_input": {"pattern": "x"}, "tool_use_id": f"g{n}"}
            answers[mode].append(send("PreToolUse", call))
            send("PostToolUse", {**call, "tool_response": {"matches": []}})
    assert answers["http"] == answers["command"]
    assert answers["http"][22]["continue"] is False
    status, refused = post_json(f"{gateway_url}/v1/hooks/no-such-runtime", {}, auth)
    assert status == 404
    assert "claude-code" in refused["error"]
