"""The real Gemini CLI (npm ``@google/gemini-cli``, pinned with its Node.js in
``runtimes/gemini.sh``), headless and offline: ``gemini -p`` talks to a scripted fake of the
Gemini API on 127.0.0.1 (``fake_model/gemini.py``) that asks for the same failing shell command
each turn, and runs a recording command hook on ``BeforeTool`` and ``AfterTool``.

These prove the harness that the loopwatch tests build on: Gemini CLI runs the command the
model asked for, calls the hooks with the documented input, refuses the call when the
``BeforeTool`` hook denies it (the refusal reaches the model as the tool's error), and stops
the agent on ``continue: false``. Without npm or the registry this fails: it never skips."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.integration.fake_model import FakeModel, GeminiApi, RepeatTool
from tests.integration.runtimes.gemini_cli import MODEL, Gemini, GeminiRun
from tests.integration.runtimes.loopwatch_checks import FAILING_COMMAND, FINAL_TEXT, MISSING, failing_loop
from tests.integration.runtimes.recording_hook import RecordingHook

MARKER = "LOOPWATCH-TEST-DENY"
SHELL_TOOL = "run_shell_command"
CALL = {"command": FAILING_COMMAND}


def _looping_model(max_calls: int) -> FakeModel:
    return FakeModel(failing_loop(SHELL_TOOL, CALL, max_calls, until=MARKER), GeminiApi)


def _run(gemini: Gemini, tmp_path: Path, model: FakeModel, hook: RecordingHook) -> GeminiRun:
    return gemini.run_in(
        tmp_path,
        base_url=model.url,
        prompt="Show me the file.",
        hooks={"BeforeTool": [hook.command], "AfterTool": [hook.command]},
    )


def test_gemini_runs_the_model_s_shell_calls_and_calls_both_tool_hooks(
    gemini: Gemini, tmp_path: Path
) -> None:
    hook = RecordingHook(tmp_path / "hook")
    # six identical calls: more than Gemini CLI's own loop detection allows (off in the settings)
    with _looping_model(max_calls=6) as model:
        run = _run(gemini, tmp_path, model, hook)
        turns = model.conversations()
        paths = {exchange.path for exchange in model.exchanges()}

    assert paths == {f"/v1beta/models/{MODEL}:streamGenerateContent"}
    assert [len(turn.outcomes) for turn in turns] == [0, 1, 2, 3, 4, 5, 6]
    assert SHELL_TOOL in turns[0].tool_names
    outcomes = turns[-1].outcomes
    assert all(MISSING in outcome.text and "Exit Code: 1" in outcome.text for outcome in outcomes)
    assert [event["tool_name"] for event in run.of_type("tool_use")] == [SHELL_TOOL] * 6
    assert run.of_type("result")[-1]["status"] == "success"

    before, after = hook.calls("BeforeTool"), hook.calls("AfterTool")
    assert len(before) == len(after) == 6  # a failed command reaches AfterTool
    session = before[0]["session_id"]
    for call in before + after:
        assert set(call) >= {"session_id", "transcript_path", "cwd", "hook_event_name", "timestamp"}
        assert call["session_id"] == session
        assert call["tool_name"] == SHELL_TOOL
        assert call["tool_input"] == {"command": FAILING_COMMAND}
        assert call["cwd"] == str(tmp_path / "work")
        assert not {"tool_use_id", "tool_call_id", "call_id"} & set(call)  # no call id in Gemini's hooks
    for call in after:
        response: dict[str, Any] = call["tool_response"]
        assert MISSING in response["llmContent"]
        assert "Exit Code: 1" in response["llmContent"]
        assert "error" not in response  # a non-zero exit is not a tool error
        assert response["returnDisplay"] == f"cat: /nonexistent-file-xyz: {MISSING}"


def test_a_tool_error_reaches_after_tool_with_its_error(gemini: Gemini, tmp_path: Path) -> None:
    hook = RecordingHook(tmp_path / "hook")
    script = RepeatTool("read_file", {"file_path": "missing.txt"}, max_calls=1, final_text=FINAL_TEXT)
    with FakeModel(script, GeminiApi) as model:
        _run(gemini, tmp_path, model, hook)
        turns = model.conversations()

    assert turns[-1].last_outcomes[0].is_error
    (after,) = hook.calls("AfterTool")
    assert after["tool_input"] == {"file_path": "missing.txt"}
    assert after["tool_response"]["error"]["type"] == "file_not_found"


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(
            {"stdout": {"decision": "deny", "reason": f"{MARKER}: refused by the test hook"}}, id="deny"
        ),
        pytest.param({"stdout": {"decision": "block", "reason": f"{MARKER}: block"}}, id="block"),
        pytest.param({"stderr": f"{MARKER}: refused on stderr", "exit": 2}, id="exit-2"),
    ],
)
def test_a_denying_before_tool_hook_makes_gemini_refuse_the_call(
    gemini: Gemini, tmp_path: Path, answer: dict[str, Any]
) -> None:
    hook = RecordingHook(tmp_path / "hook", {"BeforeTool": answer})
    with _looping_model(max_calls=3) as model:
        run = _run(gemini, tmp_path, model, hook)
        turns = model.conversations()

    assert len(turns) == 2  # the call, then the final answer once the refusal came back
    (refusal,) = turns[1].last_outcomes
    assert refusal.is_error
    assert refusal.text.startswith(f"Tool execution blocked: {MARKER}")
    (result,) = run.of_type("tool_result")
    assert result["status"] == "error"
    assert result["error"]["type"] == "policy_violation"
    assert len(hook.calls("BeforeTool")) == 1
    assert hook.calls("AfterTool") == []  # a refused call has no AfterTool


def test_continue_false_on_before_tool_stops_the_agent(gemini: Gemini, tmp_path: Path) -> None:
    stop = {"continue": False, "stopReason": f"{MARKER}: stop the agent"}
    hook = RecordingHook(tmp_path / "hook", {"BeforeTool": {"stdout": stop}})
    with _looping_model(max_calls=3) as model:
        run = _run(gemini, tmp_path, model, hook)
        turns = model.conversations()

    assert len(turns) == 1  # the model is not asked again
    (result,) = run.of_type("tool_result")
    assert result["error"]["type"] == "stop_execution"
    assert result["output"] == f"Agent execution stopped by hook: {MARKER}: stop the agent"
    assert hook.calls("AfterTool") == []


def test_gemini_ignores_claude_code_s_deny_shape(gemini: Gemini, tmp_path: Path) -> None:
    """``hookSpecificOutput.permissionDecision`` (Claude Code, Codex) means nothing to Gemini CLI:
    the call runs. A Gemini hook must answer ``decision: "deny"``."""
    claude_deny = {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": f"{MARKER}: Claude's shape",
        }
    }
    hook = RecordingHook(tmp_path / "hook", {"BeforeTool": {"stdout": claude_deny}})
    with _looping_model(max_calls=1) as model:
        _run(gemini, tmp_path, model, hook)
        turns = model.conversations()

    assert MISSING in turns[-1].last_outcomes[0].text
    assert len(hook.calls("AfterTool")) == 1
