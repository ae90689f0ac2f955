"""The fleet-wide rules' settings (spec BEYOND-OPENCLAW F0, F6): ``toolOutage``, ``systemicLoop``
and ``delegation``.

They are read from the global ``loopwatch.detectors`` only (validated in
:mod:`config.own_rules`, which refuses them per agent) and resolved here. Their keys, types,
constraints and defaults are declared once, as the Structs :class:`ToolOutageRule`,
:class:`SystemicLoopRule` and :class:`Delegation` of :mod:`config.sections`: F1 and F2 are on
by default and only publish alerts; fail-fast blocks are off; delegation chains (F6) are off.
This module defines a Struct: it stays interpreted.
"""

from __future__ import annotations

from typing import Any

import msgspec

from loopwatch.config.own_rules import RawRules, decode_rules
from loopwatch.config.sections import FLEET_SECTIONS, Delegation, SystemicLoopRule, ToolOutageRule

__all__ = [
    "Delegation",
    "FleetRules",
    "SystemicLoopRule",
    "ToolOutageRule",
    "as_dict",
    "describe",
    "fleet_rules",
]


class FleetRules(msgspec.Struct, frozen=True, rename="camel"):
    """The fleet-wide rules, resolved (file names: ``toolOutage``, ``systemicLoop``, ``delegation``)."""

    tool_outage: ToolOutageRule = msgspec.field(default_factory=ToolOutageRule)
    systemic_loop: SystemicLoopRule = msgspec.field(default_factory=SystemicLoopRule)
    delegation: Delegation = msgspec.field(default_factory=Delegation)

    @property
    def any(self) -> bool:
        return self.tool_outage.enabled or self.systemic_loop.enabled or self.delegation.enabled


def describe(rules: FleetRules) -> list[str]:
    """What the fleet-wide rules do, in words (``check-config``)."""
    outage, loop = rules.tool_outage, rules.systemic_loop
    lines = []
    if outage.enabled:
        block = (
            f"calls to it are blocked while its last failure is under {outage.block_s} s old"
            if outage.block
            else "alert only (block: false)"
        )
        lines.append(
            f"toolOutage on: a tool failing with one error in {outage.min_runs}+ runs with "
            f"{outage.min_distinct_args}+ argument sets within {outage.bucket_s * outage.window_buckets} s, "
            f"no success since, is an outage; {block}"
        )
    else:
        lines.append("toolOutage off")
    if loop.enabled:
        lines.append(
            f"systemicLoop on: alerts when {loop.min_runs}+ runs of an agent and at least "
            f"{loop.min_share:.0%} of its active runs hit one detector on one tool within "
            f"{loop.window_minutes} min (alert only)"
        )
    else:
        lines.append("systemicLoop off")
    chains = rules.delegation
    if chains.enabled:
        block = (
            "new runs and repeated calls are then blocked" if chains.block else "alert only (block: false)"
        )
        lines.append(
            f"delegation on: runs deeper than {chains.max_depth} are blocked; a chain alerts at "
            f"{chains.max_runs} runs (and 2x, 4x...), and at {chains.chain_warning_threshold} / "
            f"{chains.chain_critical_threshold} calls with the same arguments and result in "
            f"{chains.min_runs}+ of its runs; {block}; a chain is forgotten {chains.chain_ttl_s} s "
            "after its last event"
        )
    else:
        lines.append("delegation off")
    return lines


def as_dict(rules: FleetRules) -> dict[str, Any]:
    """The resolved fleet-wide rules under their file names."""
    encoded: dict[str, Any] = msgspec.to_builtins(rules)
    return encoded


def fleet_rules(global_rules: RawRules | None) -> FleetRules:
    """The resolved fleet-wide rules of a validated global ``loopwatch.detectors`` object."""
    section = decode_rules(global_rules)
    return FleetRules(*(getattr(section, fleet.name) for fleet in FLEET_SECTIONS))
