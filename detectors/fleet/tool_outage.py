"""F1: a tool failing across the fleet (``tool_outage`` / ``tool_recovered``), with fail-fast blocks.

One :class:`OutageState` per tool, stepped with that tool's :class:`ResultFact` s in the
order they arrive. Buckets of ``bucketSeconds`` by event time; the window is the last
``windowBuckets`` buckets up to the newest bucket the tool has seen (older facts still
count toward an open outage, but not toward opening one).

* **Open** (no outage open) when, in the window, one error class has failures from at least
  ``minRuns`` distinct runs with at least ``minDistinctArgs`` distinct argument hashes, and
  no success of the tool at or after the earliest of those failures: one ``tool_outage``.
* While open, failures of the tool (any class) add their runs and move its last failure on.
* **Close** at the first success whose event time is not before the outage's first failure:
  one ``tool_recovered``, ``runs`` = the distinct runs that failed from its first failure on.

Trace (defaults, one class, arguments a/b/c/a/b): failures of runs r1…r5 at 10:00:05…
10:00:45 → the fifth opens the outage (5 runs, 3 argument sets); r6 fails at 10:02 → counted;
r7 succeeds at 10:04 → recovered ("works again after 4 min", counted from the first failure),
runs 6.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from loopwatch.config.fleet_rules import ToolOutageRule
from loopwatch.detectors.fleet.alerts import FleetAlert, alert_id, format_since
from loopwatch.detectors.fleet.facts import ResultFact

__all__ = ["OpenOutage", "OutageState", "step"]

#: Runs and argument sets remembered per class and bucket (counts saturate there).
MAX_MEMBERS: Final = 10_000
SAMPLES: Final = 5
_NO_SUCCESS: Final = -1


class ClassBucket(msgspec.Struct, array_like=True):
    runs: dict[str, tuple[str, int]]  # run -> (agent, its first failure here)
    args: dict[str, None]
    first_ts: int


class Bucket(msgspec.Struct, array_like=True):
    failures: dict[str, ClassBucket] = msgspec.field(default_factory=dict)
    success_ts: int = _NO_SUCCESS  # the latest success in the bucket


class OpenOutage(msgspec.Struct, array_like=True):
    alert_id: str
    bucket: int
    since_ts: int
    opened_ts: int
    error_class: str
    runs: dict[str, int]  # every run that failed from the first failure on -> its first failure
    last_failure_ts: int
    alert_runs: int  # the failing runs its alert reported (the fail-fast blocks' count)


class OutageState(msgspec.Struct, array_like=True):
    tool: str
    top: int = -1  # the newest bucket seen
    buckets: dict[int, Bucket] = msgspec.field(default_factory=dict)
    open: OpenOutage | None = None


def samples(first: dict[str, int]) -> list[str]:
    """Up to five runs, the earliest first (by event time, then id): the same whatever order
    the facts arrived in."""
    return [run for _, run in sorted((ts, run) for run, ts in first.items())[:SAMPLES]]


def _outage_message(tool: str, runs: int, agents: int, args: int, since_ts: int) -> str:
    return (
        f"Tool {tool} is failing across the fleet: {runs} runs of {agents} agents, {args} different "
        f"argument sets, same error, no success since {format_since(since_ts)}."
    )


def step(state: OutageState, fact: ResultFact, rule: ToolOutageRule) -> list[FleetAlert]:
    """Apply one result fact of ``state.tool``; the alerts it gives (at most one)."""
    bucket = fact.ts // (rule.bucket_s * 1000)
    if bucket > state.top:
        state.top = bucket
        low = bucket - rule.window_buckets + 1
        for old in [b for b in state.buckets if b < low]:
            del state.buckets[old]
    in_window = bucket > state.top - rule.window_buckets
    if fact.error_class is None:
        return _on_success(state, fact, bucket, in_window)
    opened = state.open
    if opened is not None:
        if len(opened.runs) < MAX_MEMBERS and fact.run not in opened.runs:
            opened.runs[fact.run] = fact.ts
        opened.last_failure_ts = max(opened.last_failure_ts, fact.ts)
    if not in_window:
        return []
    entry = state.buckets.get(bucket)
    if entry is None:
        entry = state.buckets[bucket] = Bucket()
    cls = fact.error_class
    failures = entry.failures.get(cls)
    if failures is None:
        failures = entry.failures[cls] = ClassBucket({}, {}, fact.ts)
    seen = failures.runs.get(fact.run)
    if seen is None:
        if len(failures.runs) < MAX_MEMBERS:
            failures.runs[fact.run] = (fact.agent, fact.ts)
    elif fact.ts < seen[1]:
        failures.runs[fact.run] = (seen[0], fact.ts)
    if fact.args is not None and len(failures.args) < MAX_MEMBERS:
        failures.args[fact.args] = None
    failures.first_ts = min(failures.first_ts, fact.ts)
    if opened is not None:
        return []
    return _maybe_open(state, cls, fact, rule)


def _on_success(state: OutageState, fact: ResultFact, bucket: int, in_window: bool) -> list[FleetAlert]:
    if in_window:
        entry = state.buckets.get(bucket)
        if entry is None:
            entry = state.buckets[bucket] = Bucket()
        entry.success_ts = max(entry.success_ts, fact.ts)
    opened = state.open
    if opened is not None and fact.ts >= opened.since_ts:
        state.open = None
        return [_recovered(state.tool, opened, fact.ts)]
    return []


def _maybe_open(state: OutageState, cls: str, fact: ResultFact, rule: ToolOutageRule) -> list[FleetAlert]:
    """The outage, when the window now calls for one. What it takes is checked cheapest first,
    each check a condition of the opening: no success at or after the class's earliest failure
    in the window (per bucket), enough runs and argument sets counted per bucket (what the
    window holds is at most that), then counted across the buckets (stopping at the
    threshold). Only then are the buckets merged for the alert: a failure that opens nothing
    (a tool failing while it also works) costs a look at each bucket, not at its members."""
    since = fact.ts
    latest_success = _NO_SUCCESS
    runs_at_most = args_at_most = 0
    classes: list[ClassBucket] = []
    for entry in state.buckets.values():
        latest_success = max(latest_success, entry.success_ts)
        failures = entry.failures.get(cls)
        if failures is not None:
            since = min(since, failures.first_ts)
            runs_at_most += len(failures.runs)
            args_at_most += len(failures.args)
            classes.append(failures)
    if latest_success >= since or runs_at_most < rule.min_runs or args_at_most < rule.min_distinct_args:
        return []
    if not _reaches([failures.runs for failures in classes], rule.min_runs):
        return []
    if not _reaches([failures.args for failures in classes], rule.min_distinct_args):
        return []
    return _open(state, cls, fact, rule)


def _reaches(parts: list[dict[str, Any]], threshold: int) -> bool:
    """Whether the keys of ``parts`` together are at least ``threshold`` (counted up to it)."""
    seen: set[str] = set()
    for part in parts:
        for key in part:
            seen.add(key)
            if len(seen) >= threshold:
                return True
    return len(seen) >= threshold


def _open(state: OutageState, cls: str, fact: ResultFact, rule: ToolOutageRule) -> list[FleetAlert]:
    """The outage and its alert, the window's buckets merged (in order; checked again on the merge)."""
    runs: dict[str, tuple[str, int]] = {}
    args: dict[str, None] = {}
    since = fact.ts
    latest_success = _NO_SUCCESS
    for bucket in sorted(state.buckets):
        entry = state.buckets[bucket]
        latest_success = max(latest_success, entry.success_ts)
        failures = entry.failures.get(cls)
        if failures is None:
            continue
        for run, seen in failures.runs.items():
            known = runs.get(run)
            if known is None or seen[1] < known[1]:
                runs[run] = seen
        args.update(failures.args)
        since = min(since, failures.first_ts)
    if len(runs) < rule.min_runs or len(args) < rule.min_distinct_args or latest_success >= since:
        return []
    subject = f"tool:{state.tool}"
    opening = fact.ts // (rule.bucket_s * 1000)
    agents = len({agent for agent, _ in runs.values()})
    ident = alert_id("tool_outage", subject, opening)
    first = {run: ts for run, (_, ts) in runs.items()}
    state.open = OpenOutage(ident, opening, since, fact.ts, cls, first, fact.ts, len(runs))
    return [
        FleetAlert(
            alert_id=ident,
            kind="tool_outage",
            subject=subject,
            tool=state.tool,
            runs=len(runs),
            agents=agents,
            distinct_args=len(args),
            error_class=cls,
            sample_run_ids=samples(first),
            since_ts=since,
            ts=fact.ts,
            message=_outage_message(state.tool, len(runs), agents, len(args), since),
        )
    ]


def _recovered(tool: str, opened: OpenOutage, ts: int) -> FleetAlert:
    minutes = round(max(0, ts - opened.since_ts) / 60_000)
    return FleetAlert(
        alert_id=alert_id("tool_recovered", f"tool:{tool}", opened.bucket),
        kind="tool_recovered",
        subject=f"tool:{tool}",
        tool=tool,
        runs=len(opened.runs),
        error_class=opened.error_class,
        sample_run_ids=samples(opened.runs),
        since_ts=opened.since_ts,
        ts=ts,
        message=f"Tool {tool} works again after {minutes} min.",
    )
