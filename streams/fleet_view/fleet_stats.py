"""Fleet statistics in one-minute tumbling windows, built from the event and verdict streams.

Pure: every observation carries its own time (the record's timestamp), nothing reads a
clock, so any process that follows both topics (every worker, the embedded runtime, replay)
computes the same fleet view. Windows older than ``horizon_s`` are dropped.

Per window: events by type, runs seen, verdicts per agent / tool / detector / action, and
failing tools — tools whose results were errors in at least ``failing_runs`` different runs
in the window (a fleet-wide signal no single run's detector sees).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from msgspec import UNSET

from loopwatch.detectors.events import Abort, Event, Output, ToolResult, Verdict, run_scope

__all__ = ["FleetStats", "Window", "result_failed"]


@dataclass
class Window:
    start_ms: int
    first_ms: int | None = None  # the first event seen in the window
    events: Counter[str] = field(default_factory=Counter)
    runs: set[str] = field(default_factory=set)
    actions: Counter[str] = field(default_factory=Counter)
    by_agent: Counter[tuple[str, str]] = field(default_factory=Counter)
    by_tool: Counter[tuple[str, str]] = field(default_factory=Counter)
    by_detector: Counter[str] = field(default_factory=Counter)
    error_runs: dict[str, set[str]] = field(default_factory=dict)


class FleetStats:
    """Tumbling windows of ``window_s`` seconds, kept for ``horizon_s`` seconds."""

    def __init__(self, window_s: int = 60, horizon_s: int = 3600, failing_runs: int = 3) -> None:
        self.window_ms = window_s * 1000
        self.horizon_ms = horizon_s * 1000
        self.failing_runs = failing_runs
        self.windows: dict[int, Window] = {}

    def _window(self, ts_ms: int) -> Window:
        start = ts_ms - ts_ms % self.window_ms
        window = self.windows.get(start)
        if window is None:
            window = self.windows[start] = Window(start)
            for old in [s for s in self.windows if s < start - self.horizon_ms]:
                del self.windows[old]
        return window

    def event(self, event: Event, ts_ms: int) -> None:
        window = self._window(ts_ms)
        if window.first_ms is None or ts_ms < window.first_ms:
            window.first_ms = ts_ms
        window.events[str(event.__struct_config__.tag)] += 1
        scope = run_scope(event)
        window.runs.add(scope)
        if isinstance(event, ToolResult) and result_failed(event):
            window.error_runs.setdefault(event.tool, set()).add(scope)

    def output(self, output: Output, ts_ms: int) -> None:
        window = self._window(ts_ms)
        action = output.action if isinstance(output, Verdict) else "abort"
        detector = output.detector
        assert isinstance(output, (Verdict, Abort))
        window.actions[action] += 1
        window.by_agent[(output.agent_id, action)] += 1
        window.by_tool[(output.tool, action)] += 1
        window.by_detector[detector] += 1

    def timeline(self, now_ms: int, count: int = 30) -> list[dict[str, Any]]:
        """The last ``count`` windows up to ``now_ms``, oldest first (empty ones included)."""
        last = now_ms - now_ms % self.window_ms
        out = []
        for start in range(last - (count - 1) * self.window_ms, last + 1, self.window_ms):
            window = self.windows.get(start)
            actions = window.actions if window is not None else Counter()
            out.append(
                {
                    "start_ms": start,
                    "events": sum(window.events.values()) if window is not None else 0,
                    "warn": actions["warn"],
                    "block": actions["block"],
                    "abort": actions["abort"],
                }
            )
        return out

    def summary(self, now_ms: int, minutes: int = 5) -> dict[str, Any]:
        """The fleet over the last ``minutes`` windows up to ``now_ms``."""
        since = now_ms - minutes * self.window_ms
        recent = [w for start, w in sorted(self.windows.items()) if start > since - self.window_ms]
        events: Counter[str] = Counter()
        actions: Counter[str] = Counter()
        agents: Counter[tuple[str, str]] = Counter()
        tools: Counter[tuple[str, str]] = Counter()
        detectors: Counter[str] = Counter()
        runs: set[str] = set()
        error_runs: dict[str, set[str]] = {}
        for window in recent:
            events.update(window.events)
            actions.update(window.actions)
            agents.update(window.by_agent)
            tools.update(window.by_tool)
            detectors.update(window.by_detector)
            runs |= window.runs
            for tool, scopes in window.error_runs.items():
                error_runs.setdefault(tool, set()).update(scopes)
        # the rate over the time the windows cover: from `since`, or from the first event seen
        firsts = [w.first_ms for w in recent if w.first_ms is not None]
        seconds = max(1.0, (now_ms - max(since, min(firsts, default=since))) / 1000)
        looping: Counter[str] = Counter()
        for (tool, action), n in tools.items():
            if action in ("block", "abort"):
                looping[tool] += n
        return {
            "events_per_s": round(sum(events.values()) / seconds, 3),
            "events": dict(events),
            "active_runs": len(runs),
            "verdicts": dict(actions),
            "per_agent": _nest(agents),
            "per_tool": _nest(tools),
            "per_detector": dict(detectors),
            "top_looping_tools": looping.most_common(5),
            "failing_tools": sorted(
                (tool for tool, scopes in error_runs.items() if len(scopes) >= self.failing_runs)
            ),
        }


def result_failed(result: ToolResult) -> bool:
    """An error result: ``error`` set, or a digest-only result whose digest says error."""
    if result.error is not UNSET and result.error is not None:
        return True
    return isinstance(result.result_digest, str) and result.result_digest.startswith("error:")


def _nest(counts: Counter[tuple[str, str]]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (name, action), n in counts.items():
        out.setdefault(name, {})[action] = n
    return out
