"""``loopwatch hook claude-code`` against a real ``loopwatch gateway`` process, configured by
the README's ``~/.claude/settings.json`` snippet."""

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import ROOT


def readme_settings() -> dict[str, Any]:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("### Claude Code") :]
    block = re.search(r"```json\n(.*?)```", section, re.DOTALL)
    assert block is not None
    settings: dict[str, Any] = json.loads(block.group(1))
    return settings


@pytest.fixture(scope="module")
def gateway_url() -> Iterator[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "loopwatch", "gateway", "--listen", "127.0.0.1:0"],
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "LOOPWATCH_GATEWAY_TOKENS": "hook-token"},
    )
    assert proc.stderr is not None
    found = re.search(r"gateway at (http://\S+)", proc.stderr.readline())
    assert found
    yield found.group(1)
    proc.send_signal(signal.SIGTERM)
    proc.wait(20)
    proc.stderr.close()


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
    assert set(hooks) == {"UserPromptSubmit", "PreToolUse", "PostToolUse", "SessionStart", "SessionEnd"}


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
    assert warning["additionalContext"].startswith("WARNING: You have called Read 10 times")
    block = answers[20]
    assert block["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert block["hookSpecificOutput"]["permissionDecisionReason"].startswith("CRITICAL")
    assert "continue" not in block
    stop = answers[21]
    assert stop["continue"] is False
    assert stop["hookSpecificOutput"]["permissionDecision"] == "deny"
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
