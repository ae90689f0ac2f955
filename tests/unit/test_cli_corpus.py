"""Every subcommand fed every kind of bad file: a message that says what and where, never a
traceback, and a non-zero exit when nothing useful could be done."""

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import DATA, FIXTURES, ROOT

EVENTS = FIXTURES / "openclaw-post-compaction-abort.events.jsonl"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("corpus")
    files = {
        "empty": b"",
        "binary": b"\xff\xfe\x00\x01garbage\x00",
        "truncated": EVENTS.read_bytes()[:300],  # one whole event line, then half of one
        "wrong-types": b'{"type":"tool_call","event_id":7,"run_id":["x"],"tool":{},"params":1}\n',
        "transcript": (DATA / "transcripts" / "openclaw-healthy-many-tools.session.jsonl").read_bytes(),
        "config": (ROOT / "docker" / "openclaw.example.json").read_bytes(),
        "array": b"[1, 2, 3]\n",
    }
    paths = {}
    for name, data in files.items():
        paths[name] = folder / f"{name}.jsonl"
        paths[name].write_bytes(data)
    paths["missing"] = folder / "missing.jsonl"
    return paths


def loopwatch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loopwatch", *args], capture_output=True, text=True, timeout=120, cwd=ROOT
    )


KINDS = ("empty", "binary", "truncated", "wrong-types", "transcript", "config", "array")
# command -> the exit status for each kind of file (0: it did something useful)
EXPECTED = {
    "run": {
        "empty": 1,
        "binary": 1,
        "truncated": 0,
        "wrong-types": 1,
        "transcript": 1,
        "config": 1,
        "array": 1,
    },
    "replay": {
        "empty": 1,
        "binary": 1,
        "truncated": 0,
        "wrong-types": 1,
        "transcript": 0,
        "config": 1,
        "array": 1,
    },
    "import": {
        "empty": 1,
        "binary": 1,
        "truncated": 1,
        "wrong-types": 1,
        "transcript": 0,
        "config": 1,
        "array": 1,
    },
    "conformance": dict.fromkeys(
        ("empty", "binary", "truncated", "wrong-types", "transcript", "config", "array"), 1
    ),
    "check-config": {
        "empty": 2,
        "binary": 2,
        "truncated": 2,
        "wrong-types": 0,  # a JSON object: valid, with warnings that it sets nothing loopwatch reads
        "transcript": 2,
        "config": 0,
        "array": 2,
    },
}
CASES = [(command, kind, status) for command, kinds in EXPECTED.items() for kind, status in kinds.items()]
CASES += [(command, "missing", 2) for command in EXPECTED]


@pytest.mark.parametrize(("command", "kind", "status"), CASES)
def test_every_command_answers_every_file(
    command: str, kind: str, status: int, corpus: dict[str, Path]
) -> None:
    path = corpus[kind]
    done = loopwatch(command, str(path))
    assert "Traceback" not in done.stderr
    assert done.returncode == status, done.stderr
    if status:
        assert str(path) in done.stderr or str(path) in done.stdout  # where
        assert "loopwatch:" in done.stderr or "FAIL" in done.stdout  # what


@pytest.mark.parametrize("kind", ["empty", "binary", "truncated", "transcript", "array", "missing"])
def test_a_bad_config_stops_every_command_that_takes_one(kind: str, corpus: dict[str, Path]) -> None:
    config = str(corpus[kind])
    for args in (
        ("run", "--config", config, str(EVENTS)),
        ("replay", str(EVENTS), "--config", config),
        ("replay", str(EVENTS), "--compare", config),
        ("demo", "--runs", "1", "--config", config),
    ):
        done = loopwatch(*args)
        assert "Traceback" not in done.stderr
        assert done.returncode == 2, (args, done.stderr)
        assert f"invalid configuration in {config}" in done.stderr


def test_an_events_file_as_config_is_valid_but_says_it_sets_nothing(corpus: dict[str, Path]) -> None:
    done = loopwatch("check-config", str(corpus["wrong-types"]))
    assert "sets nothing loopwatch reads" in done.stderr
