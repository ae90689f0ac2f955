"""Fault scenarios on a real broker with real worker processes (``make chaos``, the fault tests).

Each scenario runs a fresh random fleet (:mod:`tests.chaos.fleet`) through ``loopwatch worker``
processes while something happens to them — a worker joins mid-backlog or while events
arrive, a worker is killed with SIGKILL, one of two is stopped with SIGTERM, the broker
restarts, the whole input is delivered again after every run ended, and (on a three-node
cluster of its own, :data:`CLUSTER_SCENARIOS`) the broker leading the input, the broker leading
the ``runs`` changelog or the active KRaft controller is killed with SIGKILL and started
again — then waits until the
group has committed the end of the input and compares, run by run, the verdicts on the topic
(de-duplicated on ``verdict_id``) with those of one uninterrupted in-process core. A run
whose verdicts differ in any way (one missing, one extra, one changed) is reported.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError

from loopwatch.detectors.events import Event, run_scope
from tests.chaos.broker import Cluster, QuorumStatus
from tests.chaos.fleet import ChaosFleet, chaos_fleet
from tests.helpers import ROOT
from tests.integration.harness import Names, WorkerProcess, event_records, expected_outputs, per_run, produce
from tests.release_tree import PREVIOUS_RELEASE, release_env, release_tree

__all__ = ["CLUSTER_SCENARIOS", "SCENARIOS", "ScenarioResult", "run_scenario"]

PARTITIONS = 4
SETTLE_TIMEOUT_S = 180.0


@dataclass
class ScenarioResult:
    scenario: str
    seed: int
    matched: int
    differed: int
    details: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.differed == 0 and not self.details

    def line(self) -> str:
        return f"{self.scenario} (seed {self.seed}): {self.matched} runs matched, {self.differed} differed"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Context:
    """One scenario run: its broker, topics, fleet, workers and scratch folder."""

    bootstrap: str
    workdir: Path
    fleet: ChaosFleet
    names: Names = field(default_factory=Names)
    workers: list[WorkerProcess] = field(default_factory=list)
    cluster: Cluster | None = None  # the cluster scenarios' own cluster (``bootstrap`` names its nodes)
    store: str = "memory"  # the workers' LOOPWATCH_STORE (each worker has a data directory of its own)
    worker_env: dict[str, str] = field(default_factory=dict)  # more settings for every worker

    @cached_property
    def expected(self) -> list[dict[str, Any]]:
        return expected_outputs(self.fleet.events, self.fleet.config)

    async def start_worker(self, tree: Path | None = None, **env: str) -> WorkerProcess:
        """A worker of this tree, or of the release checked out in ``tree``."""
        label = f"w{len(self.workers) + 1}"
        config = self.workdir / "openclaw.json"
        config.write_text(self.fleet.config_text)
        worker_env = self.names.env(
            self.bootstrap,
            LOOPWATCH_WEB_PORT=str(_free_port()),
            LOOPWATCH_DATA_DIR=str(self.workdir / label),
            LOOPWATCH_KAFKA_SESSION_TIMEOUT_S="6",
            LOOPWATCH_FLEET_VIEW="false",
            LOOPWATCH_STORE=self.store,
            **{**self.worker_env, **env},
        )
        if tree is not None:
            worker_env = release_env(tree, worker_env)
        worker = WorkerProcess(worker_env, self.workdir / f"{label}.log", config, tree)
        self.workers.append(worker)
        await asyncio.to_thread(worker.wait_ready)
        return worker

    async def produce(self, events: list[Event]) -> None:
        await produce(self.bootstrap, self.names.events, event_records(events))

    async def verdict_count(self) -> int:
        return sum((await _end_offsets(self.bootstrap, self.names.verdicts)).values())

    async def wait_verdicts(self, at_least: int, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while await self.verdict_count() < at_least:
            if time.monotonic() > deadline:
                raise AssertionError(f"fewer than {at_least} verdicts after {timeout}s:\n{self.tails()}")
            await asyncio.sleep(0.1)

    async def wait_processed(self, timeout: float = SETTLE_TIMEOUT_S) -> None:
        """Until the group committed the end of every input partition."""
        deadline = time.monotonic() + timeout
        while True:
            ends = await _end_offsets(self.bootstrap, self.names.events)
            committed = await _committed(self.bootstrap, self.names.app_id, list(ends))
            if all(committed.get(tp, -1) >= end for tp, end in ends.items()):
                return
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"input not committed to its end ({committed} of {ends}):\n{self.tails()}"
                )
            await asyncio.sleep(0.25)

    def tails(self) -> str:
        return "\n".join(f"--- {w.log.name}\n{w.tail(15)}" for w in self.workers)

    def stop_all(self) -> None:
        for worker in self.workers:
            if worker.proc.poll() is None:
                worker.stop()


async def _end_offsets(bootstrap: str, topic: str) -> dict[TopicPartition, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        ends: dict[TopicPartition, int] = await consumer.end_offsets(partitions)
        return ends
    finally:
        await consumer.stop()


async def _committed(
    bootstrap: str, group: str, partitions: list[TopicPartition]
) -> dict[TopicPartition, int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group, partitions=partitions)
        return {tp: meta.offset for tp, meta in offsets.items() if meta is not None}
    finally:
        await admin.close()


async def _read_all(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    ends = await _end_offsets(bootstrap, topic)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    out: list[dict[str, Any]] = []
    try:
        consumer.assign(list(ends))
        await consumer.seek_to_beginning(*ends)
        while [tp for tp, end in ends.items() if await consumer.position(tp) < end]:
            batch = await consumer.getmany(timeout_ms=500)
            for messages in batch.values():
                out.extend(json.loads(message.value) for message in messages)
    finally:
        await consumer.stop()
    return out


def compare(ctx: Context, name: str, got: list[dict[str, Any]]) -> ScenarioResult:
    """Run by run: the topic's verdicts (de-duplicated) against the uninterrupted core's."""
    expected = per_run(ctx.expected)
    actual = per_run(got, dedupe=True)
    details: list[str] = []
    by_id: dict[str, dict[str, Any]] = {}
    for output in got:
        first = by_id.setdefault(output["verdict_id"], output)
        if first != output:
            details.append(f"verdict {output['verdict_id']} published twice with different content")
    runs = {run_scope(event) for event in ctx.fleet.events}
    differed = 0
    for run in sorted(runs | set(actual)):
        want, have = expected.get(run, []), actual.get(run, [])
        if want != have:
            differed += 1
            if len(details) < 5:
                details.append(_difference(run, want, have))
    return ScenarioResult(name, ctx.fleet.seed, len(runs) - differed, differed, details)


def _difference(run: str, want: list[dict[str, Any]], have: list[dict[str, Any]]) -> str:
    def brief(o: dict[str, Any]) -> str:
        what = f"{o.get('detector') or o.get('reason')}/{o.get('action', 'abort')}"
        return f"{what}#{o['count']}@{o['trigger_event_id']}"

    for index, (a, b) in enumerate(zip(want, have, strict=False)):
        if a != b:
            return f"run {run}: verdict {index} expected {brief(a)}, got {brief(b)}"
    if len(want) > len(have):
        return f"run {run}: {len(want) - len(have)} missing, first {brief(want[len(have)])}"
    return f"run {run}: {len(have) - len(want)} extra, first {brief(have[len(want)])}"


# -- the scenarios ------------------------------------------------------------------------------


async def join_mid_backlog(ctx: Context) -> None:
    """The whole fleet as a backlog; a second worker joins while the first is working through it."""
    await ctx.start_worker()
    await ctx.produce(ctx.fleet.events)
    await ctx.wait_verdicts(len(ctx.expected) // 8)
    await ctx.start_worker()


def _paced(ctx: Context, chunk: int = 300, pause_s: float = 0.1) -> asyncio.Task[None]:
    """The fleet's events produced at a steady pace (``chunk`` every ``pause_s``), in the background."""
    events = ctx.fleet.events

    async def paced() -> None:
        for start in range(0, len(events), chunk):
            await ctx.produce(events[start : start + chunk])
            await asyncio.sleep(pause_s)

    return asyncio.create_task(paced())


async def _until_produced(ctx: Context, share: float) -> None:
    """Until ``share`` of the fleet's events are on the input topic."""
    wanted = int(len(ctx.fleet.events) * share)
    while await _produced(ctx) < wanted:
        await asyncio.sleep(0.05)


async def join_while_producing(ctx: Context) -> None:
    """Events arrive at a steady pace; a second worker joins a third of the way in."""
    await ctx.start_worker()
    producing = _paced(ctx)
    await _until_produced(ctx, 1 / 3)
    await ctx.start_worker()
    await producing


async def _produced(ctx: Context) -> int:
    return sum((await _end_offsets(ctx.bootstrap, ctx.names.events)).values())


async def kill_minus_nine(ctx: Context) -> None:
    """Two workers share the backlog; one is killed with SIGKILL (no shutdown, no commit)."""
    await ctx.start_worker()
    second = await ctx.start_worker()
    await ctx.produce(ctx.fleet.events)
    await ctx.wait_verdicts(len(ctx.expected) // 4)
    second.kill()


async def sigterm_one_of_two(ctx: Context) -> None:
    """Two workers share the backlog; one is stopped with SIGTERM mid-way (graceful)."""
    await ctx.start_worker()
    second = await ctx.start_worker()
    await ctx.produce(ctx.fleet.events)
    await ctx.wait_verdicts(len(ctx.expected) // 4)
    await asyncio.to_thread(second.stop)


async def redelivery_after_run_end(ctx: Context) -> None:
    """Every run ended; the group's offsets go back half-way and a worker reads the rest again.

    The second half holds the tails of runs whose start it does not hold: detected again
    from an empty state they would give verdicts with new ids.
    """
    first = await ctx.start_worker()
    await ctx.produce(ctx.fleet.events)
    await ctx.wait_processed()
    await asyncio.to_thread(first.stop)
    await _rewind_group(ctx)
    await ctx.start_worker()


async def _rewind_group(ctx: Context) -> None:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=ctx.bootstrap, group_id=ctx.names.app_id, enable_auto_commit=False
    )
    await consumer.start()
    try:
        ends = await _end_offsets(ctx.bootstrap, ctx.names.events)
        consumer.assign(list(ends))
        await consumer.commit({tp: end // 2 for tp, end in ends.items()})
    finally:
        await consumer.stop()


async def broker_restart(ctx: Context) -> None:
    """The broker stops and starts again while a worker is mid-stream."""
    await ctx.start_worker()
    half = len(ctx.fleet.events) // 2
    await ctx.produce(ctx.fleet.events[:half])
    await ctx.wait_verdicts(len(ctx.expected) // 8)
    await asyncio.to_thread(_broker, ctx.bootstrap, "stop")
    await asyncio.sleep(3)
    await asyncio.to_thread(_broker, ctx.bootstrap, "start")
    await ctx.produce(ctx.fleet.events[half:])


def _broker(bootstrap: str, action: str) -> None:
    port = bootstrap.rsplit(":", 1)[1]
    env = dict(os.environ, KAFKA_PORT=port, KAFKA_CONTROLLER_PORT=str(int(port) + 1), PYTHON=sys.executable)
    subprocess.run(
        [str(ROOT / "docker" / "kafka" / "broker.sh"), action],
        env=env,
        check=True,
        cwd=ROOT,
        capture_output=True,
    )


#: About one input record in this many is a poison pill (a malformed record of some class).
POISON_EVERY = 30


async def poison_pills(ctx: Context) -> None:
    """A few percent of malformed records of every class mixed into the input, and malformed
    config overrides on the config topic (one read at start-up, one while running), through a
    ``kill -9`` and a rebalance. No worker may exit; every pill goes to the dead-letter topic
    (once per delivery), no valid event does; every valid run gives the core's verdicts."""
    from tests.poison import POISON

    rng = random.Random(ctx.fleet.seed)
    valid = event_records(ctx.fleet.events)
    keys = sorted({key for key, _ in valid if key is not None})
    makers = list(POISON.values())
    records: list[tuple[bytes | None, bytes]] = []
    pills: set[bytes] = set()
    for record in valid:
        records.append(record)
        if rng.randrange(POISON_EVERY) == 0:
            index = len(pills)
            pill = makers[index % len(makers)]("chaos", index) + b" " * (index // len(makers))  # unique
            pills.add(pill)
            records.append((rng.choice(keys), pill))
    deep_override = b"{" + b'"a":{' * 3000 + b"}" * 3001
    admin = AIOKafkaAdminClient(bootstrap_servers=ctx.bootstrap)
    await admin.start()
    try:  # as the workers create it (a produce would auto-create it with the broker's default)
        await admin.create_topics(
            [NewTopic(ctx.names.config, 1, 1, topic_configs={"cleanup.policy": "compact"})]
        )
    finally:
        await admin.close()
    await produce(ctx.bootstrap, ctx.names.config, [(b"agent-poison", deep_override)])
    await ctx.start_worker()
    second = await ctx.start_worker()
    await produce(ctx.bootstrap, ctx.names.config, [(b"agent-poison-2", deep_override), (b"x", b"\xff\xfe")])
    await produce(ctx.bootstrap, ctx.names.events, records)
    await ctx.wait_verdicts(len(ctx.expected) // 4)
    second.kill()
    await ctx.start_worker()  # a rebalance while the pills of the killed worker come again
    await ctx.wait_processed()
    alive = [w for w in ctx.workers if w is not second]
    exited = [w.log.name for w in alive if w.proc.poll() is not None]
    if exited:
        raise AssertionError(f"workers exited: {exited}:\n{ctx.tails()}")
    letters = await _read_all(ctx.bootstrap, ctx.names.dead_letter)
    lettered = Counter(base64.b64decode(letter["value_base64"]) for letter in letters)
    missing = pills - set(lettered)
    wrong = set(lettered) - pills
    if missing or wrong:
        raise AssertionError(
            f"{len(missing)} of {len(pills)} pills not dead-lettered; "
            f"{len(wrong)} valid records dead-lettered"
        )
    repeated = [count for count in lettered.values() if count > 2]  # one delivery, one after the kill
    if repeated:
        raise AssertionError(f"{len(repeated)} pills dead-lettered more than once per delivery")


async def _leaders(ctx: Context, topic: str) -> Counter[int]:
    """How many partitions of ``topic`` each node leads (a partition without a leader: -1)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=ctx.bootstrap)
    await admin.start()
    try:
        described = await admin.describe_topics([topic])
    finally:
        await admin.close()
    return Counter(int(p["leader"]) for topic in described for p in topic["partitions"])


#: How long the changelog and controller scenarios wait, once two thirds of the input are
#: produced, for the cluster to have moved the role away from the killed node: neither role
#: holds up the input (a killed node that leads no input partition is fenced only after the
#: controller's broker session timeout, 9 s by default).
MOVE_PATIENCE_S = 60.0


async def _node_killed_mid_stream(
    ctx: Context,
    victim: Callable[[], Awaitable[int]],
    moved: Callable[[int], Awaitable[str | None]],
    patience: float = 0.0,
) -> None:
    """The frame of the cluster scenarios: a three-node cluster, every topic with 3 replicas and
    min.insync.replicas 2; two workers; events arrive at a steady pace. A third of the way in
    (a verdict out), the node ``victim()`` names is killed with SIGKILL; events go on arriving;
    two thirds of the way in, ``moved(node)`` must say nothing (``None``: the cluster moved the
    role away from the dead node) — at once, or within ``patience`` seconds for a role whose
    move does not hold up the input (what it says then fails the try); then the node is started
    again on its data."""
    cluster = ctx.cluster
    assert cluster is not None, "a cluster scenario runs on a cluster of its own"
    await ctx.start_worker(LOOPWATCH_REPLICATION_FACTOR="3")
    await ctx.start_worker(LOOPWATCH_REPLICATION_FACTOR="3")
    producing = _paced(ctx, chunk=150, pause_s=0.2)
    try:
        await _until_produced(ctx, 1 / 3)
        await ctx.wait_verdicts(1)
        node = await victim()
        await asyncio.to_thread(cluster.kill_node, node)
        await _until_produced(ctx, 2 / 3)
        deadline = time.monotonic() + patience
        while (problem := await moved(node)) is not None:
            if time.monotonic() >= deadline:
                raise AssertionError(f"{problem} (two thirds of the input produced, {patience:.0f}s waited)")
            await asyncio.sleep(0.5)
        await asyncio.to_thread(cluster.start_node, node)
        await producing
    finally:
        producing.cancel()


async def _most_leading(ctx: Context, topic: str) -> int:
    """The node leading the most partitions of ``topic`` (every partition has a leader)."""
    leaders = await _leaders(ctx, topic)
    if -1 in leaders or sum(leaders.values()) != PARTITIONS:
        raise AssertionError(f"{topic}: partitions without a leader before any kill: {leaders}")
    return leaders.most_common(1)[0][0]


async def _no_longer_leads(ctx: Context, topic: str, node: int) -> str | None:
    """``None`` once every partition of ``topic`` has a leader and none is ``node``."""
    try:
        leaders = await _leaders(ctx, topic)
    except KafkaError as exc:  # a request to the dead node, before the cluster dropped it
        return f"{topic}: no metadata ({exc!r})"
    if node in leaders or -1 in leaders or sum(leaders.values()) != PARTITIONS:
        return f"{topic}: node {node} killed, yet the partitions' leaders are {dict(leaders)}"
    return None


async def input_leader_kill(ctx: Context) -> None:
    """The node leading the most input partitions is killed with SIGKILL mid-stream (the other
    nodes take the lead) and started again on its data (:func:`_node_killed_mid_stream`)."""
    topic = ctx.names.events

    async def moved(node: int) -> str | None:  # a produce to a dead leader waits for the move
        leaders = await _leaders(ctx, topic)
        if node in leaders:
            return f"node {node} still leads input partitions after its kill: {leaders}"
        return None

    await _node_killed_mid_stream(ctx, lambda: _most_leading(ctx, topic), moved)


async def changelog_leader_kill(ctx: Context) -> None:
    """The node leading the most partitions of the ``runs`` table's changelog (faust's
    ``<app id>-runs-changelog``: every run's state and outbox) is killed with SIGKILL
    mid-stream and started again on its data: the workers' state writes go to the new leaders,
    and a worker that takes over a partition recovers it from them."""
    topic = f"{ctx.names.app_id}-runs-changelog"
    await _node_killed_mid_stream(
        ctx,
        lambda: _most_leading(ctx, topic),
        lambda node: _no_longer_leads(ctx, topic, node),
        MOVE_PATIENCE_S,
    )


async def controller_failover(ctx: Context) -> None:
    """The active KRaft controller (the metadata quorum's leader, which in combined mode is a
    broker too) is killed with SIGKILL mid-stream; the other two controllers elect a new leader
    (a later epoch) that leads on while events arrive; the node is started again on its data."""
    cluster = ctx.cluster
    assert cluster is not None, "a cluster scenario runs on a cluster of its own"
    before: list[QuorumStatus] = []

    async def victim() -> int:
        try:
            status = await asyncio.to_thread(cluster.quorum_status)
        except RuntimeError as exc:
            raise AssertionError(f"the metadata quorum did not answer before any kill: {exc}") from exc
        if status.leader not in range(1, cluster.nodes + 1):
            raise AssertionError(f"no quorum leader before any kill: {status}")
        before.append(status)
        return status.leader

    async def moved(node: int) -> str | None:
        try:
            status = await asyncio.to_thread(cluster.quorum_status)
        except RuntimeError as exc:  # the tool may ask the dead node first; it is asked again
            return f"the metadata quorum did not answer: {str(exc)[-300:]}"
        if status.leader in (node, -1) or status.leader not in range(1, cluster.nodes + 1):
            return f"quorum leader {status.leader} after the kill of node {node}"
        if status.epoch <= before[0].epoch:
            return f"quorum epoch {status.epoch} after the kill, {before[0].epoch} before"
        return None

    await _node_killed_mid_stream(ctx, victim, moved, MOVE_PATIENCE_S)


async def rolling_upgrade(ctx: Context) -> None:
    """A worker of the previous release works alone, a worker of this tree joins it a third of
    the way in (both in one group: runs move between releases both ways), and at two thirds
    the old one is stopped (SIGTERM), as a rolling upgrade does."""
    old_tree = await asyncio.to_thread(release_tree, PREVIOUS_RELEASE)
    old = await ctx.start_worker(tree=old_tree)
    producing = _paced(ctx)
    await _until_produced(ctx, 1 / 3)
    await ctx.start_worker()
    await _until_produced(ctx, 2 / 3)
    await asyncio.to_thread(old.stop)
    await producing


async def chain_across_workers(ctx: Context) -> None:
    """A delegation chain whose runs land on different workers: its alerts, and its blocks on
    every worker (:mod:`tests.chaos.chain_scenario`, which builds on this module)."""
    from tests.chaos.chain_scenario import chain_across_workers as scenario

    await scenario(ctx)


Scenario = Callable[[Context], Awaitable[None]]
SCENARIOS: dict[str, Scenario] = {
    "join-mid-backlog": join_mid_backlog,
    "join-while-producing": join_while_producing,
    "kill-9": kill_minus_nine,
    "sigterm-one-of-two": sigterm_one_of_two,
    "broker-restart": broker_restart,
    "redelivery-after-run-end": redelivery_after_run_end,
    "poison-pills": poison_pills,
    "chain-across-workers": chain_across_workers,
}
#: Scenarios that restart the broker run on a broker of their own (started and stopped here).
OWN_BROKER = {"broker-restart"}
#: Scenarios on a three-node cluster of their own (:func:`tests.chaos.broker.own_cluster`),
#: run by ``make chaos`` only (slow: a cluster per try).
#: Scenarios with a worker of an earlier release (built once under ``.bench/``), run by
#: ``make chaos`` only.
UPGRADE_SCENARIOS: dict[str, Scenario] = {"rolling-upgrade": rolling_upgrade}
CLUSTER_SCENARIOS: dict[str, Scenario] = {
    "input-leader-kill": input_leader_kill,
    "changelog-leader-kill": changelog_leader_kill,
    "controller-failover": controller_failover,
}


async def run_scenario(
    name: str,
    seed: int,
    bootstrap: str,
    workdir: Path,
    runs: int = 150,
    cluster: Cluster | None = None,
    store: str = "memory",
    worker_env: dict[str, str] | None = None,
) -> ScenarioResult:
    """Run one scenario with a fresh fleet; the comparison with the uninterrupted core.

    A scenario that cannot finish (a worker that stops processing, a timeout) is a failed
    try whose details say why; the workers' logs of every failed try are kept in
    ``test-artifacts/chaos/``.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    fleet = chaos_fleet(seed, runs, presets=name not in UPGRADE_SCENARIOS)
    ctx = Context(bootstrap, workdir, fleet, cluster=cluster, store=store, worker_env=worker_env or {})
    try:
        await {**SCENARIOS, **UPGRADE_SCENARIOS, **CLUSTER_SCENARIOS}[name](ctx)
        await ctx.wait_processed()
        got = await _read_all(ctx.bootstrap, ctx.names.verdicts)
    except AssertionError as exc:
        result = ScenarioResult(
            name, seed, 0, len({run_scope(e) for e in ctx.fleet.events}), [str(exc)[:2000]]
        )
    else:
        result = compare(ctx, name, got)
    finally:
        await asyncio.to_thread(ctx.stop_all)
    if not result.passed:
        kept = ROOT / "test-artifacts" / "chaos" / f"{name}-{store}-{seed}-{ctx.names.app_id}"
        kept.mkdir(parents=True, exist_ok=True)
        for worker in ctx.workers:
            shutil.copy(worker.log, kept / worker.log.name)
        result.details.append(f"worker logs kept in {kept}")
    return result
