"""loopwatch inside the real Codex CLI, offline.

Codex (``runtimes/codex.sh``, ``codex exec``) runs against a scripted fake of the OpenAI
Responses API (``fake_model/openai_responses.py``) with ``loopwatch hook codex`` as its command
hook for every event ``streams/gateway/hooks/codex.py`` maps, and a real ``loopwatch gateway``
deciding. A recording hook beside it keeps what Codex gave the hooks (tool name, input, the
command's output, call and turn ids).

Every assertion is about what Codex did: the fake model's recorded requests, Codex's JSONL
output, its hook inputs and the gateway's view of the run. The expected call counts and texts
come from the in-process core (``LoopDetector``) fed with the calls and the outcomes the hook
sends (``tool_response``, the command's output). Without npm or the registry this fails: it
never skips.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loopwatch.detectors.facade import Decision
from loopwatch.streams.gateway.hooks import codex as codex_hook
from tests.integration.fake_model import FakeModel, RepeatTool, ResponsesApi
from tests.integration.runtimes.codex_cli import Codex, CodexRun
from tests.integration.runtimes.loopwatch_checks import (
    FAILING_COMMAND,
    FINAL_TEXT,
    MISSING,
    HookedRun,
    core_decisions,
    failing_loop,
    first_refused,
    first_with_action,
    hook_text,
    repeated_call_decisions,
    run_page,
    run_with_loopwatch,
    unreachable_gateway_url,
)

SHELL_TOOL = "exec_command"  # Codex 0.171's shell tool, {"cmd": ...}; hooks see it as Bash
CALL = {"cmd": FAILING_COMMAND}
CODEX_TIMEOUT_S = 120.0
# Codex's own words around a PreToolUse hook's deny reason, as the model gets it
BLOCKED = "Command blocked by PreToolUse hook: "


def denied(reason: str) -> str:
    return f"{BLOCKED}{reason}. Command: {FAILING_COMMAND}"


def run_codex(codex: Codex, tmp_path: Path, script: RepeatTool, gateway_url: str) -> HookedRun[CodexRun]:
    """``codex exec`` with loopwatch's hook (and the recorder) on every event the hook maps."""
    model = FakeModel(script, ResponsesApi)
    return run_with_loopwatch(
        codex,
        model,
        tmp_path,
        runtime="codex",
        events=codex_hook.EVENTS,
        gateway_url=gateway_url,
        base_path="/v1",
        timeout=CODEX_TIMEOUT_S,
    )


def codex_decisions(pre: list[dict[str, Any]], post: list[dict[str, Any]]) -> list[Decision]:
    """The in-process core's decision for each call Codex proposed (``PreToolUse`` inputs, in
    order); a call that may proceed gets its ``PostToolUse`` ``tool_response`` as its result,
    as ``loopwatch hook codex`` sends it."""
    responses = {call["tool_use_id"]: call["tool_response"] for call in post}

    def outcome(index: int) -> dict[str, Any]:
        call_id = pre[index]["tool_use_id"]
        assert call_id in responses, f"Codex did not run allowed call {call_id}"
        return {"result": responses[call_id]}

    return core_decisions([(call["tool_name"], call["tool_input"]) for call in pre], outcome)


def _developer_texts(items: list[Any]) -> list[tuple[int, str]]:
    """The developer messages of a request's ``input``: (position, text)."""
    found = []
    for index, item in enumerate(items):
        if isinstance(item, dict) and item.get("type") == "message" and item.get("role") == "developer":
            for part in item.get("content") or []:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    found.append((index, part["text"]))
    return found


def _expected_abort() -> int:
    """The call the core aborts when every call fails with the command's usual output (only
    sizes the script; the assertions use what Codex recorded)."""
    output = f"cat: /nonexistent-file-xyz: {MISSING}\n"
    decisions = repeated_call_decisions("Bash", {"command": FAILING_COMMAND}, 40, result=output)
    return first_with_action(decisions, "abort")


def _check_hook_inputs(pre: list[dict[str, Any]]) -> None:
    assert pre
    for call in pre:
        assert call["tool_name"] == "Bash"
        assert call["tool_input"] == {"command": FAILING_COMMAND}
        assert call["turn_id"] == pre[0]["turn_id"]  # one prompt, one turn: one run


def test_a_loop_of_failing_commands_is_refused_at_the_core_s_count_and_the_warning_reaches_the_model(
    codex: Codex, gateway_url: str, tmp_path: Path
) -> None:
    ran = run_codex(codex, tmp_path, failing_loop(SHELL_TOOL, CALL, 40, until=BLOCKED), gateway_url)
    pre, post = ran.calls("PreToolUse"), ran.calls("PostToolUse")
    _check_hook_inputs(pre)
    assert MISSING in post[0]["tool_response"]
    decisions = codex_decisions(pre, post)
    refused = first_refused(decisions)
    warned = first_with_action(decisions, "warn")
    assert decisions[refused - 1].action == "block"

    # Codex ran every call before the refusal, refused that one, and the model then stopped
    assert len(pre) == refused, (len(pre), [d.action for d in decisions])
    ids = [call["tool_use_id"] for call in pre]
    assert [call["tool_use_id"] for call in post] == ids[: refused - 1]
    executed = ran.run.items("command_execution")
    assert len(executed) == refused - 1
    assert all(item["exit_code"] == 1 and MISSING in item["aggregated_output"] for item in executed)
    assert ran.run.items("agent_message")[-1]["text"] == FINAL_TEXT

    # the model got each result, and the refusal in the request after the refused call
    turns = ran.model.conversations()
    assert [turn.turn for turn in turns] == list(range(refused + 1))
    assert [o.call_id for o in turns[-1].outcomes] == ids
    assert all(MISSING in o.text for o in turns[-1].outcomes[:-1])
    (refusal,) = turns[refused].last_outcomes
    assert refusal.call_id == ids[-1]
    assert refusal.text == denied(hook_text(decisions[refused - 1]))

    # the warning reached the model as a developer message with the warned call, not before
    warning = hook_text(decisions[warned - 1])
    assert warning.startswith("loopwatch warning: ")
    requests = ran.requests()
    assert warning not in [text for _, text in _developer_texts(requests[warned - 1]["input"])]
    items = requests[warned]["input"]
    (position,) = [index for index, text in _developer_texts(items) if text == warning]
    before = items[position - 1]
    assert (before["type"], before["call_id"]) == ("function_call", ids[warned - 1])
    # loopwatch gave as many warnings as the core did, no more
    loopwatch_notes = [t for _, t in _developer_texts(requests[-1]["input"]) if t.startswith("loopwatch")]
    assert len(loopwatch_notes) == sum(d.action == "warn" for d in decisions)

    # the gateway saw the turn as one run, ended by Codex's Stop; no hook failed open
    session = ran.run.events[0]["thread_id"]
    seen = run_page(gateway_url, f"{session}#{pre[0]['turn_id']}")
    assert (seen["calls"], seen["results"], seen["status"]) == (refused, refused - 1, "ended"), seen
    ran.hooks.assert_never_failed_open()


def test_after_an_abort_every_later_call_of_the_turn_is_denied_until_the_model_gives_up(
    codex: Codex, gateway_url: str, tmp_path: Path
) -> None:
    # the model ignores the refusals: a few calls past the core's abort
    planned = _expected_abort()
    max_calls = planned + 3
    ran = run_codex(codex, tmp_path, failing_loop(SHELL_TOOL, CALL, max_calls), gateway_url)
    pre, post = ran.calls("PreToolUse"), ran.calls("PostToolUse")
    _check_hook_inputs(pre)
    decisions = codex_decisions(pre, post)
    actions = [d.action for d in decisions]
    assert len(pre) == max_calls  # Codex cannot end the turn: the model gave up by itself
    aborted = first_with_action(decisions, "abort")
    assert aborted == planned
    assert actions[aborted - 2] == "block"
    assert actions[aborted:] == ["abort"] * (max_calls - aborted), actions

    # none of the refused calls ran
    allowed = [call["tool_use_id"] for call, d in zip(pre, decisions, strict=True) if d.proceed]
    assert [call["tool_use_id"] for call in post] == allowed
    assert len(ran.run.items("command_execution")) == len(allowed) == aborted - 2

    # the model got the block, then the abort's text for every later call, each in the next request
    turns = ran.model.conversations()
    assert [turn.turn for turn in turns] == list(range(max_calls + 1))
    abort_text = hook_text(decisions[aborted - 1])
    assert abort_text.startswith("loopwatch stopped this turn: ")
    assert turns[aborted - 1].last_outcomes[0].text == denied(hook_text(decisions[aborted - 2]))
    for n in range(aborted, max_calls + 1):
        (outcome,) = turns[n].last_outcomes
        assert outcome.call_id == pre[n - 1]["tool_use_id"]
        assert outcome.text == denied(hook_text(decisions[n - 1])) == denied(abort_text)
    last = ran.model.exchanges()[-1]
    assert last.reply is not None
    assert last.reply.final
    assert ran.run.items("agent_message")[-1]["text"] == FINAL_TEXT
    ran.hooks.assert_never_failed_open()


def test_with_the_gateway_down_the_hook_lets_every_call_through(codex: Codex, tmp_path: Path) -> None:
    nobody = unreachable_gateway_url()
    ran = run_codex(codex, tmp_path, failing_loop(SHELL_TOOL, CALL, 4), nobody)
    pre, post, stop = ran.calls("PreToolUse"), ran.calls("PostToolUse"), ran.calls("Stop")
    assert len(pre) == len(post) == 4
    executed = ran.run.items("command_execution")
    assert [item["exit_code"] for item in executed] == [1, 1, 1, 1]
    turns = ran.model.conversations()
    assert [turn.turn for turn in turns] == [0, 1, 2, 3, 4]
    assert [o.call_id for o in turns[-1].outcomes] == [call["tool_use_id"] for call in pre]
    assert all(MISSING in o.text and BLOCKED not in o.text for o in turns[-1].outcomes)
    assert ran.run.items("agent_message")[-1]["text"] == FINAL_TEXT
    # loopwatch's hook ran for each call, result and the turn's end, and failed open each time
    ran.hooks.assert_failed_open(len(pre) + len(post) + len(stop), nobody)
