"""The fleet alerts a process knows of: open outages, recent systemic loops and delegation
chain alerts, the latest alerts.

Pure: fed every ``fleet_alert`` (the embedded runtime's own, or a worker's follower of
``loopwatch.alerts``), asked with the time "now". An alert seen twice (a re-published one
has the same ``alert_id``) counts once. A worker also notes the failures of tools under an
open outage that its own runs meet, which keeps the outage's fail-fast blocks going for as
long as the tool keeps failing (:meth:`AlertBoard.last_failure`). Chain alerts
(``chain_runaway``, ``chain_repeat``: F6b, F6c) are kept by subject for the horizon, at most
``CHAINS_KEPT``; their subject names their chain's root (``chain:{root}`` or
``chain:{root}:{tool}:{h12}``).

One clock per board: an alert's time is its event time (``ts``), unless the board's owner says
when it saw it (``seen_ms``, on the clock its view stamps events with: the embedded runtime's
view is on the wall clock, however old the events it replays); the horizons and the dashboard's
times read that one.
"""

from __future__ import annotations

from collections import Counter, OrderedDict, deque
from typing import Any, Final

import msgspec

from loopwatch.detectors.fleet.alerts import FleetAlert
from loopwatch.detectors.fleet.chain_repeat import args_h12
from loopwatch.detectors.fleet.chains import ACTIVE_KIND, EXPIRED_KIND

__all__ = ["CHAIN_KINDS", "AlertBoard", "chain_alert_dict", "chain_root"]

IDS_KEPT: Final = 10_000
CHAINS_KEPT: Final = 1_000
#: The alert kinds about a delegation chain (spec F6b, F6c).
CHAIN_KINDS: Final = frozenset({"chain_runaway", "chain_repeat"})
_CHAIN_PREFIX: Final = "chain:"
_BOOKKEEPING: Final = frozenset({ACTIVE_KIND, EXPIRED_KIND})


def chain_root(alert: FleetAlert) -> str | None:
    """The root run of a chain alert's chain, read from its subject; ``None`` for other kinds.

    ``chain:{root}`` (runaway) or ``chain:{root}:{tool}:{h12}`` (repeat; a root may hold
    colons, ``session:…``, and so may a tool: the alert's tool marks where the root ends)."""
    subject, kind = alert.subject, str(alert.kind)
    if kind not in CHAIN_KINDS or not subject.startswith(_CHAIN_PREFIX):
        return None
    rest = subject[len(_CHAIN_PREFIX) :]
    if kind == "chain_runaway":
        return rest
    tool = alert.tool or ""
    if alert.args_hash is not None:  # the subject ends with the tool and the args hash's h12
        suffix = f":{tool}:{args_h12(tool, alert.args_hash)}"
        return rest[: -len(suffix)] if rest.endswith(suffix) and len(rest) > len(suffix) else None
    end = rest.rfind(f":{tool}:") if tool else -1
    if end < 0:
        parts = rest.rsplit(":", 2)
        return parts[0] if len(parts) == 3 else None
    return rest[:end]


class AlertBoard:
    def __init__(self, loop_horizon_s: int = 3600, keep: int = 50) -> None:
        self.loop_horizon_ms = loop_horizon_s * 1000
        self.open_outages: dict[str, FleetAlert] = {}  # tool -> its tool_outage alert
        self.loops: dict[str, FleetAlert] = {}  # subject -> its latest systemic_loop alert
        self.recent: deque[FleetAlert] = deque(maxlen=keep)
        self.chains: OrderedDict[str, FleetAlert] = OrderedDict()  # subject -> its latest chain alert
        self.counts: Counter[str] = Counter()  # kind -> alerts
        self._failures: dict[str, int] = {}  # tool under an open outage -> its last failure seen
        self._ids: OrderedDict[str, int] = OrderedDict()  # alert_id -> its time on the board's clock

    def add(self, alert: FleetAlert, seen_ms: int | None = None) -> bool:
        """Take an alert (seen at ``seen_ms`` on the owner's clock; None: its event time);
        ``False`` if it was known already (or bookkeeping: ``chain_active``, ``chain_expired``,
        which the chain blocks read)."""
        if alert.kind in _BOOKKEEPING:
            return False
        if alert.alert_id in self._ids:
            return False
        self._ids[alert.alert_id] = alert.ts if seen_ms is None else seen_ms
        if len(self._ids) > IDS_KEPT:
            self._ids.popitem(last=False)
        self.counts[alert.kind] += 1
        self.recent.append(alert)
        tool = alert.tool or ""  # the tool kinds always name one
        if alert.kind == "tool_outage":
            self.open_outages[tool] = alert
            self._failures[tool] = max(alert.ts, self._failures.get(tool, alert.ts))
        elif alert.kind == "tool_recovered":
            opened = self.open_outages.get(tool)
            if opened is not None and opened.since_ts <= alert.ts:
                del self.open_outages[tool]
                self._failures.pop(tool, None)
        elif alert.kind in CHAIN_KINDS:
            self.chains.pop(alert.subject, None)
            self.chains[alert.subject] = alert
            while len(self.chains) > CHAINS_KEPT:
                self.chains.popitem(last=False)
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

    def seen_ms(self, alert: FleetAlert) -> int:
        """``alert``'s time on the board's clock (its event time once forgotten)."""
        return self._ids.get(alert.alert_id, alert.ts)

    def systemic_loops(self, now_ms: int) -> list[FleetAlert]:
        """Systemic loops alerted within the horizon, newest first."""
        since = now_ms - self.loop_horizon_ms
        for subject in [s for s, a in self.loops.items() if self.seen_ms(a) < since]:
            del self.loops[subject]
        return sorted(self.loops.values(), key=lambda a: -self.seen_ms(a))

    def chain_alerts(self, now_ms: int, root: str | None = None) -> list[FleetAlert]:
        """Chain alerts within the horizon (of the chain keyed by ``root`` only, if given), newest first."""
        since = now_ms - self.loop_horizon_ms
        for subject in [s for s, a in self.chains.items() if self.seen_ms(a) < since]:
            del self.chains[subject]
        found = [a for a in self.chains.values() if root is None or chain_root(a) == root]
        return sorted(found, key=lambda a: -self.seen_ms(a))

    def as_dict(self, alert: FleetAlert) -> dict[str, Any]:
        """An alert as the dashboard gets it: the alert, its time on the board's clock
        (``seen_ms``) and, for a chain alert, its chain's root."""
        out = chain_alert_dict(alert) if alert.kind in CHAIN_KINDS else msgspec.to_builtins(alert)
        out["seen_ms"] = self.seen_ms(alert)
        return out

    def summary(self, now_ms: int) -> dict[str, Any]:
        """What the dashboard's fleet page shows of the alerts."""
        return {
            "open_outages": [self.as_dict(a) for a in self.open_outages.values()],
            "systemic_loops": [self.as_dict(a) for a in self.systemic_loops(now_ms)],
            "chains": [self.as_dict(a) for a in self.chain_alerts(now_ms)],
            "recent": [self.as_dict(a) for a in reversed(self.recent)],
            "counts": dict(self.counts),
        }


def chain_alert_dict(alert: FleetAlert) -> dict[str, Any]:
    """A chain alert as the dashboard gets it: the alert, and its chain's root."""
    out: dict[str, Any] = msgspec.to_builtins(alert)
    out["chain_root"] = chain_root(alert)
    return out
