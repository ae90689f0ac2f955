"""The fleet alerts a process knows of: open outages, recent systemic loops, the latest alerts.

Pure: fed every ``fleet_alert`` (the embedded runtime's own, or a worker's follower of
``loopwatch.alerts``), asked with the time "now". An alert seen twice (a re-published one
has the same ``alert_id``) counts once. A worker also notes the failures of tools under an
open outage that its own runs meet, which keeps the outage's fail-fast blocks going for as
long as the tool keeps failing (:meth:`AlertBoard.last_failure`).
"""

from __future__ import annotations

from collections import Counter, OrderedDict, deque
from typing import Any, Final

import msgspec

from loopwatch.detectors.fleet.alerts import FleetAlert

__all__ = ["AlertBoard"]

IDS_KEPT: Final = 10_000


class AlertBoard:
    def __init__(self, loop_horizon_s: int = 3600, keep: int = 50) -> None:
        self.loop_horizon_ms = loop_horizon_s * 1000
        self.open_outages: dict[str, FleetAlert] = {}  # tool -> its tool_outage alert
        self.loops: dict[str, FleetAlert] = {}  # subject -> its latest systemic_loop alert
        self.recent: deque[FleetAlert] = deque(maxlen=keep)
        self.counts: Counter[str] = Counter()  # kind -> alerts
        self._failures: dict[str, int] = {}  # tool under an open outage -> its last failure seen
        self._ids: OrderedDict[str, None] = OrderedDict()

    def add(self, alert: FleetAlert) -> bool:
        """Take an alert; ``False`` if it was known already."""
        if alert.alert_id in self._ids:
            return False
        self._ids[alert.alert_id] = None
        if len(self._ids) > IDS_KEPT:
            self._ids.popitem(last=False)
        self.counts[alert.kind] += 1
        self.recent.append(alert)
        if alert.kind == "tool_outage":
            self.open_outages[alert.tool] = alert
            self._failures[alert.tool] = max(alert.ts, self._failures.get(alert.tool, alert.ts))
        elif alert.kind == "tool_recovered":
            opened = self.open_outages.get(alert.tool)
            if opened is not None and opened.since_ts <= alert.ts:
                del self.open_outages[alert.tool]
                self._failures.pop(alert.tool, None)
        else:
            self.loops[alert.subject] = alert
        return True

    def note_failure(self, tool: str, ts_ms: int) -> None:
        """A failure of ``tool`` at event time ``ts_ms`` (kept while the tool has an open outage)."""
        last = self._failures.get(tool)
        if last is not None and ts_ms > last:
            self._failures[tool] = ts_ms

    def last_failure(self, tool: str) -> int | None:
        """The last failure known of a tool under an open outage (``None``: no open outage)."""
        return self._failures.get(tool) if tool in self.open_outages else None

    def systemic_loops(self, now_ms: int) -> list[FleetAlert]:
        """Systemic loops alerted within the horizon, newest first."""
        since = now_ms - self.loop_horizon_ms
        for subject in [s for s, a in self.loops.items() if a.ts < since]:
            del self.loops[subject]
        return sorted(self.loops.values(), key=lambda a: -a.ts)

    def summary(self, now_ms: int) -> dict[str, Any]:
        """What the dashboard's fleet page shows of the alerts."""
        return {
            "open_outages": [msgspec.to_builtins(a) for a in self.open_outages.values()],
            "systemic_loops": [msgspec.to_builtins(a) for a in self.systemic_loops(now_ms)],
            "recent": [msgspec.to_builtins(a) for a in reversed(self.recent)],
            "counts": dict(self.counts),
        }
