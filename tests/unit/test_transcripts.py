"""The OpenClaw transcript importer against the real (anonymised) transcripts."""

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from loopwatch.detectors.decoding import decode_event
from loopwatch.streams.history.transcripts import agent_from_path, is_transcript, transcript_events
from tests.helpers import DATA, FIXTURES

TRANSCRIPTS = sorted((DATA / "transcripts").glob("*.session.jsonl"))


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=[p.name.split(".")[0] for p in TRANSCRIPTS])
def test_transcript_imports_to_its_event_fixture(path: Path) -> None:
    name = path.name.removesuffix(".session.jsonl")
    got = [
        msgspec.structs.replace(e, event_id="-")
        for e in transcript_events(path.read_bytes().splitlines(), "s1", name)
    ]
    fixture = (FIXTURES / f"{name}.events.jsonl").read_bytes().splitlines()
    want = [msgspec.structs.replace(decode_event(line), event_id="-") for line in fixture]
    assert got == want


def test_five_transcripts_are_tested() -> None:
    assert len(TRANSCRIPTS) == 5


def test_detection_and_layout() -> None:
    assert is_transcript(b'{"type":"session","version":3,"id":"abc","timestamp":"2026-01-01T00:00:00Z"}')
    assert not is_transcript(b'{"type":"tool_call"}')
    assert not is_transcript(b"garbage")
    assert agent_from_path("/home/u/.openclaw/agents/coder/sessions/x.jsonl") == "coder"
    assert agent_from_path("/tmp/x.jsonl") is None


def test_replaying_a_transcript_gives_the_verdicts_of_its_event_fixture(tmp_path: Path) -> None:
    name = "openclaw-process-poll-loop"
    layout = tmp_path / "agents" / "s1" / "sessions"
    layout.mkdir(parents=True)
    (layout / f"{name}.session.jsonl").write_bytes(
        (DATA / "transcripts" / f"{name}.session.jsonl").read_bytes()
    )

    def replay(source: Path) -> dict[str, object]:
        done = subprocess.run(
            [sys.executable, "-m", "loopwatch", "replay", str(source), "--json"],
            capture_output=True,
            check=True,
        )
        report: dict[str, object] = json.loads(done.stdout)
        return report

    from_transcript = replay(layout)  # agent id from the agents/<id>/sessions layout
    from_events = replay(FIXTURES / f"{name}.events.jsonl")
    assert from_transcript["runs"] == from_events["runs"]
    assert from_transcript["detectors"] == {"known_poll_no_progress": 2}


def test_import_command_and_skips(tmp_path: Path) -> None:
    other = tmp_path / "not-a-transcript.jsonl"
    other.write_text('{"type": "tool_call"}\n')
    path = DATA / "transcripts" / "openclaw-invalid-write-errors.session.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "loopwatch", "import", "--agent-id", "s1", str(path), str(other)],
        capture_output=True,
        check=True,
    )
    lines = done.stdout.splitlines()
    assert len(lines) == 26
    assert all(json.loads(line)["agent_id"] == "s1" for line in lines)
    assert "not an OpenClaw session transcript" in done.stderr.decode()


def test_import_and_replay_name_every_line_they_skip(tmp_path: Path) -> None:
    import subprocess
    import sys

    source = (DATA / "transcripts" / "openclaw-healthy-many-tools.session.jsonl").read_bytes().split(b"\n")
    broken = [source[0], b"{not json", b"\xff\xfe invalid utf-8", b"[1, 2]", *source[1:]]
    path = tmp_path / "broken.session.jsonl"
    path.write_bytes(b"\n".join(broken))
    clean = tmp_path / "clean.session.jsonl"
    clean.write_bytes(b"\n".join(source))
    for command in ("import", "replay"):
        done = subprocess.run(
            [sys.executable, "-m", "loopwatch", command, str(path)], capture_output=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        errors = done.stderr.decode()
        for number, why in ((2, "not valid JSON"), (3, "not valid JSON"), (4, "not a JSON object")):
            assert f"{path}:{number}: skipped: {why}" in errors, (command, errors)
    imported = subprocess.run(
        [sys.executable, "-m", "loopwatch", "import", str(path)], capture_output=True, timeout=120
    ).stdout
    reference = subprocess.run(
        [sys.executable, "-m", "loopwatch", "import", str(clean)], capture_output=True, timeout=120
    ).stdout
    assert imported.replace(b"broken", b"clean") == reference  # nothing else is lost


def test_openclaw_2026_9_loop_notes_are_removed_before_hashing(tmp_path: Path) -> None:
    """OpenClaw 2026.9 appends ``[System note: Tool-loop warning after N repeated calls. …]`` to
    a warned call's result after hashing it: import gives the events of the note-free transcript,
    and replay the same verdicts."""
    name = "openclaw-process-poll-loop"
    noted = DATA / "transcripts-2026-9" / f"{name}.session.jsonl"
    assert noted.read_text().count("[System note: Tool-loop warning after 10 repeated calls.") == 2
    plain = DATA / "transcripts" / f"{name}.session.jsonl"

    def events(path: Path) -> list[object]:
        return list(transcript_events(path.read_bytes().splitlines(), "s1", name))

    assert events(noted) == events(plain)

    def verdicts(path: Path) -> object:
        layout = tmp_path / path.parent.name / "agents" / "s1" / "sessions"
        layout.mkdir(parents=True)
        (layout / path.name).write_bytes(path.read_bytes())
        done = subprocess.run(
            [sys.executable, "-m", "loopwatch", "replay", str(layout), "--json"],
            capture_output=True,
            check=True,
        )
        return json.loads(done.stdout)["runs"]

    assert verdicts(noted) == verdicts(plain)


def edit_first(lines: list[bytes], change: Callable[[dict[str, Any]], bool]) -> list[bytes]:
    """``lines`` with the first message entry that ``change`` changed (it says whether it did)
    written again; asserts there was one."""
    edited: list[bytes] = []
    done = False
    for line in lines:
        entry = json.loads(line) if line.strip() else None
        message = entry.get("message") if isinstance(entry, dict) else None
        if not done and isinstance(message, dict) and change(message):
            done = True
            line = json.dumps(entry).encode()
        edited.append(line)
    assert done
    return edited


def test_a_line_with_a_lone_surrogate_is_read_as_javascript_reads_it(tmp_path: Path) -> None:
    """A tool output cut inside an emoji: Node writes ``"\\ud83d"``. Skipping the line would lose
    the result (its call left pending, the next prompt taken for steering)."""
    source = (DATA / "transcripts" / "openclaw-healthy-many-tools.session.jsonl").read_bytes().splitlines()

    def cut(message: dict[str, Any]) -> bool:
        if message.get("role") != "toolResult":
            return False
        message["content"][0]["text"] += "\ud83d"  # json.dumps writes the escape, as Node does
        return True

    lines = edit_first(source, cut)
    plain = list(transcript_events(source, "s1", "t"))
    events = list(transcript_events(lines, "s1", "t"))
    assert len(events) == len(plain)
    changed = [(a, b) for a, b in zip(plain, events, strict=True) if a != b]
    assert len(changed) == 1
    assert "\ud83d" in json.dumps(msgspec.to_builtins(changed[0][1]), ensure_ascii=False)
    path = tmp_path / "cut.session.jsonl"
    path.write_bytes(b"\n".join(lines))
    done = subprocess.run(
        [sys.executable, "-m", "loopwatch", "import", str(path)], capture_output=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    imported = [decode_event(line) for line in done.stdout.splitlines()]
    assert imported == list(transcript_events(lines, "main", "cut.session"))


def test_a_file_name_that_is_not_utf_8_gives_valid_event_ids(tmp_path: Path) -> None:
    """Event ids carry the file's stem: a name with a Latin-1 byte is written escaped, never as
    text no JSON encoder can write (``loopwatch import`` failed, the sidecar skipped the file)."""
    import os

    source = DATA / "transcripts" / "openclaw-healthy-many-tools.session.jsonl"
    name = os.fsdecode(b"caf\xe9.jsonl")
    (tmp_path / name).write_bytes(source.read_bytes())
    done = subprocess.run(
        [sys.executable, "-m", "loopwatch", "import", str(tmp_path)], capture_output=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    events = [decode_event(line) for line in done.stdout.splitlines()]
    assert events
    assert all(event.event_id.startswith("caf\\xe9-") for event in events)


def test_events_beyond_the_wire_s_limits_are_skipped_by_import_and_replay_alike(tmp_path: Path) -> None:
    """A transcript's events reach the engine directly in replay: one a gateway or a worker
    would refuse (a tool name of 600 bytes) is skipped and named, as ``import | run`` does."""
    source = (DATA / "transcripts" / "openclaw-healthy-many-tools.session.jsonl").read_bytes().splitlines()

    def rename(message: dict[str, Any]) -> bool:
        blocks = [
            b for b in message.get("content", []) if isinstance(b, dict) and b.get("type") == "toolCall"
        ]
        if message.get("role") != "assistant" or not blocks:
            return False
        blocks[0]["name"] = "t" * 600
        return True

    lines = edit_first(source, rename)
    path = tmp_path / "agents" / "main" / "sessions" / "long.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\n".join(lines))
    imported = subprocess.run(
        [sys.executable, "-m", "loopwatch", "import", str(path)], capture_output=True, timeout=120
    )
    assert imported.returncode == 0, imported.stderr
    assert "tool: holds 600 bytes, more than the limit of 512" in imported.stderr.decode()
    events = [decode_event(line) for line in imported.stdout.splitlines()]
    assert all(getattr(event, "tool", "") != "t" * 600 for event in events)
    all_events = transcript_events(lines, "main", "long")
    assert len(all_events) - len(events) == 1  # the call (its result names the tool itself)
    replayed = subprocess.run(
        [sys.executable, "-m", "loopwatch", "replay", str(path.parent.parent.parent), "--json"],
        capture_output=True,
        timeout=120,
    )
    assert replayed.returncode == 0, replayed.stderr
    assert "tool: holds 600 bytes, more than the limit of 512" in replayed.stderr.decode()
