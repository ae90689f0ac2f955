"""import and replay without a path: every runtime's default place under the home folder."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from loopwatch.detectors.decoding import decode_event
from loopwatch.detectors.events import ToolCall
from tests.helpers import DATA, ROOT

HERE = DATA / "agent-histories"


def loopwatch(home: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "loopwatch", *args], capture_output=True, env=env, cwd=ROOT, timeout=120
    )


def a_home(home: Path) -> dict[str, str]:
    """A home folder with one history of each runtime in its default place; run id -> agent."""
    projects = home / ".claude" / "projects" / "-home-user-project"
    shutil.copytree(HERE / "claude-code" / "session", projects)
    day = home / ".codex" / "sessions" / "2026" / "05" / "11"
    day.mkdir(parents=True)
    rollout = next((HERE / "codex").glob("rollout-*.jsonl"))
    shutil.copy(rollout, day / rollout.name)
    chats = home / ".gemini" / "tmp" / "907f2064" / "chats"
    chats.mkdir(parents=True)
    chat = next((HERE / "gemini").glob("session-*.json"))
    shutil.copy(chat, chats / chat.name)
    shutil.copytree(HERE / "openhands" / "sessions", home / ".openhands" / "sessions")
    shutil.copytree(HERE / "openhands" / "conversations", home / ".openhands" / "conversations")
    mini = home / ".config" / "mini-swe-agent"
    mini.mkdir(parents=True)
    shutil.copy(HERE / "mini-swe-agent" / "django__django-11163.traj.json", mini / "last_mini_run.traj.json")
    (home / "not-a-default-place").mkdir()
    shutil.copy(HERE / "claude-code" / "tool_heavy.jsonl", home / "not-a-default-place" / "s.jsonl")
    return {
        "8463c716-a2ea-4c14-9efa-87158ebd9f20": "claude-code",
        "8463c716-a2ea-4c14-9efa-87158ebd9f20/a7be2f0": "claude-code",
        "019e1625-789d-76c0-80ab-3724b5ddb799": "codex",
        "37b7abef-713d-4522-85f0-8ff15a4e6d17": "gemini",
        "ponylang__ponyc-4593": "openhands",
        "sdk-goal": "openhands",
        "last_mini_run": "mini-swe-agent",
    }


def test_import_without_a_path_reads_every_default_place(tmp_path: Path) -> None:
    runs = a_home(tmp_path)
    done = loopwatch(tmp_path, "import")
    assert done.returncode == 0, done.stderr
    events = [decode_event(line) for line in done.stdout.splitlines()]
    assert {e.run_id: e.agent_id for e in events} == runs


def test_replay_without_a_path_gives_a_row_per_run(tmp_path: Path) -> None:
    runs = a_home(tmp_path)
    done = loopwatch(tmp_path, "replay", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert {row["run"]: row["agent"] for row in report["runs"]} == runs
    calls = {row["run"]: row["calls"] for row in report["runs"]}
    imported = [decode_event(line) for line in loopwatch(tmp_path, "import").stdout.splitlines()]
    assert calls == {run: sum(isinstance(e, ToolCall) for e in imported if e.run_id == run) for run in runs}
    child = next(row for row in report["runs"] if row["run"].endswith("/a7be2f0"))
    assert child["parent_run_id"] == "8463c716-a2ea-4c14-9efa-87158ebd9f20"


def test_a_home_without_any_history(tmp_path: Path) -> None:
    done = loopwatch(tmp_path, "import")
    assert done.returncode == 1
    assert b"import found no agent history in the default places" in done.stderr
    done = loopwatch(tmp_path, "replay")
    assert done.returncode == 1
    assert b"no event to replay in the default places" in done.stderr
    done = loopwatch(tmp_path, "replay", "--since", "2026-01-01")
    assert done.returncode == 2
    assert b"--since applies to a Kafka source (kafka:TOPIC) only" in done.stderr
