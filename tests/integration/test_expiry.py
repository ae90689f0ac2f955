"""Idle runs and old tombstones leave a real worker, on both stores, also after a restart.

The expiry timer and ``/metrics`` read the worker's run inventory (streams.kafka.run_inventory),
not the table: these tests check them against what was produced, while the worker runs and
after it restarted on its changelog (memory) or its database (rocksdb).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from loopwatch.detectors.events import Event
from tests.helpers import Trace
from tests.integration.harness import Names, WorkerProcess, event_records, produce, run
from tests.integration.test_worker import scrape, start_worker

pytestmark = pytest.mark.integration

TTL_S = 4
EXPIRY = {
    "LOOPWATCH_STATE_TTL_S": str(TTL_S),
    "LOOPWATCH_ENDED_RUN_GRACE_S": "3",
    "LOOPWATCH_EXPIRY_INTERVAL_S": "0.5",
    "LOOPWATCH_FLEET_VIEW": "false",
}


def runs(prefix: str, count: int, ended: bool = False) -> list[Event]:
    events: list[Event] = []
    for index in range(count):
        trace = Trace(f"{prefix}-{index}")
        for call in range(3):
            trace.both("read", {"path": f"/src/{call}.py"}, result="ok")
        if ended:
            trace.end()
        events += trace.events
    return events


def gauges(worker: WorkerProcess) -> tuple[float, float, float]:
    metrics = scrape(worker)
    return metrics["loopwatch_active_runs"], metrics["loopwatch_ended_runs"], metrics["loopwatch_state_bytes"]


def wait_for(worker: WorkerProcess, wanted: tuple[float, float], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    seen = gauges(worker)
    while seen[:2] != wanted:
        if time.monotonic() > deadline:
            raise AssertionError(
                f"active/ended runs {seen[:2]}, not {wanted}, after {timeout}s:\n{worker.tail()}"
            )
        time.sleep(0.2)
        seen = gauges(worker)


@pytest.mark.parametrize("store", ["memory", "rocksdb"])
def test_idle_runs_and_old_tombstones_leave_and_the_gauges_follow(
    store: str, kafka_bootstrap: str, names: Names, tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    worker = start_worker(names, kafka_bootstrap, tmp_path, workers, "w1", LOOPWATCH_STORE=store, **EXPIRY)
    produced = time.monotonic()
    run(produce(kafka_bootstrap, names.events, event_records(runs("idle", 10) + runs("done", 5, ended=True))))
    wait_for(worker, (10, 5), timeout=TTL_S)  # before anything is due
    assert gauges(worker)[2] > 0
    wait_for(worker, (0, 0), timeout=60)
    assert time.monotonic() - produced >= 3  # not before their time
    log = worker.log.read_text()
    assert log.count('"idle run expired"') == 10
    assert gauges(worker)[2] == 0

    # runs found in the table at a restart are idle from then on, and expire one TTL later
    run(produce(kafka_bootstrap, names.events, event_records(runs("kept", 6))))
    wait_for(worker, (6, 0), timeout=30)
    worker.stop()
    again = start_worker(  # on the same data directory: rocksdb reads its database
        names,
        kafka_bootstrap,
        tmp_path,
        workers,
        "w1-again",
        LOOPWATCH_STORE=store,
        LOOPWATCH_DATA_DIR=str(tmp_path / "w1"),
        **EXPIRY,
    )
    ready = time.monotonic()
    assert gauges(again)[0] == 6  # from the inventory taken when its partitions became ready
    assert '"runs table inventory"' in again.log.read_text()
    wait_for(again, (0, 0), timeout=60)
    assert time.monotonic() - ready >= TTL_S - 1
    assert again.log.read_text().count('"idle run expired"') == 6


@pytest.mark.parametrize("store", ["memory", "rocksdb"])
def test_runs_of_partitions_kept_through_a_rebalance_keep_their_idle_clocks(
    store: str, kafka_bootstrap: str, names: Names, tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    """A worker joining moves some partitions; those the first worker keeps come straight back
    from the same rebalance, with their runs' idle clocks (runs that never end expire one TTL
    after their last event however often workers join and leave: a clock restarted at each
    rebalance would keep them for ever in a fleet that scales every hour)."""
    ttl = 16
    env = {**EXPIRY, "LOOPWATCH_STATE_TTL_S": str(ttl), "LOOPWATCH_STORE": store}
    first = start_worker(names, kafka_bootstrap, tmp_path, workers, "w1", **env)
    produced = time.monotonic()
    run(produce(kafka_bootstrap, names.events, event_records(runs("kept", 24))))
    wait_for(first, (24, 0), timeout=5)
    time.sleep(max(0.0, produced + 6 - time.monotonic()))  # a restarted clock would run to +22 s
    start_worker(names, kafka_bootstrap, tmp_path, workers, "w2", **env)  # the group rebalances
    deadline = time.monotonic() + 30
    while '"runs table inventory kept"' not in first.log.read_text():
        assert time.monotonic() < deadline, f"no partition came straight back:\n{first.tail()}"
        time.sleep(0.2)
    kept = gauges(first)[0]
    assert kept > 0, first.tail()
    while gauges(first)[0] > 0:  # the kept runs: one TTL after their events, not after the rebalance
        assert time.monotonic() - produced < ttl + 4, f"kept runs still live:\n{first.tail()}"
        time.sleep(0.2)
    assert time.monotonic() - produced >= ttl - 1  # not before their time
    assert first.log.read_text().count('"idle run expired"') == kept
