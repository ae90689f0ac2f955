"""The Claude Code session reader against real session files (tests/data/agent-histories)."""

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from msgspec import UNSET

from loopwatch.detectors.decoding import decode_event
from loopwatch.detectors.events import Event, RunEnd, ToolCall, ToolResult
from loopwatch.streams.history.claude_code_sessions import read_claude_code_session
from tests.helpers import DATA

HERE = DATA / "agent-histories" / "claude-code"
SESSION = "8463c716-a2ea-4c14-9efa-87158ebd9f20"
PARENT = HERE / "session" / f"{SESSION}.jsonl"
SUBAGENT = HERE / "session" / SESSION / "subagents" / "agent-a7be2f0.jsonl"


def read(path: Path) -> tuple[list[Event], str]:
    err = io.StringIO()
    return read_claude_code_session(path, None, err), err.getvalue()


def blocks(path: Path, kind: str) -> list[dict[str, Any]]:
    """Every content block of ``kind`` in the file, read with the standard json module."""
    found = []
    for line in path.read_text().splitlines():
        entry = json.loads(line)
        content = (entry.get("message") or {}).get("content")
        found += [b for b in content if b.get("type") == kind] if isinstance(content, list) else []
    return found


def test_calls_and_results_are_the_files_tool_use_and_tool_result_blocks() -> None:
    path = HERE / "tool_heavy.jsonl"
    events, err = read(path)
    assert err == ""
    calls = [e for e in events if isinstance(e, ToolCall)]
    results = [e for e in events if isinstance(e, ToolResult)]
    uses = blocks(path, "tool_use")
    assert [(c.tool, c.params, c.tool_call_id) for c in calls] == [
        (b["name"], b["input"], b["id"]) for b in uses
    ]
    answered = blocks(path, "tool_result")
    assert [(r.tool_call_id, r.result) for r in results] == [
        (b["tool_use_id"], b["content"]) for b in answered
    ]
    params = {b["id"]: (b["name"], b["input"]) for b in uses}
    assert all((r.tool, r.params) == params[str(r.tool_call_id)] for r in results)
    assert len(calls) == 6
    assert len(results) == 6
    assert isinstance(events[-1], RunEnd)
    # the first call as the file records it (entry timestamp 2026-02-10T22:57:57.941Z)
    assert calls[0].tool == "Bash"
    assert calls[0].params["command"] == "mix phx.server"
    assert calls[0].ts == 1770764277941
    assert calls[0].batch_id == "msg_0167kgZUrgcT7dg7uZK7hVSg"
    assert {e.run_id for e in events} == {"d6e0bada-1959-4eec-a9d2-0bfade768d8f"}  # the entries' sessionId
    assert all(e.agent_id == "claude-code" for e in events)


def test_is_error_results_are_errors_with_their_text() -> None:
    events, _ = read(SUBAGENT)
    failed = [e for e in events if isinstance(e, ToolResult) and e.error is not UNSET and e.result is UNSET]
    marked = [b for b in blocks(SUBAGENT, "tool_result") if b.get("is_error") is True]
    assert len(marked) == 2
    assert [(e.tool_call_id, e.error) for e in failed] == [(b["tool_use_id"], b["content"]) for b in marked]


def test_a_subagent_is_its_own_run_started_by_the_session() -> None:
    parent, _ = read(PARENT)
    child, _ = read(SUBAGENT)
    assert {e.run_id for e in parent} == {SESSION}
    assert {e.run_id for e in child} == {f"{SESSION}/a7be2f0"}
    assert {(e.parent_run_id, e.root_run_id, e.depth) for e in child} == {(SESSION, SESSION, 1)}
    assert all(e.session_id == SESSION for e in parent + child)
    assert len([e for e in child if isinstance(e, ToolCall)]) == len(blocks(SUBAGENT, "tool_use")) == 6


def test_event_ids_come_from_the_entries_and_are_stable(tmp_path: Path) -> None:
    events, _ = read(SUBAGENT)
    ids = [e.event_id for e in events]
    assert len(set(ids)) == len(ids)
    call = next(e for e in events if isinstance(e, ToolCall))
    assert call.event_id == f"agent-a7be2f0-{call.tool_call_id}"
    # more entries appended (the session went on): the events already read keep their ids
    grown = tmp_path / SUBAGENT.name
    grown.write_bytes(SUBAGENT.read_bytes() + (HERE / "tool_heavy.jsonl").read_bytes())
    again, _ = read(grown)
    assert [e.event_id for e in again[: len(events) - 1]] == ids[:-1]


def test_malformed_entries_are_skipped_and_named_with_file_and_line(tmp_path: Path) -> None:
    lines = PARENT.read_bytes().splitlines()
    path = tmp_path / "cut.jsonl"
    broken = [*lines[:5], b'{"type": "user", "message": ', b"[1, 2]", *lines[5:]]
    broken.append(
        b'{"type":"user","sessionId":"s","uuid":"u","message":{"content":[{"type":"tool_result"}]}}'
    )
    path.write_bytes(b"\n".join(broken) + b"\n")
    events, err = read(path)
    assert f"{path}:6: skipped: not valid JSON" in err
    assert f"{path}:7: skipped: not a JSON object but list" in err
    assert f"{path}:{len(broken)}: skipped: a tool_result block without a tool_use_id" in err
    clean, _ = read(PARENT)
    assert [(type(e), getattr(e, "tool_call_id", None)) for e in events] == [
        (type(e), getattr(e, "tool_call_id", None)) for e in clean
    ]


def test_import_reads_a_projects_folder_with_its_subagents() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "loopwatch", "import", str(HERE / "session")], capture_output=True, check=True
    )
    events = [decode_event(line) for line in done.stdout.splitlines()]
    runs = {e.run_id for e in events}
    assert runs == {SESSION, f"{SESSION}/a7be2f0"}
    for path in (PARENT, SUBAGENT):  # each run's events in its file's order, ids as read alone
        alone, _ = read(path)
        assert [e for e in events if e.run_id == alone[0].run_id] == alone
    assert done.stderr == b""
