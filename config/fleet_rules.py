"""The fleet-wide rules' settings (spec BEYOND-OPENCLAW F0): ``toolOutage`` and ``systemicLoop``.

They are read from the global ``loopwatch.detectors`` only (validated in
:mod:`config.own_rules`, which refuses them per agent) and resolved here. Their keys, types,
constraints and defaults are declared once, as the Structs :class:`ToolOutageRule` and
:class:`SystemicLoopRule` of :mod:`config.sections`: both rules are on by default and only
publish alerts; fail-fast blocks are off. This module defines a Struct: it stays interpreted.
"""

from __future__ import annotations

from typing import Any

import msgspec

from loopwatch.config.own_rules import RawRules, decode_rules
from loopwatch.config.sections import SystemicLoopRule, ToolOutageRule

__all__ = ["FleetRules", "SystemicLoopRule", "ToolOutageRule", "as_dict", "describe", "fleet_rules"]


class FleetRules(msgspec.Struct, frozen=True, rename="camel"):
    """The fleet-wide rules, resolved (file names: ``toolOutage``, ``systemicLoop``)."""

    tool_outage: ToolOutageRule = msgspec.field(default_factory=ToolOutageRule)
    systemic_loop: SystemicLoopRule = msgspec.field(default_factory=SystemicLoopRule)

    @property
    def any(self) -> bool:
        return self.tool_outage.enabled or self.systemic_loop.enabled


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
    return lines


def as_dict(rules: FleetRules) -> dict[str, Any]:
    """The resolved fleet-wide rules under their file names."""
    encoded: dict[str, Any] = msgspec.to_builtins(rules)
    return encoded


def fleet_rules(global_rules: RawRules | None) -> FleetRules:
    """The resolved fleet-wide rules of a validated global ``loopwatch.detectors`` object."""
    section = decode_rules(global_rules)
    return FleetRules(section.tool_outage, section.systemic_loop)
