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

The rules themselves (what each detects, what each keeps) are the registry's
(:mod:`detectors.rules.registry`, :mod:`detectors.rules.base`); the step orders them: hashes
once, asks the rules at a call, publishes the verdict (de-duplicating warnings, escalating
criticals), records the call and the outcome, keeps the run's first enforced abort.

Observe-only (shadow rollout): verdicts carry ``enforced: false`` and critical calls are
recorded as if they had run. The step reads no clock and makes no ids of its own
(:mod:`detectors.verdicts`).
"""

from __future__ import annotations

from typing import Any, Final

import msgspec
from msgspec import UNSET

from loopwatch.config.fleet import FleetConfig
from loopwatch.config.loop_detection import ResolvedLoopDetection
from loopwatch.config.settings import DetectorSettings, Revision
from loopwatch.detectors import escalation, raw_json
from loopwatch.detectors.event_fields import CALL, RESULT, fields_of
from loopwatch.detectors.events import (
    Abort,
    CompactionRetry,
    Event,
    Output,
    RunEnd,
    ToolCall,
    ToolResult,
    chain_of,
    run_scope,
)
from loopwatch.detectors.hashing import Digester, digester_for
from loopwatch.detectors.history import History
from loopwatch.detectors.outcomes import MISSING, VETO, ErrorMessage, OutcomeHash, hash_outcome, is_known_poll
from loopwatch.detectors.rules.base import CallContext, Detection, ResultContext
from loopwatch.detectors.rules.post_compaction_guard import DETECTOR as GUARD
from loopwatch.detectors.rules.post_compaction_guard import GuardVerdict, PostCompactionGuard
from loopwatch.detectors.rules.registry import REGISTRY, Hooks
from loopwatch.detectors.stable_json import canonical_bytes, plain
from loopwatch.detectors.state import RunState
from loopwatch.detectors.verdicts import new_abort, new_verdict, verdict_id
from loopwatch.detectors.warning_buckets import should_emit

__all__ = [
    "Prepared",
    "apply",
    "ask_rules",
    "new_state",
    "prepare",
    "prepare_for",
    "record_outcome",
    "verdict_id",
]

# Compiled, a module's own Final names are C statics; a name imported from an interpreted
# module (msgspec's UNSET, the event Structs) is a dict lookup at every use.
_UNSET: Final = UNSET
_MISSING: Final = MISSING
_TOOL_CALL: Final = ToolCall
_TOOL_RESULT: Final = ToolResult
_RAW: Final = msgspec.Raw
_ARGS_HASH: Final = raw_json.args_hash


def new_state(event: Event, config: FleetConfig, ts: int | None = None) -> RunState:
    """An empty state for the run scope of ``event``, its first event (at event time ``ts``,
    the event's own by default)."""
    run_id = event.run_id.strip() if event.run_id and event.run_id.strip() else None
    state = RunState(run_scope(event), event.agent_id, run_id, event.session_id, config.seen_event_ids)
    state.first_ts = ts if ts is not None else event.ts
    chain = chain_of(event)
    if chain is not None:
        state.depth = chain[2]
        state.root = chain[1]
    return state


class Prepared:
    """The hashes of a call or result event, computable before the state is at hand.

    For a result: its :data:`~detectors.outcomes.OutcomeHash` fields (``kind``,
    ``no_progress`` and ``failure_id`` only under revision 2026-08).
    """

    __slots__ = (
        "args_hash",
        "failure_id",
        "kind",
        "known_poll",
        "no_progress",
        "result_hash",
        "unknown_tool_name",
    )

    def __init__(
        self,
        args_hash: str,
        known_poll: bool = False,
        result_hash: str | None = None,
        unknown_tool_name: str | None = None,
        kind: str | None = None,
        no_progress: bool = False,
        failure_id: str | None = None,
    ) -> None:
        self.args_hash = args_hash
        self.known_poll = known_poll
        self.result_hash = result_hash
        self.unknown_tool_name = unknown_tool_name
        self.kind = kind
        self.no_progress = no_progress
        self.failure_id = failure_id

    @classmethod
    def outcome(cls, args_hash: str, outcome: OutcomeHash) -> Prepared:
        result_hash, unknown, kind, no_progress, failure_id = outcome
        return cls(args_hash, False, result_hash, unknown, kind, no_progress, failure_id)


def prepare(
    event: ToolCall | ToolResult,
    digester: Digester,
    send_tools: frozenset[str],
    revision: Revision = "2026-05",
    history: History | None = None,
    values: tuple[Any, ...] | None = None,
) -> Prepared:
    """Hash one event: its ``argsHash`` and, for a result, its outcome (spec §3).

    ``revision`` "2026-08" classifies outcomes by that revision's rules. ``history``: the run's,
    when at hand (a result answering the newest call with the same params takes its argsHash).
    ``values``: the event's :func:`~detectors.event_fields.fields_of`, when at hand.
    """
    is_call = type(event) is _TOOL_CALL
    if values is None:
        values = fields_of(event)
    at = CALL if is_call else RESULT
    tool: str = values[at.tool]
    params: Any = values[at.params]
    digest_only = params is _UNSET
    if digest_only:
        params = None
        args_hash = f"{tool}:{values[at.args_digest]}"
    elif (
        history is not None
        and not is_call
        and (answered := history.newest_call_hash(tool, values[at.tool_call_id], params, digester.hex_size))
        is not None
    ):
        args_hash = answered
    elif tool == "update_plan":
        args_hash = digester.args_hash(tool, plain(params))
    else:
        hashed = _ARGS_HASH(tool, params) if digester.xxh3 and type(params) is _RAW else None
        args_hash = hashed if hashed is not None else f"{tool}:{digester.hex(canonical_bytes(params))}"
    if is_call:
        known_poll = values[at.known_poll]
        if known_poll is not _UNSET:
            known = bool(known_poll)
        else:
            known = False if digest_only else is_known_poll(tool, params)
        return Prepared(args_hash, known)
    result_digest = values[at.result_digest]
    if result_digest is not _UNSET:
        result_digest = result_digest or None
        if revision != "2026-08":
            return Prepared(
                args_hash, result_hash=result_digest, unknown_tool_name=values[at.unknown_tool_name]
            )
        return Prepared(
            args_hash,
            False,
            result_digest,
            values[at.unknown_tool_name],
            values[at.outcome_kind],
            values[at.no_progress],
            values[at.failure_digest],
        )
    error: Any = values[at.error]
    if error is _UNSET or error is None:
        error = _MISSING
    elif isinstance(error, str):
        error = ErrorMessage(error)
    result = values[at.result]
    if result is _UNSET:
        result = _MISSING
    result_hash, unknown, kind, no_progress, failure_id = hash_outcome(
        tool, params, result, error, digester, send_tools, revision
    )
    return Prepared(args_hash, False, result_hash, unknown, kind, no_progress, failure_id)


def prepare_for(
    event: ToolCall | ToolResult,
    config: FleetConfig,
    resolved: ResolvedLoopDetection | None = None,
    history: History | None = None,
    values: tuple[Any, ...] | None = None,
) -> Prepared:
    """:func:`prepare` with the digest, send tools and rule revision ``config`` gives the
    event's agent (``resolved``, when at hand): the one way every shell hashes an event.
    ``history``: the run's, when the event is about to be applied to it; ``values``: as for
    :func:`prepare`."""
    if resolved is None:
        resolved = config.for_agent(event.agent_id)
    return prepare(
        event, digester_for(config.digest), config.provider_send_tools, resolved.revision, history, values
    )


def apply(
    state: RunState,
    event: Event,
    config: FleetConfig,
    prepared: Prepared | None = None,
    resolved: ResolvedLoopDetection | None = None,
    values: tuple[Any, ...] | None = None,
) -> list[Output]:
    """Apply one event of the state's run scope; the verdicts and aborts it gives, in order.

    ``prepared`` and ``resolved``: the event's hashes and its agent's config, when at hand;
    ``values``: a call's or result's :func:`~detectors.event_fields.fields_of`, when at hand."""
    kind = type(event)
    hashed = kind is _TOOL_CALL or kind is _TOOL_RESULT
    if hashed:  # (each field read once, from one tuple: see detectors.event_fields)
        if values is None:
            values = fields_of(event)  # type: ignore[arg-type]
        at = CALL if kind is _TOOL_CALL else RESULT
        event_id: str = values[at.event_id]
        ts: int | None = values[at.ts]
    else:
        event_id = event.event_id
        ts = event.ts
    if not state.remember(event_id, config.seen_event_ids):
        return []
    state.events += 1
    if ts is not None and (state.last_ts is None or ts > state.last_ts):
        state.last_ts = ts
    if hashed:
        assert values is not None
        settings = config.settings
        if resolved is None:
            resolved = config.for_agent(values[at.agent_id])
        if prepared is None:
            prepared = prepare_for(event, config, resolved, state.history, values)  # type: ignore[arg-type]
        tool: str = values[at.tool]
        call_id: str | None = values[at.tool_call_id]
        if kind is _TOOL_CALL:
            call: ToolCall = event  # type: ignore[assignment]
            outputs = _on_call(
                state, call, prepared, resolved, settings, tool, call_id, ts, values[at.params]
            )
        else:
            outputs = _on_result(state, event, prepared, resolved, settings, tool, call_id, ts)  # type: ignore[arg-type]
        if outputs and state.aborted is None:
            _note_abort(state, outputs)
        return outputs
    if isinstance(event, CompactionRetry):
        resolved = config.for_agent(event.agent_id)
        for rule in REGISTRY.for_config(resolved).on_compaction_retry:
            rule.on_compaction_retry(state, resolved)
        return []
    assert isinstance(event, RunEnd)
    return []


def _on_call(
    state: RunState,
    event: ToolCall,
    prepared: Prepared,
    resolved: ResolvedLoopDetection,
    settings: DetectorSettings,
    tool: str,
    call_id: str | None,
    ts: int | None,
    params: Any,
) -> list[Output]:
    ctx = CallContext(state, event, prepared.args_hash, prepared.known_poll, resolved, settings, tool)
    hooks = REGISTRY.for_config(resolved)
    found = ask_rules(ctx, hooks)
    outputs: list[Output] = []
    blocked = _emit(state, event, found, resolved, settings, outputs)
    for rule in hooks.after_call:
        rule.after_call(ctx, blocked, outputs)
    if blocked:
        if ctx.revision == "2026-08":  # the blocked call leaves a veto record
            state.history.append(
                tool,
                ctx.args_hash,
                call_id,
                None,
                None,
                ts,
                resolved.history_size,
                VETO,
            )
    elif resolved.records_calls:
        state.history.append(
            tool,
            ctx.args_hash,
            call_id,
            None,
            None,
            ts,
            resolved.history_size,
            params=None if params is _UNSET else params,
        )
    for rule in hooks.after_record:
        rule.after_record(ctx, outputs)
    return outputs


def ask_rules(ctx: CallContext, hooks: Hooks) -> Detection | None:
    """The proposed call's verdict (kept in ``ctx.found``), the one place the rules are
    ordered: OpenClaw's in turn until the first finds something, then every one of
    loopwatch's own, each seeing what came before (the single step and the batch ask here)."""
    found: Detection | None = None
    if ctx.openclaw:
        for rule in hooks.openclaw_on_call:
            found = rule.on_call(ctx, None)
            if found is not None:
                break
    for rule in hooks.own_on_call:
        found = rule.on_call(ctx, found)
    ctx.found = found
    return found


def _emit(
    state: RunState,
    event: ToolCall,
    found: Detection | None,
    resolved: ResolvedLoopDetection,
    settings: DetectorSettings,
    outputs: list[Output],
) -> bool:
    """Publish the call's verdict (a critical also escalates); whether the call is blocked."""
    if found is None:
        return False
    observe_only = settings.observe_only
    if not found.critical:
        key = f"{state.run_id}:{found.warning_key}" if state.run_id else found.warning_key
        if should_emit(state.buckets, key, found.count, found.bucket or resolved.warning_threshold):
            outputs.append(new_verdict(state.scope, state.run_id, event, found, "warn", observe_only))
        return False
    outputs.append(new_verdict(state.scope, state.run_id, event, found, "block", observe_only))
    state.criticals += 1
    if escalation.recovery_exhausted(state.criticals, state.recovery_aborted, settings):
        state.recovery_aborted = True
        outputs.append(
            new_abort(
                state.scope, state.run_id, event, escalation.REASON, None, escalation.MESSAGE, observe_only
            )
        )
    return not observe_only


def _on_result(
    state: RunState,
    event: ToolResult,
    prepared: Prepared,
    resolved: ResolvedLoopDetection,
    settings: DetectorSettings,
    tool: str,
    call_id: str | None,
    ts: int | None,
) -> list[Output]:
    outputs: list[Output] = []
    if _record(state, tool, call_id, ts, prepared, resolved):
        ctx = ResultContext(
            state, event, prepared.args_hash, prepared.result_hash, prepared.kind, resolved, settings, tool
        )
        for rule in REGISTRY.for_config(resolved).on_result:
            rule.on_result(ctx, outputs)
    return outputs


def _note_abort(state: RunState, outputs: list[Output]) -> None:
    """Remember the run's first enforced abort (the run's decisions stay that abort)."""
    for output in outputs:
        if type(output) is Abort and output.enforced:
            state.aborted = (output.reason, output.message)
            return


def _record(
    state: RunState,
    tool: str,
    tool_call_id: str | None,
    ts: int | None,
    prepared: Prepared,
    resolved: ResolvedLoopDetection,
) -> bool:
    """Record an outcome (spec §4.2); ``False`` when it had neither a result hash nor a kind
    (it is not recorded). One with a kind but no hash is a veto record (2026-08)."""
    result_hash = prepared.result_hash
    kind = prepared.kind
    if result_hash is None and kind is None:
        return False
    history = state.history
    pending = history.find_pending(prepared.args_hash, tool_call_id or None)
    if pending is not None:
        history.fill(
            pending, result_hash, prepared.unknown_tool_name, kind, prepared.no_progress, prepared.failure_id
        )
    else:
        history.append(
            tool,
            prepared.args_hash,
            tool_call_id,
            result_hash,
            prepared.unknown_tool_name,
            ts,
            resolved.history_size,
            kind,
            prepared.no_progress,
            prepared.failure_id,
        )
    return True


def record_outcome(
    state: RunState,
    tool: str,
    tool_call_id: str | None,
    ts: int | None,
    prepared: Prepared,
    resolved: ResolvedLoopDetection,
) -> GuardVerdict | None:
    """Record an outcome and feed the post-compaction guard, as OpenClaw's own
    ``recordToolCallOutcome`` does (conformance sessions); ``None`` when it had no hash."""
    if not _record(state, tool, tool_call_id, ts, prepared, resolved) or prepared.result_hash is None:
        return None
    guard = state.rule_states.get(GUARD)
    if not isinstance(guard, PostCompactionGuard):
        return None
    return guard.observe(resolved.guard_enabled, tool, prepared.args_hash, prepared.result_hash)
