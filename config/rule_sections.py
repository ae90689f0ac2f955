"""The in-run rules' config sections: each declared in its rule's module, handed in by the
registry, and the ``detectors`` object of a ``loopwatch`` section assembled from them.

Rules:

* A rule that is configured declares its section in its own module (``detectors/rules/``), as
  a :class:`RuleSection`: its settings as a ``typing.NamedTuple`` at their defaults (field
  names, types with their ``Meta`` constraints, default values), a description, the ordered
  pairs, what ``check-config`` says of it (``explain``) and the keys each dated preset sets.
  The section's msgspec Struct (what the decoder and the schema read) is made from that
  declaration here: a rule module is compiled by mypyc, which keeps no Struct defined in it.
  The rule reads its settings as the NamedTuple (:meth:`config.own_rules.OwnRules.get`).
* The registry (``detectors/rules/registry.py``) hands the sections of its rules in
  (:func:`hand_in`) whenever its rules are set: config imports nothing of the detectors. A
  process that reads a config file imports the registry first (every shell does);
  :func:`rule_set` refuses to guess without it.
* ``loopwatch.detectors`` is assembled from the handed-in sections, in the registry's order
  (a section may be listed before another one's: ``listed_before``), then the fleet-wide
  sections of :mod:`config.sections`. :class:`Detectors` and :class:`AgentDetectors` are
  what the config file's Structs (:mod:`config.settings`, :mod:`config.document`) name;
  the decoder and the schema read the assembled Structs in their place (``assembled``).

This module defines msgspec Structs, so it stays interpreted (not in setup.py's list).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, ClassVar, Final, TypeVar, cast, get_type_hints

import msgspec

from loopwatch.config.sections import FLEET_RULES, FLEET_SECTIONS, Section

__all__ = [
    "AgentDetectors",
    "Detectors",
    "Explained",
    "RuleSection",
    "RuleSet",
    "exempt_words",
    "hand_in",
    "ordinal",
    "rule_set",
]

T = TypeVar("T")

#: what ``check-config`` says of a rule that is on: how (``on``, or its amount) and what it does
Explained = tuple[str, str]


class RuleSection(Section[T]):
    """An in-run rule's section of ``loopwatch.detectors``, declared in the rule's module.

    ``rule``: the rule's name; the section is ``loopwatch.detectors.<rule in camelCase>``.
    ``defaults``: a ``typing.NamedTuple`` of the settings at their defaults; its field types
    (``Annotated`` with ``msgspec.Meta`` for constraints and descriptions) are the keys' types.
    ``ordered``: (lower, higher) field pairs; the lower must stay below the higher (checked once
    merged, per agent). ``explain``: what ``check-config`` says for an agent, ``None`` while the
    rule is off. ``presets``: per dated preset (``config.presets``), the keys it sets, as a file
    sets them. ``listed_before``: the key of a section this one is listed before in files, in
    messages and in the schema (else the registry's order)."""

    __slots__ = ("explain", "listed_before", "presets", "struct")

    def __init__(
        self,
        rule: str,
        description: str,
        defaults: T,
        *,
        explain: Callable[[T], Explained | None],
        ordered: tuple[tuple[str, str], ...] = (),
        presets: Mapping[str, Mapping[str, Any]] | None = None,
        listed_before: str | None = None,
    ) -> None:
        super().__init__(rule, defaults)
        self.explain = explain
        self.presets: Mapping[str, Mapping[str, Any]] = MappingProxyType(
            {name: MappingProxyType(dict(keys)) for name, keys in (presets or {}).items()}
        )
        self.listed_before = listed_before
        self.struct: type[msgspec.Struct] = _settings_struct(self.key, description, defaults, ordered)

    def view(self, value: msgspec.Struct) -> T:
        """A decoded section as the rule reads it (its NamedTuple)."""
        return type(self.defaults)(*msgspec.structs.astuple(value))

    def encoded(self, settings: T) -> Any:
        """Settings as a file writes them (file names, lists sorted)."""
        return msgspec.to_builtins(self.struct(*cast(tuple[Any, ...], settings)), order="deterministic")


def _settings_struct(
    key: str, description: str, defaults: object, ordered: tuple[tuple[str, str], ...]
) -> type[msgspec.Struct]:
    """The Struct of a section declared as a NamedTuple at its defaults: named after the key
    (``sameCallStreak``: ``SameCallStreak``), camelCase keys, unknown keys refused."""
    names: tuple[str, ...] | None = getattr(type(defaults), "_fields", None)
    if names is None:
        raise TypeError(f"section {key}: its defaults must be a typing.NamedTuple of its settings")
    for pair in ordered:
        if not set(pair) <= set(names):
            raise ValueError(f"section {key}: ordered pair {pair} names a setting it does not have")
    types = get_type_hints(type(defaults), include_extras=True)
    fields = [(name, types[name], getattr(defaults, name)) for name in names]
    namespace: dict[str, Any] = {
        "__doc__": f"``{key}``: {description}",
        "__module__": type(defaults).__module__,
    }
    if ordered:
        namespace["ordered"] = ordered
    return msgspec.defstruct(
        key[:1].upper() + key[1:],
        fields,
        namespace=namespace,
        frozen=True,
        rename="camel",
        forbid_unknown_fields=True,
    )


class Detectors(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    """``loopwatch.detectors`` (globally) or ``agents…loopwatch.detectors`` (per agent)."""

    member: ClassVar[str] = "rule"

    @classmethod
    def assembled(cls) -> type[Detectors]:
        """The object as the handed-in rules make it (what the decoder and the schema read)."""
        return rule_set().detectors


class AgentDetectors(Detectors, frozen=True, rename="camel", forbid_unknown_fields=True):
    """An agent's ``loopwatch.detectors``: merged over the global object (and its preset's) rule
    by rule, key by key; the thresholds are ordered once merged; the fleet-wide rules are set in
    the global ``loopwatch.detectors`` only."""

    refused: ClassVar[Mapping[str, str]] = dict.fromkeys(
        FLEET_RULES, "a fleet-wide rule: set it in the global loopwatch.detectors"
    )
    merged_later: ClassVar[bool] = True

    @classmethod
    def assembled(cls) -> type[AgentDetectors]:
        return rule_set().agent_detectors


def _in_file_order(sections: Sequence[RuleSection[Any]]) -> tuple[RuleSection[Any], ...]:
    """The registry's order, each section with ``listed_before`` moved before that one."""
    order = [section for section in sections if section.listed_before is None]
    for section in sections:
        if section.listed_before is not None:
            keys = [placed.key for placed in order]
            at = keys.index(section.listed_before) if section.listed_before in keys else len(order)
            order.insert(at, section)
    return tuple(order)


class RuleSet:
    """The handed-in sections in files' order, and the ``detectors`` objects made of them."""

    __slots__ = ("agent_detectors", "detectors", "sections")

    def __init__(self, sections: Sequence[RuleSection[Any]]) -> None:
        self.sections = _in_file_order(sections)
        keys = [section.key for section in self.sections]
        taken = sorted({key for key in keys if keys.count(key) > 1} | (set(keys) & set(FLEET_RULES)))
        if taken:
            raise ValueError(f"two sections of loopwatch.detectors are named {', '.join(taken)}")
        fields = [
            (section.name, section.struct, msgspec.field(default_factory=section.struct))
            for section in self.sections
        ]
        fields += [
            (section.name, type(section.defaults), msgspec.field(default_factory=type(section.defaults)))
            for section in FLEET_SECTIONS
        ]
        options: dict[str, Any] = {"frozen": True, "rename": "camel", "forbid_unknown_fields": True}
        namespace = {"__doc__": Detectors.__doc__, "__module__": __name__}
        self.detectors = cast(
            "type[Detectors]",
            msgspec.defstruct("Detectors", fields, bases=(Detectors,), namespace=namespace, **options),
        )
        namespace = {"__doc__": AgentDetectors.__doc__, "__module__": __name__}
        bases = (self.detectors, AgentDetectors)
        self.agent_detectors = cast(
            "type[AgentDetectors]",
            msgspec.defstruct("AgentDetectors", [], bases=bases, namespace=namespace, **options),
        )


_SETS: dict[tuple[RuleSection[Any], ...], RuleSet] = {}
_handed_in: list[RuleSet] = []


def hand_in(sections: Sequence[RuleSection[Any]]) -> RuleSet:
    """The sections of the registered rules, in the registry's order: from now on the config
    reads ``loopwatch.detectors`` with them (a set handed in before is assembled once)."""
    key = tuple(sections)
    found = _SETS.get(key)
    if found is None:
        found = _SETS[key] = RuleSet(key)
    _handed_in[:] = [found]
    return found


_NOT_HANDED_IN: Final = (
    "the rules' config sections were not handed in: import loopwatch.detectors.rules.registry "
    "(which does it) before reading a config"
)


def rule_set() -> RuleSet:
    """The sections handed in last (:func:`hand_in`)."""
    if not _handed_in:
        raise RuntimeError(_NOT_HANDED_IN)
    return _handed_in[0]


def ordinal(n: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``11th``... (for ``explain``)."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def exempt_words(tools: frozenset[str]) -> str:
    """A rule's ``exemptTools`` in words (for ``explain``)."""
    return f"exemptTools: {', '.join(sorted(tools))}" if tools else "no tool exempt (exemptTools: [])"
