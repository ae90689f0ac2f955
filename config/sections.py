"""loopwatch's own rules, declared once: the ``detectors`` object of a ``loopwatch`` section.

Each Struct is the single declaration of one rule's keys: their file names (camelCase),
types, ``Meta`` constraints and defaults. Validation (:mod:`config.struct_decoding`),
resolution (:mod:`config.own_rules`, :mod:`config.fleet_rules`) and ``check-config`` all read
them from here. Declarations beside the fields:

* ``ordered`` (ClassVar): (lower, higher) field pairs; the lower must stay below the higher.
* ``fleet_wide`` (ClassVar): the rule watches the whole fleet and is set globally only.
* ``member`` (ClassVar): what an unknown key of the object is called in messages.
* ``refused`` and ``merged_later`` (ClassVars of :class:`AgentDetectors`, an agent's object):
  keys it may not set, with their message; its pairs are ordered once merged over the global
  object, not on their own.

Every rule is off by default (the budget unset) except the fleet-wide ones, which only
publish alerts, so OpenClaw parity stays exact unless an operator opts in (docs/own-rules.md).
This module defines msgspec Structs, so it stays interpreted (not in setup.py's list).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, ClassVar, Final

import msgspec
from msgspec import Meta

__all__ = [
    "FLEET_RULES",
    "MAX_WINDOW",
    "AgentDetectors",
    "CallCycle",
    "Delegation",
    "Detectors",
    "EditUndo",
    "LoopBudget",
    "RunNoProgress",
    "SameCallStreak",
    "SameFailure",
    "SystemicLoopRule",
    "ToolOutageRule",
]

MAX_WINDOW: Final = 1000

Positive = Annotated[int, Meta(gt=0)]
#: tools a rule leaves alone (a poll tool, a pager): their calls and outcomes are not counted
ExemptTools = frozenset[Annotated[str, Meta(min_length=1)]]


class RunNoProgress(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    """``runNoProgress``: results repeating across tools without progress."""

    enabled: bool = False
    warning_threshold: Positive = 20
    window_size: Annotated[int, Meta(gt=0, le=MAX_WINDOW)] = 30

    ordered: ClassVar[tuple[tuple[str, str], ...]] = (("warning_threshold", "window_size"),)


class EditUndo(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    """``editUndo``: a file changed back to an earlier version."""

    enabled: bool = False
    warning_threshold: Positive = 3
    critical_threshold: Positive = 5

    ordered: ClassVar[tuple[tuple[str, str], ...]] = (("warning_threshold", "critical_threshold"),)


class SameCallStreak(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    """``sameCallStreak``: the same call (tool and arguments) made again and again in a row."""

    enabled: bool = False
    warning_threshold: Positive = 3
    critical_threshold: Positive = 5
    exempt_tools: ExemptTools = frozenset()

    ordered: ClassVar[tuple[tuple[str, str], ...]] = (("warning_threshold", "critical_threshold"),)


class CallCycle(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    """``callCycle``: the same 2 to ``maxPeriod`` calls made in the same order, round after
    round; the thresholds count rounds."""

    enabled: bool = False
    max_period: Annotated[int, Meta(ge=2, le=8)] = 5
    warning_threshold: Positive = 2
    critical_threshold: Annotated[int, Meta(gt=0, le=16)] = 3
    exempt_tools: ExemptTools = frozenset()

    ordered: ClassVar[tuple[tuple[str, str], ...]] = (("warning_threshold", "critical_threshold"),)


class SameFailure(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    """``sameFailure``: tool calls that keep failing the same way (at most two ways), however
    the calls vary; a *sweep* (failures that differ only by the arguments they echo, as
    "no matches for X" over many X) has thresholds of its own."""

    enabled: bool = False
    warning_threshold: Positive = 3
    critical_threshold: Positive = 5
    sweep_warning_threshold: Positive = 5
    sweep_critical_threshold: Positive = 8
    exempt_tools: ExemptTools = frozenset()

    ordered: ClassVar[tuple[tuple[str, str], ...]] = (
        ("warning_threshold", "critical_threshold"),
        ("sweep_warning_threshold", "sweep_critical_threshold"),
    )


class LoopBudget(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    """``loopBudget``: a run's spend from its first verdict on (unset: off)."""

    usd: (
        Annotated[
            float,
            Meta(
                gt=0,
                description="The spend (USD) at which a run is stopped, counted from its first verdict "
                "on; null: no budget.",
                extra={"unit": "USD"},
            ),
        ]
        | None
    ) = None


class ToolOutageRule(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    """``toolOutage`` (fleet-wide): a tool failing the same way across runs."""

    enabled: bool = True
    bucket_s: Positive = msgspec.field(default=60, name="bucketSeconds")
    window_buckets: Positive = 5
    min_runs: Positive = 5
    min_distinct_args: Positive = 3
    block: bool = False
    block_s: Positive = msgspec.field(default=60, name="blockSeconds")

    fleet_wide: ClassVar[bool] = True


class SystemicLoopRule(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    """``systemicLoop`` (fleet-wide): many runs of one agent hitting one detector on one tool."""

    enabled: bool = True
    bucket_s: Positive = msgspec.field(default=300, name="bucketSeconds")
    #: at most 48: an agent's state grows ~4 KB a bucket past its 64 KB at 12 (fleet-rules.md)
    window_buckets: Annotated[int, Meta(ge=1, le=48)] = 12
    min_runs: Positive = 10
    min_share: Annotated[float, Meta(gt=0, le=1)] = 0.2

    fleet_wide: ClassVar[bool] = True

    @property
    def window_minutes(self) -> int:
        return self.bucket_s * self.window_buckets // 60


class Delegation(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    """``delegation`` (fleet-wide, BEYOND-OPENCLAW F6): delegation chains of runs (off).

    ``maxDepth`` is F6a's limit on how deep in a chain a run may act; the chain thresholds are
    F6b's and F6c's."""

    enabled: bool = False
    max_depth: Annotated[int, Meta(ge=0)] = 3
    max_runs: Annotated[int, Meta(ge=2, le=1024)] = 50  # chain_runaway.EXACT_RUNS
    min_runs: Annotated[int, Meta(ge=2, le=32)] = 3  # chain_repeat.RUNS_KEPT
    chain_warning_threshold: Positive = 10
    chain_critical_threshold: Positive = 20
    block: bool = False
    chain_ttl_s: Positive = 3600

    ordered: ClassVar[tuple[tuple[str, str], ...]] = (
        ("chain_warning_threshold", "chain_critical_threshold"),
    )
    fleet_wide: ClassVar[bool] = True


class Detectors(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    """``loopwatch.detectors`` (globally) or ``agents…loopwatch.detectors`` (per agent)."""

    run_no_progress: RunNoProgress = msgspec.field(default_factory=RunNoProgress)
    edit_undo: EditUndo = msgspec.field(default_factory=EditUndo)
    loop_budget: LoopBudget = msgspec.field(default_factory=LoopBudget)
    same_call_streak: SameCallStreak = msgspec.field(default_factory=SameCallStreak)
    call_cycle: CallCycle = msgspec.field(default_factory=CallCycle)
    same_failure: SameFailure = msgspec.field(default_factory=SameFailure)
    tool_outage: ToolOutageRule = msgspec.field(default_factory=ToolOutageRule)
    systemic_loop: SystemicLoopRule = msgspec.field(default_factory=SystemicLoopRule)
    delegation: Delegation = msgspec.field(default_factory=Delegation)

    member: ClassVar[str] = "rule"


#: the rules that watch the whole fleet (file names): set globally only
FLEET_RULES: Final[tuple[str, ...]] = tuple(
    info.encode_name for info in msgspec.structs.fields(Detectors) if getattr(info.type, "fleet_wide", False)
)


class AgentDetectors(Detectors, frozen=True, rename="camel", forbid_unknown_fields=True):
    """An agent's ``loopwatch.detectors``: merged over the global object (and its preset's) rule
    by rule, key by key; the thresholds are ordered once merged; the fleet-wide rules are set in
    the global ``loopwatch.detectors`` only."""

    refused: ClassVar[Mapping[str, str]] = dict.fromkeys(
        FLEET_RULES, "a fleet-wide rule: set it in the global loopwatch.detectors"
    )
    merged_later: ClassVar[bool] = True
