"""The Codex rollout reader against a real rollout (codex-tui 0.125, tests/data/agent-histories)."""

import io
import json
from pathlib import Path
from typing import Any

from msgspec import UNSET

from loopwatch.detectors.events import CompactionRetry, Event, RunEnd, ToolCall, ToolResult
from loopwatch.streams.history.codex_rollouts import read_codex_rollout
from tests.helpers import DATA

ROLLOUT = (
    DATA
    / "agent-histories"
    / "codex"
    / "rollout-2026-05-11T11-26-55-019e1625-789d-76c0-80ab-3724b5ddb799.jsonl"
)
THREAD = "019e1625-789d-76c0-80ab-3724b5ddb799"


def read(path: Path) -> tuple[list[Event], str]:
    err = io.StringIO()
    return read_codex_rollout(path, None, err), err.getvalue()


def items(path: Path, *kinds: str) -> list[dict[str, Any]]:
    found = []
    for line in path.read_text().splitlines():
        entry = json.loads(line)
        if entry["type"] == "response_item" and entry["payload"]["type"] in kinds:
            found.append(entry["payload"])
    return found


def test_function_and_custom_tool_calls_with_their_outputs() -> None:
    events, err = read(ROLLOUT)
    assert err == ""
    calls = [e for e in events if isinstance(e, ToolCall)]
    made = items(ROLLOUT, "function_call", "custom_tool_call")
    assert [(c.tool, c.tool_call_id) for c in calls] == [(i["name"], i["call_id"]) for i in made]
    for call, item in zip(calls, made, strict=True):
        if item["type"] == "function_call":
            assert call.params == json.loads(item["arguments"])
        else:
            assert call.params == {"input": item["input"]}
    results = [e for e in events if isinstance(e, ToolResult)]
    outputs = items(ROLLOUT, "function_call_output", "custom_tool_call_output")
    assert [r.tool_call_id for r in results] == [o["call_id"] for o in outputs]
    assert [r.result if r.error is UNSET else r.error for r in results] == [o["output"] for o in outputs]
    assert {e.run_id for e in events} == {THREAD}
    assert all(e.agent_id == "codex" for e in events)
    assert isinstance(events[-1], RunEnd)
    assert calls[0].ts == 1778488913855  # the line's timestamp, 2026-05-11T08:41:53.855Z


def test_a_failed_command_is_an_error_where_the_model_read_its_end() -> None:
    """``npm test`` (unified exec) failed: its exec_command_end says so, and its exit reached the
    model in the second ``write_stdin`` poll of its session; the command's own output and the
    first poll said it was still running."""
    events, _ = read(ROLLOUT)
    failed = [e for e in events if isinstance(e, ToolResult) and e.error is not UNSET]
    assert [(e.tool, e.tool_call_id) for e in failed] == [("write_stdin", "call_PAoFGDC6cPakVp8JImcOm2uB")]
    assert "Process exited with code 1" in str(failed[0].error)
    assert failed[0].params == {
        "session_id": 83395,
        "chars": "",
        "yield_time_ms": 1000,
        "max_output_tokens": 16000,
    }


def test_subagent_rollouts_compactions_and_malformed_lines(tmp_path: Path) -> None:
    lines = ROLLOUT.read_bytes().splitlines()
    head = json.loads(lines[0])
    head["payload"]["id"] = "child-thread"
    head["payload"]["source"] = {"subagent": {"thread_spawn": {"parent_thread_id": THREAD, "depth": 2}}}
    compacted = b'{"timestamp":"2026-05-11T08:50:00.000Z","type":"compacted","payload":{"message":"summary"}}'
    path = tmp_path / "rollout-child.jsonl"
    body = [json.dumps(head).encode(), *lines[1:10], b"{not json", b'"text"', compacted, *lines[10:]]
    path.write_bytes(b"\n".join(body) + b"\n")
    events, err = read(path)
    assert {(e.run_id, e.parent_run_id, e.root_run_id, e.depth) for e in events} == {
        ("child-thread", THREAD, THREAD, 2)
    }
    assert f"{path}:11: skipped: not valid JSON" in err
    assert f"{path}:12: skipped: not a JSON object but str" in err
    assert [e.event_id for e in events if isinstance(e, CompactionRetry)] == ["rollout-child-L13"]
    original, _ = read(ROLLOUT)
    assert [e.tool_call_id for e in events if isinstance(e, ToolCall)] == [
        e.tool_call_id for e in original if isinstance(e, ToolCall)
    ]


def test_codex_0_17_marks_failures_in_item_completed_events(tmp_path: Path) -> None:
    """Codex 0.17x writes no exec_command_end: a completed item (its id the call id) with
    ``status: "failed"`` (as the real CLI's rollout in the integration test shows)."""
    patch = "call_i8DZCCtaSAHIJuvfxiUM3u8Q"
    item = {"type": "FileChange", "id": patch, "status": "failed", "changes": []}
    line = {
        "timestamp": "2026-05-11T08:42:30.000Z",
        "type": "event_msg",
        "payload": {"type": "item_completed", "item": item},
    }
    path = tmp_path / "rollout.jsonl"
    path.write_bytes(ROLLOUT.read_bytes() + json.dumps(line).encode() + b"\n")
    events, err = read(path)
    assert err == ""
    failed = [e.tool_call_id for e in events if isinstance(e, ToolResult) and e.error is not UNSET]
    assert failed == ["call_PAoFGDC6cPakVp8JImcOm2uB", patch]
