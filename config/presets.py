"""Presets: named, dated sets of rules a config file turns on with one key.

Rules (docs/real-loops.md has the measurements behind the agents preset):

* ``loopwatch.preset`` (globally) or ``agents.list[].loopwatch.preset`` /
  ``agents.entries.<id>.loopwatch.preset`` (per agent; an agent's preset replaces the global
  one for that agent) names one of :data:`PRESETS`. An alias (``"agents"``) means its newest
  dated version; a dated name (``"agents-2026-12"``) pins the rules as they were released,
  the way ``openclawRevision`` pins OpenClaw's.
* A preset is a ``tools.loopDetection`` block and a ``loopwatch.detectors`` object laid
  *under* the config file's own: the file's global block is merged over the preset's, then
  the agent's block over that (spec §6.4 merging, key by key); the same for the rules. So
  every key a file sets wins, and a file that names no preset gets exactly what it got before.
* ``"openclaw"`` is the preset of no preset: OpenClaw's rules as they are.
* A preset's ``tools.loopDetection`` block is declared here; the keys it sets in each rule's
  section are declared by the rule (its section's ``presets``, :mod:`config.rule_sections`)
  and gathered by :func:`preset_rules`. A dated preset is pinned: a rule added later joins a
  new dated version, never one released.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Annotated, Any, Final, Literal, get_args

from msgspec import Meta

from loopwatch.config.rule_sections import rule_set

__all__ = ["ALIASES", "PRESETS", "Preset", "PresetName", "preset_named", "preset_problem", "preset_rules"]


@dataclass(frozen=True, slots=True)
class Preset:
    """A dated preset: its name, the block it lays under a config file's (its rules' keys are
    their sections', :func:`preset_rules`) and what it turns on, in words."""

    name: str
    block: dict[str, Any]
    summary: str


_AGENTS_2026_12: Final = Preset(
    name="agents-2026-12",
    # OpenClaw's detectors on, at its own thresholds: the rules it turns on (sameCallStreak,
    # callCycle, sameFailure: their sections say how) stop what real agents repeat well
    # before OpenClaw's 10/20, and its rules stay the backstop they are
    block={"enabled": True},
    summary="OpenClaw's rules plus same-call streaks, call cycles and repeated failures (real agents' loops)",
)

_OPENCLAW: Final = Preset(name="openclaw", block={}, summary="OpenClaw's rules as they are")

#: every preset by its dated (or only) name
PRESETS: Final = MappingProxyType({preset.name: preset for preset in (_AGENTS_2026_12, _OPENCLAW)})
#: names that stand for the newest dated version of a preset
ALIASES: Final = MappingProxyType({"agents": _AGENTS_2026_12.name})


def preset_named(name: str) -> Preset:
    """The preset a (validated) name stands for."""
    return PRESETS[ALIASES.get(name, name)]


def preset_rules(name: str) -> dict[str, Any]:
    """The ``loopwatch.detectors`` object a (validated) preset lays under a config file's: the
    keys each rule's section declares for its dated version, in files' order."""
    dated = preset_named(name).name
    return {
        section.key: dict(section.presets[dated])
        for section in rule_set().sections
        if dated in section.presets
    }


def preset_problem(value: object) -> str:
    """What is wrong with a ``preset`` value that is not a known name."""
    known = ", ".join((*ALIASES, *PRESETS))
    if not isinstance(value, str):
        return f"must be a string, one of: {known}"
    return f"unknown preset {value!r} (known: {known})"


#: the value of a ``preset`` key: an alias or a dated name (the names of :data:`ALIASES` and
#: :data:`PRESETS`, checked below when the module loads)
PresetName = Annotated[
    Literal["agents", "agents-2026-12", "openclaw"],
    Meta(
        description='A named, dated set of rules laid under the file\'s own keys: "agents" (the '
        "newest agents preset: OpenClaw's rules plus same-call streaks, call cycles and repeated "
        'failures), a dated "agents-YYYY-MM" (pinned), or "openclaw" (OpenClaw\'s rules as they are).',
        extra={"problem": preset_problem},
    ),
]
if set(get_args(get_args(PresetName)[0])) != {*ALIASES, *PRESETS}:
    raise RuntimeError("config.presets: PresetName does not name every preset and alias")
