"""``chain-across-workers``: a delegation chain whose runs land on different workers (F6b, F6c).

The random fleet runs with ``delegation`` on (blocks included), beside one chain whose runs sit
on every input partition (:mod:`tests.chain_fleet`). Two workers share the input:

1. phase A (the whole random fleet and the chain's first five runs) is applied;
2. phase B makes the chain reach ``maxRuns`` and its repeated read both repeat thresholds:
   the three alerts must be the in-process ones, field by field, and every worker must know
   them (its follower of ``loopwatch.alerts``);
3. one worker is killed with SIGKILL and a new one joins (it learns the alerts from the start
   of the topic; the runs it takes over carry their chain in their recovered state);
4. phase C: new runs of the chain on every partition, a run started too deep, the readers
   again. Both live workers block calls of their own runs.

Then, as in every scenario, the verdicts on the topic are compared run by run with one
uninterrupted in-process core, here the run engine with the fleet watch fed A, B, C in order
(the chain's blocks included); no chain alert may be missing, extra or different.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from dataclasses import replace
from typing import Any

from loopwatch.config.fleet import parse_config_text
from loopwatch.config.fleet_rules import fleet_rules
from loopwatch.detectors.engine import Engine
from loopwatch.detectors.events import Event, encode_output, run_scope
from loopwatch.detectors.fleet.alerts import FleetAlert, encode_alert
from loopwatch.detectors.fleet.chains import chain_key
from loopwatch.detectors.fleet.watch import FleetWatch, WatchHooks
from loopwatch.detectors.hashing import digester_for
from loopwatch.streams.fleet_view.alert_board import CHAIN_KINDS as CHAIN_ALERTS
from tests.chain_fleet import chain_phases, with_delegation
from tests.chaos.scenarios import Context, _read_all
from tests.integration.harness import WorkerProcess

__all__ = ["chain_across_workers"]

KINDS = {"chain_runaway": 1, "chain_repeat": 2}
BLOCKS = 'loopwatch_verdicts_total{action="block",detector="chain_runaway",level="critical"}'
WAIT_S = 90.0


def in_process(events: list[Event], config_text: str) -> tuple[list[dict[str, Any]], list[FleetAlert]]:
    """The uninterrupted core: the run engine and the fleet watch, one event after the other."""
    config = parse_config_text(config_text)
    watch = FleetWatch(fleet_rules(config.global_rules), digester_for(config.settings.digest))
    engine = Engine(config, fleet=WatchHooks(watch))
    outputs: list[dict[str, Any]] = []
    for event in events:
        ts = event.ts if event.ts is not None else 0
        stepped = engine.step(event, ts)
        outputs += [json.loads(encode_output(out)) for out in stepped.outputs]
        state = engine.states.get(run_scope(event))
        root = chain_key(state) if state is not None and stepped.kind == "applied" else None
        watch.observe(event, run_scope(event), ts, stepped.prepared, stepped.outputs, root)
    return outputs, watch.alerts


def _scrape(worker: WorkerProcess) -> dict[str, float]:
    port = worker.env["LOOPWATCH_WEB_PORT"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


def _owned(metrics: dict[str, float]) -> set[int]:
    prefix = 'loopwatch_consumer_lag{partition="'
    return {int(key[len(prefix) : -2]) for key in metrics if key.startswith(prefix)}


async def _until(ctx: Context, check: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not await asyncio.to_thread(check):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} after {WAIT_S:.0f}s:\n{ctx.tails()}")
        await asyncio.sleep(0.25)


def _knows_the_alerts(worker: WorkerProcess) -> bool:
    metrics = _scrape(worker)
    return all(
        metrics.get(f'loopwatch_fleet_alerts_total{{kind="{kind}"}}', 0) >= n for kind, n in KINDS.items()
    )


def _split(live: list[WorkerProcess]) -> bool:
    """Every live worker applies input partitions, and together all four, once each."""
    owned = [_owned(_scrape(worker)) for worker in live]
    union = set().union(*owned)
    return all(owned) and union == {0, 1, 2, 3} and sum(len(o) for o in owned) == len(union)


def _alerts_by_id(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for record in records:
        found.setdefault(record["alert_id"], record)
    return found


async def chain_across_workers(ctx: Context) -> None:
    phases = chain_phases(f"f{ctx.fleet.seed}-chain")
    config_text = with_delegation(ctx.fleet.config_text)
    fleet = ctx.fleet.events  # the random fleet: applied with phase A
    events = [*fleet, *phases.events]
    ctx.fleet = replace(
        ctx.fleet, events=events, config_text=config_text, config=parse_config_text(config_text)
    )
    expected, alerts = in_process(events, config_text)
    ctx.expected = expected  # the in-process core with its fleet watch: the chain's blocks too
    want = {a.alert_id: json.loads(encode_alert(a)) for a in alerts if a.kind in CHAIN_ALERTS}
    if sorted(a["kind"] for a in want.values()) != ["chain_repeat", "chain_repeat", "chain_runaway"]:
        raise AssertionError(f"the chain's in-process alerts are not the three of phase B: {sorted(want)}")

    first = await ctx.start_worker()
    second = await ctx.start_worker()
    await ctx.produce([*fleet, *phases.a])
    await ctx.wait_processed()
    await ctx.produce(phases.b)
    await ctx.wait_processed()
    for worker in (first, second):
        await _until(
            ctx, lambda w=worker: _knows_the_alerts(w), f"{worker.log.name} does not know the chain's alerts"
        )

    second.kill()
    third = await ctx.start_worker()
    await _until(ctx, lambda: _knows_the_alerts(third), "the new worker did not learn the chain's alerts")
    await _until(ctx, lambda: _split([first, third]), "the input is not split between the two live workers")
    await ctx.produce(phases.c)
    await ctx.wait_processed()

    got = _alerts_by_id(await _read_all(ctx.bootstrap, ctx.names.alerts))
    chain_got = {alert_id: alert for alert_id, alert in got.items() if alert["kind"] in CHAIN_ALERTS}
    if chain_got != want:
        missing, extra = sorted(set(want) - set(chain_got)), sorted(set(chain_got) - set(want))
        changed = sorted(i for i in set(want) & set(chain_got) if want[i] != chain_got[i])
        raise AssertionError(f"chain alerts differ: missing {missing}, extra {extra}, changed {changed}")
    idle = [w.log.name for w in (first, third) if not _scrape(w).get(BLOCKS, 0)]
    if idle:
        raise AssertionError(f"workers that blocked no call of their own runs of the chain: {idle}")
