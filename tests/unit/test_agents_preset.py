"""The agents preset (config/presets.py, docs/real-loops.md): what ``loopwatch.preset`` resolves
to, globally and per agent, laid under the file's own keys, and every problem it can have.

Expected values are the ones docs/real-loops.md and config/presets.py's docstring state, written
out here by hand."""

from __future__ import annotations

from typing import Any

import pytest

from loopwatch.config import (
    ConfigError,
    FleetConfig,
    ResolvedLoopDetection,
    parse_config_text,
    parse_config_value,
)
from loopwatch.config.own_rules import DEFAULT_OWN_RULES, OwnRules
from loopwatch.config.presets import PRESETS
from loopwatch.config.rule_sections import rule_set
from loopwatch.config.sections import DELEGATION
from loopwatch.detectors.rules import (
    call_cycle,
    edit_undo,
    loop_budget,
    run_no_progress,
    same_call_streak,
    same_failure,
)

# -- what the docs say the preset is ---------------------------------------------------------

#: docs/real-loops.md, the three tables: every rule on, at these thresholds, no tool exempt
DOCUMENTED_RULES: dict[str, dict[str, Any]] = {
    "sameCallStreak": {"enabled": True, "warningThreshold": 3, "criticalThreshold": 5, "exemptTools": []},
    "callCycle": {
        "enabled": True,
        "maxPeriod": 5,
        "warningThreshold": 2,
        "criticalThreshold": 3,
        "exemptTools": [],
    },
    "sameFailure": {
        "enabled": True,
        "warningThreshold": 3,
        "criticalThreshold": 5,
        "sweepWarningThreshold": 5,
        "sweepCriticalThreshold": 8,
        "exemptTools": [],
    },
}
OWN_RULES = tuple(DOCUMENTED_RULES)


def parsed(document: dict[str, Any]) -> FleetConfig:
    return parse_config_value(document)


def own_rules(rules: OwnRules) -> dict[str, Any]:
    """The three rules of the preset, under their file names."""
    encoded = rules.as_dict()
    return {name: encoded[name] for name in OWN_RULES}


def off_rules() -> dict[str, Any]:
    """The three rules as a file that names no preset has them: off, at the same thresholds."""
    return {name: {**keys, "enabled": False} for name, keys in DOCUMENTED_RULES.items()}


def assert_openclaw_thresholds(resolved: ResolvedLoopDetection, enabled: bool | None) -> None:
    """docs/real-loops.md: "OpenClaw's thresholds are unchanged (warning 10, critical 20, global 30)"."""
    assert resolved.enabled_raw is enabled
    assert (
        resolved.warning_threshold,
        resolved.critical_threshold,
        resolved.global_circuit_breaker_threshold,
    ) == (10, 20, 30)


def assert_everything_else_at_its_default(rules: OwnRules) -> None:
    """The preset turns on its three rules and nothing else of loopwatch's own."""
    assert not rules.get(run_no_progress.SECTION).enabled
    assert not rules.get(edit_undo.SECTION).enabled
    assert rules.get(loop_budget.SECTION).usd is None
    assert not rules.get(DELEGATION).enabled


# -- the preset itself -----------------------------------------------------------------------


def test_each_rule_sets_keys_of_dated_presets_only() -> None:
    """A rule's section names the dated presets that turn it on (an alias would move with the
    next release, and a preset is pinned)."""
    named = {section.key: set(section.presets) for section in rule_set().sections if section.presets}
    assert named == {key: {"agents-2026-12"} for key in OWN_RULES}
    assert set().union(*named.values()) <= set(PRESETS)


@pytest.mark.parametrize("name", ["agents", "agents-2026-12"])
def test_the_agents_preset_resolves_to_the_documented_rules_and_thresholds(name: str) -> None:
    fleet = parsed({"loopwatch": {"preset": name}})
    resolved = fleet.for_agent("anyone")
    rules = resolved.rules
    assert own_rules(rules) == DOCUMENTED_RULES
    # the same, field by field, on the flat resolved rules the step reads
    assert (
        rules.get(same_call_streak.SECTION).enabled,
        rules.get(same_call_streak.SECTION).warning_threshold,
        rules.get(same_call_streak.SECTION).critical_threshold,
    ) == (
        True,
        3,
        5,
    )
    assert rules.get(same_call_streak.SECTION).exempt_tools == frozenset()
    assert (
        rules.get(call_cycle.SECTION).enabled,
        rules.get(call_cycle.SECTION).max_period,
        rules.get(call_cycle.SECTION).warning_threshold,
        rules.get(call_cycle.SECTION).critical_threshold,
    ) == (True, 5, 2, 3)
    assert rules.get(call_cycle.SECTION).exempt_tools == frozenset()
    assert (
        rules.get(same_failure.SECTION).enabled,
        rules.get(same_failure.SECTION).warning_threshold,
        rules.get(same_failure.SECTION).critical_threshold,
        rules.get(same_failure.SECTION).sweep_warning_threshold,
        rules.get(same_failure.SECTION).sweep_critical_threshold,
    ) == (True, 3, 5, 5, 8)
    assert rules.get(same_failure.SECTION).exempt_tools == frozenset()
    assert rules != DEFAULT_OWN_RULES
    assert_everything_else_at_its_default(rules)
    # OpenClaw's detectors on, at OpenClaw's own thresholds
    assert_openclaw_thresholds(resolved, True)
    assert resolved.enabled
    assert (resolved.generic_repeat, resolved.known_poll_no_progress, resolved.ping_pong) == (
        True,
        True,
        True,
    )
    assert fleet.warnings == ()  # "preset" is a key loopwatch reads, not a typo


def test_agents_is_the_same_as_agents_2026_12_globally_and_per_agent() -> None:
    def document(name: str) -> dict[str, Any]:
        return {
            "tools": {"loopDetection": {"historySize": 40}},
            "loopwatch": {"preset": name, "detectors": {"callCycle": {"maxPeriod": 3}}},
            "agents": {
                "list": [{"id": "coder", "loopwatch": {"preset": name}}],
                "entries": {"ops": {"loopwatch": {"detectors": {"sameFailure": {"criticalThreshold": 6}}}}},
            },
        }

    alias, pinned = parsed(document("agents")), parsed(document("agents-2026-12"))
    for agent in ("coder", "ops", "anyone"):
        assert alias.for_agent(agent) == pinned.for_agent(agent)
    assert alias.default == pinned.default
    assert alias.for_agent("coder").rules.get(call_cycle.SECTION).max_period == 3  # the file's key, both ways
    assert alias.for_agent("ops").rules.get(same_failure.SECTION).critical_threshold == 6
    # and the alias is not simply no preset at all
    assert alias.default.rules != DEFAULT_OWN_RULES


def test_the_documented_example_gives_every_agent_the_preset_but_the_poller() -> None:
    fleet = parse_config_text(
        """{
          "loopwatch": { "preset": "agents" },                      // every agent
          "agents": { "list": [
            { "id": "poller", "loopwatch": { "preset": "openclaw" } }  // one agent on OpenClaw's rules only
          ] }
        }"""
    )
    assert own_rules(fleet.for_agent("coder").rules) == DOCUMENTED_RULES
    assert fleet.for_agent("coder").enabled
    poller = fleet.for_agent("poller")
    assert poller.rules == DEFAULT_OWN_RULES
    assert poller == parsed({}).for_agent("poller")  # exactly what a file without the preset gives
    assert not poller.enabled
    assert (fleet.preset_of("poller"), fleet.preset_of("coder"), fleet.preset_of(None)) == (
        "openclaw",
        "agents",
        "agents",
    )


# -- laid under the file's own keys ----------------------------------------------------------


def test_a_global_file_key_wins_over_the_preset_key_by_key() -> None:
    fleet = parsed(
        {
            "tools": {"loopDetection": {"enabled": False, "warningThreshold": 12}},
            "loopwatch": {
                "preset": "agents",
                "detectors": {
                    "sameCallStreak": {"criticalThreshold": 7},
                    "callCycle": {"enabled": False},
                    "sameFailure": {"exemptTools": ["poll"], "sweepCriticalThreshold": 9},
                    "editUndo": {"enabled": True},
                },
            },
        }
    )
    resolved = fleet.default
    assert fleet.for_agent("anyone") == resolved
    # the block: the file's enabled and warning threshold win; the preset's enabled is gone
    assert resolved.enabled_raw is False
    assert (resolved.warning_threshold, resolved.critical_threshold) == (12, 20)
    rules = resolved.rules
    # sameCallStreak: the preset's enabled and warning, the file's critical
    assert (
        rules.get(same_call_streak.SECTION).enabled,
        rules.get(same_call_streak.SECTION).warning_threshold,
        rules.get(same_call_streak.SECTION).critical_threshold,
    ) == (
        True,
        3,
        7,
    )
    # callCycle: the file turned it off, the preset's other keys stay
    assert (
        rules.get(call_cycle.SECTION).enabled,
        rules.get(call_cycle.SECTION).max_period,
        rules.get(call_cycle.SECTION).warning_threshold,
    ) == (False, 5, 2)
    # sameFailure: the preset's, with the file's exempt tool and sweep critical
    assert (
        rules.get(same_failure.SECTION).enabled,
        rules.get(same_failure.SECTION).warning_threshold,
        rules.get(same_failure.SECTION).critical_threshold,
        rules.get(same_failure.SECTION).sweep_warning_threshold,
        rules.get(same_failure.SECTION).sweep_critical_threshold,
    ) == (True, 3, 5, 5, 9)
    assert rules.get(same_failure.SECTION).exempt_tools == frozenset({"poll"})
    # a rule the preset does not name is the file's alone
    assert rules.get(edit_undo.SECTION).enabled
    assert not rules.get(run_no_progress.SECTION).enabled


def test_an_agent_s_file_key_wins_over_the_preset_for_that_agent_only() -> None:
    fleet = parsed(
        {
            "loopwatch": {"preset": "agents"},
            "agents": {
                "list": [
                    {
                        "id": "coder",
                        "tools": {"loopDetection": {"criticalThreshold": 25}},
                        "loopwatch": {"detectors": {"sameFailure": {"enabled": False}}},
                    }
                ],
                "entries": {
                    "ops": {"loopwatch": {"detectors": {"sameCallStreak": {"exemptTools": ["poll"]}}}},
                },
            },
        }
    )
    coder = fleet.for_agent("coder")
    assert not coder.rules.get(same_failure.SECTION).enabled
    assert (
        coder.rules.get(same_failure.SECTION).warning_threshold,
        coder.rules.get(same_failure.SECTION).critical_threshold,
    ) == (3, 5)
    assert coder.rules.get(same_call_streak.SECTION).enabled
    assert coder.rules.get(call_cycle.SECTION).enabled
    assert coder.enabled  # the preset's enabled, under the agent's block
    assert (coder.warning_threshold, coder.critical_threshold) == (10, 25)
    ops = fleet.for_agent("ops")
    assert ops.rules.get(same_call_streak.SECTION).enabled
    assert ops.rules.get(same_call_streak.SECTION).exempt_tools == frozenset({"poll"})
    assert own_rules(ops.rules)["callCycle"] == DOCUMENTED_RULES["callCycle"]
    assert own_rules(ops.rules)["sameFailure"] == DOCUMENTED_RULES["sameFailure"]
    # everyone else: the preset as it is
    assert own_rules(fleet.for_agent("anyone").rules) == DOCUMENTED_RULES
    assert_openclaw_thresholds(fleet.for_agent("anyone"), True)


def test_an_agent_s_file_keys_also_win_over_the_agent_s_own_preset_and_the_global_keys_apply() -> None:
    fleet = parsed(
        {
            "tools": {"loopDetection": {"warningThreshold": 8}},
            "loopwatch": {"detectors": {"sameCallStreak": {"criticalThreshold": 7}}},
            "agents": {
                "list": [
                    {
                        "id": "coder",
                        "loopwatch": {"preset": "agents", "detectors": {"callCycle": {"maxPeriod": 2}}},
                    }
                ]
            },
        }
    )
    coder = fleet.for_agent("coder")
    assert (
        coder.rules.get(same_call_streak.SECTION).enabled,
        coder.rules.get(same_call_streak.SECTION).critical_threshold,
    ) == (True, 7)
    assert (coder.rules.get(call_cycle.SECTION).enabled, coder.rules.get(call_cycle.SECTION).max_period) == (
        True,
        2,
    )
    assert coder.rules.get(same_failure.SECTION).enabled
    assert (coder.enabled_raw, coder.warning_threshold) == (True, 8)
    # the others have no preset: the global file keys alone (the streak's critical, rule off)
    other = fleet.for_agent("other")
    assert (
        other.rules.get(same_call_streak.SECTION).enabled,
        other.rules.get(same_call_streak.SECTION).critical_threshold,
    ) == (False, 7)
    assert not other.rules.get(call_cycle.SECTION).enabled
    assert not other.rules.get(same_failure.SECTION).enabled
    assert (other.enabled_raw, other.warning_threshold) == (None, 8)


# -- a per-agent preset replaces the global one, for that agent only ----------------------------


def test_a_per_agent_preset_replaces_the_global_one_for_that_agent_only() -> None:
    fleet = parsed(
        {
            "loopwatch": {"preset": "agents"},
            "agents": {
                "list": [{"id": "poller", "loopwatch": {"preset": "openclaw"}}],
                "entries": {"pinned": {"loopwatch": {"preset": "agents-2026-12"}}},
            },
        }
    )
    assert fleet.for_agent("poller").rules == DEFAULT_OWN_RULES
    assert fleet.for_agent("poller").enabled_raw is None  # the preset's enabled is not laid under it
    for agent in ("pinned", "anyone"):
        assert own_rules(fleet.for_agent(agent).rules) == DOCUMENTED_RULES
        assert fleet.for_agent(agent).enabled


def test_a_per_agent_preset_under_no_global_one_turns_the_rules_on_for_that_agent_only() -> None:
    fleet = parsed(
        {
            "tools": {"loopDetection": {"enabled": True}},
            "loopwatch": {"preset": "openclaw"},
            "agents": {"entries": {"coder": {"loopwatch": {"preset": "agents"}}}},
        }
    )
    assert own_rules(fleet.for_agent("coder").rules) == DOCUMENTED_RULES
    assert fleet.for_agent("other").rules == DEFAULT_OWN_RULES
    assert fleet.default.rules == DEFAULT_OWN_RULES
    assert fleet.for_agent("other").enabled  # the file's own block


def test_for_agent_of_an_agent_with_only_a_preset() -> None:
    for where in (
        {"list": [{"id": "solo", "loopwatch": {"preset": "agents"}}]},
        {"entries": {"solo": {"loopwatch": {"preset": "agents"}}}},
    ):
        fleet = parsed({"agents": where})
        assert "solo" in fleet.agents
        solo = fleet.for_agent("solo")
        assert own_rules(solo.rules) == DOCUMENTED_RULES
        assert_openclaw_thresholds(solo, True)
        # every other agent gets the default: no preset, nothing enabled
        assert fleet.for_agent("other") == fleet.default
        assert fleet.default.rules == DEFAULT_OWN_RULES
        assert fleet.default.enabled_raw is None


# -- "openclaw" and no preset ----------------------------------------------------------------

DOCUMENTS_WITHOUT_PRESET: list[dict[str, Any]] = [
    {},
    {"tools": {"loopDetection": {"enabled": True}}},
    {
        "tools": {
            "loopDetection": {"enabled": True, "warningThreshold": 6, "detectors": {"pingPong": False}}
        },
        "loopwatch": {
            "detectors": {"editUndo": {"enabled": True}, "sameCallStreak": {"criticalThreshold": 9}}
        },
        "agents": {
            "list": [{"id": "coder", "tools": {"loopDetection": {"criticalThreshold": 12}}}],
            "entries": {"ops": {"loopwatch": {"detectors": {"callCycle": {"enabled": True}}}}},
        },
    },
]


@pytest.mark.parametrize("document", DOCUMENTS_WITHOUT_PRESET)
def test_the_openclaw_preset_is_the_same_as_no_preset(document: dict[str, Any]) -> None:
    plain = parsed(document)
    loopwatch = {**document.get("loopwatch", {}), "preset": "openclaw"}
    named = parsed({**document, "loopwatch": loopwatch})
    assert named.default == plain.default
    for agent in ("coder", "ops", "anyone"):
        assert named.for_agent(agent) == plain.for_agent(agent)
    # and per agent: an agent naming "openclaw" is resolved as if it named nothing
    per_agent = parsed({**document, "agents": {"entries": {"solo": {"loopwatch": {"preset": "openclaw"}}}}})
    assert per_agent.for_agent("solo") == per_agent.default


@pytest.mark.parametrize("document", DOCUMENTS_WITHOUT_PRESET)
def test_a_config_naming_no_preset_resolves_exactly_as_before(document: dict[str, Any]) -> None:
    fleet = parsed(document)
    assert fleet.global_preset is None
    assert fleet.agent_presets == {}
    for agent in ("coder", "ops", "anyone"):
        rules = fleet.for_agent(agent).rules
        if "loopwatch" not in document:
            assert rules == DEFAULT_OWN_RULES
        # the preset's rules are off, at their documented thresholds, whatever else is set
        encoded = own_rules(rules)
        expected = off_rules()
        if agent == "ops" and "loopwatch" in document:
            expected["callCycle"]["enabled"] = True  # the agent's own file key
        if "loopwatch" in document:
            expected["sameCallStreak"]["criticalThreshold"] = 9  # the file's own key
        assert encoded == expected
    if not document:
        assert fleet.default.rules == DEFAULT_OWN_RULES
        assert fleet.default.enabled_raw is None


def test_no_preset_leaves_the_enabled_default_exactly_as_it_was() -> None:
    plain = parsed({"tools": {"loopDetection": {"enabled": True}}})
    assert plain.default == FleetConfig.enabled_default().default
    assert plain.default.rules == DEFAULT_OWN_RULES
    assert own_rules(DEFAULT_OWN_RULES) == off_rules()


# -- problems --------------------------------------------------------------------------------


def problems_of(document: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as refused:
        parse_config_value(document)
    return [str(problem) for problem in refused.value.problems]


def only(problems: list[str], path: str) -> str:
    found = [problem for problem in problems if problem.startswith(f"{path}: ")]
    assert len(found) == 1, (path, problems)
    return found[0]


def test_an_unknown_preset_and_a_non_string_are_reported_with_their_paths_beside_every_other_problem() -> (
    None
):
    problems = problems_of(
        {
            "tools": {"loopDetection": {"warningThreshold": "ten"}},
            "loopwatch": {"preset": "agent", "digest": "md5"},
            "agents": {
                "list": [
                    {"id": "a", "loopwatch": {"preset": 7}},
                    {"id": "b", "loopwatch": {"preset": "agents-2027-01", "colour": "red"}},
                    {"id": "c", "loopwatch": {"preset": None}},
                    {"id": "d", "loopwatch": {"preset": ["agents"]}},
                    {"id": "e", "loopwatch": {"preset": "agents"}},
                ],
                "entries": {
                    "f": {"loopwatch": {"preset": "AGENTS"}},
                    "e": {"loopwatch": {"preset": "openclaw"}},
                },
            },
        }
    )
    known = ("agents", "agents-2026-12", "openclaw")
    unknown = only(problems, "loopwatch.preset")
    assert "'agent'" in unknown
    assert all(name in unknown for name in known)
    for path in ("agents.list[0]", "agents.list[2]", "agents.list[3]"):
        message = only(problems, f"{path}.loopwatch.preset")
        assert "string" in message
        assert all(name in message for name in known)
    assert "'agents-2027-01'" in only(problems, "agents.list[1].loopwatch.preset")
    assert "'AGENTS'" in only(problems, "agents.entries.f.loopwatch.preset")  # names are exact
    # the same agent's preset twice
    assert "twice" in only(problems, "agents.entries.e.loopwatch.preset")
    # and the problems that are not the preset's, each once
    only(problems, "tools.loopDetection.warningThreshold")
    only(problems, "loopwatch.digest")
    only(problems, "agents.list[1].loopwatch.colour")
    assert len(problems) == 10, problems


@pytest.mark.parametrize("value", [7, True, None, {"name": "agents"}, ["agents"], ""])
def test_a_preset_that_is_not_a_known_name_is_refused(value: object) -> None:
    problems = problems_of({"loopwatch": {"preset": value}})
    assert len(problems) == 1
    assert problems[0].startswith("loopwatch.preset: ")


@pytest.mark.parametrize("preset_at", ["global", "agent"])
@pytest.mark.parametrize(
    ("agent_rules", "problem"),
    [
        ({"sameCallStreak": {"warningThreshold": 5}}, "sameCallStreak.warningThreshold"),
        ({"sameCallStreak": {"criticalThreshold": 3}}, "sameCallStreak.warningThreshold"),
        ({"callCycle": {"criticalThreshold": 2}}, "callCycle.warningThreshold"),
        ({"sameFailure": {"warningThreshold": 6}}, "sameFailure.warningThreshold"),
        ({"sameFailure": {"sweepCriticalThreshold": 5}}, "sameFailure.sweepWarningThreshold"),
    ],
)
def test_an_agent_s_thresholds_are_ordered_over_the_preset(
    preset_at: str, agent_rules: dict[str, Any], problem: str
) -> None:
    """The preset's other threshold of the pair (warning 3 / critical 5, cycle 2 / 3, sweep 5 / 8)
    is the one the agent's is ordered against."""
    entry: dict[str, Any] = {"id": "coder", "loopwatch": {"detectors": agent_rules}}
    document: dict[str, Any] = {"agents": {"list": [entry]}}
    if preset_at == "global":
        document["loopwatch"] = {"preset": "agents"}
    else:
        entry["loopwatch"]["preset"] = "agents"
    problems = problems_of(document)
    assert len(problems) == 1, problems
    message = only(problems, f"agents.list[0].loopwatch.detectors.{problem}")
    assert "lower than" in message
    assert "merged over loopwatch.detectors" in message


@pytest.mark.parametrize("preset_at", ["global", "agent"])
@pytest.mark.parametrize(
    "agent_rules",
    [
        {"sameCallStreak": {"warningThreshold": 4}},  # under the preset's critical 5
        {"sameCallStreak": {"criticalThreshold": 4}},  # over the preset's warning 3
        {"callCycle": {"criticalThreshold": 4, "maxPeriod": 8}},
        {"sameFailure": {"sweepWarningThreshold": 7}},  # under the preset's sweep critical 8
        {"sameFailure": {"criticalThreshold": 4}},
    ],
)
def test_an_agent_s_single_threshold_in_order_with_the_preset_s_other_is_accepted(
    preset_at: str, agent_rules: dict[str, Any]
) -> None:
    entry: dict[str, Any] = {"id": "coder", "loopwatch": {"detectors": agent_rules}}
    document: dict[str, Any] = {"agents": {"list": [entry]}}
    if preset_at == "global":
        document["loopwatch"] = {"preset": "agents"}
    else:
        entry["loopwatch"]["preset"] = "agents"
    fleet = parsed(document)
    coder = fleet.for_agent("coder").rules
    assert coder != fleet.for_agent("other").rules
    ((rule, keys),) = agent_rules.items()
    encoded = own_rules(coder)[rule]
    assert encoded == {**DOCUMENTED_RULES[rule], **keys}


def test_a_global_threshold_out_of_order_beside_the_preset_is_reported() -> None:
    problems = problems_of(
        {"loopwatch": {"preset": "agents", "detectors": {"callCycle": {"warningThreshold": 3}}}}
    )
    assert len(problems) == 1
    assert "lower than" in only(problems, "loopwatch.detectors.callCycle.warningThreshold")
