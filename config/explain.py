"""What the runtime makes of a config: each agent's effective block and why values differ.

Pure: takes a :class:`FleetConfig`, returns data for ``loopwatch check-config`` to print.
Each agent's preset (its own, else the global one) is reported as named, with the dated
version it stands for; the preset's rules (``sameCallStreak``, ``callCycle``, ``sameFailure``)
get a note each, on or turned off by the file, with their thresholds, their exempt tools and
which of their keys the file set over the preset's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loopwatch.config.fleet import FleetConfig
from loopwatch.config.loop_detection import DEFAULTS, RawBlock, resolve
from loopwatch.config.own_rules import OwnRules
from loopwatch.config.presets import preset_named

__all__ = ["AgentReport", "explain", "preset_report"]


@dataclass(frozen=True)
class AgentReport:
    agent: str
    effective: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    #: the agent's preset (:func:`preset_report`), ``None`` when neither it nor the file names one
    preset: dict[str, str] | None = None


def preset_report(name: str | None) -> dict[str, str] | None:
    """A preset as named (``name``), the dated version it stands for, and what it turns on."""
    if name is None:
        return None
    found = preset_named(name)
    return {"name": name, "version": found.name, "summary": found.summary}


def _origin(
    key: str, global_block: RawBlock | None, agent_block: RawBlock | None, preset: str | None = None
) -> str:
    if agent_block is not None and key in agent_block:
        return "agent"
    if global_block is not None and key in global_block:
        return "global"
    if preset is not None and key in preset_named(preset).block:
        return f"preset {preset_named(preset).name}"
    return "default"


def _notes(agent: str, config: FleetConfig) -> list[str]:
    merged = config.merged_block(agent) or {}
    resolved = resolve(merged)
    agent_block = config.agent_blocks.get(agent)
    notes: list[str] = []
    if merged.get("enabled") is not True:
        state = "explicitly false" if merged.get("enabled") is False else "not set"
        notes.append(
            f"enabled is {state}: rolling detection is off for this agent"
            + ("; the post-compaction guard still runs" if merged.get("enabled") is None else "")
        )
    raised = {
        "criticalThreshold": (resolved.critical_threshold, "warningThreshold"),
        "globalCircuitBreakerThreshold": (resolved.global_circuit_breaker_threshold, "criticalThreshold"),
    }
    for key, (value, below) in raised.items():
        given = merged.get(key, DEFAULTS[key])
        if given != value:
            notes.append(
                f"{key}: {given} ({_origin(key, config.global_block, agent_block, config.preset_of(agent))}) "
                f"raised to "
                f"{value}, one above {below}"
            )
    for key in (
        "historySize",
        "warningThreshold",
        "unknownToolThreshold",
        "criticalThreshold",
        "globalCircuitBreakerThreshold",
        "enabled",
    ):
        if (
            agent_block is not None
            and key in agent_block
            and config.global_block
            and key in config.global_block
        ):
            notes.append(
                f"{key}: the agent's {agent_block[key]} overrides the global {config.global_block[key]}"
            )
    return notes


def _rules_notes(agent: str, config: FleetConfig) -> list[str]:
    """What loopwatch's own rules do for this agent, in words."""
    rules = config.for_agent(agent).rules
    notes: list[str] = []
    if rules.run_no_progress:
        notes.append(
            f"runNoProgress on: warns after {rules.run_no_progress_warning} repeated results across tools, "
            f"blocks after {rules.run_no_progress_window}"
        )
    if rules.edit_undo:
        notes.append(
            f"editUndo on: warns when a file returns to an earlier version {rules.edit_undo_warning} times, "
            f"blocks at {rules.edit_undo_critical}"
        )
    if rules.loop_budget_usd is not None:
        budget = rules.loop_budget_usd
        notes.append(
            f"loopBudget ${budget:.2f}: a run's spend from its first verdict on is blocked at ${budget:.2f} "
            f"and aborted at ${2 * budget:.2f}"
        )
    if agent in config.agent_rules:
        notes.append("loopwatch.detectors: this agent's own settings merged over the global ones")
    return notes + _preset_rules_notes(agent, config, rules)


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _exempt(tools: frozenset[str]) -> str:
    return f"exemptTools: {', '.join(sorted(tools))}" if tools else "no tool exempt (exemptTools: [])"


#: the agents preset's rules, in the order the notes give them
_PRESET_RULES = ("sameCallStreak", "callCycle", "sameFailure")


def _preset_rule(rule: str, r: OwnRules) -> tuple[bool, str]:
    """Whether one of the preset's rules is on, and what its resolved values make it do."""
    if rule == "sameCallStreak":
        return r.same_call_streak, (
            f"warns at the {_ordinal(r.same_call_streak_warning)} same call (tool and arguments) in a "
            f"row, blocks the {_ordinal(r.same_call_streak_critical)}; {_exempt(r.same_call_streak_exempt)}"
        )
    if rule == "callCycle":
        return r.call_cycle, (
            f"the same 2 to {r.call_cycle_max_period} calls going round in the same order: warns at the "
            f"{_ordinal(r.call_cycle_warning)} round, blocks at the {_ordinal(r.call_cycle_critical)}; "
            f"{_exempt(r.call_cycle_exempt)}"
        )
    return r.same_failure, (
        f"after the {_ordinal(r.same_failure_warning)} outcome in a row failing the same way the next "
        f"call is warned, after the {_ordinal(r.same_failure_critical)} blocked; after a sweep's "
        f"{_ordinal(r.same_failure_sweep_warning)} (nothing found, argument after argument) warned, "
        f"after its {_ordinal(r.same_failure_sweep_critical)} blocked; {_exempt(r.same_failure_exempt)}"
    )


def _preset_rules_notes(agent: str, config: FleetConfig, rules: OwnRules) -> list[str]:
    """One note per rule of the agents preset that is on, or that the file turned off over a
    preset turning it on: its values, and the keys the file set over the preset's."""
    name = config.preset_of(agent)
    preset = preset_named(name) if name is not None else None
    fleet = preset_named(config.global_preset) if config.global_preset is not None else None
    own = config.agent_rules.get(agent) or {}
    shared = config.global_rules or {}
    notes: list[str] = []
    for rule in _PRESET_RULES:
        on, words = _preset_rule(rule, rules)
        from_preset = preset is not None and preset.rules.get(rule, {}).get("enabled") is True
        from_fleet = fleet is not None and fleet.rules.get(rule, {}).get("enabled") is True
        if not on and not from_preset:
            if from_fleet and name != config.global_preset:
                why = f"this agent's preset {name}" if name is not None else "this agent"
                notes.append(
                    f"{rule} off: {why} does not turn it on (the global preset {config.global_preset} does)"
                )
            continue
        set_here = [
            f"{key} ({'this agent' if key in own.get(rule, {}) else 'loopwatch.detectors'})"
            for key in sorted({*own.get(rule, {}), *shared.get(rule, {})})
        ]
        source = f"preset {preset.name}" if preset is not None and from_preset else "loopwatch.detectors"
        if not on:
            where = (
                "this agent's loopwatch.detectors"
                if "enabled" in own.get(rule, {})
                else "loopwatch.detectors"
            )
            notes.append(f"{rule} off: {where} turns off what preset {name} turns on")
            continue
        tail = f"; set by the file: {', '.join(set_here)}" if set_here and from_preset else ""
        notes.append(f"{rule} on ({source}): {words}{tail}")
    return notes


def explain(config: FleetConfig) -> list[AgentReport]:
    """The default agent's effective config, then every agent with its own block or rules."""
    named = set(config.agents) - {"default"}
    reports = []
    for agent in ["default", *sorted(named)]:
        effective = config.for_agent(agent).as_openclaw()
        effective["loopwatch"] = {"detectors": config.for_agent(agent).rules.as_dict()}
        notes = _notes(agent, config) + _rules_notes(agent, config)
        reports.append(AgentReport(agent, effective, notes, preset_report(config.preset_of(agent))))
    return reports
