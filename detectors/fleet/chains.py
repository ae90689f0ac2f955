"""F6b and F6c over one delegation chain: its state, its expiry, and which rule a fact feeds.

One :class:`ChainState` per root (the run scope that keys the chain: a root run's own, or
the ``root_run_id`` its runs' first events named), stepped with the chain's facts
(:class:`~detectors.fleet.facts.ChainRunFact`, :class:`~detectors.fleet.facts.ChainResultFact`)
in the order they arrive.

A chain's state expires ``chainTtlS`` after its last event (event time): a fact at least that
much later than every fact before it starts the chain afresh (its runs, counts and marks
forgotten; an alert crossed again has the same id, as F6's ids are kind, subject and
threshold). :func:`expired` tells a holder of many chains which ones it may drop.

Facts are applied in the order they arrive (the embedded runtime's input order; in the worker,
the order the runs' events were applied, which batching does not change): expiry compares each
fact with the latest event time of the facts applied before it, so the alerts do not depend on
how the facts were batched.

A chain that had alerts and expires (a fact past its ``chainTtlS``, or a holder dropping it)
gives a ``chain_expired`` alert (:func:`expiry_alert`, subject ``chain:{root}``, ``ts`` its
last event time): its alerts are closed. While it has alerts, it says how recent its last
event is with a ``chain_active`` record each time that enters a new period of 1/20 of
``chainTtlS`` (at least a second; the record's ``ts`` is the period's start): every runtime
answers the chain's blocks from these records and the alerts only
(:mod:`detectors.fleet.chain_blocks`), so a worker that decides some of a chain's runs blocks
as the embedded runtime does, whichever runs' events it saw (a block may end up to that 1/20
of ``chainTtlS`` before the chain's state expires).
"""

from __future__ import annotations

from typing import Final

import msgspec

from loopwatch.config.sections import Delegation
from loopwatch.detectors.fleet import chain_repeat, chain_runaway
from loopwatch.detectors.fleet.alerts import FleetAlert, alert_id
from loopwatch.detectors.fleet.facts import ChainResultFact, ChainRunFact
from loopwatch.detectors.state import RunState

__all__ = [
    "ACTIVE_KIND",
    "EXPIRED_KIND",
    "ChainState",
    "beat_ms",
    "chain_key",
    "expired",
    "expiry_alert",
    "step",
]

NEVER: Final = -(2**62)
EXPIRED_KIND: Final = "chain_expired"
ACTIVE_KIND: Final = "chain_active"
_SESSION: Final = "session:"
#: A chain with alerts says it is active when its last event time enters a new period of
#: ``chainTtlS`` / BEAT_SHARE (at least a second).
BEAT_SHARE: Final = 20


class ChainState(msgspec.Struct, array_like=True):
    root: str
    last_ts: int = NEVER  # the chain's latest event time
    runaway: chain_runaway.Runaway = msgspec.field(default_factory=chain_runaway.Runaway)
    repeats: chain_repeat.Repeats = msgspec.field(default_factory=chain_repeat.Repeats)
    beat_ts: int = NEVER  # the start of the last period the chain said it was active in


def chain_key(state: RunState) -> str:
    """The root that keys a run's chain: the ``root_run_id`` its first event gave (read as a run
    scope is: without surrounding spaces, nor around a ``session:`` scope's id), or its own scope."""
    root = state.root.strip() if state.root is not None else ""
    if root.startswith(_SESSION):  # normalised like run scopes: ``session:{session_id stripped}``
        root = _SESSION + root[len(_SESSION) :].strip()
    return root if root else state.scope


def expired(state: ChainState, now_ts: int, rule: Delegation) -> bool:
    """Whether the chain's state has expired by event time ``now_ts``."""
    return now_ts - state.last_ts >= rule.chain_ttl_s * 1000


def expiry_alert(state: ChainState, rule: Delegation) -> FleetAlert | None:
    """The ``chain_expired`` alert of an expiring chain, if it had alerts."""
    if not state.runaway.alerted and not state.repeats.marks:
        return None
    subject = f"chain:{state.root}"
    return FleetAlert(
        alert_id=alert_id(EXPIRED_KIND, subject, state.last_ts),
        kind=EXPIRED_KIND,
        subject=subject,
        runs=state.runaway.count,
        sample_run_ids=[run for run, _ in state.runaway.samples],
        since_ts=state.runaway.since_ts,
        ts=state.last_ts,
        message=(
            f"Delegation chain {state.root} had no event for {rule.chain_ttl_s} s: its alerts are closed."
        ),
    )


def beat_ms(rule: Delegation) -> int:
    """The period of a chain's ``chain_active`` records."""
    return max(1000, rule.chain_ttl_s * 1000 // BEAT_SHARE)


def _beat(state: ChainState, rule: Delegation) -> FleetAlert | None:
    """The ``chain_active`` record of a chain with alerts whose last event time entered a new
    period of :func:`beat_ms` (``ts``: that period's start, so the latest record is the same
    however the chain's facts were batched)."""
    if not state.runaway.alerted and not state.repeats.marks:
        return None
    size = beat_ms(rule)
    period = state.last_ts // size * size
    if period <= state.beat_ts:
        return None
    state.beat_ts = period
    subject = f"chain:{state.root}"
    return FleetAlert(
        alert_id=alert_id(ACTIVE_KIND, subject, period),
        kind=ACTIVE_KIND,
        subject=subject,
        runs=0,
        sample_run_ids=[],
        since_ts=period,
        ts=period,
        message=f"Delegation chain {state.root} is active.",
    )


def step(state: ChainState, fact: ChainRunFact | ChainResultFact, rule: Delegation) -> list[FleetAlert]:
    """Apply one fact of ``state.root``'s chain; the alerts it gives."""
    alerts: list[FleetAlert] = []
    if state.last_ts != NEVER and expired(state, fact.ts, rule):
        closed = expiry_alert(state, rule)
        if closed is not None:
            alerts.append(closed)
        state.runaway = chain_runaway.Runaway()
        state.repeats = chain_repeat.Repeats(offsets=state.repeats.offsets)  # redeliveries stay known
        state.beat_ts = NEVER
    last = fact.last if type(fact) is ChainRunFact else fact.ts
    if last > state.last_ts:
        state.last_ts = last
    if type(fact) is ChainRunFact:
        alerts += chain_runaway.on_run(state.runaway, state.root, fact, rule)
    else:
        assert type(fact) is ChainResultFact
        alerts += chain_repeat.on_result(state.repeats, state.root, fact, rule)
    beat = _beat(state, rule)
    if beat is not None:
        alerts.append(beat)
    return alerts
