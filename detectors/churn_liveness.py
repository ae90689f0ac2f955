"""The churn lease and the stale-churn abort (revision 2026-08; loopwatch's decision).

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

from typing import Final

from loopwatch.detectors.history import History
from loopwatch.detectors.rules import argument_churn
from loopwatch.detectors.state import RunState

__all__ = ["REASON", "after_call", "after_outcome", "message", "stale_for"]

REASON: Final = "argument_churn_stale"


def message(tool: str, elapsed_ms: int, limit_s: int) -> str:
    return (
        f"CRITICAL: {tool} has churned through repeated argument patterns with the same stable "
        f"outcome for {elapsed_ms // 1000} s without progress (limit {limit_s} s). Aborting the "
        "stalled run."
    )


def after_call(state: RunState, churn: int, warning_threshold: int, ts: int | None) -> None:
    """Start or end the lease at a call that runs, given its churn count."""
    if churn >= warning_threshold:
        if state.churn_since is None and ts is not None:
            state.churn_since = ts
    else:
        state.churn_since = None


def after_outcome(state: RunState, history: History, tool: str, args_hash: str) -> None:
    """Keep or end a running lease after an outcome was recorded."""
    if state.churn_since is not None and argument_churn.evaluate(history, tool, args_hash)[0] == 0:
        state.churn_since = None


def stale_for(state: RunState, ts: int | None, limit_s: int) -> int | None:
    """Milliseconds the lease has run when that calls for the abort now, else ``None``."""
    since = state.churn_since
    if since is None or ts is None or state.churn_aborted:
        return None
    elapsed = ts - since
    if elapsed < limit_s * 1000:
        return None
    state.churn_aborted = True
    return elapsed
