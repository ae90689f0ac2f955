"""loopwatch's own detector settings, kept beside ``tools.loopDetection`` (spec §11).

In a config file they live under the top-level key ``loopwatch``::

    {"tools": {"loopDetection": {"enabled": true}},
     "loopwatch": {"digest": "sha256", "criticalBlocksBeforeAbort": 1}}
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

import msgspec
from msgspec import Meta

from loopwatch.config.errors import ConfigProblem
from loopwatch.config.struct_decoding import decode_struct

__all__ = ["REVISIONS", "DetectorSettings", "Digest", "Revision", "parse_settings"]

Digest = Literal["xxh3", "sha256"]
Revision = Literal["2026-08", "2026-05"]

#: OpenClaw rule revisions loopwatch implements; the first is the default.
REVISIONS: tuple[Revision, ...] = get_args(Revision)


class DetectorSettings(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    """Settings of the loopwatch profile that OpenClaw's config has no field for.

    Declared once: the file names are the camelCase field names (``criticalBlocksBeforeAbort``),
    the constraints are the fields' ``Meta``; :func:`parse_settings` decodes a ``loopwatch``
    object against them, key by key.

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
    critical_blocks_before_abort: Annotated[int, Meta(ge=0)] = 1
    recovery_abort: bool = True
    observe_only: bool = False
    provider_send_tools: frozenset[Annotated[str, Meta(min_length=1)]] = frozenset()
    seen_event_ids: Annotated[int, Meta(ge=256)] = 256
    max_event_bytes: Annotated[int, Meta(gt=0)] = 1_048_576
    openclaw_revision: Revision = "2026-08"
    churn_stale_after_s: Annotated[int, Meta(ge=0)] = 300

    @property
    def revision(self) -> Revision:
        """The OpenClaw rule revision that applies (``openclawRevision``)."""
        return self.openclaw_revision

    def as_dict(self) -> dict[str, Any]:
        """The settings under their file names (``providerSendTools`` sorted)."""
        encoded: dict[str, Any] = msgspec.to_builtins(self, order="deterministic")
        return encoded


def parse_settings(
    raw: object, path: str = "loopwatch", base: DetectorSettings | None = None
) -> tuple[DetectorSettings, list[ConfigProblem]]:
    """Settings from a ``loopwatch`` object over ``base``, with every problem found.

    ``detectors`` (loopwatch's own rules, :mod:`config.own_rules`) is read elsewhere.
    """
    base = base or DetectorSettings()
    if raw is None:
        return base, []
    problems: list[ConfigProblem] = []
    parsed = decode_struct(
        raw, DetectorSettings, path, problems, base=base, also_known=("detectors", "preset")
    )
    return (base, problems) if parsed is None else (parsed, problems)
