"""Every real OpenClaw fixture through ``loopwatch run``, verdict by verdict."""

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import FIXTURES

# The expected verdicts are OpenClaw's rules of revision 2026-05 (the fixtures' README).
CONFIGS: dict[str, dict[str, Any]] = {
    "expected": {"tools": {"loopDetection": {"enabled": True}}, "loopwatch": {"openclawRevision": "2026-05"}},
    "expected-lowered": {
        "tools": {"loopDetection": {"enabled": True, "warningThreshold": 3, "criticalThreshold": 5}},
        "loopwatch": {"openclawRevision": "2026-05"},
    },
}


def newest(config: dict[str, Any]) -> dict[str, Any]:
    """The same config under revision 2026-08 (the default)."""
    return {key: value for key, value in config.items() if key != "loopwatch"}


CASES = sorted(
    (path.name.split(".")[0], path.name.split(".")[1]) for path in FIXTURES.glob("*.expected*.jsonl")
)


def project(output: dict[str, Any]) -> dict[str, Any]:
    if output["type"] == "verdict":
        keys = ("level", "action", "detector", "count")
        return {
            "trigger_event_id": output["trigger_event_id"],
            "type": "verdict",
            "reason": None,
            **{k: output[k] for k in keys},
        }
    count = output["count"] if output["reason"] == "compaction_loop_persisted" else None
    return {
        "trigger_event_id": output["trigger_event_id"],
        "type": "abort",
        "level": None,
        "action": None,
        "detector": None,
        "count": count,
        "reason": output["reason"],
    }


def loopwatch_run(config: dict[str, Any], events: Path, tmp_path: Path) -> list[dict[str, Any]]:
    config_file = tmp_path / "openclaw.json"
    config_file.write_text(json.dumps(config))
    done = subprocess.run(
        [sys.executable, "-m", "loopwatch", "run", "--config", str(config_file), str(events)],
        capture_output=True,
        check=True,
    )
    assert done.stderr == b""
    return [json.loads(line) for line in done.stdout.splitlines()]


@pytest.mark.parametrize(("name", "variant"), CASES)
def test_fixture_gives_exactly_the_expected_verdicts(name: str, variant: str, tmp_path: Path) -> None:
    outputs = loopwatch_run(CONFIGS[variant], FIXTURES / f"{name}.events.jsonl", tmp_path)
    expected_text = (FIXTURES / f"{name}.{variant}.jsonl").read_text()
    expected = [json.loads(line) for line in expected_text.splitlines() if line.strip()]
    assert [project(o) for o in outputs] == expected


# every case but the read-error loop, whose blocked calls are retried (the next test)
@pytest.mark.parametrize(
    ("name", "variant"), [c for c in CASES if c != ("openclaw-read-error-loop", "expected")]
)
def test_2026_08_rules_change_nothing_where_no_blocked_call_is_retried(
    name: str, variant: str, tmp_path: Path
) -> None:
    events = FIXTURES / f"{name}.events.jsonl"
    assert loopwatch_run(newest(CONFIGS[variant]), events, tmp_path) == loopwatch_run(
        CONFIGS[variant], events, tmp_path
    )


def test_2026_08_blocks_the_same_retries_of_the_read_error_loop(tmp_path: Path) -> None:
    events = FIXTURES / "openclaw-read-error-loop.events.jsonl"
    old = loopwatch_run(CONFIGS["expected"], events, tmp_path)
    new = loopwatch_run(newest(CONFIGS["expected"]), events, tmp_path)

    def actions(outputs: list[dict[str, Any]]) -> list[tuple[str, str]]:
        return [(o["trigger_event_id"], o.get("action") or o["reason"]) for o in outputs]

    assert actions(new) == actions(old)
    assert new[:2] == old[:2]  # the first warning and the first block are the same verdicts
    # each retry leaves a veto record and its result (the trace's runtime ran it anyway): the
    # count climbs faster, so the abort's trigger (the second block) has a higher count
    assert new[2]["count"] > old[2]["count"]


def test_cases_cover_all_seven_fixtures() -> None:
    assert len({name for name, _ in CASES}) == 7
    assert len(CASES) == 8


def test_read_error_loop_agrees_with_openclaws_own_detector(tmp_path: Path) -> None:
    openclaw = json.loads((FIXTURES / "expected-from-openclaw.json").read_text())
    outputs = loopwatch_run(CONFIGS["expected"], FIXTURES / "openclaw-read-error-loop.events.jsonl", tmp_path)
    verdicts = [o for o in outputs if o["type"] == "verdict"]
    criticals = [o for o in verdicts if o["level"] == "critical"]
    for key, found in (
        ("firstWarning", verdicts[0]),
        ("firstCritical", criticals[0]),
        ("secondCritical", criticals[1]),
    ):
        ref = openclaw[key]
        assert (found["trigger_event_id"], found["tool_call_id"], found["detector"], found["count"]) == (
            ref["trigger_event_id"],
            ref["tool_call_id"],
            ref["detector"],
            ref["count"],
        )
    assert len(criticals) == openclaw["criticals"]


def test_invalid_lines_are_reported_with_line_numbers_and_skipped(tmp_path: Path) -> None:
    source = (FIXTURES / "openclaw-post-compaction-abort.events.jsonl").read_bytes().splitlines()
    mixed = [b"not json", *source[:10], b'{"type":"tool_call","event_id":"x"}', *source[10:]]
    events = tmp_path / "mixed.jsonl"
    events.write_bytes(b"\n".join(mixed) + b"\n")
    done = subprocess.run(
        [sys.executable, "-m", "loopwatch", "run", str(events)], capture_output=True, check=True
    )
    errors = done.stderr.decode().splitlines()
    assert len(errors) == 3
    assert errors[2] == "loopwatch: 2 of 45 lines were not valid events (skipped)"
    assert f"{events}:1: not valid JSON" in errors[0]
    assert f"{events}:12: invalid event: Object missing required field `tool`" in errors[1]
    assert [json.loads(line)["reason"] for line in done.stdout.splitlines()] == ["compaction_loop_persisted"]
