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
outputs, they never count toward its escalation to abort (like F1's fail-fast). A chain's
blocks end with the chain (``chainTtlS`` after the latest event time known of it: its alerts',
and its runs' events noted here with :meth:`ChainBlocks.note`).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Final

from loopwatch.config.sections import Delegation
from loopwatch.detectors.events import ToolCall, Verdict
from loopwatch.detectors.fleet import chain_repeat, chain_runaway
from loopwatch.detectors.fleet.alerts import FleetAlert
from loopwatch.detectors.verdicts import fleet_block

__all__ = ["ChainBlocks", "repeat_message", "runaway_message"]

#: Chains whose blocks are kept (the least recently alerted or noted beyond are forgotten).
MAX_CHAINS: Final = 10_000
_PREFIX: Final = "chain:"


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
        self.last_ts = last_ts
        self.opened_ts: int | None = None  # the chain's first runaway alert's ts
        self.runs = 0  # the runs of its latest runaway alert
        self.repeats: dict[str, FleetAlert] = {}  # subject -> its latest chain_repeat alert


def _root_of(alert: FleetAlert) -> str | None:
    """The root a chain alert's subject names (``chain:{root}`` or ``chain:{root}:{tool}:{h12}``)."""
    subject = alert.subject
    if not subject.startswith(_PREFIX):
        return None
    rest = subject[len(_PREFIX) :]
    if alert.kind == chain_runaway.KIND:
        return rest
    end = rest.rfind(f":{alert.tool}:")
    return rest[:end] if end >= 0 else None


class ChainBlocks:
    """The chain alerts of the chains with one, as far as blocks need them."""

    def __init__(self) -> None:
        self._chains: OrderedDict[str, _Chain] = OrderedDict()

    def __len__(self) -> int:
        return len(self._chains)

    def add(self, alert: FleetAlert) -> None:
        """Take a fleet alert (other kinds, and alerts seen before, change nothing)."""
        if alert.kind != chain_runaway.KIND and alert.kind != chain_repeat.KIND:
            return
        root = _root_of(alert)
        if root is None:
            return
        chain = self._chains.get(root)
        if chain is None:
            chain = self._chains[root] = _Chain(alert.ts)
            while len(self._chains) > MAX_CHAINS:
                self._chains.popitem(last=False)
        else:
            self._chains.move_to_end(root)
            chain.last_ts = max(chain.last_ts, alert.ts)
        if alert.kind == chain_runaway.KIND:
            chain.opened_ts = alert.ts if chain.opened_ts is None else min(chain.opened_ts, alert.ts)
            chain.runs = max(chain.runs, alert.runs)
            return
        known = chain.repeats.get(alert.subject)
        if known is None or (alert.count or 0) > (known.count or 0):
            chain.repeats[alert.subject] = alert

    def note(self, root: str, ts: int) -> None:
        """An event of a run of the chain of ``root`` at event time ``ts`` (keeps its blocks alive)."""
        chain = self._chains.get(root)
        if chain is not None and ts > chain.last_ts:
            chain.last_ts = ts

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
        chain = self._chains.get(root)
        if chain is None:
            return None
        if ts - chain.last_ts >= rule.chain_ttl_s * 1000:
            del self._chains[root]  # the chain expired: a new one starts
            return None
        opened = chain.opened_ts
        if opened is not None and first_ts is not None and first_ts > opened:
            message = runaway_message(chain.runs)
            return _verdict(scope, event, chain_runaway.KIND, chain.runs, message, root, observe_only)
        if not chain.repeats:
            return None
        alert = chain.repeats.get(chain_repeat.subject(root, event.tool, args_hash))
        if alert is None or (alert.count or 0) < rule.chain_critical_threshold:
            return None
        key = f"{event.tool}:{chain_repeat.args_h12(event.tool, args_hash)}"
        message = repeat_message(alert.runs, event.tool)
        return _verdict(scope, event, chain_repeat.KIND, alert.runs, message, key, observe_only)


def _verdict(
    scope: str, event: ToolCall, detector: str, runs: int, message: str, key: str, observe_only: bool
) -> Verdict:
    return fleet_block(scope, event, detector, runs, message, f"{detector}:{key}", observe_only)
