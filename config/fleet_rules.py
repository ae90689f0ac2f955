"""The fleet-wide rules' settings (spec BEYOND-OPENCLAW F0): ``toolOutage`` and ``systemicLoop``.

They are read from the global ``loopwatch.detectors`` only (validated in
:mod:`config.own_rules`, which refuses them per agent) and resolved here, every key with
its default: both rules are on by default and only publish alerts; fail-fast blocks are off.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from config.own_rules import RULES, RawRules

__all__ = ["FleetRules", "SystemicLoopRule", "ToolOutageRule", "fleet_rules"]


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
