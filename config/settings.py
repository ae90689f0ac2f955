"""loopwatch's own detector settings, kept beside ``tools.loopDetection`` (spec §11).

In a config file they live under the top-level key ``loopwatch``::

    {"tools": {"loopDetection": {"enabled": true}},
     "loopwatch": {"digest": "sha256", "criticalBlocksBeforeAbort": 1}}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from loopwatch.config.errors import ConfigProblem

__all__ = ["REVISIONS", "DetectorSettings", "parse_settings"]

Digest = Literal["xxh3", "sha256"]
Revision = Literal["2026-08", "2026-05"]

#: Field name in files -> (attribute, kind)
_FIELDS: dict[str, tuple[str, str]] = {
    "digest": ("digest", "digest"),
    "criticalBlocksBeforeAbort": ("critical_blocks_before_abort", "nonneg"),
    "recoveryAbort": ("recovery_abort", "bool"),
    "observeOnly": ("observe_only", "bool"),
    "providerSendTools": ("provider_send_tools", "strings"),
    "seenEventIds": ("seen_event_ids", "seen"),
    "maxEventBytes": ("max_event_bytes", "positive"),
    "openclawRevision": ("openclaw_revision", "revision"),
    "churnStaleAfterS": ("churn_stale_after_s", "nonneg"),
}

#: OpenClaw rule revisions loopwatch implements; the first is the default.
REVISIONS: tuple[Revision, ...] = ("2026-08", "2026-05")


@dataclass(frozen=True, slots=True)
class DetectorSettings:
    """Settings of the loopwatch profile that OpenClaw's config has no field for.

    * ``digest``: ``xxh3`` (XXH3-128, default) or ``sha256`` (OpenClaw-identical hashes, E2).
    * ``critical_blocks_before_abort``: critical blocks a run may receive before the next
      critical also aborts it (E1; default 1, so the second critical aborts; 0 aborts at once).
    * ``recovery_abort``: ``False`` switches the recovery abort off (blocks only).
    * ``observe_only``: shadow rollout; every call is recorded, verdicts carry
      ``enforced: false`` and never block.
    * ``provider_send_tools``: tool names a channel plugin classifies as sends (spec §3.4).
    * ``seen_event_ids``: how many event ids per run are remembered for de-duplication (≥ 256).
    * ``max_event_bytes``: larger input records are invalid.
    * ``openclaw_revision``: which OpenClaw rules apply: ``"2026-08"`` (default; argument
      churn, exec terminal failures, veto records) or ``"2026-05"`` (the rules before them).
    * ``churn_stale_after_s``: under 2026-08, a run whose argument churn goes on this many
      seconds of event time without a progressing outcome is aborted (0: never).
    """

    digest: Digest = "xxh3"
    critical_blocks_before_abort: int = 1
    recovery_abort: bool = True
    observe_only: bool = False
    provider_send_tools: frozenset[str] = field(default_factory=frozenset)
    seen_event_ids: int = 256
    max_event_bytes: int = 1_048_576
    openclaw_revision: Revision = "2026-08"
    churn_stale_after_s: int = 300

    @property
    def newest_rules(self) -> bool:
        """Whether the rules of revision 2026-08 apply."""
        return self.openclaw_revision == "2026-08"

    def as_dict(self) -> dict[str, Any]:
        """The settings under their file names."""
        return {
            "digest": self.digest,
            "criticalBlocksBeforeAbort": self.critical_blocks_before_abort,
            "recoveryAbort": self.recovery_abort,
            "observeOnly": self.observe_only,
            "providerSendTools": sorted(self.provider_send_tools),
            "seenEventIds": self.seen_event_ids,
            "maxEventBytes": self.max_event_bytes,
            "openclawRevision": self.openclaw_revision,
            "churnStaleAfterS": self.churn_stale_after_s,
        }


def _check(kind: str, value: object) -> str | None:
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if kind == "digest":
        return None if value in ("xxh3", "sha256") else 'must be "xxh3" or "sha256"'
    if kind == "revision":
        return None if value in REVISIONS else 'must be "2026-08" or "2026-05"'
    if kind == "bool":
        return None if isinstance(value, bool) else "must be a boolean"
    if kind == "nonneg":
        return None if is_int and value >= 0 else "must be a non-negative integer"  # type: ignore[operator]
    if kind == "positive":
        return None if is_int and value > 0 else "must be a positive integer"  # type: ignore[operator]
    if kind == "seen":
        return None if is_int and value >= 256 else "must be an integer of at least 256"  # type: ignore[operator]
    if kind == "strings":
        ok = isinstance(value, list) and all(isinstance(v, str) and v for v in value)
        return None if ok else "must be a list of non-empty strings"
    raise AssertionError(kind)


def parse_settings(
    raw: object, path: str = "loopwatch", base: DetectorSettings | None = None
) -> tuple[DetectorSettings, list[ConfigProblem]]:
    """Settings from a ``loopwatch`` object over ``base``, with every problem found."""
    base = base or DetectorSettings()
    if raw is None:
        return base, []
    if not isinstance(raw, dict):
        return base, [ConfigProblem(path, "must be an object")]
    problems: list[ConfigProblem] = []
    values: dict[str, Any] = {}
    for key, value in raw.items():
        spec = _FIELDS.get(key)
        if spec is None:
            problems.append(ConfigProblem(f"{path}.{key}", "unknown key"))
            continue
        attr, kind = spec
        error = _check(kind, value)
        if error:
            problems.append(ConfigProblem(f"{path}.{key}", error))
        else:
            values[attr] = frozenset(value) if kind == "strings" else value
    if problems:
        return base, problems
    return _replace(base, values), []


def _replace(base: DetectorSettings, values: dict[str, Any]) -> DetectorSettings:
    current = {name: getattr(base, name) for name in DetectorSettings.__slots__}
    current.update(values)
    return DetectorSettings(**current)
