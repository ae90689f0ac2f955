"""``replay --compare``: per differing run, how many calls earlier or later the second config
first stops it (a block or an abort), and the summary line; on small histories worked out by
hand and on the real-trajectory corpus (the agents preset against OpenClaw's rules)."""

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loopwatch.detectors.events import encode_event
from loopwatch.streams.history.replay import stop_change, stop_text
from tests.helpers import DATA, Trace

CORPUS = DATA / "real-trajectories"

# the first config: only the same-call streak, warning at the 2nd same call in a row, block at
# the 3rd; OpenClaw's rules off (no `enabled`)
STREAK_3 = {
    "loopwatch": {
        "detectors": {"sameCallStreak": {"enabled": True, "warningThreshold": 2, "criticalThreshold": 3}}
    }
}
AGENTS = {"loopwatch": {"preset": "agents"}}
MISSING = "No such file or directory"


def loopwatch(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "loopwatch", *args], capture_output=True, timeout=300)


def _history() -> list[Trace]:
    """Five runs of at most 10 calls (under OpenClaw's thresholds of 10 and 30), each call
    answered before the next; the stops under STREAK_3 / the preset (streak 3/5; the same
    failure 3/5, its block at the call after the 5th failure) in each run's comment."""
    # read /a six times: STREAK_3 blocks the 3rd; the preset warns at the 3rd and blocks the
    # 5th: later by 2
    later = Trace("later")
    for _ in range(6):
        later.both("read", {"path": "/a"}, result="same text")
    # five reads of five files, each failing the same way, then two lists, then read /q three
    # times: the preset blocks the 6th call (after the 5th failure), STREAK_3 the 10th (the
    # 3rd read /q): earlier by 4
    earlier = Trace("earlier")
    for index in range(1, 6):
        earlier.both("read", {"path": f"/p{index}"}, error=MISSING)
    earlier.both("list", {"path": "/x"}, result="x")
    earlier.both("list", {"path": "/y"}, result="y")
    for _ in range(3):
        earlier.both("read", {"path": "/q"}, result="q")
    # six reads of six files failing the same way: only the preset stops it, at the 6th call
    only_now = Trace("only-now")
    for index in range(1, 7):
        only_now.both("read", {"path": f"/r{index}"}, error=MISSING)
    # read /b three times, then a list: STREAK_3 blocks the 3rd; the preset only warns there
    no_longer = Trace("no-longer")
    for _ in range(3):
        no_longer.both("read", {"path": "/b"}, result="b")
    no_longer.both("list", {"path": "/"}, result="b")
    # read /c twice, then a list: STREAK_3 warns at the 2nd, neither config stops it
    warned = Trace("warned")
    for _ in range(2):
        warned.both("read", {"path": "/c"}, result="c")
    warned.both("list", {"path": "/"}, result="c")
    # three different reads that succeed: no verdict under either config, not listed
    quiet = Trace("quiet")
    for index in range(3):
        quiet.both("read", {"path": f"/ok{index}"}, result=f"text {index}")
    return [later, earlier, only_now, no_longer, warned, quiet]


@pytest.fixture
def files(tmp_path: Path) -> tuple[str, str, str]:
    events = tmp_path / "events.jsonl"
    lines = [encode_event(event) for trace in _history() for event in trace.events]
    events.write_bytes(b"\n".join(lines) + b"\n")
    streak = tmp_path / "streak3.json"
    streak.write_text(json.dumps(STREAK_3))
    agents = tmp_path / "agents.json"
    agents.write_text(json.dumps(AGENTS))
    return str(events), str(streak), str(agents)


def test_compare_gives_each_differing_run_its_stop_change(files: tuple[str, str, str]) -> None:
    events, streak, agents = files
    done = loopwatch("replay", events, "--config", streak, "--compare", agents, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    stops = {difference["run"]: difference["stop"] for difference in report["differences"]}
    assert stops == {
        "later": {"config": 3, "compare": 5, "change": "later", "by": 2},
        "earlier": {"config": 10, "compare": 6, "change": "earlier", "by": 4},
        "only-now": {"config": None, "compare": 6, "change": "only_now", "by": None},
        "no-longer": {"config": 3, "compare": None, "change": "no_longer", "by": None},
        "warned": {"config": None, "compare": None, "change": None, "by": None},
    }
    # 3 runs stopped by each; the two both stop: +2 and -4, median -1
    assert report["compare_stops"] == {
        "stopped": {"config": 3, "compare": 3},
        "earlier": 1,
        "later": 1,
        "same": 0,
        "only_now": 1,
        "no_longer": 1,
        "both_stopped": 2,
        "median_difference": -1.0,
    }


def test_compare_says_it_in_the_table_and_one_line(files: tuple[str, str, str]) -> None:
    events, streak, agents = files
    done = loopwatch("replay", events, "--config", streak, "--compare", agents)
    assert done.returncode == 0, done.stderr
    text = done.stdout.decode()
    assert "--compare stops it" in text
    rows = {line.split("│")[1].strip(): line for line in text.splitlines() if line.count("│") > 5}
    assert "later by 2 calls" in rows["later"]
    assert "earlier by 4 calls" in rows["earlier"]
    assert "only now" in rows["only-now"]
    assert "no longer" in rows["no-longer"]
    assert "5 of 6 runs differ" in text
    assert (
        "stopped: 3 runs by the config, 3 by --compare; --compare stops 1 earlier, 1 later, "
        "0 at the same call, 1 only now, 1 no longer; median over the 2 runs both stop: 1 call earlier"
    ) in text
    # the other way round, every change turns over
    back = json.loads(loopwatch("replay", events, "--config", agents, "--compare", streak, "--json").stdout)
    assert {d["run"]: d["stop"]["change"] for d in back["differences"]} == {
        "later": "earlier",
        "earlier": "later",
        "only-now": "no_longer",
        "no-longer": "only_now",
        "warned": None,
    }
    assert back["compare_stops"]["median_difference"] == 1.0


@pytest.mark.parametrize(
    ("config_stop", "compare_stop", "change", "by", "text"),
    [
        (12, 5, "earlier", 7, "earlier by 7 calls"),
        (4, 5, "later", 1, "later by 1 call"),
        (9, 9, "same", 0, "same call"),
        (None, 3, "only_now", None, "only now"),
        (3, None, "no_longer", None, "no longer"),
        (None, None, None, None, "-"),
    ],
)
def test_stop_change_in_words(
    config_stop: int | None, compare_stop: int | None, change: str | None, by: int | None, text: str
) -> None:
    assert stop_change(config_stop, compare_stop) == (change, by)
    assert stop_text(change, by) == text


def _stop(run: dict[str, Any]) -> int | None:
    stops = [call for call in (run["first_block"], run["first_abort"]) if call is not None]
    return min(stops) if stops else None


def test_the_agents_preset_stops_more_labelled_loops_than_openclaws_rules(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    with gzip.open(CORPUS / "events.jsonl.gz") as stream:
        events.write_bytes(stream.read())
    default = tmp_path / "default.json"
    default.write_text(json.dumps({"tools": {"loopDetection": {"enabled": True}}}))
    agents = tmp_path / "agents.json"
    agents.write_text(json.dumps(AGENTS))
    done = loopwatch("replay", str(events), "--config", str(default), "--compare", str(agents), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    labels = [json.loads(line) for line in (CORPUS / "labels-dev.jsonl").read_text().splitlines()]
    loops = {row["run_id"] for row in labels if row["label"] == "loop"}
    assert len(loops) == 19
    runs = {run["run"]: run for run in report["runs"]}
    changed = {difference["run"]: difference["stop"] for difference in report["differences"]}
    # a run not listed is stopped where the first config stops it
    by_default = {run: _stop(runs[run]) for run in loops}
    by_preset = {run: changed[run]["compare"] if run in changed else by_default[run] for run in loops}
    stopped_default = sum(call is not None for call in by_default.values())
    stopped_preset = sum(call is not None for call in by_preset.values())
    assert stopped_preset > stopped_default
    # no loop the default stops is let go, nor stopped later
    for run, call in by_default.items():
        if call is not None:
            preset_stop = by_preset[run]
            assert preset_stop is not None, run
            assert preset_stop <= call, run
    # the summary counts what the runs say
    summary = report["compare_stops"]
    every = [_stop(run) for run in report["runs"]]
    assert summary["stopped"]["config"] == sum(call is not None for call in every)
    assert (
        summary["stopped"]["compare"]
        == summary["stopped"]["config"] + summary["only_now"] - summary["no_longer"]
    )
