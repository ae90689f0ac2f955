"""Digest-only events (DESIGN §2): the same event with digests in place of its payloads.

A client that must not ship tool arguments or outputs hashes them where they are and sends
``args_digest``, ``known_poll``, ``result_digest`` and ``unknown_tool_name`` instead; under
revision 2026-08 also what the outcome was classified as (``outcome_kind``, ``no_progress``,
``failure_digest``). The client's ``digest`` and ``openclawRevision`` must be the workers'.
"""

from __future__ import annotations

import msgspec
from msgspec import UNSET

from loopwatch.config.settings import DetectorSettings
from loopwatch.detectors.events import ToolCall, ToolResult
from loopwatch.detectors.hashing import digester_for
from loopwatch.detectors.step import prepare

__all__ = ["digest_only"]


def digest_only(event: ToolCall | ToolResult, settings: DetectorSettings) -> ToolCall | ToolResult:
    """``event`` with its params, result and error replaced by their digests."""
    revision = settings.openclaw_revision
    prepared = prepare(event, digester_for(settings.digest), settings.provider_send_tools, revision)
    args_digest = prepared.args_hash[len(event.tool) + 1 :]  # argsHash is "{tool}:{digest}"
    if isinstance(event, ToolCall):
        return msgspec.structs.replace(
            event, params=UNSET, args_digest=args_digest, known_poll=prepared.known_poll
        )
    return msgspec.structs.replace(
        event,
        params=UNSET,
        result=UNSET,
        error=UNSET,
        args_digest=args_digest,
        result_digest=prepared.result_hash,
        unknown_tool_name=prepared.unknown_tool_name,
        outcome_kind=prepared.kind if revision == "2026-08" else None,
        no_progress=prepared.no_progress,
        failure_digest=prepared.failure_id,
    )
