"""The core step: ``apply(state, event, config) -> outputs`` (DESIGN §4, spec §7, §8, §11).

Rules, per event of one run scope:

* An ``event_id`` the run has already seen is ignored entirely (E4).
* ``tool_call``: detect for the proposed call against the run's history (§5). A critical is
  published and blocks the call, which is then not recorded (§7.3); the run's critical
  beyond its recovery budget is followed by an abort (E1). A warning is published only if it
  passes de-duplication (§7.2, D1). Unless blocked, the call is recorded (unless ``enabled``
  is exactly ``false``).
* ``tool_result``: the outcome is hashed (§3.3) and recorded (§4.2), also for a blocked call
  (E5); an outcome with a hash feeds the post-compaction guard, which may abort (E3).
* ``compaction_retry`` arms the guard. ``run_end`` changes nothing here: the shell drops the
  state.

Observe-only (shadow rollout): verdicts carry ``enforced: false`` and critical calls are
recorded as if they had run. The step reads no clock and makes no ids of its own: ``ts``
comes from the event and ``verdict_id`` is a hash of the scope, trigger event and kind.
"""

from __future__ import annotations

from typing import Any

import xxhash
from msgspec import UNSET

from config.fleet import FleetConfig
from config.loop_detection import ResolvedLoopDetection
from detectors import escalation
from detectors.compaction_guard import DETECTOR as GUARD_REASON
from detectors.compaction_guard import GuardVerdict
from detectors.detection import Detection, detect
from detectors.events import (
    Abort,
    CompactionRetry,
    Event,
    Output,
    RunEnd,
    ToolCall,
    ToolResult,
    Verdict,
    run_scope,
)
from detectors.hashing import Digester, digester_for
from detectors.outcomes import MISSING, ErrorMessage, hash_outcome, is_known_poll
from detectors.stable_json import canonical_bytes
from detectors.state import RunState
from detectors.warning_buckets import should_emit

__all__ = ["Prepared", "apply", "new_state", "prepare", "record_outcome", "verdict_id"]


def verdict_id(scope: str, trigger_event_id: str, kind: str) -> str:
    """Deterministic id: the same trigger in the same run gives the same id."""
    return xxhash.xxh3_128_hexdigest(f"{scope}\x1f{trigger_event_id}\x1f{kind}".encode())


def new_state(event: Event, config: FleetConfig) -> RunState:
    """An empty state for the run scope of ``event``."""
    run_id = event.run_id.strip() if event.run_id and event.run_id.strip() else None
    return RunState(
        run_scope(event), event.agent_id, run_id, event.session_id, config.settings.seen_event_ids
    )


class Prepared:
    """The hashes of a call or result event, computable before the state is at hand."""

    __slots__ = ("args_hash", "known_poll", "result_hash", "unknown_tool_name")

    def __init__(
        self,
        args_hash: str,
        known_poll: bool = False,
        result_hash: str | None = None,
        unknown_tool_name: str | None = None,
    ) -> None:
        self.args_hash = args_hash
        self.known_poll = known_poll
        self.result_hash = result_hash
        self.unknown_tool_name = unknown_tool_name


def prepare(event: ToolCall | ToolResult, digester: Digester, send_tools: frozenset[str]) -> Prepared:
    """Hash one event: its ``argsHash`` and, for a result, its outcome (spec §3)."""
    tool = event.tool
    params: Any = event.params
    digest_only = params is UNSET
    if digest_only:
        params = None
        args_hash = f"{tool}:{event.args_digest}"
    elif tool == "update_plan":
        args_hash = digester.args_hash(tool, params)
    else:
        args_hash = f"{tool}:{digester.hex(canonical_bytes(params))}"
    if isinstance(event, ToolCall):
        if event.known_poll is not UNSET:
            known = bool(event.known_poll)
        else:
            known = False if digest_only else is_known_poll(tool, params)
        return Prepared(args_hash, known)
    if event.result_digest is not UNSET:
        return Prepared(
            args_hash, result_hash=event.result_digest or None, unknown_tool_name=event.unknown_tool_name
        )
    error: Any = event.error
    if error is UNSET or error is None:
        error = MISSING
    elif isinstance(error, str):
        error = ErrorMessage(error)
    result = MISSING if event.result is UNSET else event.result
    result_hash, unknown = hash_outcome(tool, params, result, error, digester, send_tools)
    return Prepared(args_hash, result_hash=result_hash, unknown_tool_name=unknown)


def apply(
    state: RunState, event: Event, config: FleetConfig, prepared: Prepared | None = None
) -> list[Output]:
    """Apply one event of the state's run scope; the verdicts and aborts it gives, in order."""
    if not state.remember(event.event_id):
        return []
    state.events += 1
    ts = event.ts
    if ts is not None and (state.last_ts is None or ts > state.last_ts):
        state.last_ts = ts
    kind = type(event)
    if kind is ToolCall or kind is ToolResult:
        settings = config.settings
        if prepared is None:
            prepared = prepare(event, digester_for(settings.digest), settings.provider_send_tools)  # type: ignore[arg-type]
        resolved = config.for_agent(event.agent_id)
        if kind is ToolCall:
            return _on_call(state, event, prepared, resolved, config)  # type: ignore[arg-type]
        return _on_result(state, event, prepared, resolved, settings.observe_only)  # type: ignore[arg-type]
    if isinstance(event, CompactionRetry):
        resolved = config.for_agent(event.agent_id)
        if resolved.guard_enabled:
            state.guard.arm(resolved.guard_window)
        return []
    assert isinstance(event, RunEnd)
    return []


def _on_call(
    state: RunState,
    event: ToolCall,
    prepared: Prepared,
    resolved: ResolvedLoopDetection,
    config: FleetConfig,
) -> list[Output]:
    settings = config.settings
    history = state.history
    found = detect(history, event.tool, prepared.args_hash, prepared.known_poll, resolved)
    outputs: list[Output] = []
    blocked = False
    if found is not None:
        if found.critical:
            outputs.append(_verdict(state, event, found, "block", settings.observe_only))
            blocked = not settings.observe_only
            state.criticals += 1
            if escalation.recovery_exhausted(state.criticals, state.recovery_aborted, settings):
                state.recovery_aborted = True
                outputs.append(
                    _abort(state, event, escalation.REASON, None, escalation.MESSAGE, settings.observe_only)
                )
        else:
            key = f"{state.run_id}:{found.warning_key}" if state.run_id else found.warning_key
            if should_emit(state.buckets, key, found.count, resolved.warning_threshold):
                outputs.append(_verdict(state, event, found, "warn", settings.observe_only))
    if not blocked and resolved.records_calls:
        history.append(
            event.tool,
            prepared.args_hash,
            event.tool_call_id,
            None,
            None,
            event.ts,
            resolved.history_size,
        )
    return outputs


def _verdict(state: RunState, event: ToolCall, found: Detection, action: str, observe_only: bool) -> Output:
    return Verdict(
        verdict_id=verdict_id(state.scope, event.event_id, "verdict"),
        run_id=state.run_id,
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
    )


def _on_result(
    state: RunState,
    event: ToolResult,
    prepared: Prepared,
    resolved: ResolvedLoopDetection,
    observe_only: bool,
) -> list[Output]:
    verdict = record_outcome(state, event.tool, event.tool_call_id, event.ts, prepared, resolved)
    if verdict is None or not verdict.should_abort:
        return []
    return [_abort(state, event, GUARD_REASON, verdict.count, verdict.message or "", observe_only)]


def _abort(
    state: RunState,
    event: ToolCall | ToolResult,
    reason: str,
    count: int | None,
    message: str,
    observe_only: bool,
) -> Abort:
    return Abort(
        verdict_id=verdict_id(state.scope, event.event_id, "abort"),
        run_id=state.run_id,
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


def record_outcome(
    state: RunState,
    tool: str,
    tool_call_id: str | None,
    ts: int | None,
    prepared: Prepared,
    resolved: ResolvedLoopDetection,
) -> GuardVerdict | None:
    """Record an outcome (spec §4.2) and feed the guard; ``None`` when it had no hash."""
    result_hash = prepared.result_hash
    if result_hash is None:
        return None
    history = state.history
    pending = history.find_pending(prepared.args_hash, tool_call_id or None)
    if pending is not None:
        history.fill(pending, result_hash, prepared.unknown_tool_name)
    else:
        history.append(
            tool,
            prepared.args_hash,
            tool_call_id,
            result_hash,
            prepared.unknown_tool_name,
            ts,
            resolved.history_size,
        )
    return state.guard.observe(resolved.guard_enabled, tool, prepared.args_hash, result_hash)
