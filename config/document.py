"""A whole config file, declared once: where loopwatch reads its sections in an OpenClaw file.

The Structs below are the file's outline down to its sections (``tools.loopDetection``:
:mod:`config.loop_detection_block`; ``loopwatch``: :mod:`config.settings`; the rules:
:mod:`config.rule_sections`, assembled from the rules' own declarations). :mod:`config.fleet`
decodes the agents against them and ``check-config --schema`` writes the JSON Schema from them
(:mod:`config.schema`).

* Objects of OpenClaw's own (the file, ``tools``, ``agents``, an agent's entry) keep every
  other key: they are not ``forbid_unknown_fields``, so a real ``openclaw.json`` is read as it is.
* ``agents`` and its ``list`` and ``entries`` may be ``null``; an entry of ``agents.entries``
  that is no object is left alone (OpenClaw's), one of ``agents.list`` must be an object.
* What a Struct cannot say is checked by :mod:`config.fleet`: an ``agents.list`` entry with a
  block or a ``loopwatch`` object needs an ``id`` (a non-empty string; the schema says it with
  ``json_schema``), and one agent may not have two blocks, presets or ``detectors``.

This module defines msgspec Structs, so it stays interpreted (not in setup.py's list).
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

import msgspec
from msgspec import UNSET, Meta, UnsetType

from loopwatch.config.loop_detection_block import LoopDetection
from loopwatch.config.presets import PresetName
from loopwatch.config.rule_sections import AgentDetectors
from loopwatch.config.settings import LoopwatchSection

__all__ = [
    "AgentEntry",
    "AgentListEntry",
    "AgentLoopwatch",
    "AgentRecord",
    "Agents",
    "ConfigFile",
    "NotAnObject",
    "Tools",
]

#: a value that is no JSON object (an ``agents.entries`` value loopwatch leaves alone)
NotAnObject = list[Any] | str | float | int | bool | None


class Tools(msgspec.Struct, frozen=True, rename="camel"):
    """``tools`` (OpenClaw's tool settings): loopwatch reads ``loopDetection``."""

    loop_detection: LoopDetection | UnsetType = UNSET


class AgentLoopwatch(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    """An agent's ``loopwatch``: its own rules and preset (the settings are global only)."""

    detectors: AgentDetectors | UnsetType = UNSET
    preset: (
        Annotated[PresetName, Meta(description="This agent's preset, instead of the global one.")] | UnsetType
    ) = UNSET

    unknown_key: ClassVar[str] = "only detectors and preset can be set per agent"


class AgentEntry(msgspec.Struct, frozen=True, rename="camel"):
    """An agent's entry in ``agents.entries`` (keyed by its id): its block over the global one,
    its rules over the global ones, its preset."""

    tools: Tools | UnsetType = UNSET
    loopwatch: AgentLoopwatch | UnsetType = UNSET


class AgentListEntry(AgentEntry, frozen=True, rename="camel"):
    """An agent's entry in ``agents.list``: as in ``agents.entries``, with its ``id``."""

    id: Annotated[
        Any,
        Meta(
            description="The agent's id: a non-empty string where the entry sets a "
            "tools.loopDetection block or a loopwatch object."
        ),
    ] = UNSET

    #: the JSON Schema of what :mod:`config.fleet` checks itself (the id such an entry needs)
    json_schema: ClassVar[dict[str, Any]] = {
        "if": {
            "anyOf": [
                {"required": ["loopwatch"]},
                {"required": ["tools"], "properties": {"tools": {"required": ["loopDetection"]}}},
            ]
        },
        "then": {"required": ["id"], "properties": {"id": {"type": "string", "pattern": "\\S"}}},
    }


class AgentRecord(AgentEntry, frozen=True, rename="camel", forbid_unknown_fields=True):
    """An agent's entry as a ``loopwatch.config`` topic record carries it: ``tools`` and
    ``loopwatch`` only."""


class Agents(msgspec.Struct, frozen=True, rename="camel"):
    """``agents`` (OpenClaw's agents): per-agent blocks, rules and presets, each agent's merged
    over the global ones."""

    listed: list[AgentListEntry] | UnsetType | None = msgspec.field(default=UNSET, name="list")
    entries: dict[str, AgentEntry | NotAnObject] | UnsetType | None = UNSET


class ConfigFile(msgspec.Struct, frozen=True, rename="camel"):
    """A loopwatch config file: OpenClaw's own ``openclaw.json`` (JSON5; every key loopwatch
    does not read is left alone) or a file of loopwatch's keys alone."""

    tools: Tools | UnsetType = UNSET
    agents: Agents | UnsetType | None = UNSET
    loopwatch: LoopwatchSection | UnsetType | None = UNSET
