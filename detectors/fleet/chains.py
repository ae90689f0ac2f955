"""F6b and F6c over one delegation chain: its state, its expiry, and which rule a fact feeds.

One :class:`ChainState` per root (the run scope that keys the chain: a root run's own, or
the ``root_run_id`` its runs' first events named), stepped with the chain's facts
(:class:`~detectors.fleet.facts.ChainRunFact`, :class:`~detectors.fleet.facts.ChainResultFact`)
in the order they arrive.

A chain's state expires ``chainTtlS`` after its last event (event time): a fact at least that
much later than every fact before it starts the chain afresh (its runs, counts and marks
forgotten; an alert crossed again has the same id, as F6's ids are kind, subject and
threshold). :func:`expired` tells a holder of many chains which ones it may drop.
"""

from __future__ import annotations

from typing import Final

import msgspec

from loopwatch.config.sections import Delegation
from loopwatch.detectors.fleet import chain_repeat, chain_runaway
from loopwatch.detectors.fleet.alerts import FleetAlert
from loopwatch.detectors.fleet.facts import ChainResultFact, ChainRunFact
from loopwatch.detectors.state import RunState

__all__ = ["ChainState", "chain_key", "expired", "step"]

NEVER: Final = -(2**62)


class ChainState(msgspec.Struct, array_like=True):
    root: str
    last_ts: int = NEVER  # the chain's latest event time
    runaway: chain_runaway.Runaway = msgspec.field(default_factory=chain_runaway.Runaway)
    repeats: chain_repeat.Repeats = msgspec.field(default_factory=chain_repeat.Repeats)


def chain_key(state: RunState) -> str:
    """The root that keys a run's chain: the ``root_run_id`` its first event gave, or its own scope."""
    root = state.root
    return root if root is not None else state.scope


def expired(state: ChainState, now_ts: int, rule: Delegation) -> bool:
    """Whether the chain's state has expired by event time ``now_ts``."""
    return now_ts - state.last_ts >= rule.chain_ttl_s * 1000


def step(state: ChainState, fact: ChainRunFact | ChainResultFact, rule: Delegation) -> list[FleetAlert]:
    """Apply one fact of ``state.root``'s chain; the alerts it gives."""
    if state.last_ts != NEVER and expired(state, fact.ts, rule):
        state.runaway = chain_runaway.Runaway()
        state.repeats = chain_repeat.Repeats()
    last = fact.last if type(fact) is ChainRunFact else fact.ts
    if last > state.last_ts:
        state.last_ts = last
    if type(fact) is ChainRunFact:
        return chain_runaway.on_run(state.runaway, state.root, fact, rule)
    assert type(fact) is ChainResultFact
    return chain_repeat.on_result(state.repeats, state.root, fact, rule)
