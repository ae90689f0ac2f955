"""F6b/F6c properties: with ``delegation`` off nothing changes, on without blocks no verdict
changes, and the worker's compacted chain facts give exactly the alerts of every fact.

* Random fleets of delegation chains (runs naming roots and parents, calls repeating each
  other's work, long quiet gaps) give the same verdicts and the same alerts with no
  ``delegation`` section as with ``delegation: {enabled: false, block: true, …}`` and tiny
  thresholds; switched on without ``block`` (and a depth limit nobody reaches) they give the
  same verdicts, only alerts more.
* A worker sends each batch's chain facts compacted (detectors.fleet.fact_batch): a run's
  events collapse to one fact per stretch without a ``chainTtlS`` gap. On facts in time
  order, cut into batches anywhere, the chain rules must give the same alerts from the
  compacted batches as from every fact.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from loopwatch.config import FleetConfig, parse_config_text
from loopwatch.config.fleet_rules import FleetRules
from loopwatch.config.sections import Delegation
from loopwatch.detectors.events import Event, ToolCall, ToolResult
from loopwatch.detectors.fleet.alerts import FleetAlert
from loopwatch.detectors.fleet.chains import ChainState
from loopwatch.detectors.fleet.fact_batch import FactBatch
from loopwatch.detectors.fleet.facts import ChainResultFact, ChainRunFact, Fact
from loopwatch.detectors.fleet.watch import apply_fact
from loopwatch.detectors.stable_json import from_python
from tests.unit.test_chain_rules import sequential

T0 = 1_700_000_000_000
ROOTS = ["root-a", "root-b"]
TINY = {
    "maxRuns": 2,
    "minRuns": 2,
    "chainWarningThreshold": 2,
    "chainCriticalThreshold": 3,
    "chainTtlS": 20,
}


def document(delegation: dict[str, Any] | None) -> FleetConfig:
    doc: dict[str, Any] = {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 4}}}
    if delegation is not None:
        doc["loopwatch"] = {"detectors": {"delegation": delegation}}
    return parse_config_text(json.dumps(doc))


@st.composite
def chain_fleets(draw: Any) -> list[Event]:
    """Calls and results of runs of two chains (and roots alone), in time order, with repeats."""
    count = draw(st.integers(1, 70))
    ts = T0
    ids = itertools.count()
    first_seen: set[str] = set()
    events: list[Event] = []
    for _ in range(count):
        ts += draw(st.sampled_from([0, 300, 2_000, 9_000, 25_000]))
        root = draw(st.sampled_from(ROOTS))
        member = draw(st.integers(0, 4))
        run = root if member == 0 else f"{root}/sub-{member}"
        chain: dict[str, Any] = {}
        if run not in first_seen:
            first_seen.add(run)
            if member and draw(st.booleans()):
                chain = {"parent_run_id": root, "root_run_id": root, "depth": draw(st.integers(1, 6))}
        params = from_python({"path": draw(st.sampled_from(["/a", "/b"]))})
        n = next(ids)
        call = ToolCall(
            event_id=f"c{n}",
            run_id=run,
            agent_id=f"ag{member % 2}",
            ts=ts,
            tool="read",
            params=params,
            **chain,
        )
        events.append(call)
        if draw(st.integers(0, 3)):
            text = draw(st.sampled_from(["same", "same", "other"]))
            events.append(
                ToolResult(
                    event_id=f"r{n}",
                    run_id=run,
                    agent_id=call.agent_id,
                    ts=ts + 5,
                    tool="read",
                    params=params,
                    result=from_python({"content": [{"type": "text", "text": text}]}),
                )
            )
        if draw(st.integers(0, 9)) == 0:
            events.append(events[-1])  # a republished event
    return events


@settings(max_examples=150)
@given(chain_fleets())
def test_with_delegation_off_nothing_changes(events: list[Event]) -> None:
    plain = sequential(events, document(None))
    assert sequential(events, document({**TINY, "enabled": False, "block": True})) == plain
    on, alerts = sequential(events, document({**TINY, "enabled": True, "maxDepth": 100}))
    assert on == plain[0]  # alerts only, no verdict
    assert plain[1] == [a for a in alerts if not a.kind.startswith("chain_")]


RULE = Delegation(
    enabled=True,
    max_runs=2,
    min_runs=2,
    chain_warning_threshold=2,
    chain_critical_threshold=4,
    chain_ttl_s=10,
)
RULES = FleetRules(delegation=RULE)


STEPS = [0, 0, 1_000, 4_000, 11_000]
LATE_STEPS = [*STEPS, -1_000, -6_000, -12_000, 24_000]  # facts from other partitions arrive late


@st.composite
def chain_facts(draw: Any, steps: list[int] = STEPS) -> list[tuple[ChainRunFact, ChainResultFact | None]]:
    """Per event, in arrival order: its run fact and, for a result, its result fact (some twice)."""
    count = draw(st.integers(1, 120))
    ts = T0
    out: list[tuple[ChainRunFact, ChainResultFact | None]] = []
    for n in range(count):
        ts += draw(st.sampled_from(steps))
        root = draw(st.sampled_from(ROOTS))
        run = f"{root}/r{draw(st.integers(0, 5))}"
        agent = f"ag{draw(st.integers(0, 2))}"
        result = None
        if draw(st.booleans()):
            event = f"e{n}" if draw(st.integers(0, 6)) else "e-again"
            args = draw(st.sampled_from(["read:aaaa", "read:bbbb"]))
            result = ChainResultFact(root, run, event, "read", args, draw(st.sampled_from(["x", "y"])), ts)
        out.append((ChainRunFact(root, run, agent, ts, ts), result))
    return out


def one_by_one(events: list[tuple[ChainRunFact, ChainResultFact | None]]) -> list[FleetAlert]:
    chains: dict[str, ChainState] = {}
    alerts: list[FleetAlert] = []
    for run, result in events:
        alerts += apply_fact(run, RULES, {}, {}, chains)
        if result is not None:
            alerts += apply_fact(result, RULES, {}, {}, chains)
    return alerts


def batched(events: list[tuple[ChainRunFact, ChainResultFact | None]], cuts: list[int]) -> list[FleetAlert]:
    chains: dict[str, ChainState] = {}
    alerts: list[FleetAlert] = []
    batch = FactBatch(chain_ttl_s=RULE.chain_ttl_s)
    bounds = sorted({0, len(events), *(c % (len(events) + 1) for c in cuts)})
    for start, end in itertools.pairwise(bounds):
        for run, result in events[start:end]:
            batch.chain_run(run.root, run.run, run.agent, run.ts)
            if result is not None:
                batch.chain_result(result)
        drained: dict[str, list[Fact]] = batch.drain()
        for subject in sorted(drained):  # each subject is its own partition: its facts in order
            for fact in drained[subject]:
                alerts += apply_fact(fact, RULES, {}, {}, chains)
    return alerts


def by_chain(alerts: list[FleetAlert]) -> dict[str, list[FleetAlert]]:
    """Alerts per chain, by id (a chain's runaway and repeat alerts do not depend on each other);
    of its ``chain_active`` records, how many depends on the batching, the latest does not."""
    grouped: dict[str, list[FleetAlert]] = {}
    latest: dict[str, FleetAlert] = {}
    for alert in alerts:
        if alert.kind == "chain_active":
            known = latest.get(alert.subject)
            if known is None or alert.ts >= known.ts:
                latest[alert.subject] = alert
            continue
        root = alert.subject.split(":")[1]
        grouped.setdefault(root, []).append(alert)
    for alert in latest.values():
        grouped.setdefault(alert.subject.split(":")[1], []).append(alert)
    return {root: sorted(found, key=lambda a: a.alert_id) for root, found in grouped.items()}


@settings(max_examples=400)
@given(chain_facts(), st.lists(st.integers(0, 200), max_size=6))
def test_compacted_chain_facts_give_the_alerts_of_every_fact(
    events: list[tuple[ChainRunFact, ChainResultFact | None]], cuts: list[int]
) -> None:
    assert by_chain(batched(events, cuts)) == by_chain(one_by_one(events))


@settings(max_examples=400)
@given(chain_facts(LATE_STEPS), st.lists(st.integers(0, 200), max_size=6))
def test_facts_out_of_time_order_give_the_same_alerts_however_they_are_batched(
    events: list[tuple[ChainRunFact, ChainResultFact | None]], cuts: list[int]
) -> None:
    assert by_chain(batched(events, cuts)) == by_chain(one_by_one(events))
