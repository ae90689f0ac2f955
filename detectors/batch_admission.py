"""Batch admission: the tool calls of one model turn decided together (openclaw-rules §7.6).

OpenClaw 2026.9 (``admitToolCallBatch`` and ``evaluateToolLoopCall`` in the shipped
``dist/agent-tools.before-tool-call-*.mjs``; source ``src/agents/tool-loop-admission.ts``)
admits an assistant turn's calls as one batch. :func:`admit_batch` does the same to one run's
state, and is the only place that decides a batch (every shell comes here through the run
engine: :meth:`detectors.run_engine.RunEngine.step_batch`):

* Calls whose ``event_id`` the run has already seen are passed over (E4); the others are
  the batch, in assistant order, and each is remembered by the run.
* **Evaluation**, against a *projection*: a copy of the run's history to which every
  evaluated call that was not refused is appended as a veto record (no result hash, kind
  ``tool-loop-veto``), without trimming to ``historySize``. Each call is asked the rules of
  the single step, in its order (OpenClaw's first match, then loopwatch's own), against the
  projection, so the third call of a batch sees the first two. The run itself is not
  changed by evaluation, except by what the rules note of a proposed call whatever becomes
  of it (the spend of its model turn, the file versions ``edit_undo`` tracks), as in the
  single step.
* The first enforced critical **refuses the batch**: no call of it is committed, and no
  later call is evaluated. The trigger gets its block verdict (and E1's abort when the run's
  recovery is spent); under revision 2026-08 every call of the batch with the trigger's
  arguments hash (OpenClaw's action key) leaves a veto record in the run's history, in
  assistant order, and the other calls leave nothing (2026-05 records no blocked call).
* The warnings of the calls evaluated (before the trigger too) are de-duplicated against the
  run's warning buckets in order and published as usual (OpenClaw updates the session's
  buckets at evaluation, a refused batch's warnings included).
* Otherwise the batch is **admitted**: each call, in assistant order, gets the verdict its
  evaluation found, and is then recorded as a pending call (trimmed to ``historySize``) with
  the single step's hooks around it (``after_call`` sees the calls before it committed, as
  OpenClaw reconciles churn at launch).

A batch of one call is the single step exactly: no projection is built, and the rules, the
verdict, the record and the hooks come in the same order. An observe-only critical refuses
nothing (published unenforced, the batch goes on). The fleet's blocks (F1's fail-fast, a
chain's: the run engine asks them, call by call) are per-call policies, as in OpenClaw's
runtime, where the loop admission of the batch comes first and the other policies block single
calls (``tests/unit/test_batch_admission.py`` checks that a batch of one does what the single
step does, fleet hooks included).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from msgspec import UNSET

from loopwatch.config.fleet import FleetConfig
from loopwatch.config.loop_detection import ResolvedLoopDetection
from loopwatch.config.settings import DetectorSettings
from loopwatch.detectors.events import Output, ToolCall, run_scope
from loopwatch.detectors.history import History
from loopwatch.detectors.outcomes import VETO
from loopwatch.detectors.rules.base import CallContext, Detection
from loopwatch.detectors.rules.registry import REGISTRY
from loopwatch.detectors.state import RunState
from loopwatch.detectors.step import Prepared, _emit, _note_abort, ask_rules, prepare_for

__all__ = [
    "SIBLING_MESSAGE",
    "BatchOutcome",
    "admit_batch",
    "batch_problem",
]

#: What a call refused with its batch is told (OpenClaw 2026.9's text for the siblings of the
#: call that triggered critical tool-loop recovery, ``completeToolLoopInterventionBatch``).
SIBLING_MESSAGE: Final = (
    "This tool was not executed because another call in the batch triggered critical tool-loop "
    "recovery. Reassess the task before choosing the next action."
)

#: the projection is never trimmed (OpenClaw pushes the projected records past ``historySize``)
_UNBOUNDED: Final = 1 << 62


class BatchOutcome:
    """What admitting one batch did: per call (in the batch's order) its ``outputs``, its
    hashes (``prepared``), whether it was ``applied`` (``False``: its event id was seen
    before) and ``evaluated`` (asked the rules: not the calls after the trigger, nor those
    not applied), and the verdict its evaluation ``found`` (published or not);
    ``refused_by``: the index of the call whose critical refused the batch (``None``:
    admitted); ``kind``: ``applied``, or ``late`` when the run had ended and had seen every
    call; ``loop_spend``: what the batch added to the run's loop spend."""

    __slots__ = (
        "applied",
        "calls",
        "evaluated",
        "found",
        "kind",
        "loop_spend",
        "outputs",
        "prepared",
        "refused_by",
    )

    def __init__(self, calls: list[ToolCall], kind: str = "applied") -> None:
        self.calls = calls
        self.kind = kind
        self.outputs: list[list[Output]] = [[] for _ in calls]
        self.prepared: list[Prepared | None] = [None] * len(calls)
        self.applied = [False] * len(calls)
        self.evaluated = [False] * len(calls)
        self.found: list[Detection | None] = [None] * len(calls)
        self.refused_by: int | None = None
        self.loop_spend = 0.0

    @property
    def refused(self) -> bool:
        return self.refused_by is not None

    def all_outputs(self) -> list[Output]:
        """Every call's outputs, in the batch's order."""
        return [output for outputs in self.outputs for output in outputs]


def batch_problem(calls: list[ToolCall]) -> str | None:
    """Why ``calls`` cannot be one batch (``None``: they can): none at all, or calls of several
    runs, or ``batch_id`` given twice differently."""
    if not calls:
        return "a batch holds at least one call"
    scope = run_scope(calls[0])
    batch = calls[0].batch_id
    for index, call in enumerate(calls):
        if run_scope(call) != scope:
            return f"call {index}: a batch's calls share one run ({scope!r}), this one is {run_scope(call)!r}"
        if isinstance(call.batch_id, str):
            if isinstance(batch, str) and call.batch_id != batch:
                return f"call {index}: batch_id {call.batch_id!r} differs from the batch's {batch!r}"
            batch = call.batch_id
    return None


def _projection(history: History) -> History:
    """A copy of ``history`` (records and indexes) that is never trimmed."""
    projected = History()
    for record in history.records:
        projected.append(
            record.tool,
            record.args_hash,
            record.tool_call_id,
            record.result_hash,
            record.unknown_tool_name,
            record.ts,
            _UNBOUNDED,
            record.kind,
            record.no_progress,
            record.failure_id,
        )
    return projected


def _evaluate(
    state: RunState,
    calls: list[ToolCall],
    batch: list[int],
    prepared: list[Prepared],
    resolved: list[ResolvedLoopDetection],
    settings: DetectorSettings,
    outcome: BatchOutcome,
) -> list[CallContext]:
    """Ask the rules for each call of ``batch`` against the projection, up to the first
    enforced critical (``outcome.refused_by``); the contexts of the calls evaluated."""
    real = state.history
    projected = _projection(real) if len(batch) > 1 else real  # one call: the single step
    contexts: list[CallContext] = []
    state.history = projected
    try:
        for index in batch:
            call, hashes = calls[index], prepared[index]
            ctx = CallContext(state, call, hashes.args_hash, hashes.known_poll, resolved[index], settings)
            found = ask_rules(ctx, REGISTRY.for_config(resolved[index]))
            contexts.append(ctx)
            outcome.evaluated[index] = True
            outcome.found[index] = found
            if found is not None and found.critical and not settings.observe_only:
                outcome.refused_by = index
                break
            if projected is not real:
                projected.append(
                    call.tool, hashes.args_hash, call.tool_call_id, None, None, call.ts, _UNBOUNDED, VETO
                )
    finally:
        state.history = real
    return contexts


def _settle(
    state: RunState,
    calls: list[ToolCall],
    batch: list[int],
    prepared: list[Prepared],
    resolved: list[ResolvedLoopDetection],
    settings: DetectorSettings,
    contexts: list[CallContext],
    outcome: BatchOutcome,
) -> None:
    """Publish each evaluated call's verdict (the batch's ``contexts``, in order) and commit
    what the batch leaves in the run: the admitted calls as pending records, or the refused
    batch's veto records."""
    history = state.history
    trigger = outcome.refused_by
    refused = trigger is not None
    for index, ctx in zip(batch, contexts, strict=False):  # the calls after the trigger: none
        call = calls[index]
        outputs = outcome.outputs[index]
        conf = resolved[index]
        hooks = REGISTRY.for_config(conf)
        ctx.history = history  # the hooks see the run's own history, the calls before committed
        blocked = _emit(state, call, ctx.found, conf, settings, outputs)
        for rule in hooks.after_call:
            rule.after_call(ctx, blocked or refused, outputs)
        if not refused:
            if conf.records_calls:
                params = call.params
                history.append(
                    call.tool,
                    ctx.args_hash,
                    call.tool_call_id,
                    None,
                    None,
                    call.ts,
                    conf.history_size,
                    params=None if params is UNSET else params,
                )
        elif index == trigger and ctx.revision == "2026-08":
            _record_vetoes(history, calls, batch, prepared, resolved, ctx.args_hash)
        for rule in hooks.after_record:
            rule.after_record(ctx, outputs)
        if outputs and state.aborted is None:
            _note_abort(state, outputs)


def _record_vetoes(
    history: History,
    calls: list[ToolCall],
    batch: list[int],
    prepared: list[Prepared],
    resolved: list[ResolvedLoopDetection],
    action_key: str,
) -> None:
    """A veto record for every call of the refused batch with the trigger's action key."""
    for index in batch:
        if prepared[index].args_hash == action_key:
            call = calls[index]
            history.append(
                call.tool,
                action_key,
                call.tool_call_id,
                None,
                None,
                call.ts,
                resolved[index].history_size,
                VETO,
            )


def admit_batch(
    state: RunState,
    calls: list[ToolCall],
    config: FleetConfig,
    prepared: Sequence[Prepared | None] | None = None,
) -> BatchOutcome:
    """Admit or refuse ``calls`` (one run's, in assistant order) as one batch; what it did.

    ``prepared``: the calls' hashes where at hand (computed here otherwise)."""
    outcome = BatchOutcome(calls)
    if prepared is not None:
        outcome.prepared = list(prepared)
    batch: list[int] = []
    seen_limit = config.settings.seen_event_ids
    for index, call in enumerate(calls):
        if not state.remember(call.event_id, seen_limit):
            continue
        state.events += 1
        ts = call.ts
        if ts is not None and (state.last_ts is None or ts > state.last_ts):
            state.last_ts = ts
        outcome.applied[index] = True
        batch.append(index)
    if not batch:
        return outcome
    settings = config.settings
    resolved = [config.for_agent(call.agent_id) for call in calls]
    ready: list[Prepared] = []
    for index, call in enumerate(calls):
        hashes = outcome.prepared[index]
        if hashes is None:
            hashes = outcome.prepared[index] = prepare_for(call, config, resolved[index])
        ready.append(hashes)
    contexts = _evaluate(state, calls, batch, ready, resolved, settings, outcome)
    _settle(state, calls, batch, ready, resolved, settings, contexts, outcome)
    return outcome
