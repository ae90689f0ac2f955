"""A three-node KRaft cluster of ``docker/kafka/broker.sh`` (``KAFKA_NODES=3``), started by this
module on ports of its own: replicated topics, the loss of a partition leader, its return.

The cluster is this module's own (not the shared broker of ``make test``); it not starting is a
failure. Waits poll the cluster's metadata up to generous deadlines; nothing is timed.
"""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaError

from loopwatch.config.stream_settings import parse_stream_settings
from loopwatch.streams.kafka.connect import ensure_topics
from tests.chaos.broker import Cluster, own_cluster
from tests.integration.harness import (
    Names,
    WorkerProcess,
    consume,
    event_records,
    expected_outputs,
    fixture_events,
    per_run,
    produce,
)

#: Clients on 29092-29094, controllers on 29193-29195: clear of the shared broker (19092/19093),
#: the chaos scenarios' own broker (19292/19293) and Redis (16379).
CLIENT_PORT = 29092
CONTROLLER_PORT = 29193
WAIT_S = 90.0


pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The cluster, stopped and deleted after the module's tests (a failed start is a failure)."""
    with ExitStack() as stack:
        try:
            running = stack.enter_context(
                own_cluster(CLIENT_PORT, CONTROLLER_PORT, tmp_path_factory.mktemp("kafka-cluster"))
            )
        except RuntimeError as exc:
            pytest.fail(f"the three-node cluster did not start: {exc}")
        yield running


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _describe(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    await admin.start()
    try:
        described = await admin.describe_topics([topic])
    finally:
        await admin.close()
    if not described or described[0].get("error_code") or not described[0]["partitions"]:
        return []
    partitions: list[dict[str, Any]] = described[0]["partitions"]
    return sorted(partitions, key=lambda p: int(p["partition"]))


async def _partitions(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    """The topic's partitions (leader, replicas, isr) as the cluster's metadata has them; ``[]``
    while it has not. An admin request may go to a node just killed: it is asked again."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            return await _describe(bootstrap, topic)
        except KafkaError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.25)


async def _until(what: str, check: Callable[[], Awaitable[bool]], timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f}s: {what}")
        await asyncio.sleep(0.25)


async def _topic_configs(bootstrap: str, topics: list[str]) -> dict[str, dict[str, str]]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    await admin.start()
    try:
        responses = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic) for topic in topics]
        )
    finally:
        await admin.close()
    out: dict[str, dict[str, str]] = {}
    for response in responses:
        for _code, _message, _type, name, entries in response.resources:
            out[name] = {entry[0]: entry[1] for entry in entries}
    return out


async def _produce_all(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, request_timeout_ms=30000
    )
    await producer.start()
    try:
        for value in values:
            await producer.send_and_wait(topic, value, partition=0)
    finally:
        await producer.stop()


async def _consume_all(bootstrap: str, topic: str, count: int) -> list[bytes]:
    """The first ``count`` records of the topic, read by a consumer group (its coordinator on
    whichever node leads the offsets topic)."""
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=f"cluster-test-{uuid.uuid4().hex[:8]}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    values: list[bytes] = []
    try:
        deadline = time.monotonic() + WAIT_S
        while len(values) < count and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            values.extend(message.value for messages in batch.values() for message in messages)
    finally:
        await consumer.stop()
    return values


def test_leader_killed_and_back(cluster: Cluster) -> None:
    """A topic with 3 replicas and min.insync.replicas 2: its leader is killed with SIGKILL;
    another node leads, acks=all writes and a group's reads go on; the node comes back with its
    data and rejoins the in-sync replicas."""
    topic = f"cluster-{uuid.uuid4().hex[:8]}"
    bootstrap = cluster.bootstrap

    async def create() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic, 1, 3, topic_configs={"min.insync.replicas": "2"})])
        finally:
            await admin.close()

    asyncio.run(create())

    async def all_in_sync() -> bool:
        partitions = await _partitions(bootstrap, topic)
        return bool(partitions) and len(partitions[0]["isr"]) == 3

    asyncio.run(_until("3 in-sync replicas", all_in_sync))
    first = asyncio.run(_partitions(bootstrap, topic))[0]
    assert sorted(first["replicas"]) == [1, 2, 3]
    assert sorted(first["isr"]) == [1, 2, 3]
    leader = int(first["leader"])
    before = [f"before-{i}".encode() for i in range(50)]
    asyncio.run(_produce_all(bootstrap, topic, before))

    cluster.kill_node(leader)

    async def moved() -> bool:
        partitions = await _partitions(bootstrap, topic)
        return bool(partitions) and partitions[0]["leader"] not in (leader, -1)

    asyncio.run(_until(f"a leader other than node {leader}", moved))
    after_kill = asyncio.run(_partitions(bootstrap, topic))[0]
    assert after_kill["leader"] in {1, 2, 3} - {leader}
    assert leader not in after_kill["isr"]
    assert len(after_kill["isr"]) == 2
    after = [f"after-{i}".encode() for i in range(50)]
    asyncio.run(_produce_all(bootstrap, topic, after))  # acks=all: 2 in sync are min.insync.replicas
    assert asyncio.run(_consume_all(bootstrap, topic, 100)) == before + after

    cluster.start_node(leader)

    async def rejoined() -> bool:
        partitions = await _partitions(bootstrap, topic)
        return bool(partitions) and leader in partitions[0]["isr"]

    asyncio.run(_until(f"node {leader} back in the in-sync replicas", rejoined))
    assert sorted(asyncio.run(_partitions(bootstrap, topic))[0]["isr"]) == [1, 2, 3]
    # a client that knows only the node started again finds the whole cluster through it
    only_it = f"127.0.0.1:{cluster.port + leader - 1}"
    assert asyncio.run(_consume_all(only_it, topic, 100)) == before + after


def test_loopwatch_topics_replicated(cluster: Cluster, tmp_path: Path) -> None:
    """With ``LOOPWATCH_REPLICATION_FACTOR=3`` every loopwatch topic, the tables' changelogs
    (created by faust) included, has 3 replicas and min.insync.replicas 2, and a worker on
    the cluster gives the in-process core's verdicts."""
    names = Names()
    bootstrap = cluster.bootstrap
    worker = WorkerProcess(
        names.env(
            bootstrap,
            LOOPWATCH_REPLICATION_FACTOR="3",
            LOOPWATCH_DATA_DIR=str(tmp_path / "data"),
            LOOPWATCH_WEB_PORT=str(_free_port()),
        ),
        tmp_path / "worker.log",
    )
    try:
        worker.wait_ready()
        events = fixture_events()
        expected = expected_outputs(events)
        asyncio.run(produce(bootstrap, names.events, event_records(events)))
        got = asyncio.run(consume(bootstrap, names.verdicts, until=len(expected), timeout=WAIT_S, settle=2))
        assert per_run(got) == per_run(expected)
        assert len(got) == len(expected)
    finally:
        worker.stop()
    settings = parse_stream_settings(names.env(bootstrap, LOOPWATCH_REPLICATION_FACTOR="3"))
    asyncio.run(ensure_topics(settings))  # the topics exist: nothing changes
    topics = [
        names.events,
        names.verdicts,
        names.dead_letter,
        names.config,
        names.alerts,
        names.facts,
        names.replies,
        f"{names.app_id}-runs-changelog",
        f"{names.app_id}-fleet-changelog",
    ]
    for topic in topics:
        partitions = asyncio.run(_partitions(bootstrap, topic))
        assert partitions, f"{topic} does not exist"
        assert all(len(p["replicas"]) == 3 for p in partitions), (topic, partitions)
    configs = asyncio.run(_topic_configs(bootstrap, topics))
    assert {topic: configs[topic]["min.insync.replicas"] for topic in topics} == dict.fromkeys(topics, "2")
    assert configs[names.config]["cleanup.policy"] == "compact"
    assert configs[f"{names.app_id}-runs-changelog"]["cleanup.policy"] == "compact"
