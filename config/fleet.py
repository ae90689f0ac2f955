"""A whole configuration: the global block, per-agent blocks and loopwatch's settings.

Reads OpenClaw config files (JSON5): ``tools.loopDetection`` (global),
``agents.list[].tools.loopDetection`` (with the agent's ``id``) and
``agents.entries.<id>.tools.loopDetection``. Every other OpenClaw key is left alone, so a
real ``openclaw.json`` can be used as it is. loopwatch's settings live under ``loopwatch``.
Parsing takes text, not a path: reading the file is the caller's I/O.

The file is declared as the Structs of :mod:`config.document` (and of the sections below
them) and decoded against them by :func:`config.struct_decoding.decode_struct`, every problem
with its path. What no declaration says is checked here: an agent entry with a block or a
``loopwatch`` object needs an id, an agent may not have two blocks, presets or ``detectors``,
and an agent's rules are ordered once merged over the global ones.

Every agent is resolved once, when the config is built: the default (the global block and
rules alone) and every agent with a block or rules of its own, into a frozen table that
:meth:`FleetConfig.for_agent` reads with one lookup; any other agent gets the default.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import json5

from loopwatch.config.document import AgentRecord, ConfigFile
from loopwatch.config.errors import ConfigError, ConfigProblem
from loopwatch.config.loop_detection import (
    RawBlock,
    ResolvedLoopDetection,
    merge_agent,
    resolve,
    validate_block,
)
from loopwatch.config.near_misses import near_misses
from loopwatch.config.own_rules import RawRules, merge_rules, resolve_rules, validate_rules
from loopwatch.config.presets import preset_named, preset_rules
from loopwatch.config.settings import DetectorSettings, Digest, LoopwatchSection, parse_settings
from loopwatch.config.struct_decoding import decode_field, decode_struct

__all__ = ["FleetConfig", "parse_config_text", "parse_config_value"]


@dataclass(frozen=True)
class FleetConfig:
    """Frozen configuration of a fleet; :meth:`for_agent` gives an agent's effective block."""

    global_block: RawBlock | None = None
    agent_blocks: dict[str, RawBlock] = field(default_factory=dict)
    settings: DetectorSettings = field(default_factory=DetectorSettings)
    global_rules: RawRules | None = None  # loopwatch.detectors
    agent_rules: dict[str, RawRules] = field(default_factory=dict)  # agents' loopwatch.detectors
    warnings: tuple[str, ...] = field(default=(), compare=False)  # keys that look like typos
    global_preset: str | None = None  # loopwatch.preset (config.presets)
    agent_presets: dict[str, str] = field(default_factory=dict)  # agents' loopwatch.preset
    #: resolved at construction (``__post_init__``), never changed afterwards
    default: ResolvedLoopDetection = field(init=False, compare=False, repr=False)
    _agents: dict[str, ResolvedLoopDetection] = field(init=False, compare=False, repr=False)
    #: the settings every event reads, copied out of ``settings`` at construction (a native
    #: attribute each: reading a field of the settings Struct is a lookup by name)
    seen_event_ids: int = field(init=False, compare=False, repr=False)
    digest: Digest = field(init=False, compare=False, repr=False)
    provider_send_tools: frozenset[str] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        default = self._resolve(None)
        own = (*self.agent_blocks, *self.agent_rules, *self.agent_presets)
        agents = {agent: self._resolve(agent) for agent in own}
        object.__setattr__(self, "default", default)
        object.__setattr__(self, "_agents", agents)
        settings = self.settings
        object.__setattr__(self, "seen_event_ids", settings.seen_event_ids)
        object.__setattr__(self, "digest", settings.digest)
        object.__setattr__(self, "provider_send_tools", settings.provider_send_tools)

    def _resolve(self, agent_id: str | None) -> ResolvedLoopDetection:
        block = self.merged_block(agent_id)
        rules = resolve_rules(self.merged_rules(agent_id))
        return resolve(block, self.settings.openclaw_revision, rules)

    def preset_of(self, agent_id: str | None) -> str | None:
        """The preset an agent runs under (its own, else the global one), as named."""
        if agent_id is not None:
            own = self.agent_presets.get(agent_id)
            if own is not None:
                return own
        return self.global_preset

    @classmethod
    def enabled_default(cls, settings: DetectorSettings | None = None) -> FleetConfig:
        """``{"tools": {"loopDetection": {"enabled": true}}}``: the product's default."""
        return cls(global_block={"enabled": True}, settings=settings or DetectorSettings())

    def merged_block(self, agent_id: str | None) -> RawBlock | None:
        """The merged, unresolved block of one agent (spec §6.4), over its preset's (``None``:
        the default agent's)."""
        name = self.preset_of(agent_id)
        base = merge_agent(preset_named(name).block, self.global_block) if name else self.global_block
        return base if agent_id is None else merge_agent(base, self.agent_blocks.get(agent_id))

    def merged_rules(self, agent_id: str | None) -> RawRules | None:
        """The merged, unresolved ``detectors`` object of one agent, over its preset's."""
        name = self.preset_of(agent_id)
        base = rules_under_preset(name, self.global_rules)
        return base if agent_id is None else merge_rules(base, self.agent_rules.get(agent_id))

    @property
    def agents(self) -> Mapping[str, ResolvedLoopDetection]:
        """The agents with a block or rules of their own, resolved at construction (read-only)."""
        return MappingProxyType(self._agents)

    def for_agent(self, agent_id: str) -> ResolvedLoopDetection:
        """The resolved config of one agent: its entry of the table, or the default."""
        agents = self._agents
        if not agents:  # (no agent of its own: no lookup, no hash of the id)
            return self.default
        return agents.get(agent_id, self.default)

    def with_agent_entry(self, agent_id: str, entry: dict[str, Any] | None) -> FleetConfig:
        """A copy with one agent's entry replaced, as ``agents.list[]`` gives it (``tools``,
        ``loopwatch``: its block, rules and preset); ``None`` removes every override of it."""
        return _agent_entry(self, agent_id, entry)

    def with_agent_block(self, agent_id: str, block: RawBlock | None) -> FleetConfig:
        """A copy with one agent's block replaced (``None`` removes the override)."""
        blocks = dict(self.agent_blocks)
        if block is None:
            blocks.pop(agent_id, None)
        else:
            problems = validate_block(block, f"agents.{agent_id}.tools.loopDetection")
            if problems:
                raise ConfigError(problems)
            blocks[agent_id] = block
        return FleetConfig(
            self.global_block,
            blocks,
            self.settings,
            self.global_rules,
            self.agent_rules,
            global_preset=self.global_preset,
            agent_presets=self.agent_presets,
        )


def rules_under_preset(preset: str | None, global_rules: RawRules | None) -> RawRules | None:
    """The global ``detectors`` object laid over a preset's (``None``: no preset)."""
    return merge_rules(preset_rules(preset), global_rules) if preset else global_rules


@dataclass
class _Agents:
    """What the agents of a file set: per agent, its block, its ``detectors`` object (and the
    path it was found at) and its preset."""

    blocks: dict[str, RawBlock] = field(default_factory=dict)
    rules: dict[str, RawRules] = field(default_factory=dict)
    rules_at: dict[str, str] = field(default_factory=dict)
    presets: dict[str, str] = field(default_factory=dict)


def _agent_entry(config: FleetConfig, agent_id: str, entry: dict[str, Any] | None) -> FleetConfig:
    """``config`` with one agent's whole entry replaced: its ``tools.loopDetection`` block, its
    ``loopwatch`` ``detectors`` and ``preset`` (``None``: every override of the agent removed)."""
    blocks, rules, presets = dict(config.agent_blocks), dict(config.agent_rules), dict(config.agent_presets)
    for kept in (blocks, rules, presets):
        kept.pop(agent_id, None)
    if entry is not None:
        problems: list[ConfigProblem] = []
        path = f"agents.{agent_id}"
        decode_struct(entry, AgentRecord, path, problems)
        found = _Agents()
        _collect_entry(entry, agent_id, path, found, problems)
        name = found.presets.get(agent_id, config.global_preset)
        own = found.rules.get(agent_id)
        if own is not None and not problems:
            base = rules_under_preset(name, config.global_rules)
            problems += validate_rules(merge_rules(base, own), found.rules_at[agent_id])
        if problems:
            raise ConfigError(problems)
        block = found.blocks.get(agent_id)
        if block is not None:
            blocks[agent_id] = block
        if own is not None:
            rules[agent_id] = own
        if agent_id in found.presets:
            presets[agent_id] = found.presets[agent_id]
    return FleetConfig(
        config.global_block,
        blocks,
        config.settings,
        config.global_rules,
        rules,
        global_preset=config.global_preset,
        agent_presets=presets,
    )


def _block_of(owner: dict[str, Any]) -> RawBlock | None:
    """The ``tools.loopDetection`` object of the file or of an agent entry, if it is one."""
    tools = owner.get("tools")
    block = tools.get("loopDetection") if isinstance(tools, dict) else None
    return block if isinstance(block, dict) else None


def _clean(problems: list[ConfigProblem], path: str) -> bool:
    """Whether no problem was found at ``path`` or below it."""
    below = path + "."
    return not any(problem.path == path or problem.path.startswith(below) for problem in problems)


def parse_config_value(
    value: object, source: str | None = None, settings: DetectorSettings | None = None
) -> FleetConfig:
    """A :class:`FleetConfig` from a decoded config document; raises :class:`ConfigError`."""
    problems: list[ConfigProblem] = []
    if not isinstance(value, dict):
        raise ConfigError([ConfigProblem("", "the config must be a JSON object")], source)
    if "tools" in value:
        decode_field(ConfigFile, "tools", value["tools"], "tools", problems)
    global_block = _block_of(value)
    agents = _Agents()
    if "agents" in value:
        decode_field(ConfigFile, "agents", value["agents"], "agents", problems)
        _collect_agents(value["agents"], agents, problems)
    section = value.get("loopwatch")
    global_rules: RawRules | None = None
    global_preset: str | None = None
    global_ok = True
    if isinstance(section, dict) and "preset" in section:
        named, preset = decode_field(
            LoopwatchSection, "preset", section["preset"], "loopwatch.preset", problems
        )
        if named:
            global_preset = preset
    if isinstance(section, dict) and "detectors" in section:
        found_rules = section["detectors"]
        global_ok = decode_field(LoopwatchSection, "detectors", found_rules, "loopwatch.detectors", problems)[
            0
        ]
        global_rules = found_rules if isinstance(found_rules, dict) else None
    parsed_settings, found = parse_settings(section, base=settings)
    problems.extend(found)
    if global_ok:  # the threshold order of each agent's rules, merged over the global ones
        for agent_id, own in agents.rules.items():
            name = agents.presets.get(agent_id, global_preset)
            base = rules_under_preset(name, global_rules)
            merged_problems = validate_rules(merge_rules(base, own), agents.rules_at[agent_id])
            problems.extend(
                ConfigProblem(p.path, f"{p.message} (this agent's rules merged over loopwatch.detectors)")
                for p in merged_problems
            )
    if problems:
        raise ConfigError(problems, source)
    return FleetConfig(
        global_block,
        agents.blocks,
        parsed_settings,
        global_rules,
        agents.rules,
        tuple(near_misses(value)),
        global_preset,
        agents.presets,
    )


def _collect_entry(
    entry: dict[str, Any], agent_id: str, path: str, out: _Agents, problems: list[ConfigProblem]
) -> None:
    """An agent entry's block, ``detectors`` and preset (decoded already: each kept where it
    had no problem), and the problem of one given twice for the same agent."""
    block = _block_of(entry)
    if block is not None:
        if agent_id in out.blocks:
            problems.append(ConfigProblem(path, f"agent {agent_id!r} has a loopDetection block twice"))
        else:
            out.blocks[agent_id] = block
    section = entry.get("loopwatch")
    if not isinstance(section, dict):
        return
    if "preset" in section:
        where = f"{path}.loopwatch.preset"
        if agent_id in out.presets:
            problems.append(ConfigProblem(where, f"agent {agent_id!r} has loopwatch.preset twice"))
        elif _clean(problems, where):
            out.presets[agent_id] = section["preset"]
    if "detectors" in section:
        rules = section["detectors"]
        where = f"{path}.loopwatch.detectors"
        if agent_id in out.rules_at:
            twice = f"agent {agent_id!r} has loopwatch.detectors twice (also at {out.rules_at[agent_id]})"
            problems.append(ConfigProblem(where, twice))
        elif _clean(problems, where) and isinstance(rules, dict):
            out.rules[agent_id] = rules
        out.rules_at.setdefault(agent_id, where)


def _collect_agents(agents: object, out: _Agents, problems: list[ConfigProblem]) -> None:
    """Every agent entry of ``agents`` (decoded already), by its id: an ``agents.list`` entry
    with a block or a ``loopwatch`` object needs one."""
    if not isinstance(agents, dict):
        return
    listed = agents.get("list")
    for index, entry in enumerate(listed if isinstance(listed, list) else []):
        if not isinstance(entry, dict):
            continue
        path = f"agents.list[{index}]"
        agent_id = entry.get("id")
        if not isinstance(agent_id, str) or not agent_id.strip():
            if _block_of(entry) is not None or "loopwatch" in entry:
                problems.append(ConfigProblem(f"{path}.id", "must be a non-empty string"))
            continue
        _collect_entry(entry, agent_id.strip(), path, out, problems)
    entries = agents.get("entries")
    for agent_id, entry in entries.items() if isinstance(entries, dict) else ():
        if isinstance(entry, dict):
            _collect_entry(entry, agent_id, f"agents.entries.{agent_id}", out, problems)


def json5_value(text: str) -> Any:
    """The value of JSON5 text; plain JSON (what most config files are) through the stdlib's
    parser, a hundred times faster than the JSON5 one and with the same value."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # JSON5 proper (comments, unquoted keys), or no JSON
        return json5.loads(text)


_JSON5_ERROR = re.compile(r"<string>:(\d+) (.*) at column (\d+)", re.DOTALL)


def _json5_where(message: str) -> str:
    """The json5 parser's ``<string>:LINE WHAT at column N`` as ``line LINE, column N: WHAT``
    (the file is named by the problem's source)."""
    found = _JSON5_ERROR.fullmatch(message)
    if found is None:
        return message
    line, what, column = found.groups()
    return f"line {line}, column {column}: {what}"


def parse_config_text(
    text: str, source: str | None = None, settings: DetectorSettings | None = None
) -> FleetConfig:
    """A :class:`FleetConfig` from JSON5 text (an OpenClaw or loopwatch config file)."""
    try:
        value: Any = json5_value(text)
    except ValueError as exc:
        raise ConfigError([ConfigProblem("", f"not valid JSON5: {_json5_where(str(exc))}")], source) from exc
    except RecursionError as exc:  # the parser recurses per array and object
        raise ConfigError([ConfigProblem("", "not valid JSON5: nested too deeply")], source) from exc
    return parse_config_value(value, source, settings)
