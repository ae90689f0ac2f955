"""The fleet-wide rules' settings (spec BEYOND-OPENCLAW F0): ``toolOutage`` and ``systemicLoop``.

They are read from the global ``loopwatch.detectors`` only (validated in
:mod:`config.own_rules`, which refuses them per agent) and resolved here, every key with
its default: both rules are on by default and only publish alerts; fail-fast blocks are off.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loopwatch.config.own_rules import RULES, RawRules

__all__ = ["FleetRules", "SystemicLoopRule", "ToolOutageRule", "as_dict", "describe", "fleet_rules"]


@dataclass(frozen=True, slots=True)
class ToolOutageRule:
    enabled: bool = True
    bucket_s: int = 60
    window_buckets: int = 5
    min_runs: int = 5
    min_distinct_args: int = 3
    block: bool = False
    block_s: int = 60


@dataclass(frozen=True, slots=True)
class SystemicLoopRule:
    enabled: bool = True
    bucket_s: int = 300
    window_buckets: int = 12
    min_runs: int = 10
    min_share: float = 0.2

    @property
    def window_minutes(self) -> int:
        return self.bucket_s * self.window_buckets // 60


@dataclass(frozen=True, slots=True)
class FleetRules:
    tool_outage: ToolOutageRule = ToolOutageRule()
    systemic_loop: SystemicLoopRule = SystemicLoopRule()

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
    outage, loop = rules.tool_outage, rules.systemic_loop
    return {
        "toolOutage": {
            "enabled": outage.enabled,
            "bucketSeconds": outage.bucket_s,
            "windowBuckets": outage.window_buckets,
            "minRuns": outage.min_runs,
            "minDistinctArgs": outage.min_distinct_args,
            "block": outage.block,
            "blockSeconds": outage.block_s,
        },
        "systemicLoop": {
            "enabled": loop.enabled,
            "bucketSeconds": loop.bucket_s,
            "windowBuckets": loop.window_buckets,
            "minRuns": loop.min_runs,
            "minShare": loop.min_share,
        },
    }


def _get(rules: RawRules | None, rule: str, key: str) -> Any:
    block = rules.get(rule) if rules else None
    value = block.get(key) if isinstance(block, dict) else None
    return RULES[rule][key][1] if value is None else value


def fleet_rules(global_rules: RawRules | None) -> FleetRules:
    """The resolved fleet-wide rules of a validated global ``loopwatch.detectors`` object."""
    outage, loop = "toolOutage", "systemicLoop"
    return FleetRules(
        ToolOutageRule(
            enabled=bool(_get(global_rules, outage, "enabled")),
            bucket_s=int(_get(global_rules, outage, "bucketSeconds")),
            window_buckets=int(_get(global_rules, outage, "windowBuckets")),
            min_runs=int(_get(global_rules, outage, "minRuns")),
            min_distinct_args=int(_get(global_rules, outage, "minDistinctArgs")),
            block=bool(_get(global_rules, outage, "block")),
            block_s=int(_get(global_rules, outage, "blockSeconds")),
        ),
        SystemicLoopRule(
            enabled=bool(_get(global_rules, loop, "enabled")),
            bucket_s=int(_get(global_rules, loop, "bucketSeconds")),
            window_buckets=int(_get(global_rules, loop, "windowBuckets")),
            min_runs=int(_get(global_rules, loop, "minRuns")),
            min_share=float(_get(global_rules, loop, "minShare")),
        ),
    )
