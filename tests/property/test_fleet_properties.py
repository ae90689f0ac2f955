"""The worker's compacted fact batches give exactly the alerts of every fact, one by one.

A worker sends each batch's facts compacted (detectors.fleet.fact_batch): a run's calls
collapse to one per bucket, and successes between two successes of the same bucket are
dropped. On facts in time order, split into batches anywhere, the fleet rules must give the
same alerts from the compacted batches as from every fact.
"""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from loopwatch.config.fleet_rules import FleetRules, SystemicLoopRule, ToolOutageRule
from loopwatch.detectors.fleet.alerts import FleetAlert
from loopwatch.detectors.fleet.fact_batch import FactBatch
from loopwatch.detectors.fleet.facts import CallFact, Fact, LoopFact, ResultFact
from loopwatch.detectors.fleet.watch import apply_fact

RULES = FleetRules(
    ToolOutageRule(bucket_s=10, window_buckets=3, min_runs=3, min_distinct_args=2),
    SystemicLoopRule(bucket_s=10, window_buckets=3, min_runs=2, min_share=0.3),
)
T0 = 1_700_000_000_000


@st.composite
def fleet_facts(draw: Any) -> list[Fact]:
    """Facts in time order: calls, successes and failures of two tools, loop verdicts."""
    count = draw(st.integers(1, 120))
    ts = T0
    facts: list[Fact] = []
    for _ in range(count):
        ts += draw(st.integers(0, 4000))
        run = f"r{draw(st.integers(0, 7))}"
        agent = draw(st.sampled_from(["a", "b"]))
        kind = draw(st.integers(0, 9))
        tool = draw(st.sampled_from(["search", "fetch"]))
        if kind < 3:
            facts.append(CallFact(agent, run, ts))
        elif kind < 6:
            facts.append(ResultFact(tool, agent, run, ts))
        elif kind < 9:
            error = draw(st.sampled_from(["error:x", "error:y"]))
            facts.append(ResultFact(tool, agent, run, ts, error, f"{tool}:{draw(st.integers(0, 3))}"))
        else:  # a verdict comes with the call it is about
            facts.append(CallFact(agent, run, ts))
            facts.append(LoopFact(agent, tool, "generic_repeat", run, ts))
    return facts


def one_by_one(facts: list[Fact]) -> list[FleetAlert]:
    outages: dict[str, Any] = {}
    agents: dict[str, Any] = {}
    return [alert for fact in facts for alert in apply_fact(fact, RULES, outages, agents)]


def batched(facts: list[Fact], cuts: list[int]) -> list[FleetAlert]:
    outages: dict[str, Any] = {}
    agents: dict[str, Any] = {}
    alerts: list[FleetAlert] = []
    batch = FactBatch(RULES.tool_outage.bucket_s, RULES.systemic_loop.bucket_s)
    bounds = sorted({0, len(facts), *(c % (len(facts) + 1) for c in cuts)})
    for start, end in itertools.pairwise(bounds):
        for fact in facts[start:end]:
            if type(fact) is CallFact:
                batch.call(fact.agent, fact.run, fact.ts)
            elif type(fact) is ResultFact and fact.error_class is None:
                batch.success(fact.tool, fact.run, fact.ts)
            elif type(fact) is ResultFact:
                batch.failure(fact)
            else:
                assert type(fact) is LoopFact
                batch.loop(fact)
        drained = batch.drain()
        # each subject is its own partition: its facts in order; subjects apart
        for subject in sorted(drained):
            for fact in drained[subject]:
                alerts += apply_fact(fact, RULES, outages, agents)
    return alerts


def by_subject(alerts: list[FleetAlert]) -> dict[str, list[FleetAlert]]:
    grouped: dict[str, list[FleetAlert]] = {}
    for alert in alerts:
        grouped.setdefault(alert.subject.split(":tool:")[0], []).append(alert)
    return grouped


@settings(max_examples=500)
@given(fleet_facts(), st.lists(st.integers(0, 200), max_size=6))
def test_compacted_batches_give_the_alerts_of_every_fact(facts: list[Fact], cuts: list[int]) -> None:
    assert by_subject(batched(facts, cuts)) == by_subject(one_by_one(facts))
