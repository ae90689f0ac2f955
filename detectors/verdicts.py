"""The outputs a run's step publishes: verdicts and aborts, with deterministic ids.

The step reads no clock and makes no ids of its own: ``ts`` comes from the trigger event and
``verdict_id`` is a hash of the run scope, the trigger event and the output's kind, so the
same trigger in the same run always gives the same id (a redelivered event re-publishes the
same verdicts, which consumers de-duplicate by id).
"""

from __future__ import annotations

from typing import Final

import xxhash

from loopwatch.detectors import escalation
from loopwatch.detectors.events import Abort, ToolCall, ToolResult, Verdict, VerdictAction
from loopwatch.detectors.rules.base import Detection

__all__ = ["new_abort", "new_verdict", "verdict_id"]

#: the abort reasons whose ids are ``…\x1fabort`` (as they always were); every other reason's
#: id kind is ``abort:<reason>``, since one call can abort a run for several reasons at once
_PLAIN_ABORT_KINDS: Final = frozenset({escalation.REASON, "compaction_loop_persisted"})  # the guard's


def verdict_id(scope: str, trigger_event_id: str, kind: str) -> str:
    """Deterministic id: the same trigger in the same run gives the same id."""
    return xxhash.xxh3_128_hexdigest(f"{scope}\x1f{trigger_event_id}\x1f{kind}".encode())


def new_verdict(
    scope: str,
    run_id: str | None,
    event: ToolCall,
    found: Detection,
    action: VerdictAction,
    observe_only: bool,
) -> Verdict:
    """The verdict ``found`` gives the proposed call (``action``: ``warn`` or ``block``)."""
    return Verdict(
        verdict_id=verdict_id(scope, event.event_id, "verdict"),
        run_id=run_id,
        agent_id=event.agent_id,
        session_id=event.session_id,
        tool_call_id=event.tool_call_id,
        trigger_event_id=event.event_id,
        level=found.level,
        action=action,
        detector=found.detector,
        count=found.count,
        message=found.message,
        warning_key=found.warning_key,
        paired_tool=found.paired_tool,
        tool=event.tool,
        ts=event.ts,
        enforced=not observe_only,
        liveness_signal=found.liveness_signal,
    )


def fleet_block(
    scope: str, event: ToolCall, detector: str, count: int, message: str, warning_key: str, observe_only: bool
) -> Verdict:
    """A fleet rule's block of one proposed call (F1's fail-fast, F6's chain blocks): critical,
    outside the run's escalation, its id from the detector."""
    return Verdict(
        verdict_id=verdict_id(scope, event.event_id, detector),
        run_id=event.run_id,
        agent_id=event.agent_id,
        session_id=event.session_id,
        tool_call_id=event.tool_call_id,
        trigger_event_id=event.event_id,
        level="critical",
        action="block",
        detector=detector,
        count=count,
        message=message,
        warning_key=warning_key,
        paired_tool=None,
        tool=event.tool,
        ts=event.ts,
        enforced=not observe_only,
    )


def new_abort(
    scope: str,
    run_id: str | None,
    event: ToolCall | ToolResult,
    reason: str,
    count: int | None,
    message: str,
    observe_only: bool,
) -> Abort:
    """The run's abort for ``reason``, triggered by ``event``."""
    kind = "abort" if reason in _PLAIN_ABORT_KINDS else f"abort:{reason}"
    return Abort(
        verdict_id=verdict_id(scope, event.event_id, kind),
        run_id=run_id,
        agent_id=event.agent_id,
        session_id=event.session_id,
        trigger_event_id=event.event_id,
        reason=reason,
        tool=event.tool,
        count=count,
        message=message,
        ts=event.ts,
        enforced=not observe_only,
    )
