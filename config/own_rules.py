"""loopwatch's own rules (docs/own-rules.md): the ``detectors`` object of a ``loopwatch`` section.

Rules:

* Globally under ``loopwatch.detectors``; per agent under ``agents.list[].loopwatch.detectors``
  or ``agents.entries.<id>.loopwatch.detectors``, merged over the global one rule by rule,
  key by key (like ``loopDetection`` blocks).
* One object per rule, every key optional, declared once as the Structs of
  :mod:`config.sections` (keys, types, constraints, defaults): ``runNoProgress``,
  ``editUndo``, ``loopBudget``; and the fleet-wide ``toolOutage`` and ``systemicLoop``,
  global only (resolved by :mod:`config.fleet_rules`).
* Validation reports every problem with its path: unknown rules and keys, wrong types, and
  a warning threshold not below the critical one (``windowSize`` for ``runNoProgress``).

Off by default (the budget unset), so OpenClaw parity stays exact unless an operator opts in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import msgspec

from loopwatch.config.errors import ConfigError, ConfigProblem
from loopwatch.config.sections import (
    FLEET_RULES,
    AgentDetectors,
    CallCycle,
    Detectors,
    EditUndo,
    LoopBudget,
    RunNoProgress,
    SameCallStreak,
    SameFailure,
)
from loopwatch.config.struct_decoding import decode_struct

__all__ = [
    "DEFAULT_OWN_RULES",
    "FLEET_RULES",
    "OwnRules",
    "decode_rules",
    "merge_rules",
    "resolve_rules",
    "validate_rules",
]

RawRules = dict[str, Any]

_DEFAULTS: Final = Detectors()


def validate_rules(raw: object, path: str, per_agent: bool = False) -> list[ConfigProblem]:
    """Every problem of one ``detectors`` object. Per agent, the fleet-wide rules are refused
    and the threshold order is not checked: it applies once merged over the global object
    (an agent may set only ``criticalThreshold``, over a global ``warningThreshold``)."""
    problems: list[ConfigProblem] = []
    decode_struct(raw, AgentDetectors if per_agent else Detectors, path, problems)
    return problems


def decode_rules(rules: RawRules | None, path: str = "loopwatch.detectors") -> Detectors:
    """A validated (possibly merged, possibly absent) ``detectors`` object, decoded.

    Raises :class:`ConfigError` for an object that was not validated and is invalid.
    """
    if not rules:
        return _DEFAULTS
    problems: list[ConfigProblem] = []
    decoded = decode_struct(rules, Detectors, path, problems)
    if decoded is None:
        raise ConfigError(problems)
    return decoded


def merge_rules(global_rules: RawRules | None, agent_rules: RawRules | None) -> RawRules | None:
    """The agent's rules over the global ones, rule by rule and key by key."""
    if agent_rules is None:
        return global_rules
    if global_rules is None:
        return agent_rules
    merged = dict(global_rules)
    for rule, block in agent_rules.items():
        base = global_rules.get(rule)
        merged[rule] = {**base, **block} if isinstance(base, dict) and isinstance(block, dict) else block
    return merged


@dataclass(frozen=True, slots=True)
class OwnRules:
    """The in-run rules of one agent, resolved (the fleet-wide ones are read elsewhere).

    Flat, for the step's sake; the values and their defaults come from
    :class:`config.sections.Detectors` (:meth:`of`).
    """

    run_no_progress: bool = _DEFAULTS.run_no_progress.enabled
    run_no_progress_warning: int = _DEFAULTS.run_no_progress.warning_threshold
    run_no_progress_window: int = _DEFAULTS.run_no_progress.window_size
    edit_undo: bool = _DEFAULTS.edit_undo.enabled
    edit_undo_warning: int = _DEFAULTS.edit_undo.warning_threshold
    edit_undo_critical: int = _DEFAULTS.edit_undo.critical_threshold
    loop_budget_usd: float | None = _DEFAULTS.loop_budget.usd
    # F6a, from the global (fleet-wide) delegation rule: how deep in a chain a run may act
    delegation: bool = _DEFAULTS.delegation.enabled
    delegation_max_depth: int = _DEFAULTS.delegation.max_depth
    # the agents preset's rules (docs/real-loops.md)
    same_call_streak: bool = _DEFAULTS.same_call_streak.enabled
    same_call_streak_warning: int = _DEFAULTS.same_call_streak.warning_threshold
    same_call_streak_critical: int = _DEFAULTS.same_call_streak.critical_threshold
    same_call_streak_exempt: frozenset[str] = _DEFAULTS.same_call_streak.exempt_tools
    call_cycle: bool = _DEFAULTS.call_cycle.enabled
    call_cycle_max_period: int = _DEFAULTS.call_cycle.max_period
    call_cycle_warning: int = _DEFAULTS.call_cycle.warning_threshold
    call_cycle_critical: int = _DEFAULTS.call_cycle.critical_threshold
    call_cycle_exempt: frozenset[str] = _DEFAULTS.call_cycle.exempt_tools
    same_failure: bool = _DEFAULTS.same_failure.enabled
    same_failure_warning: int = _DEFAULTS.same_failure.warning_threshold
    same_failure_critical: int = _DEFAULTS.same_failure.critical_threshold
    same_failure_sweep_warning: int = _DEFAULTS.same_failure.sweep_warning_threshold
    same_failure_sweep_critical: int = _DEFAULTS.same_failure.sweep_critical_threshold
    same_failure_exempt: frozenset[str] = _DEFAULTS.same_failure.exempt_tools

    @staticmethod
    def of(section: Detectors) -> OwnRules:
        """The in-run rules of a decoded ``detectors`` object."""
        run, edit = section.run_no_progress, section.edit_undo
        streak, cycle, failure = section.same_call_streak, section.call_cycle, section.same_failure
        return OwnRules(
            run_no_progress=run.enabled,
            run_no_progress_warning=run.warning_threshold,
            run_no_progress_window=run.window_size,
            edit_undo=edit.enabled,
            edit_undo_warning=edit.warning_threshold,
            edit_undo_critical=edit.critical_threshold,
            loop_budget_usd=section.loop_budget.usd,
            delegation=section.delegation.enabled,
            delegation_max_depth=section.delegation.max_depth,
            same_call_streak=streak.enabled,
            same_call_streak_warning=streak.warning_threshold,
            same_call_streak_critical=streak.critical_threshold,
            same_call_streak_exempt=streak.exempt_tools,
            call_cycle=cycle.enabled,
            call_cycle_max_period=cycle.max_period,
            call_cycle_warning=cycle.warning_threshold,
            call_cycle_critical=cycle.critical_threshold,
            call_cycle_exempt=cycle.exempt_tools,
            same_failure=failure.enabled,
            same_failure_warning=failure.warning_threshold,
            same_failure_critical=failure.critical_threshold,
            same_failure_sweep_warning=failure.sweep_warning_threshold,
            same_failure_sweep_critical=failure.sweep_critical_threshold,
            same_failure_exempt=failure.exempt_tools,
        )

    @property
    def any(self) -> bool:
        """Whether any in-run rule of loopwatch's own is on."""
        return (
            self.run_no_progress
            or self.edit_undo
            or self.loop_budget_usd is not None
            or self.delegation
            or self.same_call_streak
            or self.call_cycle
            or self.same_failure
        )

    def section(self) -> Detectors:
        """The rules as a ``detectors`` object (the fleet-wide ones at their defaults)."""
        return Detectors(
            run_no_progress=RunNoProgress(
                self.run_no_progress, self.run_no_progress_warning, self.run_no_progress_window
            ),
            edit_undo=EditUndo(self.edit_undo, self.edit_undo_warning, self.edit_undo_critical),
            loop_budget=LoopBudget(self.loop_budget_usd),
            same_call_streak=SameCallStreak(
                self.same_call_streak,
                self.same_call_streak_warning,
                self.same_call_streak_critical,
                self.same_call_streak_exempt,
            ),
            call_cycle=CallCycle(
                self.call_cycle,
                self.call_cycle_max_period,
                self.call_cycle_warning,
                self.call_cycle_critical,
                self.call_cycle_exempt,
            ),
            same_failure=SameFailure(
                self.same_failure,
                self.same_failure_warning,
                self.same_failure_critical,
                self.same_failure_sweep_warning,
                self.same_failure_sweep_critical,
                self.same_failure_exempt,
            ),
        )

    def as_dict(self) -> dict[str, Any]:
        """The resolved in-run rules under their file names."""
        encoded: dict[str, Any] = msgspec.to_builtins(self.section(), order="deterministic")
        return {rule: value for rule, value in encoded.items() if rule not in FLEET_RULES}


DEFAULT_OWN_RULES: Final = OwnRules.of(_DEFAULTS)


def resolve_rules(rules: RawRules | None) -> OwnRules:
    """The resolved in-run rules of a validated (possibly merged, possibly absent) object."""
    return DEFAULT_OWN_RULES if not rules else OwnRules.of(decode_rules(rules))
