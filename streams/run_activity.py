"""Recent activity per run and the fleet's verdict feed, for the dashboard's drill-down.

Pure and bounded: the ``max_runs`` most recently active runs are kept (least recently
active dropped first), each with its last ``recent_per_run`` calls, results and verdicts and
up to ``verdicts_per_run`` of its verdicts; the feed holds the last ``feed_size`` verdicts of
the fleet. Times come from the records, never from a clock.

Tool arguments are shown as a short fingerprint of their canonical JSON (the same
serialisation the detectors hash, so repeated arguments are visible at a glance) and,
unless ``previews`` is off, a preview cut at ``PREVIEW_CHARS`` characters.
"""

from __future__ import annotations

from collections import Counter, OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

import msgspec
import xxhash
from msgspec import UNSET

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
from detectors.stable_json import canonical_bytes, wire_enc_hook
from streams.fleet_stats import result_failed

__all__ = ["ACTION_RANK", "PREVIEW_CHARS", "RunActivity", "RunRecord"]

PREVIEW_CHARS = 160
#: How serious an action is, for "worst so far" and for ordering runs on the dashboard.
ACTION_RANK = {"warn": 1, "block": 2, "abort": 3}

_PREVIEW = msgspec.json.Encoder(enc_hook=wire_enc_hook)


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
    recent: deque[dict[str, Any]] = field(default_factory=deque)
    verdicts: deque[dict[str, Any]] = field(default_factory=deque)

    def summary(self) -> dict[str, Any]:
        return {
            "run": self.scope,
            "agent_id": self.agent_id,
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
        max_runs: int = 5000,
        recent_per_run: int = 100,
        verdicts_per_run: int = 500,
        feed_size: int = 200,
        previews: bool = True,
    ) -> None:
        self.max_runs = max_runs
        self.recent_per_run = recent_per_run
        self.verdicts_per_run = verdicts_per_run
        self.previews = previews
        self.runs: OrderedDict[str, RunRecord] = OrderedDict()
        self.feed: deque[dict[str, Any]] = deque(maxlen=feed_size)

    def _record(self, scope: str, agent_id: str, ts_ms: int) -> RunRecord:
        record = self.runs.get(scope)
        if record is None:
            record = RunRecord(
                scope,
                agent_id,
                ts_ms,
                ts_ms,
                recent=deque(maxlen=self.recent_per_run),
                verdicts=deque(maxlen=self.verdicts_per_run),
            )
            self.runs[scope] = record
            while len(self.runs) > self.max_runs:
                self.runs.popitem(last=False)
        else:
            self.runs.move_to_end(scope)
            record.last_ms = max(record.last_ms, ts_ms)
        return record

    def event(self, event: Event, ts_ms: int) -> None:
        record = self._record(run_scope(event), event.agent_id, ts_ms)
        if isinstance(event, RunEnd):
            record.ended = True
            record.recent.append({"kind": "run_end", "ts_ms": ts_ms, "event_id": event.event_id})
            return
        record.ended = False  # a run id that comes back is active again
        if isinstance(event, CompactionRetry):
            record.compactions += 1
            record.recent.append({"kind": "compaction", "ts_ms": ts_ms, "event_id": event.event_id})
            return
        entry: dict[str, Any] = {
            "ts_ms": ts_ms,
            "event_id": event.event_id,
            "tool": event.tool,
            "tool_call_id": event.tool_call_id,
            "args": self._fingerprint(event.params, event.args_digest),
        }
        if isinstance(event, ToolCall):
            record.calls += 1
            entry["kind"] = "call"
            entry["preview"] = self._preview(event.params)
        else:
            assert isinstance(event, ToolResult)
            record.results += 1
            failed = result_failed(event)
            record.errors += failed
            entry["kind"] = "result"
            entry["outcome"] = "error" if failed else "ok"
            entry["preview"] = self._preview(_outcome_value(event))
        record.recent.append(entry)

    def output(self, output: Output, ts_ms: int) -> None:
        scope = output.run_id if output.run_id is not None else f"session:{output.session_id}"
        record = self._record(scope, output.agent_id, ts_ms)
        entry = _output_entry(output, ts_ms)
        action = entry["action"]
        record.actions[action] += 1
        if record.worst is None or ACTION_RANK[action] > ACTION_RANK[record.worst]:
            record.worst = action
        record.last_detector = entry["detector"]
        record.verdicts.append(entry)
        record.recent.append(entry)
        self.feed.append({**entry, "run": scope, "agent_id": output.agent_id})

    def run(self, scope: str) -> dict[str, Any] | None:
        """One run: its summary, every verdict kept, and its recent activity (oldest first)."""
        record = self.runs.get(scope)
        if record is None:
            return None
        return {**record.summary(), "verdict_list": list(record.verdicts), "recent": list(record.recent)}

    def flagged(self, limit: int = 25) -> list[dict[str, Any]]:
        """Runs with verdicts: the worst first, then the most recently active."""
        flagged = [r for r in self.runs.values() if r.worst is not None]
        flagged.sort(key=lambda r: (-ACTION_RANK[r.worst or "warn"], -r.last_ms, r.scope))
        return [r.summary() for r in flagged[:limit]]

    def latest(self, limit: int = 50) -> list[dict[str, Any]]:
        """The feed, newest first."""
        return list(reversed(self.feed))[:limit]

    def _fingerprint(self, params: Any, args_digest: Any) -> str:
        if args_digest is not UNSET:
            return str(args_digest)[:12]
        return xxhash.xxh3_64_hexdigest(canonical_bytes(params))[:8]

    def _preview(self, value: Any) -> str | None:
        if not self.previews or value is UNSET:
            return None
        try:
            text = value if isinstance(value, str) else _PREVIEW.encode(value).decode("utf-8", "replace")
        except (TypeError, ValueError, OverflowError):
            text = repr(value)
        return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def _output_entry(output: Output, ts_ms: int) -> dict[str, Any]:
    if isinstance(output, Verdict):
        return {
            "kind": "verdict",
            "ts_ms": ts_ms,
            "verdict_id": output.verdict_id,
            "level": output.level,
            "action": output.action,
            "detector": output.detector,
            "count": output.count,
            "tool": output.tool,
            "message": output.message,
            "enforced": output.enforced,
        }
    assert isinstance(output, Abort)
    return {
        "kind": "abort",
        "ts_ms": ts_ms,
        "verdict_id": output.verdict_id,
        "level": "critical",
        "action": "abort",
        "detector": output.reason,
        "count": output.count,
        "tool": output.tool,
        "message": output.message,
        "enforced": output.enforced,
    }


def _outcome_value(result: ToolResult) -> Any:
    if result.error is not UNSET and result.error is not None:
        return result.error
    if result.result is not UNSET:
        return result.result
    return result.result_digest
