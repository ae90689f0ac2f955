"""What the runtime makes of a config: each agent's effective block and why values differ.

Pure: takes a :class:`FleetConfig`, returns data for ``loopwatch check-config`` to print.
Each agent's preset (its own, else the global one) is reported as named, with the dated
version it stands for. Each of loopwatch's own rules says what it does in words (its section's
``explain``, :mod:`config.rule_sections`): a rule no preset turns on gets a note while it is
on; a rule a preset turns on gets one when it is on, or turned off by the file over a preset,
with which of its keys the file set over the preset's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loopwatch.config.fleet import FleetConfig
from loopwatch.config.loop_detection import DEFAULTS, RawBlock, resolve
from loopwatch.config.own_rules import OwnRules
from loopwatch.config.presets import preset_named, preset_rules
from loopwatch.config.rule_sections import rule_set

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
    """What loopwatch's own rules do for this agent, in words: each rule no preset turns on,
    in files' order, while it is on; then the presets' rules (:func:`_preset_rules_notes`)."""
    rules = config.for_agent(agent).rules
    notes: list[str] = []
    for section in rule_set().sections:
        explained = section.explain(rules.get(section))
        if not section.presets and explained is not None:
            how, words = explained
            notes.append(f"{section.key} {how}: {words}")
    if agent in config.agent_rules:
        notes.append("loopwatch.detectors: this agent's own settings merged over the global ones")
    return notes + _preset_rules_notes(agent, config, rules)


def _preset_rules_notes(agent: str, config: FleetConfig, rules: OwnRules) -> list[str]:
    """One note per rule a preset turns on that is on, or that the file turned off over a
    preset turning it on: its values, and the keys the file set over the preset's."""
    name = config.preset_of(agent)
    preset = preset_named(name) if name is not None else None
    from_agent = preset_rules(name) if name is not None else {}
    from_global = preset_rules(config.global_preset) if config.global_preset is not None else {}
    own = config.agent_rules.get(agent) or {}
    shared = config.global_rules or {}
    notes: list[str] = []
    for section in rule_set().sections:
        if not section.presets:
            continue
        rule = section.key
        explained = section.explain(rules.get(section))
        from_preset = from_agent.get(rule, {}).get("enabled") is True
        from_fleet = from_global.get(rule, {}).get("enabled") is True
        if explained is None and not from_preset:
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
        if explained is None:
            where = (
                "this agent's loopwatch.detectors"
                if "enabled" in own.get(rule, {})
                else "loopwatch.detectors"
            )
            notes.append(f"{rule} off: {where} turns off what preset {name} turns on")
            continue
        how, words = explained
        tail = f"; set by the file: {', '.join(set_here)}" if set_here and from_preset else ""
        notes.append(f"{rule} {how} ({source}): {words}{tail}")
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
