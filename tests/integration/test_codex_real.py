"""The real Codex CLI (npm ``@openai/codex``, pinned in ``runtimes/codex.sh``), headless and
offline: ``codex exec`` talks to a scripted fake of the OpenAI Responses API on 127.0.0.1
(``fake_model/openai_responses.py``) that asks for the same failing shell command each turn,
and runs a recording command hook on ``PreToolUse`` and ``PostToolUse``.

These prove the harness that the loopwatch tests build on: Codex runs the command the model
asked for, calls the hooks with the documented input, and refuses the call when the
``PreToolUse`` hook denies it (the refusal reaches the model as the tool's output). Without npm
or the registry this fails: it never skips."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.fake_model import FakeModel, ResponsesApi
from tests.integration.runtimes.codex_cli import Codex, CodexRun
from tests.integration.runtimes.loopwatch_checks import FAILING_COMMAND, FINAL_TEXT, MISSING, failing_loop
from tests.integration.runtimes.recording_hook import RecordingHook

MARKER = "LOOPWATCH-TEST-DENY"
SHELL_TOOL = "exec_command"  # Codex 0.171's shell tool (unified exec): {"cmd": "..."}
CALL = {"cmd": FAILING_COMMAND}
DENY = {
    "hookSpecificOutput": {
        "hookEventName": "PreToolUse",
        "permissionDecision": "deny",
        "permissionDecisionReason": f"{MARKER}: refused by the test hook",
    }
}


def _looping_model(max_calls: int) -> FakeModel:
    return FakeModel(failing_loop(SHELL_TOOL, CALL, max_calls, until=MARKER), ResponsesApi)


def _run(codex: Codex, tmp_path: Path, model: FakeModel, hook: RecordingHook) -> CodexRun:
    return codex.run_in(
        tmp_path,
        base_url=f"{model.url}/v1",
        prompt="Show me the file.",
        hooks={"PreToolUse": [hook.command], "PostToolUse": [hook.command]},
    )


def test_codex_runs_the_model_s_shell_calls_and_calls_both_tool_hooks(codex: Codex, tmp_path: Path) -> None:
    hook = RecordingHook(tmp_path / "hook")
    with _looping_model(max_calls=3) as model:
        run = _run(codex, tmp_path, model, hook)
        turns = model.conversations()

    # the model asked three times; Codex ran the command each time and sent its failure back
    assert [len(turn.outcomes) for turn in turns] == [0, 1, 2, 3]
    assert SHELL_TOOL in turns[0].tool_names
    outcomes = turns[-1].outcomes
    assert all(MISSING in outcome.text and "exited with code 1" in outcome.text for outcome in outcomes)
    executed = run.items("command_execution")
    assert [item["exit_code"] for item in executed] == [1, 1, 1]
    assert all(FAILING_COMMAND in item["command"] for item in executed)
    assert run.items("agent_message")[-1]["text"] == FINAL_TEXT

    pre, post = hook.calls("PreToolUse"), hook.calls("PostToolUse")
    call_ids = [outcome.call_id for outcome in outcomes]
    assert [call["tool_use_id"] for call in pre] == call_ids
    assert [call["tool_use_id"] for call in post] == call_ids  # a failed command reaches PostToolUse
    session = pre[0]["session_id"]
    for call in pre + post:
        assert call["session_id"] == session
        assert call["turn_id"] == pre[0]["turn_id"]  # one user prompt, one turn
        assert call["tool_name"] == "Bash"  # Claude Code's name for the shell tool
        assert call["tool_input"] == {"command": FAILING_COMMAND}  # exec_command's "cmd", renamed
        assert call["cwd"] == str(tmp_path / "work")
        assert call["model"] == "fake-model"
        assert call["permission_mode"] == "bypassPermissions"
        assert isinstance(call["transcript_path"], str)
    assert {call["hook_event_name"] for call in pre} == {"PreToolUse"}
    assert "tool_response" not in pre[0]
    assert all(call["tool_response"].strip() == f"cat: /nonexistent-file-xyz: {MISSING}" for call in post)


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param({"stdout": DENY}, id="permissionDecision-deny"),
        pytest.param({"stderr": f"{MARKER}: refused on stderr", "exit": 2}, id="exit-2"),
        pytest.param(
            {"stdout": {"decision": "block", "reason": f"{MARKER}: legacy block"}}, id="decision-block"
        ),
    ],
)
def test_a_denying_pre_tool_use_hook_makes_codex_refuse_the_call(
    codex: Codex, tmp_path: Path, answer: dict[str, object]
) -> None:
    hook = RecordingHook(tmp_path / "hook", {"PreToolUse": answer})
    with _looping_model(max_calls=3) as model:
        run = _run(codex, tmp_path, model, hook)
        turns = model.conversations()

    assert len(turns) == 2  # the call, then the final answer once the refusal came back
    (refusal,) = turns[1].last_outcomes
    assert refusal.text.startswith(f"Command blocked by PreToolUse hook: {MARKER}")
    assert refusal.text.endswith(f"Command: {FAILING_COMMAND}")
    assert run.items("command_execution") == []  # never ran
    assert len(hook.calls("PreToolUse")) == 1
    assert hook.calls("PostToolUse") == []  # a refused call has no PostToolUse


def test_codex_rejects_continue_false_on_pre_tool_use_and_runs_the_call(codex: Codex, tmp_path: Path) -> None:
    """Codex refuses ``continue: false`` / ``stopReason`` on ``PreToolUse`` as unsupported, and
    the rejected output's deny goes with it: the command runs. A hook must not send them."""
    abort = {**DENY, "continue": False, "stopReason": f"{MARKER}: stop"}
    hook = RecordingHook(tmp_path / "hook", {"PreToolUse": {"stdout": abort}})
    with _looping_model(max_calls=2) as model:
        run = _run(codex, tmp_path, model, hook)
        turns = model.conversations()

    assert len(turns) == 3
    assert [item["exit_code"] for item in run.items("command_execution")] == [1, 1]
    assert all(MARKER not in outcome.text for outcome in turns[-1].outcomes)
    assert len(hook.calls("PostToolUse")) == 2
