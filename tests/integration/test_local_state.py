"""The worker on the RocksDB store (``LOOPWATCH_STORE=rocksdb``), on a real broker.

A worker restarted on its data directory (after SIGTERM, or ``kill -9`` mid-stream) reads only
the changelog records past what its database holds, and its verdicts stay those of one
uninterrupted core; with ``LOOPWATCH_STANDBY_REPLICAS=1`` the second worker keeps a copy of the
first one's partitions and, when the first is killed, takes them over without reading their
changelog from the start. What a worker read is taken from its own "partitions ready" log line
(faust's recovery, counted record by record); the changelogs' sizes from the broker.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from loopwatch.detectors.events import Event
from tests.chaos.fleet import ChaosFleet, chaos_fleet
from tests.chaos.scenarios import PARTITIONS, _committed, _end_offsets, _read_all
from tests.integration.harness import Names, WorkerProcess, event_records, expected_outputs, per_run, produce

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Setup:
    """One test's broker, names, fleet and workers (all on the rocksdb store)."""

    def __init__(self, bootstrap: str, tmp_path: Path, workers: list[WorkerProcess], seed: int) -> None:
        self.bootstrap = bootstrap
        self.tmp_path = tmp_path
        self.workers = workers
        self.names = Names()
        self.fleet: ChaosFleet = chaos_fleet(seed, runs=120)
        self.config = tmp_path / "openclaw.json"
        self.config.write_text(self.fleet.config_text)

    def start(self, label: str, data_dir: str, **env: str) -> WorkerProcess:
        settings = {
            "LOOPWATCH_WEB_PORT": str(_free_port()),
            "LOOPWATCH_DATA_DIR": str(self.tmp_path / data_dir),
            "LOOPWATCH_STORE": "rocksdb",
            "LOOPWATCH_FLEET_VIEW": "false",
            "LOOPWATCH_KAFKA_SESSION_TIMEOUT_S": "6",  # a killed worker leaves the group soon
        }
        worker = WorkerProcess(
            self.names.env(self.bootstrap, **{**settings, **env}),
            self.tmp_path / f"{label}.log",
            self.config,
        )
        self.workers.append(worker)
        worker.wait_ready()
        return worker

    def produce(self, events: list[Event]) -> None:
        asyncio.run(produce(self.bootstrap, self.names.events, event_records(events)))

    def changelog_ends(self) -> dict[int, int]:
        """The ``runs`` changelog's end offset per partition."""
        topic = f"{self.names.app_id}-runs-changelog"
        ends = asyncio.run(_end_offsets(self.bootstrap, topic))
        return {tp.partition: end for tp, end in ends.items()}

    def wait_processed(self, timeout: float = 180.0) -> None:
        """Until the group committed the end of every input partition."""
        deadline = time.monotonic() + timeout
        while True:
            ends = asyncio.run(_end_offsets(self.bootstrap, self.names.events))
            committed = asyncio.run(_committed(self.bootstrap, self.names.app_id, list(ends)))
            if all(committed.get(tp, -1) >= end for tp, end in ends.items()):
                return
            if time.monotonic() > deadline:
                tails = "\n".join(w.tail(15) for w in self.workers)
                raise AssertionError(f"input not committed to its end ({committed} of {ends}):\n{tails}")
            time.sleep(0.25)

    def assert_exact_verdicts(self) -> None:
        """The verdicts on the topic (a verdict id may repeat, with the same content) are the
        uninterrupted core's, run by run."""
        got = asyncio.run(_read_all(self.bootstrap, self.names.verdicts))
        expected = expected_outputs(self.fleet.events, self.fleet.config)
        assert len(expected) > 100
        by_id: dict[str, dict[str, Any]] = {}
        for output in got:
            assert by_id.setdefault(output["verdict_id"], output) == output
        assert per_run(got, dedupe=True) == per_run(expected)


def ready_lines(worker: WorkerProcess) -> list[dict[str, Any]]:
    """The worker's "partitions ready" log records (JSON logs), in order."""
    lines = []
    for line in worker.log.read_text(errors="replace").splitlines():
        if line.startswith("{") and '"partitions ready"' in line:
            lines.append(json.loads(line))
    return lines


def replayed_runs(line: dict[str, Any], names: Names, partitions: set[int] | None = None) -> int:
    """``runs`` changelog records read to recover the (given) partitions, per that record."""
    prefix = f"{names.app_id}-runs-changelog["
    return sum(
        count
        for where, count in line["changelog_replayed"].items()
        if where.startswith(prefix) and (partitions is None or int(where[len(prefix) : -1]) in partitions)
    )


def input_partitions(line: dict[str, Any], names: Names) -> set[int]:
    prefix = f"{names.events}["
    return {int(where[len(prefix) : -1]) for where in line["positions"] if where.startswith(prefix)}


@pytest.mark.parametrize("stop", ["sigterm", "kill-9"])
def test_a_restarted_worker_reads_only_the_changelog_tail_and_changes_no_verdict(
    stop: str, kafka_bootstrap: str, tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    setup = Setup(kafka_bootstrap, tmp_path, workers, seed=31 if stop == "sigterm" else 32)
    events = setup.fleet.events
    first, second = len(events) * 2 // 5, len(events) * 7 // 10
    worker = setup.start("w1", "data")
    setup.produce(events[:first])
    setup.wait_processed()  # committed, so persisted first: the database holds all of it
    persisted = sum(setup.changelog_ends().values())
    assert persisted > 100
    setup.produce(events[first:second])
    while sum(setup.changelog_ends().values()) == persisted:  # the second part is being applied
        time.sleep(0.01)
    if stop == "sigterm":
        worker.stop()
    else:
        worker.kill()
    written = sum(setup.changelog_ends().values())
    again = setup.start("w1-again", "data")
    [line] = ready_lines(again)
    replayed = replayed_runs(line, setup.names)
    assert line["store"] == "rocksdb"
    assert input_partitions(line, setup.names) == set(range(PARTITIONS))
    if stop == "sigterm":
        assert replayed == 0  # a graceful stop persists everything it wrote
    else:  # at most what was written after the last commit before the kill
        assert replayed <= written - persisted
    setup.produce(events[second:])
    setup.wait_processed()
    setup.assert_exact_verdicts()


def test_a_standby_replica_keeps_a_warm_copy_for_the_failover(
    kafka_bootstrap: str, tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    setup = Setup(kafka_bootstrap, tmp_path, workers, seed=33)
    names = setup.names
    standby = {"LOOPWATCH_STANDBY_REPLICAS": "1"}
    first = setup.start("w1", "data-1", **standby)
    second = setup.start("w2", "data-2", **standby)
    deadline = time.monotonic() + 60
    while len(ready_lines(first)) < 2:  # the rebalance for the second worker done
        assert time.monotonic() < deadline, first.tail()
        time.sleep(0.2)
    events = setup.fleet.events
    half = len(events) // 2
    setup.produce(events[:half])
    setup.wait_processed()
    time.sleep(3)  # the standbys read the changelog records of the last batches
    mine, theirs = ready_lines(first)[-1], ready_lines(second)[-1]
    first_inputs, second_inputs = input_partitions(mine, names), input_partitions(theirs, names)
    assert first_inputs
    assert second_inputs
    assert first_inputs.isdisjoint(second_inputs)
    assert first_inputs | second_inputs == set(range(PARTITIONS))
    changelog = f"{names.app_id}-runs-changelog"
    assert {f"{changelog}[{p}]" for p in first_inputs} <= set(theirs["standbys"])
    assert {f"{changelog}[{p}]" for p in second_inputs} <= set(mine["standbys"])
    before = len(ready_lines(second))
    first.kill()
    deadline = time.monotonic() + 90
    while len(ready_lines(second)) == before or input_partitions(ready_lines(second)[-1], names) != set(
        range(PARTITIONS)
    ):
        assert time.monotonic() < deadline, second.tail()
        time.sleep(0.2)
    takeover = ready_lines(second)[-1]
    ends = setup.changelog_ends()
    taken = sum(ends[p] for p in first_inputs)
    kept = sum(count for where, count in takeover["standby_records"].items() if where.startswith(changelog))
    assert kept > 0  # the copy was kept while the first worker owned those partitions
    assert replayed_runs(takeover, names, first_inputs) < taken / 10  # not read from scratch
    setup.produce(events[half:])
    setup.wait_processed()
    setup.assert_exact_verdicts()
