"""F6b/F6c through two workers on the real broker: a delegation chain whose runs sit on every
partition (so on both workers) gives the in-process alerts, field by field, and once every
worker knows them, the in-process blocks on each worker's own runs (tests/chain_fleet.py)."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec
import pytest

from loopwatch.config import parse_config_text
from loopwatch.detectors.events import Event, chain_of, encode_output, run_scope
from loopwatch.streams.embedded.runtime import partition_for
from loopwatch.streams.fleet_view.metrics import depth_label
from tests.chain_fleet import chain_phases, with_delegation
from tests.integration.harness import Names, WorkerProcess, consume, event_records, per_run, produce, run
from tests.integration.test_fleet_alerts import alerts_of, wait_facts_committed
from tests.integration.test_worker import scrape, start_worker
from tests.unit.test_chain_rules import sequential

pytestmark = pytest.mark.integration

CONFIG = with_delegation(json.dumps({"tools": {"loopDetection": {"enabled": True}}}))
KINDS = (
    'loopwatch_fleet_alerts_total{kind="chain_runaway"}',
    'loopwatch_fleet_alerts_total{kind="chain_repeat"}',
)


def owned(worker: WorkerProcess) -> set[int]:
    """The input partitions a worker applies (its consumer-lag series)."""
    prefix = 'loopwatch_consumer_lag{partition="'
    return {int(key[len(prefix) : -2]) for key in scrape(worker) if key.startswith(prefix)}


def wait_until(check: Any, what: str, worker: WorkerProcess, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}:\n{worker.tail()}"
        time.sleep(0.2)


def chain_alerts(bootstrap: str, names: Names, count: int, timeout: float = 90) -> list[dict[str, Any]]:
    """The chain's alerts, once ``count`` arrived (its ``chain_active`` records, bookkeeping for
    the blocks, are no alerts)."""
    deadline = time.monotonic() + timeout
    while True:
        found = alerts_of(run(consume(bootstrap, names.alerts, until=count + 4, timeout=3)))
        got = [alert for alert in found if alert["kind"] != "chain_active"]
        if len(got) >= count or time.monotonic() > deadline:
            return got


def test_a_chain_across_two_workers_alerts_and_blocks_as_in_process(
    kafka_bootstrap: str, names: Names, tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    phases = chain_phases(f"it-{names.app_id}")
    assert {partition_for(e.run_id or "", 4) for e in phases.events} == {0, 1, 2, 3}
    outputs, alerts = sequential(phases.events, parse_config_text(CONFIG))
    assert sorted(a.kind for a in alerts) == ["chain_repeat", "chain_repeat", "chain_runaway"]
    w1 = start_worker(names, kafka_bootstrap, tmp_path, workers, "w1", config=CONFIG)
    w2 = start_worker(names, kafka_bootstrap, tmp_path, workers, "w2", config=CONFIG)
    wait_until(lambda: owned(w1) and owned(w2) and owned(w1) | owned(w2) == {0, 1, 2, 3}, "no even split", w2)

    run(produce(kafka_bootstrap, names.events, event_records(phases.a)))
    wait_facts_committed(kafka_bootstrap, names)
    assert alerts_of(run(consume(kafka_bootstrap, names.alerts, until=1, timeout=3))) == []  # A alone: none
    run(produce(kafka_bootstrap, names.events, event_records(phases.b)))
    got = chain_alerts(kafka_bootstrap, names, 3)
    want = [json.loads(msgspec.json.encode(a)) for a in alerts]
    assert sorted(got, key=lambda a: a["alert_id"]) == sorted(want, key=lambda a: a["alert_id"])

    for worker in (w1, w2):  # every worker follows the alerts topic: each knows them
        wait_until(
            lambda w=worker: [scrape(w).get(k, 0) for k in KINDS] == [1, 2], "alerts not known", worker
        )
    run(produce(kafka_bootstrap, names.events, event_records(phases.c)))
    expected = [json.loads(encode_output(o)) for o in outputs]
    got_verdicts = run(consume(kafka_bootstrap, names.verdicts, until=len(expected), timeout=90, settle=2))
    assert per_run(got_verdicts, dedupe=True) == per_run(expected)
    for worker in (w1, w2):  # each blocked the calls of its own runs of the chain
        metrics = scrape(worker)
        key = 'loopwatch_verdicts_total{action="block",detector="chain_runaway",level="critical"}'
        assert metrics.get(key, 0) > 0, worker.tail()
    assert not [e for e in phases.events if isinstance(e, Event) and e.run_id is None]
    # each worker counts the runs it started by depth (their first events): together, the chain's
    first: dict[str, int] = {}
    for event in phases.events:
        if isinstance(event, Event) and run_scope(event) not in first:
            chain = chain_of(event)
            first[run_scope(event)] = chain[2] if chain is not None else 0
    prefix = "loopwatch_runs_started_total{"
    started: Counter[str] = Counter()
    for worker in (w1, w2):
        for name, value in scrape(worker).items():
            if name.startswith(prefix):
                started[name] += int(value)
    assert started == Counter(f'{prefix}depth="{depth_label(depth)}"}}' for depth in first.values())
