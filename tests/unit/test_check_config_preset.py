"""``check-config``: each agent's preset (the global one, and an agent's own where it differs)
and the loopwatch rules it resolved to, the agents preset's three among them, with their
thresholds, exempt tools and the keys the file set over the preset's."""

import json
import subprocess
import sys
from typing import Any

from loopwatch.config.explain import explain
from loopwatch.config.fleet import parse_config_text

PRESET_SUMMARY = (
    "OpenClaw's rules plus same-call streaks, call cycles and repeated failures (real agents' loops)"
)
# the agents-2026-12 preset's rules as docs/real-loops.md gives them
STREAK = {"enabled": True, "warningThreshold": 3, "criticalThreshold": 5, "exemptTools": []}
CYCLE = {"enabled": True, "maxPeriod": 5, "warningThreshold": 2, "criticalThreshold": 3, "exemptTools": []}
FAILURE = {
    "enabled": True,
    "warningThreshold": 3,
    "criticalThreshold": 5,
    "sweepWarningThreshold": 5,
    "sweepCriticalThreshold": 8,
    "exemptTools": [],
}

GLOBAL_AND_OPT_OUT = """{
  loopwatch: {preset: "agents"},
  agents: {list: [{id: "poller", loopwatch: {preset: "openclaw"}}]},
}"""

TUNED = """{
  loopwatch: {
    preset: "agents",
    detectors: {sameCallStreak: {criticalThreshold: 6, exemptTools: ["wait", "poll"]}},
  },
  agents: {list: [
    {id: "quiet", loopwatch: {detectors: {sameFailure: {enabled: false}}}},
    {id: "pinned", loopwatch: {
      preset: "agents-2026-12",
      detectors: {callCycle: {warningThreshold: 3, criticalThreshold: 4}},
    }},
  ]},
}"""


def check_config(text: str, *flags: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "loopwatch", "check-config", *flags, "-"],
        input=text.encode(),
        capture_output=True,
        timeout=120,
    )


def document(text: str) -> dict[str, Any]:
    done = check_config(text, "--json")
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def rules(agent: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = agent["effective"]["loopwatch"]["detectors"]
    return found


def test_json_gives_the_global_preset_and_each_agents_with_the_rules_it_turned_on() -> None:
    report = document(GLOBAL_AND_OPT_OUT)
    agents_preset = {"name": "agents", "version": "agents-2026-12", "summary": PRESET_SUMMARY}
    assert report["preset"] == agents_preset
    default, poller = report["agents"]["default"], report["agents"]["poller"]
    assert default["preset"] == agents_preset
    assert poller["preset"] == {
        "name": "openclaw",
        "version": "openclaw",
        "summary": "OpenClaw's rules as they are",
    }
    assert default["effective"]["enabled"] is True  # the preset's block
    sames = rules(default)
    assert (sames["sameCallStreak"], sames["callCycle"], sames["sameFailure"]) == (STREAK, CYCLE, FAILURE)
    # the agent on OpenClaw's rules alone: none of the three, and OpenClaw's detection not enabled
    assert poller["effective"]["enabled"] is False
    assert [rules(poller)[rule]["enabled"] for rule in ("sameCallStreak", "callCycle", "sameFailure")] == [
        False,
        False,
        False,
    ]
    assert default["notes"] == [
        "sameCallStreak on (preset agents-2026-12): warns at the 3rd same call (tool and arguments) in a "
        "row, blocks the 5th; no tool exempt (exemptTools: [])",
        "callCycle on (preset agents-2026-12): the same 2 to 5 calls going round in the same order: warns "
        "at the 2nd round, blocks at the 3rd; no tool exempt (exemptTools: [])",
        "sameFailure on (preset agents-2026-12): after the 3rd outcome in a row failing the same way the "
        "next call is warned, after the 5th blocked; after a sweep's 5th (nothing found, argument after "
        "argument) warned, after its 8th blocked; no tool exempt (exemptTools: [])",
    ]
    for rule in ("sameCallStreak", "callCycle", "sameFailure"):
        off = f"{rule} off: this agent's preset openclaw does not turn it on (the global preset agents does)"
        assert off in poller["notes"]


def test_text_names_the_global_preset_once_and_an_agents_own_where_it_differs() -> None:
    done = check_config(GLOBAL_AND_OPT_OUT)
    assert done.returncode == 0, done.stderr
    text = done.stdout.decode()
    assert f"\npreset: agents (stands for agents-2026-12): {PRESET_SUMMARY}\n" in text
    default = text.split("\nagent default:\n")[1].split("\nagent poller:\n")[0]
    poller = text.split("\nagent poller:\n")[1].split("\nfleet-wide rules")[0]
    assert "preset (this agent's own)" not in default  # the global one
    assert "  preset (this agent's own): openclaw: OpenClaw's rules as they are\n" in poller
    assert "  note: sameCallStreak on (preset agents-2026-12): warns at the 3rd same call" in default
    assert "blocks the 5th; no tool exempt (exemptTools: [])" in default
    assert "  note: callCycle on (preset agents-2026-12)" in default
    assert "  note: sameFailure on (preset agents-2026-12)" in default
    assert "sameCallStreak on" not in poller


def test_keys_the_file_sets_over_the_preset_are_shown_with_where_they_come_from() -> None:
    report = document(TUNED)["agents"]
    default, quiet, pinned = report["default"], report["quiet"], report["pinned"]
    tuned_streak = {**STREAK, "criticalThreshold": 6, "exemptTools": ["poll", "wait"]}
    assert rules(default)["sameCallStreak"] == tuned_streak
    assert rules(quiet)["sameCallStreak"] == tuned_streak
    assert rules(quiet)["sameFailure"] == {**FAILURE, "enabled": False}
    assert rules(pinned)["callCycle"] == {**CYCLE, "warningThreshold": 3, "criticalThreshold": 4}
    assert (quiet["preset"]["name"], pinned["preset"]["name"]) == ("agents", "agents-2026-12")
    assert (
        "sameCallStreak on (preset agents-2026-12): warns at the 3rd same call (tool and arguments) in a "
        "row, blocks the 6th; exemptTools: poll, wait; set by the file: criticalThreshold "
        "(loopwatch.detectors), exemptTools (loopwatch.detectors)"
    ) in default["notes"]
    assert (
        "sameFailure off: this agent's loopwatch.detectors turns off what preset agents turns on"
        in quiet["notes"]
    )
    assert (
        "callCycle on (preset agents-2026-12): the same 2 to 5 calls going round in the same order: warns "
        "at the 3rd round, blocks at the 4th; no tool exempt (exemptTools: []); set by the file: "
        "criticalThreshold (this agent), warningThreshold (this agent)"
    ) in pinned["notes"]
    text = check_config(TUNED).stdout.decode()
    # the pinned agent names its own preset (another name than the global one's)
    assert "  preset (this agent's own): agents-2026-12: " in text
    assert text.count("preset (this agent's own)") == 1


def test_a_config_without_a_preset_says_so_and_notes_none_of_the_three() -> None:
    config = "{tools: {loopDetection: {enabled: true}}}"
    report = document(config)
    assert report["preset"] is None
    assert report["agents"]["default"]["preset"] is None
    assert not any(
        rule in note
        for note in report["agents"]["default"]["notes"]
        for rule in ("sameCallStreak", "callCycle", "sameFailure")
    )
    text = check_config(config).stdout.decode()
    assert "\npreset: none (OpenClaw's rules as they are; " in text
    assert "docs/real-loops.md" in text


def test_a_rule_turned_on_without_a_preset_is_noted_as_the_files() -> None:
    config = parse_config_text(
        '{"agents": {"list": [{"id": "a", "loopwatch": {"preset": "agents"}}, '
        '{"id": "b", "loopwatch": {"detectors": '
        '{"sameCallStreak": {"enabled": true, "criticalThreshold": 4}}}}]}}'
    )
    reports = {report.agent: report for report in explain(config)}
    assert reports["default"].preset is None
    assert reports["a"].preset == {"name": "agents", "version": "agents-2026-12", "summary": PRESET_SUMMARY}
    assert reports["b"].preset is None
    assert (
        "sameCallStreak on (loopwatch.detectors): warns at the 3rd same call (tool and arguments) in a row, "
        "blocks the 4th; no tool exempt (exemptTools: [])"
    ) in reports["b"].notes
    assert not any("callCycle" in note or "sameFailure" in note for note in reports["b"].notes)
