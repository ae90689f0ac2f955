"""``argument_churn_stale``: the churn lease and its abort (revision 2026-08; loopwatch's decision).

Argument churn (:mod:`detectors.rules.argument_churn`) only warns. A run that keeps churning
is still stuck, so it owns a clock, the *lease*:

* at a call that is let through, churn is evaluated for its arguments against the history
  before it: at the warning threshold the lease starts (if none is running) at the call's
  ``ts``; below it the lease ends;
* at an outcome, while a lease runs, churn is evaluated for the recorded call's arguments
  over the history that now includes it: any churn keeps the lease, none ends it (a novel
  argument or a distinct result is progress);
* the first event whose ``ts`` is ``churnStaleAfterS`` or more after the lease start aborts
  the run with reason ``argument_churn_stale``, at most once per run.

Event time only: an event without ``ts`` neither starts a lease nor ends one by age.
Trace (limit 300 s, warning threshold 10): churn reaches 10 at t=40 s → lease from 40 s;
churn continues; the call at t=341 s → abort (301 s ≥ 300 s).
"""

from __future__ import annotations

from typing import Any, Final

from loopwatch.config.loop_detection import ResolvedLoopDetection
from loopwatch.detectors.events import Output, ToolCall, ToolResult
from loopwatch.detectors.history import History
from loopwatch.detectors.rule_state import RuleState
from loopwatch.detectors.rules import argument_churn
from loopwatch.detectors.rules.base import CallContext, ResultContext, Rule
from loopwatch.detectors.state import RunState
from loopwatch.detectors.verdicts import new_abort

__all__ = ["REASON", "RULE", "ChurnLease", "message"]

REASON: Final = "argument_churn_stale"


def message(tool: str, elapsed_ms: int, limit_s: int) -> str:
    return (
        f"CRITICAL: {tool} has churned through repeated argument patterns with the same stable "
        f"outcome for {elapsed_ms // 1000} s without progress (limit {limit_s} s). Aborting the "
        "stalled run."
    )


class ChurnLease(RuleState):
    """When the run's lease started (event ms, ``None``: none running), and whether the run
    was aborted for stale churn."""

    __slots__ = ("aborted", "since")

    def __init__(self, since: int | None = None, aborted: bool = False) -> None:
        self.since = since
        self.aborted = aborted

    def dump(self) -> Any:
        return [self.since, self.aborted]

    def stale_for(self, ts: int | None, limit_s: int) -> int | None:
        """Milliseconds the lease has run when that calls for the abort now, else ``None``."""
        since = self.since
        if since is None or ts is None or self.aborted:
            return None
        elapsed = ts - since
        if elapsed < limit_s * 1000:
            return None
        self.aborted = True
        return elapsed


def lease_of(state: RunState) -> ChurnLease | None:
    lease = state.rule_states.get(REASON)
    assert lease is None or isinstance(lease, ChurnLease)
    return lease


def _stale_limit(ctx: CallContext | ResultContext) -> int:
    """Seconds of churn that abort a run; 0 when the stale-churn abort does not apply."""
    return ctx.settings.churn_stale_after_s if ctx.revision == "2026-08" and ctx.resolved.enabled else 0


def _abort_if_stale(
    lease: ChurnLease,
    ctx: CallContext | ResultContext,
    event: ToolCall | ToolResult,
    limit_s: int,
    outputs: list[Output],
) -> None:
    elapsed = lease.stale_for(event.ts, limit_s)
    if elapsed is not None:
        state = ctx.state
        text = message(event.tool, elapsed, limit_s)
        outputs.append(
            new_abort(state.scope, state.run_id, event, REASON, None, text, ctx.settings.observe_only)
        )


def _outcome_ends(history: History, tool: str, args_hash: str) -> bool:
    """Whether an outcome just recorded is progress: no churn for the recorded call's arguments."""
    return argument_churn.evaluate(history, tool, args_hash)[0] == 0


class ArgumentChurnStale(Rule):
    """The lease: started and ended at calls that run, kept or ended at outcomes; the abort
    at the first event ``churnStaleAfterS`` or more after its start."""

    def __init__(self) -> None:
        super().__init__(REASON)

    def active(self, resolved: ResolvedLoopDetection) -> bool:
        return resolved.enabled and resolved.revision == "2026-08"

    def after_call(self, ctx: CallContext, blocked: bool, outputs: list[Output]) -> None:
        if blocked or not _stale_limit(ctx):
            return
        found = ctx.found
        if found is not None and found.detector == argument_churn.DETECTOR:
            churn = found.count
        else:
            churn = argument_churn.evaluate(ctx.history, ctx.tool, ctx.args_hash)[0]
        state = ctx.state
        lease = lease_of(state)
        if churn >= ctx.resolved.warning_threshold:
            ts = ctx.event.ts
            if lease is None:
                if ts is not None:
                    state.rule_states[REASON] = ChurnLease(ts)
            elif lease.since is None and ts is not None:
                lease.since = ts
        elif lease is not None:
            lease.since = None

    def after_record(self, ctx: CallContext, outputs: list[Output]) -> None:
        lease = lease_of(ctx.state)
        if lease is None or lease.since is None:
            return
        limit = _stale_limit(ctx)
        if limit:
            _abort_if_stale(lease, ctx, ctx.event, limit, outputs)

    def on_result(self, ctx: ResultContext, outputs: list[Output]) -> None:
        lease = lease_of(ctx.state)
        if lease is None or lease.since is None:  # no lease running (always so under 2026-05)
            return
        limit = _stale_limit(ctx)
        if not limit:
            return
        if ctx.result_hash is not None and _outcome_ends(ctx.state.history, ctx.tool, ctx.args_hash):
            lease.since = None
        _abort_if_stale(lease, ctx, ctx.event, limit, outputs)

    def load_state(self, raw: Any) -> ChurnLease:
        since, aborted = raw
        return ChurnLease(since, aborted)


RULE: Final[ArgumentChurnStale] = ArgumentChurnStale()
