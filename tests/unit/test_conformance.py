import json
import subprocess
import sys
from pathlib import Path

import pytest

from loopwatch.detectors.conformance import run_vector
from loopwatch.detectors.stable_json import WIRE_DECODER
from tests.helpers import NEWEST_VECTORS, VECTORS

VECTOR_LINES = VECTORS.read_bytes().splitlines()
NEWEST_LINES = NEWEST_VECTORS.read_bytes().splitlines()


@pytest.mark.parametrize("line", VECTOR_LINES, ids=[json.loads(v)["name"] for v in VECTOR_LINES])
def test_public_vector_passes(line: bytes) -> None:
    assert run_vector(WIRE_DECODER.decode(line)) is None


@pytest.mark.parametrize("line", NEWEST_LINES, ids=[json.loads(v)["name"] for v in NEWEST_LINES])
def test_newest_vector_passes(line: bytes) -> None:
    assert run_vector(WIRE_DECODER.decode(line)) is None


def test_the_profile_picks_the_revision() -> None:
    """The two vectors whose expectations differ between revisions (spec difference #4)."""
    by_name = {json.loads(line)["name"]: json.loads(line) for line in VECTOR_LINES}
    for name in ("runtime_warn_once_per_bucket_then_sticky_block", "guard_not_fed_by_loop_veto"):
        vector = by_name[name]
        assert run_vector(vector) is None
        failure = run_vector({**vector, "profile": "loopwatch-newest"})
        assert failure is not None
        assert "count" in failure.reason
    newest = [json.loads(line) for line in NEWEST_LINES]
    under_old_rules = [run_vector({**vector, "profile": "loopwatch"}) for vector in newest]
    assert sum(failure is not None for failure in under_old_rules) >= 10


def test_an_unknown_profile_is_a_failure() -> None:
    failure = run_vector({"name": "x", "profile": "openclaw-2030", "steps": []})
    assert failure is not None
    assert "profile 'openclaw-2030'" in failure.reason


def test_a_wrong_expectation_fails_naming_the_step() -> None:
    vector = json.loads(VECTOR_LINES[0])
    vector["steps"][-1]["expect"] = {"stuck": True}
    failure = run_vector(vector)
    assert failure is not None
    assert failure.step == len(vector["steps"]) - 1
    assert "expected stuck=True" in failure.reason


@pytest.mark.parametrize(
    ("mutation", "reason"),
    [
        ({"op": "teleport"}, "unknown op 'teleport'"),
        (
            {"op": "check", "tool": "read", "params": {}, "expect": {"vibes": 1}},
            "cannot evaluate expectation key 'vibes'",
        ),
        ({"op": "check"}, "step needs a string tool and params"),
        ({"op": "assert_history", "expect": {"entries": [{"index": 99}]}}, "no entry at index 99"),
    ],
)
def test_what_cannot_be_evaluated_is_a_failure(mutation: dict[str, object], reason: str) -> None:
    failure = run_vector({"name": "x", "steps": [mutation]})
    assert failure is not None
    assert reason in failure.reason


def test_malformed_vector() -> None:
    assert run_vector({"name": "x"}) is not None
    assert run_vector([1, 2]) is not None


def test_cli_reports_failures_and_exit_status(tmp_path: Path) -> None:
    good = VECTOR_LINES[0].decode()
    bad = json.loads(good)
    bad["name"] = "broken"
    bad["steps"][-1]["expect"] = {"stuck": True}
    vectors = tmp_path / "v.jsonl"
    vectors.write_text("\n".join([good, json.dumps(bad), "{oops"]) + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "loopwatch", "conformance", str(vectors)], capture_output=True
    )
    lines = done.stdout.decode().splitlines()
    assert done.returncode == 1
    assert lines[-1] == "1 passed, 2 failed"
    assert any(line.startswith(f"FAIL {vectors}:2 broken: step 1") for line in lines)
    assert any(line.startswith(f"FAIL {vectors}:3: not valid JSON") for line in lines)  # one format


def test_cli_says_why_an_empty_file_fails(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    done = subprocess.run([sys.executable, "-m", "loopwatch", "conformance", str(empty)], capture_output=True)
    assert done.returncode == 1
    assert f"{empty}: no conformance vectors in it" in done.stderr.decode()


def test_cli_passes_on_the_public_file() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "loopwatch", "conformance", str(VECTORS)], capture_output=True
    )
    assert done.returncode == 0
    assert done.stdout.decode().splitlines()[-1] == f"{len(VECTOR_LINES)} passed, 0 failed"
