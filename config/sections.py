"""The sections of ``loopwatch.detectors`` declared here: the fleet-wide rules' (``toolOutage``,
``systemicLoop``, ``delegation``), and the types every rule's section shares.

The in-run rules declare their sections in their own modules (``detectors/rules/``, as a
:class:`config.rule_sections.RuleSection`); the registry hands those in, and
:mod:`config.rule_sections` assembles the whole ``detectors`` object from them and the
fleet-wide sections below (:data:`FLEET_SECTIONS`, listed after the in-run rules').

Each Struct is the single declaration of one rule's keys: their file names (camelCase),
types, ``Meta`` constraints and defaults. Validation (:mod:`config.struct_decoding`),
resolution (:mod:`config.own_rules`, :mod:`config.fleet_rules`) and ``check-config`` all read
them from here. Declarations beside the fields:

* ``ordered`` (ClassVar): (lower, higher) field pairs; the lower must stay below the higher.
* ``fleet_wide`` (ClassVar): the rule watches the whole fleet and is set globally only.

The fleet-wide rules are on by default (they only publish alerts) but for delegation chains,
which are off (docs/fleet-rules.md). This module defines msgspec Structs, so it stays
interpreted (not in setup.py's list).
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Final, Generic, TypeVar

import msgspec
from msgspec import Meta

__all__ = [
    "DELEGATION",
    "FLEET_RULES",
    "FLEET_SECTIONS",
    "MAX_WINDOW",
    "SYSTEMIC_LOOP",
    "TOOL_OUTAGE",
    "Delegation",
    "ExemptTools",
    "Positive",
    "Section",
    "SystemicLoopRule",
    "ToolOutageRule",
    "camel",
]

T = TypeVar("T")

MAX_WINDOW: Final = 1000

Positive = Annotated[int, Meta(gt=0)]
#: tools a rule leaves alone (a poll tool, a pager): their calls and outcomes are not counted
ExemptTools = frozenset[Annotated[str, Meta(min_length=1)]]


def camel(name: str) -> str:
    """A section's name in files (``same_call_streak`` -> ``sameCallStreak``), as ``rename="camel"``
    writes a field's."""
    first, *rest = name.split("_")
    return first + "".join(word[:1].upper() + word[1:] for word in rest)


class Section(Generic[T]):
    """One object of ``loopwatch.detectors``: its attribute name, its name in files (``key``) and
    its settings at their defaults (what :meth:`config.own_rules.OwnRules.get` gives of it where
    a config does not set it)."""

    __slots__ = ("defaults", "key", "name")

    def __init__(self, name: str, defaults: T) -> None:
        self.name = name
        self.key = camel(name)
        self.defaults = defaults

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.key!r})"


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


TOOL_OUTAGE: Final = Section("tool_outage", ToolOutageRule())
SYSTEMIC_LOOP: Final = Section("systemic_loop", SystemicLoopRule())
#: also the in-run rule ``delegation_depth``'s (F6a: ``enabled``, ``maxDepth``)
DELEGATION: Final = Section("delegation", Delegation())

#: the fleet-wide rules' sections, in files' order (after the in-run rules')
FLEET_SECTIONS: Final[
    tuple[Section[ToolOutageRule] | Section[SystemicLoopRule] | Section[Delegation], ...]
] = (
    TOOL_OUTAGE,
    SYSTEMIC_LOOP,
    DELEGATION,
)
#: the rules that watch the whole fleet (file names): set globally only
FLEET_RULES: Final[tuple[str, ...]] = tuple(section.key for section in FLEET_SECTIONS)
