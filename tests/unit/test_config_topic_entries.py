"""Config-topic records that carry an agent's whole entry (its preset, its rules, its block)."""

from __future__ import annotations

import json

import pytest

from loopwatch.config.errors import ConfigError
from loopwatch.config.fleet import FleetConfig
from loopwatch.config.own_rules import DEFAULT_OWN_RULES
from loopwatch.detectors.rules import call_cycle, same_call_streak, same_failure
from loopwatch.streams.kafka.config_topic import apply_config_record


def _record(config: FleetConfig, agent: str, value: object) -> FleetConfig:
    body = b"" if value is None else json.dumps(value).encode()
    return apply_config_record(config, agent.encode(), body)


def test_a_preset_record_puts_one_agent_on_the_preset() -> None:
    base = FleetConfig.enabled_default()
    tuned = _record(base, "coder", {"loopwatch": {"preset": "agents"}})
    rules = tuned.for_agent("coder").rules
    assert (
        rules.get(same_call_streak.SECTION).enabled,
        rules.get(call_cycle.SECTION).enabled,
        rules.get(same_failure.SECTION).enabled,
    ) == (True, True, True)
    assert (
        rules.get(same_call_streak.SECTION).warning_threshold,
        rules.get(same_call_streak.SECTION).critical_threshold,
    ) == (3, 5)
    assert tuned.for_agent("coder").enabled  # the file's block still applies under the preset
    assert tuned.for_agent("other").rules == DEFAULT_OWN_RULES
    assert base.for_agent("coder").rules == DEFAULT_OWN_RULES  # the original is unchanged


def test_an_entry_sets_block_rules_and_preset_together_and_null_removes_them() -> None:
    base = FleetConfig.enabled_default()
    entry = {
        "tools": {"loopDetection": {"warningThreshold": 4, "criticalThreshold": 9}},
        "loopwatch": {"preset": "agents", "detectors": {"sameCallStreak": {"criticalThreshold": 7}}},
    }
    tuned = _record(base, "coder", entry)
    resolved = tuned.for_agent("coder")
    assert (resolved.warning_threshold, resolved.critical_threshold) == (4, 9)
    assert resolved.rules.get(same_call_streak.SECTION).critical_threshold == 7
    assert resolved.rules.get(same_failure.SECTION).critical_threshold == 5  # the preset's, not overridden
    cleared = _record(tuned, "coder", None)
    assert cleared.for_agent("coder") == base.for_agent("coder")


def test_a_plain_block_record_still_means_a_loop_detection_block() -> None:
    tuned = _record(FleetConfig.enabled_default(), "coder", {"enabled": True, "warningThreshold": 3})
    assert tuned.for_agent("coder").warning_threshold == 3
    assert tuned.for_agent("coder").rules == DEFAULT_OWN_RULES


def test_a_bad_entry_is_refused_with_every_problem_and_its_path() -> None:
    bad = {"loopwatch": {"preset": "agents-1999", "digest": "md5"}, "colour": 1}
    with pytest.raises(ConfigError) as raised:
        _record(FleetConfig.enabled_default(), "coder", bad)
    text = str(raised.value)
    assert "agents.coder.colour: unknown key" in text
    assert "agents.coder.loopwatch.preset: unknown preset 'agents-1999'" in text
    assert "agents.coder.loopwatch.digest: only detectors and preset can be set per agent" in text
