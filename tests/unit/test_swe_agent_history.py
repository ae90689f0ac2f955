"""The SWE-agent and mini-swe-agent trajectory readers against real trajectories."""

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from msgspec import UNSET

from loopwatch.detectors.decoding import decode_event
from loopwatch.detectors.events import Event, RunEnd, ToolCall, ToolResult
from loopwatch.streams.history.history_runs import json_document
from loopwatch.streams.history.swe_agent_trajectories import (
    read_mini_swe_agent_trajectory,
    read_swe_agent_trajectory,
)
from tests.helpers import DATA

HERE = DATA / "agent-histories"
SWE = HERE / "swe-agent" / "6e44b9__sweagenttestrepo-1c2844.traj"
MINI = HERE / "mini-swe-agent" / "django__django-11163.traj.json"


def swe(path: Path, document: Any = None) -> tuple[list[Event], str]:
    err = io.StringIO()
    doc = json_document(path.read_bytes()) if document is None else document
    return read_swe_agent_trajectory(path, doc, None, err), err.getvalue()


def mini(path: Path, document: Any = None) -> tuple[list[Event], str]:
    err = io.StringIO()
    doc = json_document(path.read_bytes()) if document is None else document
    return read_mini_swe_agent_trajectory(path, doc, None, err), err.getvalue()


def test_swe_agent_steps_are_calls_named_by_their_first_word() -> None:
    events, err = swe(SWE)
    assert err == ""
    steps = json.loads(SWE.read_text())["trajectory"]
    calls = [e for e in events if isinstance(e, ToolCall)]
    results = [e for e in events if isinstance(e, ToolResult)]
    assert [c.tool for c in calls] == ["find_file", "open", "edit", "python3", "submit"]
    assert [c.params for c in calls] == [{"command": s["action"].strip()} for s in steps]
    assert [r.result for r in results] == [s["observation"] for s in steps]
    assert [(r.tool, r.params) for r in results] == [(c.tool, c.params) for c in calls]
    assert [c.tool_call_id for c in calls] == ["s0", "s1", "s2", "s3", "s4"]
    # no times in the format: 20 s a step, the result 5 s later (as the corpus makes them)
    assert [e.ts for e in events] == [
        20000,
        25000,
        40000,
        45000,
        60000,
        65000,
        80000,
        85000,
        100000,
        105000,
        110000,
    ]
    assert isinstance(events[-1], RunEnd)
    assert {(e.run_id, e.agent_id) for e in events} == {("6e44b9__sweagenttestrepo-1c2844", "swe-agent")}


def test_swe_agent_steps_without_a_model_action_are_no_calls(tmp_path: Path) -> None:
    document = json.loads(SWE.read_text())
    steps = document["trajectory"]
    steps.insert(1, {**steps[1], "action": ""})  # a reply SWE-agent could not parse
    steps.append({**steps[-1], "action": "exit_cost"})  # SWE-agent stopped the run itself
    steps.append("not a step")
    events, err = swe(tmp_path / "x.traj", document)
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert [c.tool_call_id for c in calls] == ["s0", "s2", "s3", "s4", "s5"]  # ids: the steps
    assert [c.ts for c in calls] == [20000, 40000, 60000, 80000, 100000]  # times: the calls
    assert f"{tmp_path / 'x.traj'}:trajectory[7]: skipped: a step that is str, not an object" in err


def test_mini_swe_agent_bash_blocks_are_calls_and_the_next_user_message_their_result() -> None:
    events, err = mini(MINI)
    assert err == ""
    calls = [e for e in events if isinstance(e, ToolCall)]
    results = [e for e in events if isinstance(e, ToolResult)]
    messages = json.loads(MINI.read_text())["messages"]
    assert len(calls) == len(results) == 13
    assert all(c.tool == "bash" for c in calls)
    assert calls[0].params == {"command": 'ls -R | grep ":$" | head -n 5 && grep -r "def model_to_dict" .'}
    assert calls[1].params == {"command": "cat django/forms/models.py"}
    assert [c.tool_call_id for c in calls] == [f"m{i}" for i in range(2, 28, 2)]
    assert [r.result for r in results] == [messages[i]["content"] for i in range(3, 29, 2)]
    # the call at the model response's "created" second, its result 1 s later
    assert (calls[0].ts, results[0].ts, events[-1].ts) == (1763508910000, 1763508911000, 1763508979000)


def test_mini_swe_agent_timeouts_are_errors(tmp_path: Path) -> None:
    document = json.loads(MINI.read_text())
    timeout = (
        "The last command <command>python3 reproduce_issue.py</command> timed out and has been killed.\n"
        "The output of the command was:\n <output>\n\n</output>\n"
        "Please try another command and make sure to avoid those requiring interactive input."
    )
    document["messages"][9]["content"] = timeout
    events, _ = mini(tmp_path / "t.traj.json", document)
    failed = [e for e in events if isinstance(e, ToolResult) and e.error is not UNSET]
    assert [(e.tool_call_id, e.error, e.result) for e in failed] == [("m8", timeout, UNSET)]


def test_mini_swe_agent_1_1_actions_and_tool_messages(tmp_path: Path) -> None:
    """mini-swe-agent 2 (trajectory format 1.1): ``extra.actions`` with the model's tool call ids,
    ``tool`` messages answering them, ``exception_info`` when the command did not run to its end."""
    document = {
        "trajectory_format": "mini-swe-agent-1.1",
        "info": {"exit_status": "Submitted"},
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Fix the bug."},
            {
                "role": "assistant",
                "content": None,
                "extra": {
                    "actions": [
                        {"command": "ls", "tool_call_id": "call_1"},
                        {"command": "sleep 99", "tool_call_id": "call_2"},
                    ],
                    "timestamp": 1767225600.5,
                },
            },
            {
                "role": "tool",
                "tool_call_id": "call_2",
                "content": "<returncode>-1</returncode>",
                "extra": {
                    "exception_info": "An error occurred while executing the command: timed out",
                    "timestamp": 1767225630.0,
                },
            },
            {
                "role": "tool",
                "tool_call_id": "call_1",
                "content": "<returncode>0</returncode>\n<output>\na\n</output>",
                "extra": {"exception_info": "", "timestamp": 1767225601.0},
            },
        ],
    }
    events, err = mini(tmp_path / "v2.traj.json", document)
    assert err == ""
    kinds = [(type(e).__name__, getattr(e, "tool_call_id", None), e.ts) for e in events]
    assert kinds == [
        ("ToolCall", "call_1", 1767225600500),
        ("ToolCall", "call_2", 1767225600500),
        ("ToolResult", "call_2", 1767225630000),
        ("ToolResult", "call_1", 1767225601000),
        ("RunEnd", None, 1767225631000),
    ]
    failed, done = events[2], events[3]
    assert isinstance(failed, ToolResult)
    assert isinstance(done, ToolResult)
    assert failed.error == "<returncode>-1</returncode>"
    assert str(done.result).startswith("<returncode>0")


def test_import_finds_both_formats_from_their_content(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "run.traj").write_bytes(SWE.read_bytes())
    (tmp_path / "a" / "run.traj.json").write_bytes(MINI.read_bytes())
    done = subprocess.run(
        [sys.executable, "-m", "loopwatch", "import", str(tmp_path)], capture_output=True, check=True
    )
    events = [decode_event(line) for line in done.stdout.splitlines()]
    # one run id in two files: the second is read as another run
    assert {(e.run_id, e.agent_id) for e in events} == {("run", "swe-agent"), ("run~2", "mini-swe-agent")}
    assert len(events) == 11 + 27
    assert len({e.event_id for e in events}) == len(events)
    assert "run run is in another file too; read as run~2" in done.stderr.decode()
