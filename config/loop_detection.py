"""The ``tools.loopDetection`` block: OpenClaw's field names, validation and resolution.

Rules (spec §6):

* A block is a JSON object whose keys are declared once, as the Struct
  :class:`config.loop_detection_block.LoopDetection` (``enabled``, ``historySize``, the four
  thresholds, ``detectors`` and ``postCompactionGuard``), with the defaults resolution falls
  back to. Unknown keys are rejected (OpenClaw's strict schema).
* Validation (:func:`validate_block`) decodes a block against it: every problem with its path,
  plus OpenClaw's two ordering messages (between thresholds the block sets).
* Resolution (:func:`resolve`) never fails: a value that is not a positive integer falls back
  to its default, then the critical and global thresholds are raised above the one below.
* :func:`merge_agent` merges a per-agent block over the global one, ``detectors`` and
  ``postCompactionGuard`` key by key.

The raw block is kept as a plain ``dict`` so resolution sees exactly what OpenClaw sees
(``enabled`` unset, ``false`` and ``true`` are three different things).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loopwatch.config.errors import ConfigProblem
from loopwatch.config.loop_detection_block import LoopDetection, PostCompactionGuard, defaults
from loopwatch.config.own_rules import DEFAULT_OWN_RULES, OwnRules
from loopwatch.config.settings import Revision
from loopwatch.config.struct_decoding import decode_struct

__all__ = [
    "DEFAULTS",
    "ResolvedLoopDetection",
    "as_positive_int",
    "merge_agent",
    "resolve",
    "validate_block",
]

RawBlock = dict[str, Any]

#: the values resolution falls back to (spec §6.3), as the block's declaration documents them
DEFAULTS: dict[str, int] = defaults(LoopDetection)
DEFAULT_GUARD_WINDOW: int = defaults(PostCompactionGuard)["windowSize"]


def _is_positive_int(value: object) -> bool:
    # JSON numbers: 3 and 3.0 are the same number in JavaScript; booleans are not numbers.
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value > 0
    if isinstance(value, float):
        return value.is_integer() and value > 0
    return False


def as_positive_int(value: object, default: int) -> int:
    """``value`` if it is a positive integer, else ``default`` (spec §6.3 ``asPositiveInt``)."""
    return int(value) if _is_positive_int(value) else default  # type: ignore[call-overload]


def validate_block(block: object, path: str) -> list[ConfigProblem]:
    """Every problem of one ``loopDetection`` block (strict schema plus the ordering checks)."""
    problems: list[ConfigProblem] = []
    decode_struct(block, LoopDetection, path, problems)
    return problems


def merge_agent(global_block: RawBlock | None, agent_block: RawBlock | None) -> RawBlock | None:
    """Per-agent merge of spec §6.4: agent keys win; nested objects merge key by key."""
    if agent_block is None:
        return global_block
    if global_block is None:
        return agent_block
    merged = dict(global_block)
    merged.update(agent_block)
    for nested in ("detectors", "postCompactionGuard"):
        g, a = global_block.get(nested), agent_block.get(nested)
        if isinstance(g, dict) and isinstance(a, dict):
            merged[nested] = {**g, **a}
    return merged


@dataclass(frozen=True, slots=True)
class ResolvedLoopDetection:
    """A resolved block (spec §6.3). ``enabled_raw`` keeps the unset/false/true distinction."""

    enabled_raw: bool | None
    history_size: int
    warning_threshold: int
    unknown_tool_threshold: int
    critical_threshold: int
    global_circuit_breaker_threshold: int
    generic_repeat: bool
    known_poll_no_progress: bool
    ping_pong: bool
    guard_window: int
    revision: Revision = "2026-05"  # OpenClaw rule revision (``loopwatch.openclawRevision``)
    rules: OwnRules = DEFAULT_OWN_RULES  # loopwatch's own in-run rules (``loopwatch.detectors``)

    @property
    def enabled(self) -> bool:
        """Rolling-history detection runs only when ``enabled`` is true."""
        return self.enabled_raw is True

    @property
    def records_calls(self) -> bool:
        """Calls are recorded unless ``enabled`` is exactly ``false`` (mid-2026 wrapper)."""
        return self.enabled_raw is not False

    @property
    def guard_enabled(self) -> bool:
        """The post-compaction guard is on unless ``enabled`` is exactly ``false`` (§8)."""
        return self.enabled_raw is not False

    def as_openclaw(self) -> dict[str, Any]:
        """The resolved values under OpenClaw's field names."""
        return {
            "enabled": self.enabled,
            "historySize": self.history_size,
            "warningThreshold": self.warning_threshold,
            "unknownToolThreshold": self.unknown_tool_threshold,
            "criticalThreshold": self.critical_threshold,
            "globalCircuitBreakerThreshold": self.global_circuit_breaker_threshold,
            "detectors": {
                "genericRepeat": self.generic_repeat,
                "knownPollNoProgress": self.known_poll_no_progress,
                "pingPong": self.ping_pong,
            },
            "postCompactionGuard": {"enabled": self.guard_enabled, "windowSize": self.guard_window},
        }


def _flag(detectors: object, name: str) -> bool:
    if isinstance(detectors, dict):
        value = detectors.get(name)
        if value is not None:
            return bool(value)
    return True


def resolve(
    block: RawBlock | None, revision: Revision | bool = "2026-05", rules: OwnRules = DEFAULT_OWN_RULES
) -> ResolvedLoopDetection:
    """Resolve a raw (possibly merged, possibly absent) block per spec §6.3 and §8.

    ``revision`` is the OpenClaw rule revision (the setting ``openclawRevision``; ``True`` and
    ``False`` still stand for 2026-08 and 2026-05); ``rules`` are the agent's own loopwatch
    rules, resolved.
    """
    if isinstance(revision, bool):
        revision = "2026-08" if revision else "2026-05"
    raw = block or {}
    warning = as_positive_int(raw.get("warningThreshold"), DEFAULTS["warningThreshold"])
    critical = as_positive_int(raw.get("criticalThreshold"), DEFAULTS["criticalThreshold"])
    glob = as_positive_int(
        raw.get("globalCircuitBreakerThreshold"), DEFAULTS["globalCircuitBreakerThreshold"]
    )
    if critical <= warning:
        critical = warning + 1
    if glob <= critical:
        glob = critical + 1
    enabled = raw.get("enabled")
    detectors = raw.get("detectors")
    guard = raw.get("postCompactionGuard")
    window = guard.get("windowSize") if isinstance(guard, dict) else None
    return ResolvedLoopDetection(
        enabled_raw=None if enabled is None else bool(enabled),
        history_size=as_positive_int(raw.get("historySize"), DEFAULTS["historySize"]),
        warning_threshold=warning,
        unknown_tool_threshold=as_positive_int(
            raw.get("unknownToolThreshold"), DEFAULTS["unknownToolThreshold"]
        ),
        critical_threshold=critical,
        global_circuit_breaker_threshold=glob,
        generic_repeat=_flag(detectors, "genericRepeat"),
        known_poll_no_progress=_flag(detectors, "knownPollNoProgress"),
        ping_pong=_flag(detectors, "pingPong"),
        guard_window=as_positive_int(window, DEFAULT_GUARD_WINDOW),
        revision=revision,
        rules=rules,
    )
