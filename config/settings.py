"""loopwatch's own detector settings, kept beside ``tools.loopDetection`` (spec §11).

In a config file they live under the top-level key ``loopwatch``::

    {"tools": {"loopDetection": {"enabled": true}},
     "loopwatch": {"digest": "sha256", "criticalBlocksBeforeAbort": 1}}
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal, get_args

import msgspec
from msgspec import UNSET, Meta, UnsetType

from loopwatch.config.errors import ConfigProblem
from loopwatch.config.presets import PresetName
from loopwatch.config.rule_sections import Detectors
from loopwatch.config.struct_decoding import decode_struct

__all__ = ["REVISIONS", "DetectorSettings", "Digest", "LoopwatchSection", "Revision", "parse_settings"]

Digest = Literal["xxh3", "sha256"]
Revision = Literal["2026-08", "2026-05"]

#: OpenClaw rule revisions loopwatch implements; the first is the default.
REVISIONS: tuple[Revision, ...] = get_args(Revision)


class DetectorSettings(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    """Settings of the loopwatch profile that OpenClaw's config has no field for.

    Declared once: the file names are the camelCase field names (``criticalBlocksBeforeAbort``),
    the constraints and what each setting does are the fields' ``Meta``;
    :func:`parse_settings` decodes a ``loopwatch`` object against them, key by key.
    """

    digest: Annotated[
        Digest,
        Meta(description='"xxh3" (XXH3-128) or "sha256" (OpenClaw-identical hashes and warning keys).'),
    ] = "xxh3"
    critical_blocks_before_abort: Annotated[
        int,
        Meta(
            ge=0,
            description="Critical blocks a run may receive before the next critical also aborts it "
            "(1: the second critical aborts; 0: the first).",
        ),
    ] = 1
    recovery_abort: Annotated[bool, Meta(description="false: blocks only, never an abort.")] = True
    observe_only: Annotated[
        bool,
        Meta(
            description="Shadow rollout: every call is recorded, verdicts carry enforced: false and "
            "never block."
        ),
    ] = False
    provider_send_tools: Annotated[
        frozenset[Annotated[str, Meta(min_length=1)]],
        Meta(description="Tools a channel plugin classifies as sends (their results are delivery receipts)."),
    ] = frozenset()
    seen_event_ids: Annotated[
        int, Meta(ge=256, description="Event ids per run remembered to drop a redelivered event.")
    ] = 256
    max_event_bytes: Annotated[int, Meta(gt=0, description="Larger input records are invalid.")] = 1_048_576
    openclaw_revision: Annotated[
        Revision,
        Meta(
            description='OpenClaw\'s rules that apply: "2026-08" (argument churn, exec terminal failures, '
            'veto records) or "2026-05" (the rules before them).'
        ),
    ] = "2026-08"
    churn_stale_after_s: Annotated[
        int,
        Meta(
            ge=0,
            description="Under 2026-08, a run whose argument churn goes on this many seconds of event "
            "time without a progressing outcome is aborted (0: never).",
        ),
    ] = 300

    @property
    def revision(self) -> Revision:
        """The OpenClaw rule revision that applies (``openclawRevision``)."""
        return self.openclaw_revision

    def as_dict(self) -> dict[str, Any]:
        """The settings under their file names (``providerSendTools`` sorted)."""
        encoded: dict[str, Any] = msgspec.to_builtins(self, order="deterministic")
        return encoded


class LoopwatchSection(DetectorSettings, frozen=True, rename="camel", forbid_unknown_fields=True):
    """``loopwatch``: loopwatch's own section of the config file: its settings, its own rules
    (``detectors``) and a ``preset``. Declared here for the whole section; the settings are
    decoded as :class:`DetectorSettings`, the other two keys on their own."""

    detectors: Detectors | UnsetType = UNSET
    preset: PresetName | UnsetType = UNSET


#: the keys of a ``loopwatch`` section that are not settings (read on their own)
SECTION_KEYS: Final[tuple[str, ...]] = tuple(
    info.encode_name
    for info in msgspec.structs.fields(LoopwatchSection)
    if info.name not in DetectorSettings.__struct_fields__
)


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
    parsed = decode_struct(raw, DetectorSettings, path, problems, base=base, also_known=SECTION_KEYS)
    return (base, problems) if parsed is None else (parsed, problems)
