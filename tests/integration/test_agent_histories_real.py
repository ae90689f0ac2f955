"""The agent-history readers on the session files the real CLIs write, offline.

Each CLI (pinned in ``runtimes/``) runs headless against a scripted fake model that asks for
the same failing shell command a few times, with a recording command hook on its tool events;
the CLI's own session file in the throwaway ``HOME`` (Codex's rollout, Gemini CLI's chat,
Claude Code's session) is then read with loopwatch's reader. The rows are checked against what
the CLI told its hooks: one call per hook call, in order, with the same call id (where the hook
has one), command and outcome. Without npm or the registry this fails: it never skips."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from msgspec import UNSET

from loopwatch.config.fleet import parse_config_text
from loopwatch.detectors.events import Event, RunEnd, ToolCall, ToolResult
from loopwatch.streams.gateway.hooks.gemini import without_process_ids
from loopwatch.streams.history.agent_histories import default_files, read_histories
from loopwatch.streams.history.replay import replay
from tests.integration.fake_model import FakeModel, GeminiApi, RepeatTool, ResponsesApi
from tests.integration.runtimes.codex_cli import Codex
from tests.integration.runtimes.gemini_cli import Gemini
from tests.integration.runtimes.loopwatch_checks import FAILING_COMMAND, MISSING, failing_loop
from tests.integration.runtimes.process import command_hooks, install
from tests.integration.runtimes.recording_hook import RecordingHook
from tests.integration.test_claude_code_real import INSTALL as CLAUDE_INSTALL
from tests.integration.test_claude_code_real import run_claude

CALLS = 3


def histories(home: Path) -> list[Event]:
    """What ``loopwatch import`` reads from the default places of ``home``."""
    err = io.StringIO()
    found = read_histories(default_files(home), None, err)
    assert err.getvalue() == ""
    assert found.others == []
    return found.events


def replay_row(events: list[Event]) -> tuple[int, int | None, int | None, int | None]:
    """``replay``'s one row for the CLI's session under the agents preset: its calls and its
    first warning, block and abort. The scripted model makes the same failing call CALLS (3)
    times in a row: the preset's sameCallStreak warns at the 3rd (docs/real-loops.md)."""
    rows = replay(events, parse_config_text('{"loopwatch": {"preset": "agents"}}'))
    assert len(rows) == 1
    row = next(iter(rows.values()))
    return (row.calls, *row.outcome())


def split(events: list[Event]) -> tuple[list[ToolCall], list[ToolResult]]:
    calls = [e for e in events if isinstance(e, ToolCall)]
    results = [e for e in events if isinstance(e, ToolResult)]
    assert isinstance(events[-1], RunEnd)
    return calls, results


def test_codex_s_rollout_gives_the_calls_codex_told_its_hooks(codex: Codex, tmp_path: Path) -> None:
    hook = RecordingHook(tmp_path / "hook")
    model = FakeModel(failing_loop("exec_command", {"cmd": FAILING_COMMAND}, CALLS), ResponsesApi)
    with model:
        codex.run_in(
            tmp_path,
            base_url=f"{model.url}/v1",
            prompt="Show me the file.",
            hooks={"PreToolUse": [hook.command], "PostToolUse": [hook.command]},
        )
    assert len(list((tmp_path / "home" / ".codex" / "sessions").rglob("rollout-*.jsonl"))) == 1
    events = histories(tmp_path / "home")
    calls, results = split(events)
    pre, post = hook.calls("PreToolUse"), hook.calls("PostToolUse")
    assert len(pre) == len(post) == CALLS
    assert {e.run_id for e in events} == {pre[0]["session_id"]}  # the rollout's thread id
    assert [c.tool_call_id for c in calls] == [p["tool_use_id"] for p in pre]
    # the rollout keeps the model's call (exec_command, "cmd"); the hook renames it (Bash, "command")
    assert [(c.tool, c.params["cmd"]) for c in calls] == [
        ("exec_command", p["tool_input"]["command"]) for p in pre
    ]
    assert [r.tool_call_id for r in results] == [p["tool_use_id"] for p in post]
    assert replay_row(events) == (len(pre), 3, None, None)
    # the command exited 1: the rollout's exec_command_end says so, and the output is an error
    for result, seen in zip(results, post, strict=True):
        assert result.result is UNSET
        assert MISSING in str(result.error)
        assert str(seen["tool_response"]).strip() in str(result.error)


def test_gemini_s_chat_gives_the_calls_gemini_told_its_hooks(gemini: Gemini, tmp_path: Path) -> None:
    hook = RecordingHook(tmp_path / "hook")
    model = FakeModel(failing_loop("run_shell_command", {"command": FAILING_COMMAND}, CALLS), GeminiApi)
    with model:
        gemini.run_in(
            tmp_path,
            base_url=model.url,
            prompt="Show me the file.",
            hooks={"BeforeTool": [hook.command], "AfterTool": [hook.command]},
        )
    events = histories(tmp_path / "home")
    calls, results = split(events)
    before, after = hook.calls("BeforeTool"), hook.calls("AfterTool")
    assert len(before) == len(after) == CALLS
    assert {e.run_id for e in events} == {before[0]["session_id"]}
    assert [(c.tool, c.params) for c in calls] == [(b["tool_name"], b["tool_input"]) for b in before]
    assert replay_row(events) == (len(before), 3, None, None)
    # Gemini CLI 0.61 logs JSONL, and records a failing command as a success whose output says
    # the exit code (its hook's tool_response has no error either): a result, without the
    # process-id lines, as loopwatch's AfterTool hook sends it
    outcomes = [a["tool_response"] for a in after]
    assert all(not o.get("error") for o in outcomes)
    for result, outcome in zip(results, outcomes, strict=True):
        assert result.error is UNSET
        assert MISSING in str(result.result)
        assert "Process Group PGID" not in str(result.result)
        assert result.result == without_process_ids(outcome["llmContent"])  # what the hook sends


@pytest.fixture(scope="module")
def claude() -> str:
    return install(CLAUDE_INSTALL)[-1]


def test_claude_code_s_session_gives_the_calls_claude_code_told_its_hooks(
    claude: str, tmp_path: Path
) -> None:
    hook = RecordingHook(tmp_path / "hook")
    events = ("PreToolUse", "PostToolUse", "PostToolUseFailure")
    settings = {"hooks": command_hooks({e: [hook.command] for e in events}, matcher="*", timeout=30)}
    with FakeModel(RepeatTool("Bash", {"command": FAILING_COMMAND}, max_calls=CALLS)) as model:
        run = run_claude(claude, tmp_path, model, settings, ("Bash", "Read"))
    assert run.returncode == 0, run.stderr[-2000:]
    history = histories(tmp_path / "home")
    calls, results = split(history)
    pre, failures = hook.calls("PreToolUse"), hook.calls("PostToolUseFailure")
    assert len(pre) == len(failures) == CALLS
    assert {e.run_id for e in history} == {pre[0]["session_id"]}
    assert [(c.tool, c.params, c.tool_call_id) for c in calls] == [
        (p["tool_name"], p["tool_input"], p["tool_use_id"]) for p in pre
    ]
    # each command failed: PostToolUseFailure for the hook, is_error in the session: an error
    outcomes = run.outcomes()  # Claude Code's own stream-json output
    assert [r.tool_call_id for r in results] == [f["tool_use_id"] for f in failures]
    assert replay_row(history) == (len(pre), 3, None, None)
    for result in results:
        assert result.result is UNSET
        assert result.error == outcomes[str(result.tool_call_id)].content
        assert MISSING in str(result.error)
