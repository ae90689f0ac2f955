"""``loopwatch hook codex`` and ``loopwatch hook gemini``: what one hook call asks of loopwatch
(``plan``, pure) and how the decision is answered in the runtime's own hook format. The
runtimes themselves are in ``tests/integration/test_codex_loopwatch.py`` and
``test_gemini_loopwatch.py``."""

from __future__ import annotations

from typing import Any

import pytest

from loopwatch.detectors.runtime_texts import decision_text
from loopwatch.streams.gateway.hooks import claude_code, codex, gemini
from loopwatch.streams.gateway.hooks.plan import MemoryPrompts

COMMAND = {"command": "cat /nonexistent-file-xyz"}


def answer(action: str) -> dict[str, Any]:
    if action == "abort":
        return {"decision": "abort", "reason": "tool_loop_recovery_exhausted", "verdicts": []}
    verdict = {"action": action, "detector": "generic_repeat", "tool": "Bash", "count": 10}
    return {"decision": action, "reason": "generic_repeat", "verdicts": [verdict]}


def codex_hook(event: str, **fields: Any) -> dict[str, Any]:
    return {"hook_event_name": event, "session_id": "s1", "turn_id": "t1", **fields}


def gemini_hook(event: str, **fields: Any) -> dict[str, Any]:
    return {"hook_event_name": event, "session_id": "s1", **fields}


# Claude Code


@pytest.mark.parametrize("source", ["system", "poll_event"])
def test_claude_code_s_machine_injected_prompts_go_on_in_the_same_run(source: str) -> None:
    """Task notifications, peer messages, auto-continuation: no new run (a new one would reset
    the loop counts and free an aborted run's calls)."""
    prompts = MemoryPrompts()
    prompt = {"hook_event_name": "UserPromptSubmit", "session_id": "s1", "prompt": "go"}
    assert claude_code.plan(prompt, prompts, "claude-code").events == []
    injected = claude_code.plan({**prompt, "source": source, "prompt": "a peer says hi"}, prompts, "cc")
    assert injected.events == []
    call = {"hook_event_name": "PreToolUse", "session_id": "s1", "tool_name": "Bash", "tool_input": COMMAND}
    decide = claude_code.plan(call, prompts, "claude-code").decide
    assert decide is not None
    assert decide["run_id"] == "s1#1"
    (ended,) = claude_code.plan({**prompt, "source": "user"}, prompts, "claude-code").events
    assert (ended["type"], ended["run_id"]) == ("run_end", "s1#1")


def test_claude_code_s_prompt_source_of_another_type_is_no_source() -> None:
    prompts = MemoryPrompts()
    prompt = {"hook_event_name": "UserPromptSubmit", "session_id": "s1", "prompt": "go"}
    for source in (["system"], {"a": 1}, 7, None):
        claude_code.plan({**prompt, "source": source}, prompts, "claude-code")
    assert prompts.current("s1") == 4  # each a prompt of the user's, none a crash


# Codex


def test_codex_asks_a_decision_for_a_proposed_call_in_the_turn_s_run() -> None:
    plan = codex.plan(
        codex_hook("PreToolUse", tool_name="Bash", tool_input=COMMAND, tool_use_id="call_1"),
        MemoryPrompts(),
        "codex",
    )
    assert plan.events == []
    assert plan.decide == {
        "run_id": "s1#t1",
        "session_id": "s1",
        "agent_id": "codex",
        "tool": "Bash",
        "params": COMMAND,
        "tool_call_id": "call_1",
    }


@pytest.mark.parametrize("action", ["block", "abort"])
def test_codex_gets_a_plain_deny_for_a_block_and_an_abort(action: str) -> None:
    plan = codex.plan(
        codex_hook("PreToolUse", tool_name="Bash", tool_input=COMMAND), MemoryPrompts(), "codex"
    )
    output = plan.respond(answer(action))
    # Codex rejects continue/stopReason on PreToolUse (and the deny with them): never sent
    assert output == {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": decision_text(answer(action)),
        }
    }


def test_codex_gets_a_warning_as_additional_context_and_nothing_for_an_allow() -> None:
    plan = codex.plan(
        codex_hook("PreToolUse", tool_name="Bash", tool_input=COMMAND), MemoryPrompts(), "codex"
    )
    text = decision_text(answer("warn"))
    assert plan.respond(answer("warn")) == {
        "hookSpecificOutput": {"hookEventName": "PreToolUse", "additionalContext": text}
    }
    assert plan.respond({"decision": "allow", "verdicts": []}) is None
    assert plan.respond(None) is None  # nothing decided (the gateway failed): go on


def test_codex_records_the_command_s_output_as_the_result_even_of_a_failed_command() -> None:
    output = "cat: /nonexistent-file-xyz: No such file or directory\n"
    hook = codex_hook(
        "PostToolUse", tool_name="Bash", tool_input=COMMAND, tool_use_id="c", tool_response=output
    )
    (event,) = codex.plan(hook, MemoryPrompts(), "codex").events
    assert event["type"] == "tool_result"
    assert (event["run_id"], event["tool"], event["params"]) == ("s1#t1", "Bash", COMMAND)
    assert (event["tool_call_id"], event["result"]) == ("c", output)
    assert "error" not in event


def test_codex_s_stop_ends_the_turn_s_run_and_a_subagent_has_a_run_of_its_own() -> None:
    (end,) = codex.plan(codex_hook("Stop"), MemoryPrompts(), "codex").events
    assert (end["type"], end["run_id"]) == ("run_end", "s1#t1")

    sub = codex.plan(
        codex_hook("PreToolUse", agent_id="a1", tool_name="Bash", tool_input=COMMAND),
        MemoryPrompts(),
        "codex",
    )
    assert sub.decide is not None
    assert sub.decide["run_id"] == "s1#t1/a1"
    assert (sub.decide["parent_run_id"], sub.decide["depth"]) == ("s1#t1", 1)
    (sub_end,) = codex.plan(codex_hook("SubagentStop", agent_id="a1"), MemoryPrompts(), "codex").events
    assert sub_end["run_id"] == "s1#t1/a1"
    assert codex.plan(codex_hook("Stop", agent_id="a1"), MemoryPrompts(), "codex").events == []


# Gemini CLI


def test_gemini_runs_are_prompts_before_agent_ends_the_previous_one_and_after_agent_its_own() -> None:
    prompts = MemoryPrompts()
    assert gemini.plan(gemini_hook("BeforeAgent"), prompts, "gemini").events == []
    before = gemini.plan(
        gemini_hook("BeforeTool", tool_name="run_shell_command", tool_input=COMMAND), prompts, "g"
    )
    assert before.decide is not None
    assert before.decide["run_id"] == "s1#1"
    (done,) = gemini.plan(gemini_hook("AfterAgent"), prompts, "gemini").events
    assert (done["type"], done["run_id"]) == ("run_end", "s1#1")
    (previous,) = gemini.plan(gemini_hook("BeforeAgent"), prompts, "gemini").events
    assert (previous["type"], previous["run_id"]) == ("run_end", "s1#1")
    (end,) = gemini.plan(gemini_hook("SessionEnd"), prompts, "gemini").events
    assert (end["type"], end["run_id"]) == ("run_end", "s1#2")


def test_gemini_denies_a_block_and_stops_the_agent_on_an_abort() -> None:
    prompts = MemoryPrompts()
    hook = gemini_hook("BeforeTool", tool_name="run_shell_command", tool_input=COMMAND)
    plan = gemini.plan(hook, prompts, "gemini")
    block, abort = decision_text(answer("block")), decision_text(answer("abort"))
    assert plan.respond(answer("block")) == {"decision": "deny", "reason": block}
    assert plan.respond(answer("abort")) == {
        "decision": "deny",
        "reason": abort,
        "continue": False,
        "stopReason": abort,
    }
    assert plan.respond({"decision": "allow", "verdicts": []}) is None


def test_gemini_gives_a_warning_with_the_warned_call_s_result_once() -> None:
    prompts = MemoryPrompts()
    call = {"tool_name": "run_shell_command", "tool_input": COMMAND}
    warning = decision_text(answer("warn"))
    assert gemini.plan(gemini_hook("BeforeTool", **call), prompts, "gemini").respond(answer("warn")) is None
    result = {"llmContent": "Output: x", "returnDisplay": "x"}
    after = gemini.plan(gemini_hook("AfterTool", tool_response=result, **call), prompts, "gemini")
    assert after.respond(None) == {
        "hookSpecificOutput": {"hookEventName": "AfterTool", "additionalContext": warning}
    }
    again = gemini.plan(gemini_hook("AfterTool", tool_response=result, **call), prompts, "gemini")
    assert again.respond(None) is None


def _sent(tool: str, response: Any) -> dict[str, Any]:
    hook = gemini_hook("AfterTool", tool_name=tool, tool_input=COMMAND, tool_response=response)
    (event,) = gemini.plan(hook, MemoryPrompts(), "gemini").events
    return {key: event[key] for key in ("result", "error") if key in event}


def test_gemini_s_shell_result_is_sent_without_the_run_s_process_ids() -> None:
    def shell(pgid: int, background: str = "") -> dict[str, str]:
        lines = ["Output: cat: /nonexistent-file-xyz: No such file or directory", "Exit Code: 1"]
        if background:
            lines.append(f"Background PIDs: {background}")
        lines.append(f"Process Group PGID: {pgid}")
        content = "<untrusted_context>\n" + "\n".join(lines) + "\n</untrusted_context>"
        return {"llmContent": content, "returnDisplay": "cat: ..."}

    sent = _sent("run_shell_command", shell(2128))
    assert sent == {
        "result": "<untrusted_context>\nOutput: cat: /nonexistent-file-xyz: No such file or directory\n"
        "Exit Code: 1\n</untrusted_context>"
    }
    # the same failure in another process (group) is the same outcome
    assert _sent("run_shell_command", shell(4470, background="4471, 4472")) == sent
    bare = _sent("run_shell_command", {"llmContent": "Output: ok\nProcess Group PGID: 12"})
    assert bare == {"result": "Output: ok"}
    # the ids only go at the end of a shell result: the command's own output is kept
    own = "Output: Process Group PGID: 5\nProcess Group PGID: 6"
    assert _sent("run_shell_command", {"llmContent": own}) == {"result": "Output: Process Group PGID: 5"}
    other = "Output: x\nProcess Group PGID: 7"
    assert _sent("read_file", {"llmContent": other}) == {"result": other}


def test_gemini_s_tool_error_is_the_result_s_error() -> None:
    error = {"message": "File not found: missing.txt", "type": "file_not_found"}
    assert _sent("read_file", {"llmContent": "x", "error": error}) == {"error": "File not found: missing.txt"}
    assert _sent("read_file", {"llmContent": "x", "error": "boom"}) == {"error": "boom"}


def test_a_block_answer_that_names_no_tool_says_this_call_once() -> None:
    text = decision_text({"decision": "block", "reason": "generic_repeat"})
    assert text.startswith("loopwatch blocked this call: this tool was called")  # (not "this this tool call")
