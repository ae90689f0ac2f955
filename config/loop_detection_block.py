"""OpenClaw's ``tools.loopDetection`` block, declared once (spec §6.1).

The Structs below are the declaration of a block's keys: their file names, types, ``Meta``
constraints and descriptions, the values resolution falls back to (each key's documented
``default``, read by :func:`defaults`) and the two cross-field rules (``ordered``, in
OpenClaw's own sentence). :func:`config.loop_detection.validate_block` decodes a block against
them; resolution works on the plain ``dict`` (an agent's block is merged over the global one
key by key).

Every key may be left out (``msgspec.UNSET``), and left out differs from any value: ``enabled``
unset, ``false`` and ``true`` are three things, and the threshold order is checked between the
thresholds a block sets itself only (resolution raises the others). This module defines msgspec
Structs, so it stays interpreted (not in setup.py's list).
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, get_args, get_origin

import msgspec
from msgspec import UNSET, Meta, UnsetType

__all__ = ["LoopDetection", "LoopDetectionDetectors", "PostCompactionGuard", "defaults"]


def _positive(default: int, description: str) -> Meta:
    """A positive integer's ``Meta``, with the value resolution falls back to."""
    return Meta(gt=0, description=description, extra_json_schema={"default": default})


def _switch(description: str) -> Meta:
    """A detector's switch: on unless ``false``."""
    return Meta(description=description, extra_json_schema={"default": True})


class LoopDetectionDetectors(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    """``detectors``: OpenClaw's detectors switched one by one (each on unless ``false``)."""

    generic_repeat: (
        Annotated[bool, _switch("The same call repeated (warning), or with identical outcomes (critical).")]
        | UnsetType
    ) = UNSET
    known_poll_no_progress: (
        Annotated[
            bool, _switch("A known poll (command_status, process poll or log) with identical outcomes.")
        ]
        | UnsetType
    ) = UNSET
    ping_pong: (
        Annotated[
            bool, _switch("Two call patterns alternating (critical with identical outcomes on both sides).")
        ]
        | UnsetType
    ) = UNSET


class PostCompactionGuard(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    """``postCompactionGuard``: after a compaction retry, a run whose outcomes stay the same is
    aborted (``compaction_loop_persisted``). It runs unless ``enabled`` is exactly ``false``."""

    window_size: (
        Annotated[int, _positive(3, "Outcomes in a row, the same as the newest, that abort the run.")]
        | UnsetType
    ) = UNSET


class LoopDetection(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    """``tools.loopDetection`` (global) or an agent's: OpenClaw's loop detection. An agent's
    block is merged over the global one key by key; within a block, warningThreshold <
    criticalThreshold < globalCircuitBreakerThreshold."""

    enabled: (
        Annotated[
            bool,
            Meta(
                description="Rolling-history detection runs only when true. Unset: calls are still "
                "recorded and the post-compaction guard runs; false: neither."
            ),
        ]
        | UnsetType
    ) = UNSET
    history_size: (
        Annotated[int, _positive(30, "Records a run's history keeps (the oldest go first).")] | UnsetType
    ) = UNSET
    warning_threshold: (
        Annotated[int, _positive(10, "Repeats that give a warning; lower than criticalThreshold.")]
        | UnsetType
    ) = UNSET
    unknown_tool_threshold: (
        Annotated[int, _positive(10, "Calls in a row to a tool that does not exist before a block.")]
        | UnsetType
    ) = UNSET
    critical_threshold: (
        Annotated[
            int,
            _positive(
                20, "Repeats with identical outcomes that block; lower than globalCircuitBreakerThreshold."
            ),
        ]
        | UnsetType
    ) = UNSET
    global_circuit_breaker_threshold: (
        Annotated[int, _positive(30, "Identical no-progress outcomes of any call that block it.")] | UnsetType
    ) = UNSET
    detectors: LoopDetectionDetectors | UnsetType = UNSET
    post_compaction_guard: PostCompactionGuard | UnsetType = UNSET

    ordered: ClassVar[tuple[tuple[str, str], ...]] = (
        ("warning_threshold", "critical_threshold"),
        ("critical_threshold", "global_circuit_breaker_threshold"),
    )
    #: OpenClaw's own sentence (spec §6.1)
    order_message: ClassVar[str] = "tools.loopDetection.{low} must be lower than {high}."


def _metas(tp: Any) -> list[Meta]:
    if get_origin(tp) is Annotated:
        return [meta for meta in get_args(tp)[1:] if isinstance(meta, Meta)]
    return [meta for option in get_args(tp) for meta in _metas(option)]


def defaults(cls: type[msgspec.Struct]) -> dict[str, Any]:
    """The documented default of every key of ``cls`` that has one (file name -> value)."""
    found: dict[str, Any] = {}
    for info in msgspec.structs.fields(cls):
        for meta in _metas(info.type):
            if meta.extra_json_schema and "default" in meta.extra_json_schema:
                found[info.encode_name] = meta.extra_json_schema["default"]
    return found
