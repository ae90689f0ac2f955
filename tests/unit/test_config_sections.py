"""loopwatch's own config declared once (msgspec Structs) and every agent resolved at load."""

from dataclasses import replace
from typing import Any

import msgspec
import pytest

from loopwatch.config import ConfigError, DetectorSettings, FleetConfig, parse_config_text, parse_config_value
from loopwatch.config.fleet_rules import FleetRules, SystemicLoopRule, ToolOutageRule, fleet_rules
from loopwatch.config.own_rules import DEFAULT_OWN_RULES, OwnRules, resolve_rules
from loopwatch.config.rule_sections import Detectors
from loopwatch.config.sections import FLEET_RULES
from loopwatch.config.settings import parse_settings
from loopwatch.detectors.rules import edit_undo, loop_budget, run_no_progress

# -- every agent resolved once, at load ---------------------------------------------------------

FLEET = """{
  tools: {loopDetection: {enabled: true, warningThreshold: 8}},
  loopwatch: {openclawRevision: "2026-05", detectors: {loopBudget: {usd: 3}}},
  agents: {
    list: [{id: "coder", tools: {loopDetection: {criticalThreshold: 12}}}],
    entries: {ops: {loopwatch: {detectors: {editUndo: {enabled: true}}}}},
  },
}"""


def test_every_agent_with_a_block_or_rules_is_resolved_when_the_config_is_built() -> None:
    config = parse_config_text(FLEET)
    assert sorted(config.agents) == ["coder", "ops"]
    assert config.agents["coder"].critical_threshold == 12
    assert config.agents["ops"].rules.get(edit_undo.SECTION).enabled
    assert config.default.warning_threshold == 8
    assert config.default.rules.get(loop_budget.SECTION).usd == 3.0


def test_for_agent_returns_the_table_s_entry_or_the_default_always_the_same_object() -> None:
    config = parse_config_text(FLEET)
    assert config.for_agent("coder") is config.agents["coder"]
    assert config.for_agent("coder") is config.for_agent("coder")
    assert config.for_agent("someone") is config.default
    assert config.for_agent("someone-else") is config.default
    assert sorted(config.agents) == ["coder", "ops"]  # asking for unknown agents adds nothing


def test_the_table_is_read_only_and_the_config_has_no_cache() -> None:
    config = parse_config_text(FLEET)
    with pytest.raises(TypeError):
        config.agents["new"] = config.default  # type: ignore[index]
    assert not hasattr(config, "_cache")


def test_a_replaced_config_and_an_agent_override_are_resolved_again() -> None:
    config = parse_config_text(FLEET)
    override = config.with_agent_block("coder", {"warningThreshold": 3})
    assert override.for_agent("coder").warning_threshold == 3
    assert config.for_agent("coder").warning_threshold == 8  # the original is unchanged
    assert override.with_agent_block("coder", None).for_agent("coder").critical_threshold == 20
    budget_off = replace(config, global_rules={"loopBudget": {"usd": None}})
    assert budget_off.for_agent("anyone").rules.get(loop_budget.SECTION).usd is None
    assert config.for_agent("anyone").rules.get(loop_budget.SECTION).usd == 3.0


# -- the revision ------------------------------------------------------------------------------


@pytest.mark.parametrize(("revision", "newest"), [("2026-05", False), ("2026-08", True)])
def test_the_revision_is_carried_by_the_settings_and_every_resolved_agent(
    revision: str, newest: bool
) -> None:
    config = parse_config_value(
        {"loopwatch": {"openclawRevision": revision}, "agents": {"entries": {"a": {}}}}
    )
    assert config.settings.revision == revision
    assert (config.settings.revision == "2026-08") is newest
    for resolved in (config.default, config.for_agent("a"), config.for_agent("unknown")):
        assert resolved.revision == revision
        assert (resolved.revision == "2026-08") is newest


def test_the_default_revision_is_2026_08() -> None:
    config = parse_config_text("{tools: {loopDetection: {enabled: true}}}")
    assert config.settings.revision == "2026-08"
    assert config.for_agent("x").revision == "2026-08"
    assert FleetConfig.enabled_default().for_agent("x").revision == "2026-08"


# -- every problem with its path ----------------------------------------------------------------


def test_every_problem_of_a_bad_loopwatch_block_is_listed_with_its_path() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config_value(
            {
                "loopwatch": {
                    "digest": "md5",
                    "criticalBlocksBeforeAbort": -1,
                    "recoveryAbort": "no",
                    "observeOnly": 1,
                    "providerSendTools": ["send", ""],
                    "seenEventIds": 255,
                    "maxEventBytes": 0,
                    "openclawRevision": "2027-01",
                    "churnStaleAfterS": 1.5,
                    "colour": "red",
                    "detectors": {
                        "runNoProgress": {"enabled": "yes", "windowSize": 1001},
                        "editUndo": {"criticalThreshold": True},
                        "loopBudget": {"usd": 0},
                        "toolOutage": {"bucketSeconds": 0, "block": "sometimes"},
                        "systemicLoop": {"minShare": 1.5, "windowBuckets": 49},
                        "vibes": {},
                    },
                }
            }
        )
    assert [(p.path, p.message) for p in caught.value.problems] == [
        ("loopwatch.detectors.runNoProgress.enabled", "must be a boolean"),
        ("loopwatch.detectors.runNoProgress.windowSize", "must be a positive integer of at most 1000"),
        ("loopwatch.detectors.editUndo.criticalThreshold", "must be a positive integer"),
        ("loopwatch.detectors.loopBudget.usd", "must be a positive number (USD) or null"),
        ("loopwatch.detectors.toolOutage.bucketSeconds", "must be a positive integer"),
        ("loopwatch.detectors.toolOutage.block", "must be a boolean"),
        ("loopwatch.detectors.systemicLoop.minShare", "must be a number above 0 and at most 1"),
        ("loopwatch.detectors.systemicLoop.windowBuckets", "must be a positive integer of at most 48"),
        (
            "loopwatch.detectors.vibes",
            "unknown rule (known: runNoProgress, editUndo, loopBudget, sameCallStreak, callCycle, "
            "sameFailure, toolOutage, systemicLoop, delegation)",
        ),
        ("loopwatch.digest", 'must be "xxh3" or "sha256"'),
        ("loopwatch.criticalBlocksBeforeAbort", "must be a non-negative integer"),
        ("loopwatch.recoveryAbort", "must be a boolean"),
        ("loopwatch.observeOnly", "must be a boolean"),
        ("loopwatch.providerSendTools", "must be a list of non-empty strings"),
        ("loopwatch.seenEventIds", "must be an integer of at least 256"),
        ("loopwatch.maxEventBytes", "must be a positive integer"),
        ("loopwatch.openclawRevision", 'must be "2026-08" or "2026-05"'),
        ("loopwatch.churnStaleAfterS", "must be a non-negative integer"),
        (
            "loopwatch.colour",
            "unknown key (known: digest, criticalBlocksBeforeAbort, recoveryAbort, observeOnly, "
            "providerSendTools, seenEventIds, maxEventBytes, openclawRevision, churnStaleAfterS, "
            "detectors, preset)",
        ),
    ]


def test_ordering_problems_are_reported_with_the_other_problems_of_other_rules() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config_value(
            {"loopwatch": {"detectors": {"editUndo": {"warningThreshold": 5}, "loopBudget": {"usd": "x"}}}}
        )
    assert [str(p) for p in caught.value.problems] == [
        "loopwatch.detectors.editUndo.warningThreshold: must be lower than criticalThreshold",
        "loopwatch.detectors.loopBudget.usd: must be a positive number (USD) or null",
    ]


def test_a_section_that_is_not_an_object_is_one_problem() -> None:
    bad: object
    for bad in ([], "x", 3):
        with pytest.raises(ConfigError) as caught:
            parse_config_value({"loopwatch": {"detectors": {"runNoProgress": bad}}})
        assert [str(p) for p in caught.value.problems] == [
            "loopwatch.detectors.runNoProgress: must be an object"
        ]
    assert [str(p) for p in parse_settings([])[1]] == ["loopwatch: must be an object"]


def test_integers_are_json_numbers_and_booleans_are_not_numbers() -> None:
    config = parse_config_value(
        {"loopwatch": {"seenEventIds": 512.0, "detectors": {"runNoProgress": {"warningThreshold": 25.0}}}}
    )
    assert config.settings.seen_event_ids == 512
    assert type(config.settings.seen_event_ids) is int
    assert config.for_agent("x").rules.get(run_no_progress.SECTION).warning_threshold == 25
    assert type(config.for_agent("x").rules.get(run_no_progress.SECTION).warning_threshold) is int
    with pytest.raises(ConfigError, match=r"loopwatch\.seenEventIds: must be an integer of at least 256"):
        parse_config_value({"loopwatch": {"seenEventIds": 300.5}})
    with pytest.raises(ConfigError, match=r"loopwatch\.maxEventBytes: must be a positive integer"):
        parse_config_value({"loopwatch": {"maxEventBytes": True}})
    budget = parse_config_value({"loopwatch": {"detectors": {"loopBudget": {"usd": 2}}}})
    assert budget.for_agent("x").rules.get(loop_budget.SECTION).usd == 2.0


def test_settings_given_over_a_base_keep_the_base_s_other_values() -> None:
    base = DetectorSettings(digest="sha256", observe_only=True)
    parsed, problems = parse_settings({"providerSendTools": ["b", "a"]}, base=base)
    assert problems == []
    assert (parsed.digest, parsed.observe_only, parsed.provider_send_tools) == (
        "sha256",
        True,
        frozenset({"a", "b"}),
    )
    assert parsed.as_dict()["providerSendTools"] == ["a", "b"]
    bad, problems = parse_settings({"digest": "md5"}, base=base)
    assert bad is base
    assert [str(p) for p in problems] == ['loopwatch.digest: must be "xxh3" or "sha256"']


# -- defaults in one place ---------------------------------------------------------------------


def test_the_defaults_come_from_the_structs() -> None:
    documented: dict[str, Any] = {
        "runNoProgress": {"enabled": False, "warningThreshold": 20, "windowSize": 30},
        "editUndo": {"enabled": False, "warningThreshold": 3, "criticalThreshold": 5},
        "loopBudget": {"usd": None},
        "sameCallStreak": {
            "enabled": False,
            "warningThreshold": 3,
            "criticalThreshold": 5,
            "exemptTools": [],
        },
        "callCycle": {
            "enabled": False,
            "maxPeriod": 5,
            "warningThreshold": 2,
            "criticalThreshold": 3,
            "exemptTools": [],
        },
        "sameFailure": {
            "enabled": False,
            "warningThreshold": 3,
            "criticalThreshold": 5,
            "sweepWarningThreshold": 5,
            "sweepCriticalThreshold": 8,
            "exemptTools": [],
        },
        "toolOutage": {
            "enabled": True,
            "bucketSeconds": 60,
            "windowBuckets": 5,
            "minRuns": 5,
            "minDistinctArgs": 3,
            "block": False,
            "blockSeconds": 60,
        },
        "systemicLoop": {
            "enabled": True,
            "bucketSeconds": 300,
            "windowBuckets": 12,
            "minRuns": 10,
            "minShare": 0.2,
        },
        "delegation": {
            "enabled": False,
            "maxDepth": 3,
            "maxRuns": 50,
            "minRuns": 3,
            "chainWarningThreshold": 10,
            "chainCriticalThreshold": 20,
            "block": False,
            "chainTtlS": 3600,
        },
    }
    assert msgspec.to_builtins(Detectors.assembled()()) == documented
    assert FLEET_RULES == ("toolOutage", "systemicLoop", "delegation")
    assert OwnRules() == DEFAULT_OWN_RULES == resolve_rules(None) == resolve_rules({})
    assert DEFAULT_OWN_RULES.as_dict() == {
        k: documented[k]
        for k in ("runNoProgress", "editUndo", "loopBudget", "sameCallStreak", "callCycle", "sameFailure")
    }
    assert fleet_rules(None) == FleetRules() == FleetRules(ToolOutageRule(), SystemicLoopRule())
    explicit = parse_config_value({"loopwatch": {"detectors": documented}})
    assert explicit.for_agent("x").rules == DEFAULT_OWN_RULES
    assert fleet_rules(explicit.global_rules) == FleetRules()


def test_settings_file_names_are_the_camel_case_field_names() -> None:
    settings = DetectorSettings()
    assert msgspec.json.decode(msgspec.json.encode(settings), type=DetectorSettings) == settings
    assert settings.as_dict() == {
        "digest": "xxh3",
        "criticalBlocksBeforeAbort": 1,
        "recoveryAbort": True,
        "observeOnly": False,
        "providerSendTools": [],
        "seenEventIds": 256,
        "maxEventBytes": 1_048_576,
        "openclawRevision": "2026-08",
        "churnStaleAfterS": 300,
    }


def test_unvalidated_rules_handed_to_a_config_are_refused_with_their_path() -> None:
    with pytest.raises(ConfigError, match=r"loopwatch\.detectors\.editUndo\.enabled: must be a boolean"):
        FleetConfig(global_rules={"editUndo": {"enabled": "on"}})
