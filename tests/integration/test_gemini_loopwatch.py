"""loopwatch inside the real Gemini CLI, offline.

Gemini CLI (``runtimes/gemini.sh``, ``gemini -p``) runs against a scripted fake of the Gemini
API (``fake_model/gemini.py``) with ``loopwatch hook gemini`` as its command hook for every
event ``streams/gateway/hooks/gemini.py`` maps, and a real ``loopwatch gateway`` deciding.
Gemini CLI's own loop detection is off (``runtimes/gemini_cli.py``): loopwatch's is tested. A
recording hook beside loopwatch's keeps what Gemini CLI gave the hooks.

Every assertion is about what Gemini CLI did: the fake model's recorded requests, its
``stream-json`` output, its hook inputs and the gateway's view of the run. The expected call
counts and texts come from the in-process core (``LoopDetector``) fed with the calls and the
outcomes the hook sends (the ``llmContent`` the model reads, without the shell run's process
ids). Without npm or the registry this fails: it never skips.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from loopwatch.detectors.facade import Decision
from loopwatch.streams.gateway.hooks import gemini as gemini_hook
from tests.integration.fake_model import FakeModel, GeminiApi, RepeatTool
from tests.integration.runtimes.gemini_cli import Gemini, GeminiRun
from tests.integration.runtimes.loopwatch_checks import (
    FAILING_COMMAND,
    MISSING,
    HookedRun,
    core_decisions,
    failing_loop,
    first_refused,
    first_with_action,
    hook_text,
    run_page,
    run_with_loopwatch,
    unreachable_gateway_url,
)

SHELL_TOOL = "run_shell_command"
CALL = {"command": FAILING_COMMAND}
GEMINI_TIMEOUT_S = 120.0
# Gemini CLI's own words (0.61) around a hook's text, as the model and the user get it
BLOCKED = "Tool execution blocked: "
STOPPED = "Agent execution stopped by hook: "


def hook_context(text: str) -> str:
    return f"\n\n<hook_context>{text}</hook_context>"


def run_gemini(gemini: Gemini, tmp_path: Path, script: RepeatTool, gateway_url: str) -> HookedRun[GeminiRun]:
    """``gemini -p`` with loopwatch's hook (and the recorder) on every event the hook maps."""
    model = FakeModel(script, GeminiApi)
    return run_with_loopwatch(
        gemini,
        model,
        tmp_path,
        runtime="gemini",
        events=gemini_hook.EVENTS,
        gateway_url=gateway_url,
        timeout=GEMINI_TIMEOUT_S,
    )


def sent_result(llm_content: str) -> str:
    """The outcome ``loopwatch hook gemini`` sends for a shell result: what the model read,
    without the ``Process Group PGID`` line that differs on every run."""
    return re.sub(r"\nProcess Group PGID: [0-9]+(?=\n</untrusted_context>$)", "", llm_content)


def gemini_decisions(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> list[Decision]:
    """The in-process core's decision for each call Gemini CLI proposed (``BeforeTool`` inputs,
    in order); the calls that may proceed get the ``AfterTool`` results, in order (the calls
    run one at a time)."""
    results = iter(after)

    def outcome(index: int) -> dict[str, Any]:
        result = next(results)
        assert (result["tool_name"], result["tool_input"]) == (
            before[index]["tool_name"],
            before[index]["tool_input"],
        )
        return {"result": sent_result(result["tool_response"]["llmContent"])}

    decisions = core_decisions([(call["tool_name"], call["tool_input"]) for call in before], outcome)
    assert next(results, None) is None, "Gemini CLI ran a call the core refuses"
    return decisions


def _check_hook_inputs(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> None:
    assert before
    for call in before + after:
        assert call["tool_name"] == SHELL_TOOL
        assert call["tool_input"] == CALL
        assert call["session_id"] == before[0]["session_id"]
    for call in after:
        content = call["tool_response"]["llmContent"]
        assert MISSING in content
        assert "Exit Code: 1" in content
    # the shell's result names its process group, a new one each run: the hook leaves it out
    pgids = {
        re.findall(r"Process Group PGID: ([0-9]+)", call["tool_response"]["llmContent"])[0] for call in after
    }
    assert len(pgids) == len(after)
    assert len({sent_result(call["tool_response"]["llmContent"]) for call in after}) <= 1


def test_a_loop_of_failing_commands_is_refused_at_the_core_s_count_and_the_warning_reaches_the_model(
    gemini: Gemini, gateway_url: str, tmp_path: Path
) -> None:
    ran = run_gemini(gemini, tmp_path, failing_loop(SHELL_TOOL, CALL, 40, until=BLOCKED), gateway_url)
    before, after = ran.calls("BeforeTool"), ran.calls("AfterTool")
    _check_hook_inputs(before, after)
    decisions = gemini_decisions(before, after)
    refused = first_refused(decisions)
    warned = first_with_action(decisions, "warn")
    assert decisions[refused - 1].action == "block"

    # Gemini CLI ran every call before the refusal, refused that one, and the model then stopped
    assert len(before) == refused, (len(before), [d.action for d in decisions])
    assert len(after) == refused - 1
    results = ran.run.of_type("tool_result")
    assert [r["status"] for r in results] == ["success"] * (refused - 1) + ["error"]
    assert results[-1]["error"]["type"] == "policy_violation"
    assert ran.run.of_type("result")[-1]["status"] == "success"

    # the model got each result, and the refusal (as the call's error) in the request after it
    turns = ran.model.conversations()
    assert [turn.turn for turn in turns] == list(range(refused + 1))
    (refusal,) = turns[refused].last_outcomes
    assert refusal.is_error
    assert refusal.text == BLOCKED + hook_text(decisions[refused - 1])
    assert results[-1]["output"] == refusal.text

    # the warning reached the model appended to the warned call's result, and only there
    warning = hook_text(decisions[warned - 1])
    assert warning.startswith("loopwatch warning: ")
    (warned_result,) = turns[warned].last_outcomes
    assert warned_result.text == after[warned - 1]["tool_response"]["llmContent"] + hook_context(warning)
    assert not turns[warned - 1].mentions(warning)
    with_context = [o for o in turns[-1].outcomes if "<hook_context>" in o.text]
    assert len(with_context) == sum(d.action == "warn" for d in decisions)

    # the gateway saw the prompt as one run, ended with the agent's answer; no hook failed open
    session = ran.run.of_type("init")[0]["session_id"]
    assert session == before[0]["session_id"]
    assert len(ran.calls("BeforeAgent")) == len(ran.calls("AfterAgent")) == 1
    seen = run_page(gateway_url, f"{session}#1")
    assert (seen["calls"], seen["results"], seen["status"]) == (refused, refused - 1, "ended"), seen
    ran.hooks.assert_never_failed_open()


def test_an_abort_stops_the_agent_the_model_is_not_asked_again(
    gemini: Gemini, gateway_url: str, tmp_path: Path
) -> None:
    # the model ignores the block and asks again, up to 40 calls if nothing stopped it
    ran = run_gemini(gemini, tmp_path, failing_loop(SHELL_TOOL, CALL, 40), gateway_url)
    before, after = ran.calls("BeforeTool"), ran.calls("AfterTool")
    _check_hook_inputs(before, after)
    decisions = gemini_decisions(before, after)
    actions = [d.action for d in decisions]
    assert "abort" in actions, actions
    aborted = first_with_action(decisions, "abort")
    assert actions[aborted - 2] == "block"
    # Gemini CLI stopped at the aborting call: no call after it, and that call did not run
    assert len(before) == aborted, actions
    assert len(after) == aborted - 2

    # the model got the block, then nothing more: the aborting call's request was the last
    turns = ran.model.conversations()
    assert [turn.turn for turn in turns] == list(range(aborted))
    assert turns[-1].last_outcomes[0].text == BLOCKED + hook_text(decisions[aborted - 2])
    last = ran.model.exchanges()[-1]
    assert last.reply is not None
    assert not last.reply.final

    # Gemini CLI's output: the call stopped the agent with the abort's text
    abort_text = hook_text(decisions[aborted - 1])
    assert abort_text.startswith("loopwatch stopped this turn: ")
    results = ran.run.of_type("tool_result")
    assert len(results) == aborted
    assert results[-1]["status"] == "error"
    assert results[-1]["error"]["type"] == "stop_execution"
    assert results[-1]["output"] == STOPPED + abort_text
    assert ran.calls("AfterAgent") == []  # the agent did not answer: it was stopped
    ran.hooks.assert_never_failed_open()


def test_with_the_gateway_down_the_hook_lets_every_call_through(gemini: Gemini, tmp_path: Path) -> None:
    nobody = unreachable_gateway_url()
    ran = run_gemini(gemini, tmp_path, failing_loop(SHELL_TOOL, CALL, 4), nobody)
    before, after = ran.calls("BeforeTool"), ran.calls("AfterTool")
    assert len(before) == len(after) == 4
    assert [r["status"] for r in ran.run.of_type("tool_result")] == ["success"] * 4
    turns = ran.model.conversations()
    assert [turn.turn for turn in turns] == [0, 1, 2, 3, 4]
    assert len(turns[-1].outcomes) == 4
    assert all(
        MISSING in o.text and not o.is_error and "<hook_context>" not in o.text for o in turns[-1].outcomes
    )
    assert ran.run.of_type("result")[-1]["status"] == "success"
    # loopwatch's hook ran for each call, result and the agent's end, and failed open each time
    ran.hooks.assert_failed_open(len(before) + len(after) + len(ran.calls("AfterAgent")), nobody)
