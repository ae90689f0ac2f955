"""Random fleets for the fault scenarios: many runs of the demo's scenarios, interleaved.

A fleet is seeded: the same seed gives the same events and config. Each run follows one of
the demo's scripted agents (healthy ones, polls, ping-pong, unknown tools, volatile receipts,
failing commands, loops after compaction), every call gets its result, and every run ends
with ``run_end``. Runs are interleaved at random, as many agents publishing at once are.
About 3 % of events are published a second time a few records later, as a runtime that
retries a publish does (some after the run's ``run_end``). Thresholds are random per agent;
the OpenClaw rule revision, the stale-churn limit and loopwatch's own rules (on or off) are
random per fleet, and so is the agents preset (on in about half the fleets, never with a worker
of an earlier release, which does not know it); every call carries usage. Events carry the
run's own event time (4-12 s a step), so stale churn aborts happen too.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

from loopwatch.config.fleet import FleetConfig, parse_config_text
from loopwatch.detectors.events import CompactionRetry, Event, RunEnd, ToolCall, ToolResult, Usage
from loopwatch.streams.embedded.demo_fleet import SCENARIOS

__all__ = ["ChaosFleet", "chaos_fleet"]

#: loopwatch's own rules, on in half of the fleets (a budget a loop of ~25 calls reaches)
OWN_RULES = {"runNoProgress": {"enabled": True}, "editUndo": {"enabled": True}, "loopBudget": {"usd": 0.3}}


@dataclass(frozen=True)
class ChaosFleet:
    seed: int
    events: list[Event]
    config_text: str
    config: FleetConfig


def _thresholds(rnd: random.Random) -> dict[str, object]:
    warning = rnd.randint(3, 10)
    critical = warning + rnd.randint(2, 8)
    breaker = critical + rnd.randint(2, 10)
    return {
        "enabled": True,
        "historySize": rnd.choice([20, 30, 50]),
        "warningThreshold": warning,
        "criticalThreshold": critical,
        "globalCircuitBreakerThreshold": breaker,
    }


def _run_events(tag: str, number: int, rnd: random.Random) -> list[Event]:
    scenario = SCENARIOS[rnd.randrange(len(SCENARIOS))]
    run_id = f"{tag}-run-{number:04d}"
    agent = scenario.agent_id
    events: list[Event] = []
    clock = 0
    for index, step in enumerate(scenario.script(random.Random(rnd.random()))):
        event_id = f"{run_id}-e{index}"
        clock += rnd.randint(4000, 12000)
        if step.compaction:
            events.append(CompactionRetry(event_id=event_id, run_id=run_id, agent_id=agent, ts=clock))
            continue
        call_id = f"{run_id}-c{index}"
        events.append(
            ToolCall(
                event_id=f"{event_id}c",
                run_id=run_id,
                agent_id=agent,
                tool=step.tool,
                params=step.params,
                tool_call_id=call_id,
                ts=clock,
                usage=Usage(
                    input_tokens=rnd.randint(500, 4000), output_tokens=rnd.randint(20, 400), cost_usd=0.02
                ),
            )
        )
        outcome: dict[str, Any] = {"error": step.error} if step.error is not None else {"result": step.result}
        events.append(
            ToolResult(
                event_id=f"{event_id}r",
                run_id=run_id,
                agent_id=agent,
                tool=step.tool,
                params=step.params,
                tool_call_id=call_id,
                ts=clock + 500,
                **outcome,
            )
        )
    events.append(RunEnd(event_id=f"{run_id}-end", run_id=run_id, agent_id=agent, ts=clock + 1000))
    return events


def chaos_fleet(seed: int, runs: int = 150, duplicate_pct: float = 3.0, presets: bool = True) -> ChaosFleet:
    """A seeded random fleet and its per-agent config (JSON5 text and parsed); ``presets``:
    whether the fleet may run the agents preset (drawn last: the same seed gives the same
    events and thresholds either way)."""
    rnd = random.Random(seed)
    tag = f"f{seed}"
    scripts = [_run_events(tag, number, rnd) for number in range(runs)]
    cursors = [0] * runs
    active = list(range(runs))
    events: list[Event] = []
    later: list[tuple[int, Event]] = []  # (position, event): re-published copies
    while active:
        pick = active[rnd.randrange(len(active))]
        event = scripts[pick][cursors[pick]]
        cursors[pick] += 1
        if cursors[pick] == len(scripts[pick]):
            active.remove(pick)
        events.append(event)
        if rnd.random() * 100 < duplicate_pct:
            later.append((len(events) + rnd.randint(1, 40), event))
        while later and later[0][0] <= len(events):
            events.append(later.pop(0)[1])
        later.sort(key=lambda item: item[0])
    events.extend(event for _, event in later)
    agents = sorted({scenario.agent_id for scenario in SCENARIOS})
    document: dict[str, Any] = {
        "tools": {"loopDetection": {"enabled": True}},
        "agents": {"list": [{"id": agent, "tools": {"loopDetection": _thresholds(rnd)}} for agent in agents]},
        "loopwatch": {
            "openclawRevision": rnd.choice(["2026-08", "2026-08", "2026-05"]),
            "churnStaleAfterS": rnd.choice([0, 60, 300]),
            "detectors": rnd.choice([{}, OWN_RULES]),
        },
    }
    if rnd.random() < 0.5 and presets:
        document["loopwatch"]["preset"] = "agents"
    text = json.dumps(document, indent=1)
    return ChaosFleet(seed, events, text, parse_config_text(text, f"chaos fleet {seed}"))
