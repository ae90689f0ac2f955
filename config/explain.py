"""What the runtime makes of a config: each agent's effective block and why values differ.

Pure: takes a :class:`FleetConfig`, returns data for ``loopwatch check-config`` to print.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loopwatch.config.fleet import FleetConfig
from loopwatch.config.loop_detection import DEFAULTS, RawBlock, resolve

__all__ = ["AgentReport", "explain"]


@dataclass(frozen=True)
class AgentReport:
    agent: str
    effective: dict[str, Any]
    notes: list[str] = field(default_factory=list)


def _origin(key: str, global_block: RawBlock | None, agent_block: RawBlock | None) -> str:
    if agent_block is not None and key in agent_block:
        return "agent"
    if global_block is not None and key in global_block:
        return "global"
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
                f"{key}: {given} ({_origin(key, config.global_block, agent_block)}) raised to "
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
    return notes


def explain(config: FleetConfig) -> list[AgentReport]:
    """The default agent's effective config, then every agent with its own block or rules."""
    named = set(config.agents) - {"default"}
    reports = []
    for agent in ["default", *sorted(named)]:
        effective = config.for_agent(agent).as_openclaw()
        effective["loopwatch"] = {"detectors": config.for_agent(agent).rules.as_dict()}
        reports.append(AgentReport(agent, effective, _notes(agent, config) + _rules_notes(agent, config)))
    return reports
