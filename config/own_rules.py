"""loopwatch's own rules (docs/own-rules.md): the ``detectors`` object of a ``loopwatch`` section.

Rules:

* Globally under ``loopwatch.detectors``; per agent under ``agents.list[].loopwatch.detectors``
  or ``agents.entries.<id>.loopwatch.detectors``, merged over the global one rule by rule,
  key by key (like ``loopDetection`` blocks).
* One object per rule, every key optional: the in-run rules' sections, declared in their
  modules and handed in by the registry (:mod:`config.rule_sections`), then the fleet-wide
  ``toolOutage``, ``systemicLoop`` and ``delegation`` (:mod:`config.sections`), global only
  (resolved by :mod:`config.fleet_rules`).
* Validation reports every problem with its path: unknown rules and keys, wrong types, and
  a warning threshold not below the critical one (each section's ordered pairs).
* An agent's rules resolve to :class:`OwnRules`: each section's settings, as its rule reads
  them (:meth:`OwnRules.get`).

Off by default (the budget unset), so OpenClaw parity stays exact unless an operator opts in.
"""

from __future__ import annotations

from typing import Any, Final, TypeVar

from loopwatch.config.errors import ConfigError, ConfigProblem
from loopwatch.config.rule_sections import AgentDetectors, Detectors, rule_set
from loopwatch.config.sections import FLEET_RULES, FLEET_SECTIONS, Section
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

T = TypeVar("T")

RawRules = dict[str, Any]


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
        return rule_set().detectors()
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


class OwnRules:
    """The settings of one agent's rules, resolved: each section's (the in-run rules' and the
    fleet-wide ones') as its rule reads it, :meth:`get`. Only the sections whose settings
    differ from their defaults are kept (two agents alike compare equal)."""

    __slots__ = ("values",)

    def __init__(self, values: dict[str, Any] | None = None) -> None:
        self.values: dict[str, Any] = values if values is not None else {}

    @staticmethod
    def of(section: Detectors) -> OwnRules:
        """The rules of a decoded ``detectors`` object."""
        values: dict[str, Any] = {}
        for rule in rule_set().sections:
            settings = rule.view(getattr(section, rule.name))
            if settings != rule.defaults:
                values[rule.name] = settings
        for fleet in FLEET_SECTIONS:
            value = getattr(section, fleet.name)
            if value != fleet.defaults:
                values[fleet.name] = value
        return OwnRules(values)

    def get(self, section: Section[T]) -> T:
        """The settings of one section (its defaults where the config does not set it, or where
        it was resolved before its rule was registered)."""
        found: T | None = self.values.get(section.name)
        return section.defaults if found is None else found

    def as_dict(self) -> dict[str, Any]:
        """The in-run rules' settings under their file names, in files' order."""
        return {rule.key: rule.encoded(self.get(rule)) for rule in rule_set().sections}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OwnRules) and self.values == other.values

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.values.items())))

    def __repr__(self) -> str:
        return f"OwnRules({self.values!r})"


DEFAULT_OWN_RULES: Final = OwnRules()


def resolve_rules(rules: RawRules | None) -> OwnRules:
    """The resolved rules of a validated (possibly merged, possibly absent) object."""
    return DEFAULT_OWN_RULES if not rules else OwnRules.of(decode_rules(rules))
