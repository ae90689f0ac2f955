"""Recent activity per run and the fleet's verdict feed, for the dashboard's drill-down.

Pure and bounded: the ``max_runs`` most recently active runs are kept (least recently
active dropped first), each with its last ``recent_per_run`` calls, results and verdicts and
its last ``verdicts_per_run`` verdicts (a verdict entry is one object in both); the feed holds
the last ``feed_size`` verdicts of the fleet. With the defaults and previews on, that is at
most some 60 MB however large the fleet: entries are small tuples, repeated strings
(tools, detectors, messages) are shared. What fired in a run (verdicts per detector,
action and level, first and last time, highest count) is counted over all its verdicts. Times
come from the records, never from a clock.

Delegation chains (F6): a run's first event fixes its parent, root and depth; the runs kept
are indexed by root, so a chain's tree (:mod:`streams.fleet_view.chain_tree`) is built from
its own runs only, and shown at most ``CHAIN_ROWS`` rows at a time.

Tool arguments are shown as a short fingerprint of their canonical JSON (the same
serialisation the detectors hash, so repeated arguments are visible at a glance) and,
unless ``previews`` is off, a preview cut at ``PREVIEW_CHARS`` characters.

Cheap to feed (a worker shows it every event it applies, on the detection loop): entries are
kept as plain tuples of strings and numbers, which the garbage collector stops tracking at
once (a named tuple stays tracked: 100,000 of them in every collection of the old
generations), and the preview of a text of at most ``LAZY_PREVIEW_BYTES`` (arguments, most
results) is made from a copy of it when the run is shown, not for every event.
"""

from __future__ import annotations

import sys
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import msgspec
import xxhash
from msgspec import UNSET

from loopwatch.detectors.events import (
    Abort,
    CompactionRetry,
    Event,
    Output,
    RunEnd,
    ToolCall,
    ToolResult,
    Verdict,
    chain_of,
    run_scope,
)
from loopwatch.detectors.stable_json import canonical_bytes, encodable, plain, wire_enc_hook
from loopwatch.streams.fleet_view.chain_tree import CYCLE, PARENT_NOT_SEEN, ROOT_NOT_SEEN, chain_layout
from loopwatch.streams.fleet_view.fleet_stats import result_failed

__all__ = [
    "ACTION_RANK",
    "CHAIN_ROWS",
    "LAZY_PREVIEW_BYTES",
    "PREVIEW_CHARS",
    "Fired",
    "RunActivity",
    "RunRecord",
    "Step",
]

PREVIEW_CHARS = 120
#: A value's JSON text up to this size is kept (copied) and previewed when shown.
LAZY_PREVIEW_BYTES = 256
#: Rows of a delegation chain's tree shown by default (a runaway chain has thousands of runs).
CHAIN_ROWS = 200
#: How serious an action is, for "worst so far" and for ordering runs on the dashboard.
ACTION_RANK = {"warn": 1, "block": 2, "abort": 3}

_PREVIEW = msgspec.json.Encoder(enc_hook=wire_enc_hook)


class Step(NamedTuple):
    """A call, a result, a compaction retry or the run's end (kept as a plain tuple of these
    fields; ``preview`` may be the JSON text it is made from, as bytes)."""

    kind: str
    ts_ms: int
    tool: str | None = None
    args: int | str | None = None  # fingerprint of the arguments (shown as 8 hex digits)
    outcome: str | None = None  # results: "ok" or "error"
    preview: str | None = None


class Fired(NamedTuple):
    """A verdict or an abort (kept as a plain tuple of these fields)."""

    kind: str
    ts_ms: int
    verdict_id: str
    level: str
    action: str
    detector: str
    hits: int | None  # the verdict's count ("count" in JSON; a tuple has a count method)
    tool: str
    message: str
    enforced: bool


#: A Step's or a Fired's fields, as a plain tuple (``kind`` says which).
Entry = tuple[Any, ...]
_FIRED_KINDS = frozenset({"verdict", "abort"})


@dataclass
class RunRecord:
    scope: str
    agent_id: str
    first_ms: int
    last_ms: int
    ended: bool = False
    calls: int = 0
    results: int = 0
    errors: int = 0
    compactions: int = 0
    actions: Counter[str] = field(default_factory=Counter)
    worst: str | None = None
    last_detector: str | None = None
    recent: deque[Entry] = field(default_factory=deque)
    verdicts: deque[Entry] = field(default_factory=deque)  # Fired
    # (detector, action, level) -> [verdicts, first ms, last ms, highest count]: every verdict
    fired: dict[tuple[str, str, str], list[int]] = field(default_factory=dict)
    chain: tuple[str, str, int] | None = None  # (parent, root, depth): fixed by the first event
    evented: bool = False  # an event was seen (a verdict may come first: two topics are followed)

    @property
    def root(self) -> str:
        """The run scope that keys its delegation chain (its own for a root run)."""
        return self.chain[1] if self.chain is not None else self.scope

    def summary(self) -> dict[str, Any]:
        parent, root, depth = self.chain if self.chain is not None else (None, self.scope, 0)
        return {
            "run": self.scope,
            "agent_id": self.agent_id,
            "parent_run_id": parent,
            "root_run_id": root,
            "depth": depth,
            "status": "ended" if self.ended else "active",
            "first_ms": self.first_ms,
            "last_ms": self.last_ms,
            "calls": self.calls,
            "results": self.results,
            "errors": self.errors,
            "compactions": self.compactions,
            "verdicts": dict(self.actions),
            "worst": self.worst,
            "last_detector": self.last_detector,
        }


class RunActivity:
    """Feed it events and outputs in stream order; ask for a run or the runs that loop."""

    def __init__(
        self,
        max_runs: int = 2000,
        recent_per_run: int = 50,
        verdicts_per_run: int = 50,
        feed_size: int = 200,
        previews: bool = True,
    ) -> None:
        self.max_runs = max_runs
        self.recent_per_run = recent_per_run
        self.verdicts_per_run = verdicts_per_run
        self.previews = previews
        self.runs: OrderedDict[str, RunRecord] = OrderedDict()
        self.feed: deque[tuple[Entry, str, str]] = deque(maxlen=feed_size)  # (Fired, run, agent)
        # delegation chains: root -> the runs kept here that belong to it (the root's own
        # record, if any, is under its scope in ``runs``, not in here)
        self.chains: dict[str, dict[str, None]] = {}

    def _record(self, scope: str, agent_id: str, ts_ms: int) -> RunRecord:
        record = self.runs.get(scope)
        if record is None:
            record = RunRecord(
                scope,
                sys.intern(agent_id),
                ts_ms,
                ts_ms,
                recent=deque(maxlen=self.recent_per_run),
                verdicts=deque(maxlen=self.verdicts_per_run),
            )
            self.runs[scope] = record
            while len(self.runs) > self.max_runs:
                self._forget(*self.runs.popitem(last=False))
        else:
            self.runs.move_to_end(scope)
            record.last_ms = max(record.last_ms, ts_ms)
        return record

    def _forget(self, scope: str, record: RunRecord) -> None:
        if record.chain is None:
            return
        members = self.chains.get(record.chain[1])
        if members is not None:
            members.pop(scope, None)
            if not members:
                del self.chains[record.chain[1]]

    def event(self, event: Event, ts_ms: int) -> None:
        scope = run_scope(event)
        record = self._record(scope, event.agent_id, ts_ms)
        if not record.evented:  # the run's first event fixes its chain (F6)
            record.evented = True
            record.chain = chain_of(event)
            if record.chain is not None:
                self.chains.setdefault(record.chain[1], {})[scope] = None
        if isinstance(event, RunEnd):
            record.ended = True
            record.recent.append(("run_end", ts_ms, None, None, None, None))
            return
        record.ended = False  # a run id that comes back is active again
        if isinstance(event, CompactionRetry):
            record.compactions += 1
            record.recent.append(("compaction", ts_ms, None, None, None, None))
            return
        tool = sys.intern(event.tool)
        args = self._fingerprint(event.params, event.args_digest)
        if isinstance(event, ToolCall):
            record.calls += 1
            record.recent.append(("call", ts_ms, tool, args, None, self._preview(event.params)))
            return
        assert isinstance(event, ToolResult)
        record.results += 1
        failed = result_failed(event)
        record.errors += failed
        outcome = "error" if failed else "ok"
        record.recent.append(("result", ts_ms, tool, args, outcome, self._preview(_outcome_value(event))))

    def output(self, output: Output, ts_ms: int) -> None:
        scope = output.run_id if output.run_id is not None else f"session:{output.session_id}"
        record = self._record(scope, output.agent_id, ts_ms)
        entry = _fired(output, ts_ms)
        kept = tuple(entry)
        record.actions[entry.action] += 1
        if record.worst is None or ACTION_RANK[entry.action] > ACTION_RANK[record.worst]:
            record.worst = entry.action
        record.last_detector = entry.detector
        key = (entry.detector, entry.action, entry.level)
        tally = record.fired.get(key)
        if tally is None:
            record.fired[key] = [1, ts_ms, ts_ms, entry.hits or 0]
        else:
            tally[0] += 1
            tally[2] = ts_ms
            tally[3] = max(tally[3], entry.hits or 0)
        record.verdicts.append(kept)
        record.recent.append(kept)
        self.feed.append((kept, scope, record.agent_id))

    def run(self, scope: str) -> dict[str, Any] | None:
        """One run: its summary, its last verdicts and its recent activity (oldest first)."""
        record = self.runs.get(scope)
        if record is None:
            return None
        root = record.root
        members = self.chains.get(root, {})
        return {
            **record.summary(),
            # runs of its delegation chain kept here, the root's included (1: a run on its own)
            "chain_runs": len(members) + (root in self.runs and root not in members),
            "fired": _fired_rows(record),
            "verdict_list": [_as_dict(entry) for entry in record.verdicts],
            "recent": [_as_dict(entry) for entry in record.recent],
        }

    def chain(self, root: str, limit: int = CHAIN_ROWS) -> dict[str, Any]:
        """The tree of the delegation chain keyed by ``root``, as rows depth first (at most
        ``limit``) with each run's verdicts (``runs`` 0: none of its runs is kept here)."""
        members = self.chains.get(root, {})
        runs = [self.runs[scope] for scope in members]
        own = self.runs.get(root)
        if own is not None and root not in members:
            runs.append(own)
        # the root is drawn first, whatever its own first event said
        parents = {r.scope: (r.chain[0] if r.chain is not None and r.scope != root else None) for r in runs}
        first = {r.scope: r.first_ms for r in runs}
        layout = chain_layout(root, parents, first)
        totals: Counter[str] = Counter()
        for r in runs:
            totals.update(r.actions)
        rows = []
        for row in layout[: max(0, limit)]:
            record = self.runs.get(row.run) if row.note != ROOT_NOT_SEEN else None
            entry: dict[str, Any] = {
                "run": row.run,
                "level": row.level,
                "note": row.note,
                "children": row.children,
            }
            if record is not None:
                entry.update(record.summary())
                entry["aborted"] = record.actions["abort"] > 0
                entry["fired"] = _fired_rows(record)
            rows.append(entry)
        return {
            "root": root,
            "root_seen": own is not None,
            "runs": len(runs),
            "agents": len({r.agent_id for r in runs}),
            "max_depth": max((r.chain[2] for r in runs if r.chain is not None), default=0),
            "verdicts": dict(totals),
            "aborted_runs": sum(1 for r in runs if r.actions["abort"]),
            "parent_not_seen": sum(1 for row in layout if row.note == PARENT_NOT_SEEN),
            "cycles": sum(1 for row in layout if row.note == CYCLE),
            "shown": len(rows),
            "hidden": len(layout) - len(rows),
            "rows": rows,
        }

    def flagged(self, limit: int = 25) -> list[dict[str, Any]]:
        """Runs with verdicts: the worst first, then the most recently active."""
        flagged = [r for r in self.runs.values() if r.worst is not None]
        flagged.sort(key=lambda r: (-ACTION_RANK[r.worst or "warn"], -r.last_ms, r.scope))
        return [r.summary() for r in flagged[:limit]]

    def latest(self, limit: int = 50) -> list[dict[str, Any]]:
        """The feed, newest first."""
        newest = list(reversed(self.feed))[:limit]
        return [{**_as_dict(entry), "run": scope, "agent_id": agent} for entry, scope, agent in newest]

    def _fingerprint(self, params: Any, args_digest: Any) -> int | str:
        if args_digest is not UNSET:
            return str(args_digest)[:12]
        return xxhash.xxh3_64_intdigest(canonical_bytes(params)) >> 32  # an int is smaller than text

    def _preview(self, value: Any) -> str | bytes | None:
        """The preview of ``value``, or the JSON text it is made from when shown."""
        if not self.previews or value is UNSET:
            return None
        if type(value) is msgspec.Raw and len(value) <= LAZY_PREVIEW_BYTES:
            return bytes(value)
        return _preview_text(value)


def _preview_text(value: Any) -> str:
    """What a value looks like on the dashboard: its compact JSON (a string as it is), cut."""
    value = plain(value)  # (the value as it would be decoded, not the text as it came)
    try:
        text = value if isinstance(value, str) else _PREVIEW.encode(value).decode("utf-8", "replace")
    except (TypeError, ValueError, OverflowError):  # (a lone surrogate inside: UnicodeEncodeError)
        text = repr(value)
    if not encodable(text):  # a lone surrogate: U+FFFD, as JavaScript shows it (pairs joined)
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return (
        text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 3] + "..."
    )  # ASCII: a str with "…" takes 2 bytes a character


def _fired_rows(record: RunRecord) -> list[dict[str, Any]]:
    """What fired in a run, by detector, action and level: the most serious first."""
    order = sorted(
        record.fired.items(), key=lambda item: (-ACTION_RANK[item[0][1]], -item[1][0], item[0][0], item[0][2])
    )
    return [
        {
            "detector": detector,
            "action": action,
            "level": level,
            "verdicts": n,
            "first_ms": first,
            "last_ms": last,
            "count": top,
        }
        for (detector, action, level), (n, first, last, top) in order
    ]


def _as_dict(entry: Entry) -> dict[str, Any]:
    if entry[0] in _FIRED_KINDS:
        out = dict(zip(Fired._fields, entry, strict=True))
        out["count"] = out.pop("hits")
        return out
    out = dict(zip(Step._fields, entry, strict=True))
    if isinstance(out["args"], int):
        out["args"] = f"{out['args']:08x}"
    if isinstance(out["preview"], bytes):  # made now, from the text kept
        out["preview"] = _preview_text(msgspec.Raw(out["preview"]))
    return out


def _fired(output: Output, ts_ms: int) -> Fired:
    intern = sys.intern
    if isinstance(output, Verdict):
        return Fired(
            "verdict",
            ts_ms,
            output.verdict_id,
            intern(output.level),
            intern(output.action),
            intern(output.detector),
            output.count,
            intern(output.tool),
            intern(output.message),
            output.enforced,
        )
    assert isinstance(output, Abort)
    return Fired(
        "abort",
        ts_ms,
        output.verdict_id,
        "critical",
        "abort",
        intern(output.detector),
        output.count,
        intern(output.tool),
        intern(output.message),
        output.enforced,
    )


def _outcome_value(result: ToolResult) -> Any:
    if result.error is not UNSET and result.error is not None:
        return result.error
    if result.result is not UNSET:
        return result.result
    return result.result_digest
