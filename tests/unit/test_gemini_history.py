"""The Gemini CLI chat reader against a real saved chat (tests/data/agent-histories/gemini)."""

import copy
import io
import json
from pathlib import Path
from typing import Any

from msgspec import UNSET

from loopwatch.detectors.events import Event, RunEnd, ToolCall, ToolResult
from loopwatch.streams.history.gemini_chats import read_gemini_chat
from tests.helpers import DATA

CHAT = DATA / "agent-histories" / "gemini" / "session-2026-01-16T11-01-file-ops-37b7abef.json"
SESSION = "37b7abef-713d-4522-85f0-8ff15a4e6d17"


def read(path: Path) -> tuple[list[Event], str]:
    err = io.StringIO()
    return read_gemini_chat(path, None, err), err.getvalue()


def recorded_calls(chat: dict[str, Any]) -> list[dict[str, Any]]:
    return [call for m in chat["messages"] if m["type"] == "gemini" for call in m.get("toolCalls", [])]


def test_tool_calls_and_their_function_responses() -> None:
    events, err = read(CHAT)
    assert err == ""
    chat = json.loads(CHAT.read_text())
    recorded = recorded_calls(chat)
    calls = [e for e in events if isinstance(e, ToolCall)]
    results = [e for e in events if isinstance(e, ToolResult)]
    assert [(c.tool, c.params, c.tool_call_id) for c in calls] == [
        (r["name"], r["args"], r["id"]) for r in recorded
    ]
    outputs = {r["id"]: r["result"][0]["functionResponse"]["response"]["output"] for r in recorded}
    assert {str(r.tool_call_id): r.result for r in results} == outputs
    assert len(calls) == 14
    assert {e.run_id for e in events} == {SESSION}
    assert all(e.agent_id == "gemini" for e in events)
    assert isinstance(events[-1], RunEnd)


def test_the_turns_gemini_cli_records_in_one_message_stay_turns() -> None:
    """The fourth message holds three turns' calls (recorded at three times): each turn's calls
    come before its results, and carry a batch of their own."""
    events, _ = read(CHAT)
    first = [e for e in events if isinstance(e, (ToolCall, ToolResult))][:18]
    kinds = "".join("c" if isinstance(e, ToolCall) else "r" for e in first)
    assert kinds == "ccrr" + "ccccrrrr" + "cccrrr"
    batches = [e.batch_id for e in first if isinstance(e, ToolCall)]
    message = "9d6e5250-8892-491e-84ed-0506e7fffcdc"
    assert batches == [f"{message}.1"] * 2 + [f"{message}.2"] * 4 + [f"{message}.3"] * 3
    assert [e.ts for e in first[:2]] == [1768561440677, 1768561440677]  # 2026-01-16T11:04:00.677Z


def chat_log(chat: dict[str, Any]) -> list[bytes]:
    """The chat as Gemini CLI writes it since it logs JSONL (its migration of a saved chat:
    the metadata line, then every message)."""
    head = {k: chat[k] for k in ("sessionId", "projectHash", "startTime", "lastUpdated")}
    return [json.dumps(head).encode(), *(json.dumps(m).encode() for m in chat["messages"])]


def test_a_jsonl_chat_log_with_rewritten_messages_rewinds_and_bad_lines(tmp_path: Path) -> None:
    chat = json.loads(CHAT.read_text())
    lines = chat_log(chat)
    last = copy.deepcopy(chat["messages"][-2])  # the last message with calls, written again
    failed = last["toolCalls"][-1]
    failed["status"] = "error"
    failed["result"][0]["functionResponse"]["response"] = {"error": "File not found: hello.md"}
    lines += [
        json.dumps(last).encode(),
        b'{"$set": {"summary": "file ops"}}',
        b'{"$rewindTo": "x"}',
        b"{oops",
        b"[]",
    ]
    path = tmp_path / "chats" / "session-2026-01-16T11-01-37b7abef.jsonl"
    path.parent.mkdir()
    path.write_bytes(b"\n".join(lines) + b"\n")
    events, err = read(path)
    assert f"{path}:{len(lines) - 1}: skipped: not valid JSON" in err
    assert f"{path}:{len(lines)}: skipped: not a JSON object but list" in err
    saved, _ = read(CHAT)
    calls = [(e.tool, e.tool_call_id) for e in events if isinstance(e, ToolCall)]
    assert calls == [(e.tool, e.tool_call_id) for e in saved if isinstance(e, ToolCall)]
    errors = [(e.tool_call_id, e.error) for e in events if isinstance(e, ToolResult) and e.error is not UNSET]
    assert errors == [(failed["id"], "File not found: hello.md")]


def test_shell_results_lose_their_process_ids_and_cancelled_calls_are_errors(tmp_path: Path) -> None:
    chat = json.loads(CHAT.read_text())
    message = chat["messages"][-2]
    shell, cancelled = message["toolCalls"]
    shell["name"] = "run_shell_command"
    response = shell["result"][0]["functionResponse"]["response"]
    response["output"] = "Output: boom\nExit Code: 1\nBackground PIDs: 2141\nProcess Group PGID: 2128"
    cancelled["status"] = "cancelled"
    cancelled["result"][0]["functionResponse"]["response"] = {"error": "[Operation Cancelled] Reason: user"}
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(chat))
    events, _ = read(path)
    outcomes = {e.tool_call_id: (e.result, e.error) for e in events if isinstance(e, ToolResult)}
    assert outcomes[shell["id"]] == ("Output: boom\nExit Code: 1", UNSET)
    assert outcomes[cancelled["id"]] == (UNSET, "[Operation Cancelled] Reason: user")


def test_a_subagent_chat_is_started_by_its_parent_session(tmp_path: Path) -> None:
    chat = json.loads(CHAT.read_text())
    chat["sessionId"] = "sub-1"
    lines = chat_log(chat)
    head = json.loads(lines[0])
    head["kind"] = "subagent"
    lines[0] = json.dumps(head).encode()
    path = tmp_path / "chats" / SESSION / "sub-1.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\n".join(lines) + b"\n")
    events, err = read(path)
    assert err == ""
    assert {(e.run_id, e.parent_run_id, e.depth, e.session_id) for e in events} == {
        ("sub-1", SESSION, 1, SESSION)
    }
