"""What the dashboard and ``/fleet`` show: fleet windows plus per-run activity, in one place.

Pure: fed with every event and output of the fleet (a worker's follower of both topics, or
the embedded runtime's own stream) with each record's time; asked with the time "now".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from loopwatch.detectors.events import Event, Output
from loopwatch.detectors.fleet.alerts import FleetAlert
from loopwatch.streams.fleet_view.alert_board import AlertBoard
from loopwatch.streams.fleet_view.fleet_stats import FleetStats
from loopwatch.streams.fleet_view.metrics import WorkerMetrics
from loopwatch.streams.fleet_view.run_activity import CHAIN_ROWS, RunActivity
from loopwatch.streams.fleet_view.spend_ledger import SpendLedger

__all__ = ["FleetView"]


class FleetView:
    def __init__(
        self,
        source: str,
        window_s: int = 60,
        horizon_s: int = 3600,
        failing_runs: int = 3,
        previews: bool = True,
        enabled: bool = True,
    ) -> None:
        self.source = source
        self.enabled = enabled
        self.stats = FleetStats(window_s=window_s, horizon_s=horizon_s, failing_runs=failing_runs)
        self.activity = RunActivity(previews=previews)
        self.spend = SpendLedger()
        self.alerts = AlertBoard()
        # the embedded runtime's Prometheus metrics (a worker keeps its own): what it processed,
        # and its gauges (active runs, ended runs, state bytes) from the runtime serving now
        self.metrics = WorkerMetrics()
        self.gauges: Callable[[], tuple[int, int, int]] = lambda: (0, 0, 0)
        self.events = 0
        self.outputs = 0

    @property
    def horizon_ms(self) -> int:
        return self.stats.horizon_ms

    def event(self, event: Event, ts_ms: int) -> None:
        self.events += 1
        self.stats.event(event, ts_ms)
        self.activity.event(event, ts_ms)
        self.spend.event(event)

    def output(self, output: Output, ts_ms: int) -> None:
        self.outputs += 1
        self.stats.output(output, ts_ms)
        self.activity.output(output, ts_ms)
        self.spend.output(output)

    def alert(self, alert: FleetAlert, seen_ms: int | None = None) -> None:
        """A fleet alert, seen at ``seen_ms`` on the clock the view's events are stamped with
        (None: the alert's event time, right where events are stamped with their own time)."""
        self.alerts.add(alert, seen_ms)

    def summary(self, now_ms: int, minutes: int = 5) -> dict[str, Any]:
        """The windowed fleet numbers of the last ``minutes`` minutes (``/fleet``)."""
        return {
            "source": self.source,
            "enabled": self.enabled,
            "as_of_ms": now_ms,
            "minutes": minutes,
            **self.stats.summary(now_ms, minutes),
        }

    def overview(self, now_ms: int, minutes: int = 5) -> dict[str, Any]:
        """Everything the dashboard's fleet page draws, in one answer."""
        return {
            **self.summary(now_ms, minutes),
            "totals": {
                "events": self.events,
                "verdicts": self.outputs,
                "runs_tracked": len(self.activity.runs),
            },
            "timeline": self.stats.timeline(now_ms, 30),
            "feed": self.activity.latest(50),
            "runs": self.activity.flagged(25),
            "spend": self.spend.summary(10),
            "alerts": self.alerts.summary(now_ms),
        }

    def run(self, scope: str) -> dict[str, Any] | None:
        return self.activity.run(scope)

    def chain(self, root: str, now_ms: int, limit: int = CHAIN_ROWS) -> dict[str, Any] | None:
        """A delegation chain's tree of runs and its chain alerts (``/fleet/chain``); ``None``
        if neither a run nor an alert of it is known."""
        tree = self.activity.chain(root, limit)
        alerts = [self.alerts.as_dict(a) for a in self.alerts.chain_alerts(now_ms, root)]
        if not tree["runs"] and not alerts:
            return None
        return {**tree, "alerts": alerts}
