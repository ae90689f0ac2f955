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

import json
import shlex
import socket
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest

from loopwatch import LoopDetector
from loopwatch.detectors.facade import Decision
from loopwatch.streams.gateway.hooks import codex as codex_hook
from loopwatch.streams.gateway.runtime_texts import decision_text
from tests.gateway_process import gateway_process
from tests.integration.fake_model import FakeModel, RepeatTool, refused_with
from tests.integration.fake_model.openai_responses import FakeResponsesModel
from tests.integration.runtimes.codex_cli import Codex, CodexRun
from tests.integration.runtimes.recording_hook import RecordingHook

PROMPT = "Find out why the build fails."
COMMAND = "cat /nonexistent-file-xyz"
SHELL_TOOL = "exec_command"  # Codex 0.171's shell tool, {"cmd": ...}; hooks see it as Bash
CALL = {"cmd": COMMAND}
MISSING = "No such file or directory"
CODEX_TIMEOUT_S = 120.0
FAIL_OPEN = "allowing (fail open)"
# Codex's own words around a PreToolUse hook's deny reason, as the model gets it
BLOCKED = "Command blocked by PreToolUse hook: "


def denied(reason: str) -> str:
    return f"{BLOCKED}{reason}. Command: {COMMAND}"


@pytest.fixture(scope="module")
def codex() -> Codex:
    return Codex.install()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def gateway() -> Iterator[str]:
    with gateway_process() as started:
        yield started.url


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as page:
        return json.loads(page.read())


@dataclass
class Ran:
    run: CodexRun
    model: FakeModel
    recorder: RecordingHook
    hook_stderr: Path

    def calls(self, event: str) -> list[dict[str, Any]]:
        """What Codex gave the hooks of ``event``, in order."""
        return self.recorder.calls(event)

    def fail_open_lines(self) -> list[str]:
        text = self.hook_stderr.read_text() if self.hook_stderr.exists() else ""
        return [line for line in text.splitlines() if line.strip()]

    def requests(self) -> list[dict[str, Any]]:
        """The bodies of the model's turns (the requests the script answered), in order."""
        return [e.body for e in self.model.exchanges() if e.conversation is not None]


def run_codex(codex: Codex, tmp_path: Path, script: RepeatTool, gateway_url: str) -> Ran:
    """``codex exec`` with loopwatch's hook (and the recorder) on every event the hook maps."""
    recorder = RecordingHook(tmp_path / "recorder")
    hook_stderr = tmp_path / "loopwatch-hook.stderr"
    loopwatch = shlex.join(
        [
            str(Path(sys.executable).with_name("loopwatch")),
            *("hook", "codex", "--gateway", gateway_url),
            # generous: on a busy machine a slow answer would fail open and skew the counts
            *("--timeout-ms", "10000"),
        ]
    )
    loopwatch += f" 2>>{shlex.quote(str(hook_stderr))}"
    with FakeResponsesModel(script) as model:
        run = codex.run(
            home=tmp_path / "home",
            workdir=tmp_path / "work",
            base_url=f"{model.url}/v1",
            prompt=PROMPT,
            hooks={event: [recorder.command, loopwatch] for event in codex_hook.EVENTS},
            env={"LOOPWATCH_HOOK_STATE_DIR": str(tmp_path / "hook-state")},
            timeout=CODEX_TIMEOUT_S,
        )
    assert not run.finished.timed_out, run.finished.describe()
    assert run.finished.returncode == 0, run.finished.describe()
    return Ran(run, model, recorder, hook_stderr)


def core_decisions(pre: list[dict[str, Any]], post: list[dict[str, Any]]) -> list[Decision]:
    """The in-process core's decision for each call Codex proposed (``PreToolUse`` inputs, in
    order); a call that may proceed gets its ``PostToolUse`` ``tool_response`` as its result,
    as ``loopwatch hook codex`` sends it."""
    responses = {call["tool_use_id"]: call["tool_response"] for call in post}
    core = LoopDetector()
    decisions = []
    for call in pre:
        tool, params = call["tool_name"], call["tool_input"]
        decision = core.before_tool_call("run", tool, params)
        decisions.append(decision)
        if decision.proceed:
            assert call["tool_use_id"] in responses, f"Codex did not run allowed call {call['tool_use_id']}"
            core.after_tool_call("run", tool, params, result=responses[call["tool_use_id"]])
    return decisions


def hook_text(decision: Decision) -> str:
    """What loopwatch says for ``decision`` (the gateway's answer to it, in a runtime's terms)."""
    answer = {
        "decision": decision.action,
        "message": decision.message,
        "reason": decision.reason,
        "verdicts": [msgspec.to_builtins(output) for output in decision.outputs],
    }
    return decision_text(answer)


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
    core = LoopDetector()
    for n in range(1, 41):
        decision = core.before_tool_call("run", "Bash", {"command": COMMAND})
        if decision.action == "abort":
            return n
        if decision.proceed:
            core.after_tool_call(
                "run", "Bash", {"command": COMMAND}, result=f"cat: /nonexistent-file-xyz: {MISSING}\n"
            )
    raise AssertionError("the core never aborts this loop")


def _check_hook_inputs(pre: list[dict[str, Any]]) -> None:
    assert pre
    for call in pre:
        assert call["tool_name"] == "Bash"
        assert call["tool_input"] == {"command": COMMAND}
        assert call["turn_id"] == pre[0]["turn_id"]  # one prompt, one turn: one run


def test_a_loop_of_failing_commands_is_refused_at_the_core_s_count_and_the_warning_reaches_the_model(
    codex: Codex, gateway: str, tmp_path: Path
) -> None:
    script = RepeatTool(
        SHELL_TOOL, CALL, stop_when=refused_with(BLOCKED), max_calls=40, final_text="Stopping."
    )
    ran = run_codex(codex, tmp_path, script, gateway)
    pre, post = ran.calls("PreToolUse"), ran.calls("PostToolUse")
    _check_hook_inputs(pre)
    assert MISSING in post[0]["tool_response"]
    decisions = core_decisions(pre, post)
    refused = next(n for n, d in enumerate(decisions, 1) if not d.proceed)
    warned = next(n for n, d in enumerate(decisions, 1) if d.action == "warn")
    assert decisions[refused - 1].action == "block"

    # Codex ran every call before the refusal, refused that one, and the model then stopped
    assert len(pre) == refused, (len(pre), [d.action for d in decisions])
    ids = [call["tool_use_id"] for call in pre]
    assert [call["tool_use_id"] for call in post] == ids[: refused - 1]
    executed = ran.run.items("command_execution")
    assert len(executed) == refused - 1
    assert all(item["exit_code"] == 1 and MISSING in item["aggregated_output"] for item in executed)
    assert ran.run.items("agent_message")[-1]["text"] == "Stopping."

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
    run_id = urllib.parse.quote(f"{session}#{pre[0]['turn_id']}")
    seen = _get(f"{gateway}/fleet/run?id={run_id}")
    assert (seen["calls"], seen["results"], seen["status"]) == (refused, refused - 1, "ended"), seen
    assert ran.fail_open_lines() == []


def test_after_an_abort_every_later_call_of_the_turn_is_denied_until_the_model_gives_up(
    codex: Codex, gateway: str, tmp_path: Path
) -> None:
    # the model ignores the refusals: a few calls past the core's abort
    planned = _expected_abort()
    max_calls = planned + 3
    script = RepeatTool(SHELL_TOOL, CALL, max_calls=max_calls, final_text="Stopping.")
    ran = run_codex(codex, tmp_path, script, gateway)
    pre, post = ran.calls("PreToolUse"), ran.calls("PostToolUse")
    _check_hook_inputs(pre)
    decisions = core_decisions(pre, post)
    actions = [d.action for d in decisions]
    assert len(pre) == max_calls  # Codex cannot end the turn: the model gave up by itself
    aborted = actions.index("abort") + 1
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
    assert ran.run.items("agent_message")[-1]["text"] == "Stopping."
    assert ran.fail_open_lines() == []


def test_with_the_gateway_down_the_hook_lets_every_call_through(codex: Codex, tmp_path: Path) -> None:
    nobody = f"http://127.0.0.1:{_free_port()}"
    script = RepeatTool(SHELL_TOOL, CALL, max_calls=4, final_text="Stopping.")
    ran = run_codex(codex, tmp_path, script, nobody)
    pre, post, stop = ran.calls("PreToolUse"), ran.calls("PostToolUse"), ran.calls("Stop")
    assert len(pre) == len(post) == 4
    executed = ran.run.items("command_execution")
    assert [item["exit_code"] for item in executed] == [1, 1, 1, 1]
    turns = ran.model.conversations()
    assert [turn.turn for turn in turns] == [0, 1, 2, 3, 4]
    assert [o.call_id for o in turns[-1].outcomes] == [call["tool_use_id"] for call in pre]
    assert all(MISSING in o.text and BLOCKED not in o.text for o in turns[-1].outcomes)
    assert ran.run.items("agent_message")[-1]["text"] == "Stopping."
    # loopwatch's hook ran for each call, result and the turn's end, and failed open each time
    lines = ran.fail_open_lines()
    assert len(lines) == len(pre) + len(post) + len(stop), lines
    assert all(FAIL_OPEN in line and nobody in line for line in lines), lines
