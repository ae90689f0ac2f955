"""F6b's and F6c's optional blocks (``delegation.block``), answered from the chain alerts known.

Every runtime answers them the same way, from the ``chain_runaway`` / ``chain_repeat`` alerts
it knows (the embedded runtime's own, or a worker's follower of ``loopwatch.alerts``) and the
run's chain (:attr:`RunState.root`, its first event's time :attr:`RunState.first_ts`):

* **runaway**: while the chain has a ``chain_runaway`` alert, a call of a run whose first event
  is later than the first alert's ``ts`` (the runs it counted, and older ones, are spared) gets
  a critical verdict, detector ``chain_runaway``, action ``block``, count = the runs of the
  chain's latest alert;
* **repeat**: from the chain's critical ``chain_repeat`` alert of a tool and args hash on (the
  one whose ``count`` reached ``chainCriticalThreshold``), every call with that tool and args
  hash in the chain gets a critical verdict, detector ``chain_repeat``, count = its runs.

A runaway block comes first. The blocks are the fleet's, not the run's: added to the run's
outputs, they never count toward its escalation to abort (like F1's fail-fast).

A chain's blocks end when it expires, as known from its alerts and ``chain_active`` records
only (never from the events a runtime happens to see, so a worker that decides some of a
chain's runs blocks as the embedded runtime does): at its ``chain_expired`` alert, or once a
call, an alert or a record comes ``chainTtlS`` or more after the latest time they gave (each
is checked before it moves that time on). Alerts of an expired episode arriving late (another
partition of the alerts topic) are ignored: their ``ts`` is not later than the expiry's.
Repeat blocks are keyed by the tool and the full args hash (``args_hash``), never by the
subject's 12 characters.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Final

from loopwatch.config.sections import Delegation
from loopwatch.detectors.events import ToolCall, Verdict
from loopwatch.detectors.fleet import chain_repeat, chain_runaway
from loopwatch.detectors.fleet.alerts import FleetAlert
from loopwatch.detectors.fleet.chains import ACTIVE_KIND, EXPIRED_KIND
from loopwatch.detectors.verdicts import fleet_block

__all__ = ["ChainBlocks", "repeat_message", "runaway_message"]

#: Chains whose blocks are kept (the least recently alerted beyond are forgotten).
MAX_CHAINS: Final = 10_000
_PREFIX: Final = "chain:"
_KINDS: Final = frozenset({chain_runaway.KIND, chain_repeat.KIND, EXPIRED_KIND, ACTIVE_KIND})


def runaway_message(runs: int) -> str:
    return (
        f"CRITICAL: this delegation chain has started {runs} runs; no new agent of it may act. "
        "Report back to the agent that started you."
    )


def repeat_message(runs: int, tool: str) -> str:
    return (
        f"CRITICAL: {runs} agents of this delegation chain already called {tool} with these "
        "arguments and got the same result. Use that result instead of calling again."
    )


class _Chain:
    __slots__ = ("last_ts", "opened_ts", "repeats", "runs")

    def __init__(self, last_ts: int) -> None:
        self.last_ts = last_ts  # the latest time its alerts and records gave
        self.opened_ts: int | None = None  # the chain's first runaway alert's ts
        self.runs = 0  # the runs of its latest runaway alert
        self.repeats: dict[str, FleetAlert] = {}  # tool and args hash -> its latest chain_repeat alert


def _repeat_key(tool: str, args_hash: str | None, subject: str) -> str:
    """Where a repeat alert is kept: its tool and full args hash (an alert without one: its subject)."""
    return f"{tool}\x1f{args_hash}" if args_hash is not None else f"\x1e{subject}"


def _root_of(alert: FleetAlert) -> str | None:
    """The root a chain alert's subject names (``chain:{root}`` or ``chain:{root}:{tool}:{h12}``)."""
    subject = alert.subject
    if not subject.startswith(_PREFIX):
        return None
    rest = subject[len(_PREFIX) :]
    if alert.kind != chain_repeat.KIND:
        return rest
    tool = alert.tool or ""
    if alert.args_hash is not None:
        suffix = f":{tool}:{chain_repeat.args_h12(tool, alert.args_hash)}"
        return rest[: -len(suffix)] if rest.endswith(suffix) and len(rest) > len(suffix) else None
    end = rest.rfind(f":{tool}:")
    return rest[:end] if end >= 0 else None


class ChainBlocks:
    """The chain alerts of the chains with one, as far as blocks need them."""

    def __init__(self, ttl_s: int = 3600) -> None:
        self.ttl_ms = ttl_s * 1000  # ``chainTtlS`` (its holder keeps it up to date)
        self._chains: OrderedDict[str, _Chain] = OrderedDict()
        self._closed: OrderedDict[str, int] = OrderedDict()  # root -> its latest expiry's ts

    def __len__(self) -> int:
        return len(self._chains)

    def add(self, alert: FleetAlert) -> None:
        """Take a fleet alert (other kinds, and alerts seen before, change nothing)."""
        kind = alert.kind
        if kind not in _KINDS:
            return
        root = _root_of(alert)
        if root is None:
            return
        chain = self._chains.get(root)
        if chain is not None and alert.ts - chain.last_ts >= self.ttl_ms:
            self._close(root, chain.last_ts)  # expired before this alert: it opens a new episode
            chain = None
        if kind == EXPIRED_KIND:
            self._close(root, alert.ts)
            return
        closed = self._closed.get(root)
        if closed is not None and alert.ts <= closed:
            return  # of an episode that has expired
        if kind == ACTIVE_KIND:
            if chain is not None and alert.ts > chain.last_ts:
                chain.last_ts = alert.ts
            return
        if chain is None:
            chain = self._chains[root] = _Chain(alert.ts)
            while len(self._chains) > MAX_CHAINS:
                self._chains.popitem(last=False)
        else:
            self._chains.move_to_end(root)
            chain.last_ts = max(chain.last_ts, alert.ts)
        if kind == chain_runaway.KIND:
            chain.opened_ts = alert.ts if chain.opened_ts is None else min(chain.opened_ts, alert.ts)
            chain.runs = max(chain.runs, alert.runs)
            return
        key = _repeat_key(alert.tool or "", alert.args_hash, alert.subject)
        known = chain.repeats.get(key)
        if known is None or (alert.count or 0) > (known.count or 0):
            chain.repeats[key] = alert

    def _close(self, root: str, ts: int) -> None:
        """The chain of ``root`` expired at its time ``ts``: its blocks end."""
        self._chains.pop(root, None)
        closed = self._closed.get(root)
        if closed is None or ts > closed:
            self._closed[root] = ts
            self._closed.move_to_end(root)
            while len(self._closed) > MAX_CHAINS:
                self._closed.popitem(last=False)

    def block(
        self,
        scope: str,
        root: str,
        first_ts: int | None,
        event: ToolCall,
        args_hash: str,
        ts: int,
        rule: Delegation,
        observe_only: bool,
    ) -> Verdict | None:
        """The block of a call (at event time ``ts``, args hash ``args_hash``) of run ``scope``,
        first seen at ``first_ts``, in the chain of ``root``; ``None`` if it may go on."""
        self.ttl_ms = rule.chain_ttl_s * 1000
        chain = self._chains.get(root)
        if chain is None:
            return None
        if ts - chain.last_ts >= self.ttl_ms:
            self._close(root, chain.last_ts)  # the chain expired: a new one starts
            return None
        opened = chain.opened_ts
        if opened is not None and first_ts is not None and first_ts > opened:
            message = runaway_message(chain.runs)
            return _verdict(scope, event, chain_runaway.KIND, chain.runs, message, root, observe_only)
        if not chain.repeats:
            return None
        tool = event.tool
        alert = chain.repeats.get(_repeat_key(tool, args_hash, ""))
        if alert is None:  # alerts published without their args hash
            alert = chain.repeats.get(_repeat_key(tool, None, chain_repeat.subject(root, tool, args_hash)))
        if alert is None or (alert.count or 0) < rule.chain_critical_threshold:
            return None
        key = f"{tool}:{chain_repeat.args_h12(tool, args_hash)}"
        message = repeat_message(alert.runs, tool)
        return _verdict(scope, event, chain_repeat.KIND, alert.runs, message, key, observe_only)


def _verdict(
    scope: str, event: ToolCall, detector: str, runs: int, message: str, key: str, observe_only: bool
) -> Verdict:
    return fleet_block(scope, event, detector, runs, message, f"{detector}:{key}", observe_only)
