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

from loopwatch.config.fleet import FleetConfig
from loopwatch.config.loop_detection import ResolvedLoopDetection
from loopwatch.config.own_rules import OwnRules
from loopwatch.config.settings import DetectorSettings
from loopwatch.detectors import churn_liveness, escalation
from loopwatch.detectors.compaction_guard import DETECTOR as GUARD_REASON
from loopwatch.detectors.compaction_guard import GuardVerdict
from loopwatch.detectors.detection import Detection, detect
from loopwatch.detectors.events import (
    Abort,
    CompactionRetry,
    Event,
    Output,
    RunEnd,
    ToolCall,
    ToolResult,
    Usage,
    Verdict,
    run_scope,
)
from loopwatch.detectors.hashing import Digester, digester_for
from loopwatch.detectors.outcomes import MISSING, VETO, ErrorMessage, OutcomeHash, hash_outcome, is_known_poll
from loopwatch.detectors.rules import argument_churn, edit_undo, loop_budget, run_no_progress
from loopwatch.detectors.stable_json import canonical_bytes
from loopwatch.detectors.state import RunState
from loopwatch.detectors.warning_buckets import should_emit

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
    event: ToolCall | ToolResult, digester: Digester, send_tools: frozenset[str], newest: bool = False
) -> Prepared:
    """Hash one event: its ``argsHash`` and, for a result, its outcome (spec §3).

    ``newest`` classifies outcomes by the rules of revision 2026-08.
    """
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
        result_digest = event.result_digest or None
        if not newest:
            return Prepared(args_hash, result_hash=result_digest, unknown_tool_name=event.unknown_tool_name)
        return Prepared(
            args_hash,
            False,
            result_digest,
            event.unknown_tool_name,
            event.outcome_kind,
            event.no_progress,
            event.failure_digest,
        )
    error: Any = event.error
    if error is UNSET or error is None:
        error = MISSING
    elif isinstance(error, str):
        error = ErrorMessage(error)
    result = MISSING if event.result is UNSET else event.result
    return Prepared.outcome(
        args_hash, hash_outcome(tool, params, result, error, digester, send_tools, newest)
    )


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
        resolved = config.for_agent(event.agent_id)
        if prepared is None:
            prepared = prepare(
                event,  # type: ignore[arg-type]
                digester_for(settings.digest),
                settings.provider_send_tools,
                resolved.newest,
            )
        if kind is ToolCall:
            outputs = _on_call(state, event, prepared, resolved, config)  # type: ignore[arg-type]
        else:
            outputs = _on_result(state, event, prepared, resolved, settings)  # type: ignore[arg-type]
        if outputs and state.aborted is None:
            _note_abort(state, outputs)
        return outputs
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
    tool = event.tool
    args_hash = prepared.args_hash
    found = detect(history, tool, args_hash, prepared.known_poll, resolved)
    rules = resolved.rules
    if rules.run_no_progress or rules.edit_undo:
        found = _own_rules(state, event, found, rules)
    found, budget = _spend(state, event.usage, found, rules.loop_budget_usd)
    outputs: list[Output] = []
    blocked = _emit(state, event, found, resolved, settings, outputs)
    if (
        budget is not None
        and not state.budget_aborted
        and loop_budget.reached(state.loop_spend_usd, 2 * budget)
    ):
        state.budget_aborted = True
        cents = round(state.loop_spend_usd * 100)
        message = loop_budget.abort_message(state.loop_spend_usd, budget)
        outputs.append(_abort(state, event, loop_budget.ABORT_REASON, cents, message, settings.observe_only))
    stale_limit = _stale_limit(settings, resolved)
    if stale_limit and not blocked:
        if found is not None and found.detector == argument_churn.DETECTOR:
            churn = found.count
        else:
            churn = argument_churn.evaluate(history, tool, args_hash)[0]
        churn_liveness.after_call(state, churn, resolved.warning_threshold, event.ts)
    if blocked:
        if resolved.newest:  # the blocked call leaves a veto record (2026-08)
            history.append(
                tool, args_hash, event.tool_call_id, None, None, event.ts, resolved.history_size, VETO
            )
    elif resolved.records_calls:
        history.append(tool, args_hash, event.tool_call_id, None, None, event.ts, resolved.history_size)
    if stale_limit and state.churn_since is not None:
        _stale_churn_abort(state, event, stale_limit, settings.observe_only, outputs)
    return outputs


def _own_rules(
    state: RunState, event: ToolCall, found: Detection | None, rules: OwnRules
) -> Detection | None:
    """``found`` (OpenClaw's rules) or a verdict of ``run_no_progress`` / ``edit_undo``.

    A critical wins over a warning; between equals, OpenClaw's rules come first, then
    ``run_no_progress``, then ``edit_undo``. ``edit_undo`` counts every write and edit.
    """
    own: list[Detection] = []
    if rules.run_no_progress:
        count = run_no_progress.count(state)
        window, warning = rules.run_no_progress_window, rules.run_no_progress_warning
        if count >= warning:
            tools = run_no_progress.tools_in(state, count)
            critical = count >= window
            message = (run_no_progress.critical_message if critical else run_no_progress.warning_message)(
                count, tools
            )
            level = "critical" if critical else "warning"
            key = run_no_progress.warning_key()
            own.append(Detection.own(level, run_no_progress.DETECTOR, count, message, key, warning))
    if rules.edit_undo and event.params is not UNSET:
        change = edit_undo.observe_call(state, event.tool, event.params)
        if change is not None and change[1] >= rules.edit_undo_warning:
            path, count = change
            critical = count >= rules.edit_undo_critical
            message = (edit_undo.critical_message if critical else edit_undo.warning_message)(path, count)
            level = "critical" if critical else "warning"
            key = edit_undo.warning_key(path)
            own.append(Detection.own(level, edit_undo.DETECTOR, count, message, key, rules.edit_undo_warning))
    if not own or (found is not None and found.critical):
        return found
    for detection in own:
        if detection.critical:
            return detection
    return found if found is not None else own[0]


def _spend(
    state: RunState, usage: Usage | None, found: Detection | None, budget: float | None
) -> tuple[Detection | None, float | None]:
    """Count a call's usage; the call's verdict (the budget's, when the loop spend reaches it).

    The loop spend counts from the run's first verdict on, the call that gets it included.
    Also returns the budget while the loop spend is at or above it (for the abort at twice).
    """
    if found is not None and state.first_detector is None:
        state.first_detector = found.detector
    in_loop = state.first_detector is not None
    if usage is not None:
        cost = usage.cost_usd
        state.spend_usd += cost
        # bounded: a run's sums stay storable (int64), whatever its calls claim
        state.input_tokens = min(state.input_tokens + usage.input_tokens, _INT64_MAX)
        state.output_tokens = min(state.output_tokens + usage.output_tokens, _INT64_MAX)
        if in_loop:
            state.loop_spend_usd += cost
    if budget is None or not in_loop or not loop_budget.reached(state.loop_spend_usd, budget):
        return found, None
    if not state.budget_fired and (found is None or not found.critical):
        state.budget_fired = True
        message = loop_budget.critical_message(state.loop_spend_usd, budget)
        cents = round(state.loop_spend_usd * 100)
        found = Detection.own("critical", loop_budget.DETECTOR, cents, message, loop_budget.warning_key(), 0)
    return found, budget


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
    if not found.critical:
        key = f"{state.run_id}:{found.warning_key}" if state.run_id else found.warning_key
        if should_emit(state.buckets, key, found.count, found.bucket or resolved.warning_threshold):
            outputs.append(_verdict(state, event, found, "warn", settings.observe_only))
        return False
    outputs.append(_verdict(state, event, found, "block", settings.observe_only))
    state.criticals += 1
    if escalation.recovery_exhausted(state.criticals, state.recovery_aborted, settings):
        state.recovery_aborted = True
        outputs.append(
            _abort(state, event, escalation.REASON, None, escalation.MESSAGE, settings.observe_only)
        )
    return not settings.observe_only


def _stale_churn_abort(
    state: RunState, event: ToolCall | ToolResult, limit_s: int, observe_only: bool, outputs: list[Output]
) -> None:
    elapsed = churn_liveness.stale_for(state, event.ts, limit_s)
    if elapsed is not None:
        outputs.append(
            _abort(
                state,
                event,
                churn_liveness.REASON,
                None,
                churn_liveness.message(event.tool, elapsed, limit_s),
                observe_only,
            )
        )


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
        liveness_signal=found.liveness_signal,
    )


def _on_result(
    state: RunState,
    event: ToolResult,
    prepared: Prepared,
    resolved: ResolvedLoopDetection,
    settings: DetectorSettings,
) -> list[Output]:
    observe_only = settings.observe_only
    verdict = record_outcome(state, event.tool, event.tool_call_id, event.ts, prepared, resolved)
    rules = resolved.rules
    if rules.run_no_progress and prepared.result_hash is not None:
        run_no_progress.observe(state, event.tool, prepared.result_hash, rules.run_no_progress_window)
    outputs: list[Output] = []
    if verdict is not None and verdict.should_abort:
        outputs.append(_abort(state, event, GUARD_REASON, verdict.count, verdict.message or "", observe_only))
    if state.churn_since is None:  # no churn lease running (always so under 2026-05)
        return outputs
    stale_limit = _stale_limit(settings, resolved)
    if stale_limit:
        if prepared.result_hash is not None:
            churn_liveness.after_outcome(state, state.history, event.tool, prepared.args_hash)
        _stale_churn_abort(state, event, stale_limit, observe_only, outputs)
    return outputs


def _stale_limit(settings: DetectorSettings, resolved: ResolvedLoopDetection) -> int:
    """Seconds of churn that abort a run; 0 when the stale-churn abort does not apply."""
    return settings.churn_stale_after_s if resolved.newest and resolved.enabled else 0


_INT64_MAX = 2**63 - 1


def _note_abort(state: RunState, outputs: list[Output]) -> None:
    """Remember the run's first enforced abort (the run's decisions stay that abort)."""
    for output in outputs:
        if type(output) is Abort and output.enforced:
            state.aborted = (output.reason, output.message)
            return


def _abort_kind(reason: str) -> str:
    """The id kind of an abort: one call can abort a run for several reasons at once (a
    stale churn or a spent budget besides the recovery), each needs its own id; the ids of
    the first two reasons are as they always were."""
    if reason == escalation.REASON or reason == GUARD_REASON:
        return "abort"
    return f"abort:{reason}"


def _abort(
    state: RunState,
    event: ToolCall | ToolResult,
    reason: str,
    count: int | None,
    message: str,
    observe_only: bool,
) -> Abort:
    return Abort(
        verdict_id=verdict_id(state.scope, event.event_id, _abort_kind(reason)),
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
    """Record an outcome (spec §4.2) and feed the guard; ``None`` when it had no hash.

    An outcome with neither a result hash nor a kind is not recorded. One with a kind but
    no hash (a veto, 2026-08) is recorded but never seen by the guard.
    """
    result_hash = prepared.result_hash
    kind = prepared.kind
    if result_hash is None and kind is None:
        return None
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
    if result_hash is None:
        return None
    return state.guard.observe(resolved.guard_enabled, tool, prepared.args_hash, result_hash)
