"""The OpenHands event-folder reader: the server's numbered events and the SDK's event files."""

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

from msgspec import UNSET

from loopwatch.detectors.decoding import decode_event
from loopwatch.detectors.events import Event, RunEnd, ToolCall, ToolResult
from loopwatch.streams.history.openhands_events import read_openhands_events
from tests.helpers import DATA

HERE = DATA / "agent-histories" / "openhands"
SERVER = HERE / "sessions" / "ponylang__ponyc-4593" / "events"
SDK = HERE / "conversations" / "sdk-goal" / "events"


def read(folder: Path) -> tuple[list[Event], str]:
    err = io.StringIO()
    return read_openhands_events(folder, sorted(folder.glob("*.json")), None, err), err.getvalue()


def test_server_actions_with_tool_call_metadata_are_calls_answered_by_their_observations() -> None:
    events, err = read(SERVER)
    assert err == ""
    calls = [e for e in events if isinstance(e, ToolCall)]
    results = [e for e in events if isinstance(e, ToolResult)]
    actions = [json.loads((SERVER / f"{n}.json").read_text()) for n in (5, 7, 9, 11, 13, 15)]
    assert [c.tool for c in calls] == ["execute_bash"] * 6
    assert [c.params for c in calls] == [{"command": a["args"]["command"]} for a in actions]
    assert [c.tool_call_id for c in calls] == [a["tool_call_metadata"]["tool_call_id"] for a in actions]
    assert [c.event_id for c in calls] == [f"ponylang__ponyc-4593-{n}" for n in (5, 7, 9, 11, 13, 15)]
    observations = [json.loads((SERVER / f"{n}.json").read_text()) for n in (6, 8, 10, 12, 14, 16)]
    assert [(r.result if r.error is UNSET else r.error) for r in results] == [
        o["content"] for o in observations
    ]
    # `ls src/lib` exited 2: OpenHands marks the observation success: false
    assert [(r.params, r.error) for r in results if r.error is not UNSET] == [
        ({"command": "ls src/lib"}, "ls: cannot access 'src/lib': No such file or directory")
    ]
    assert calls[0].ts == 1746031543619  # "2025-04-30T16:45:43.619026", UTC
    assert {e.run_id for e in events} == {"ponylang__ponyc-4593"}
    assert isinstance(events[-1], RunEnd)


def test_sdk_action_and_observation_events() -> None:
    events, err = read(SDK)
    assert err == ""
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert [(c.tool, c.tool_call_id) for c in calls] == [
        ("terminal", "chatcmpl-tool-9d0341c7a033ae28"),
        ("terminal", "chatcmpl-tool-9fa678118a57807d"),
    ]
    first = json.loads(next(SDK.glob("event-00003-*.json")).read_text())
    assert calls[0].params == json.loads(first["tool_call"]["arguments"])
    assert calls[0].batch_id == first["llm_response_id"]
    results = [e for e in events if isinstance(e, ToolResult)]
    # is_error observations are errors; the one whose action the folder lacks keeps its tool
    assert [(r.tool_call_id, r.error is not UNSET, r.params) for r in results] == [
        ("chatcmpl-tool-9d0341c7a033ae28", True, calls[0].params),
        ("chatcmpl-tool-9051d3d10f914188", True, {}),
        ("chatcmpl-tool-9fa678118a57807d", False, calls[1].params),
    ]
    assert str(results[0].error).startswith("Cannot execute multiple commands at once.")


def test_rejections_agent_errors_and_broken_files(tmp_path: Path) -> None:
    folder = tmp_path / "c1" / "events"
    shutil.copytree(SDK, folder)
    call = "chatcmpl-tool-9fa678118a57807d"
    extra = [
        {
            "id": "r-1",
            "timestamp": "2026-06-16T05:41:00",
            "source": "user",
            "kind": "UserRejectObservation",
            "tool_name": "terminal",
            "tool_call_id": call,
            "rejection_reason": "not now",
        },
        {
            "id": "e-1",
            "timestamp": "2026-06-16T05:41:01",
            "source": "agent",
            "kind": "AgentErrorEvent",
            "tool_name": "nonexistent",
            "tool_call_id": "call-x",
            "error": "Tool 'nonexistent' not found.",
        },
    ]
    for number, event in enumerate(extra, start=10):
        (folder / f"event-{number:05d}-{event['id']}.json").write_text(json.dumps(event))
    (folder / "event-00012-0000-broken.json").write_text("{")
    events, err = read(folder)
    assert f"{folder / 'event-00012-0000-broken.json'}:1: skipped: not a JSON event object" in err
    tail = [(e.tool, e.tool_call_id, e.error) for e in events if isinstance(e, ToolResult)][-2:]
    assert tail == [("terminal", call, "not now"), ("nonexistent", "call-x", "Tool 'nonexistent' not found.")]


def test_import_finds_event_folders_and_leaves_the_event_cache_out(tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    shutil.copytree(SERVER.parent, root / "ponylang__ponyc-4593")
    cache = root / "ponylang__ponyc-4593" / "event_cache"
    cache.mkdir()
    pages = [json.loads(p.read_text()) for p in sorted(SERVER.glob("*.json"), key=lambda p: int(p.stem))]
    (cache / "0-25.json").write_text(json.dumps(pages))
    done = subprocess.run(
        [sys.executable, "-m", "loopwatch", "import", str(tmp_path)], capture_output=True, check=True
    )
    events = [decode_event(line) for line in done.stdout.splitlines()]
    alone, _ = read(SERVER)
    assert [e.event_id for e in events] == [e.event_id for e in alone]
    assert done.stderr == b""
