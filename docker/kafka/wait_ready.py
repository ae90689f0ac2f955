"""Wait until a Kafka broker (or cluster) really serves clients: metadata, produce, and a group consume.

On a cluster (``KAFKA_REPLICATION`` > 1) the round trip is a replicated one: at least
``KAFKA_WAIT_BROKERS`` brokers are registered, the probe topic has ``KAFKA_REPLICATION``
replicas of which at least that many (up to the replication factor) are in sync, and the
record is produced with acks=all before it is consumed. (A node started again while another
one is down waits with ``KAFKA_WAIT_BROKERS=1``.)

Exit 0 when ready, 1 on timeout. Environment: KAFKA_BOOTSTRAP (127.0.0.1:19092),
KAFKA_WAIT_TIMEOUT (seconds, 90), KAFKA_REPLICATION (1), KAFKA_WAIT_BROKERS (1).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

BOOTSTRAP = os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:19092")
TIMEOUT = float(os.environ.get("KAFKA_WAIT_TIMEOUT", "90"))
REPLICATION = int(os.environ.get("KAFKA_REPLICATION", "1"))
BROKERS = int(os.environ.get("KAFKA_WAIT_BROKERS", "1"))
TOPIC = "_loopwatch_readiness" if REPLICATION == 1 else f"_loopwatch_readiness_r{REPLICATION}"


class NotYet(Exception):
    """The cluster answers but is not complete yet."""


async def probe() -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=BOOTSTRAP, request_timeout_ms=5000)
    await admin.start()
    try:
        brokers = (await admin.describe_cluster())["brokers"]
        if len(brokers) < BROKERS:
            raise NotYet(f"{len(brokers)} of {BROKERS} brokers registered")
        if TOPIC not in await admin.list_topics():
            await admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=REPLICATION)])
        if REPLICATION > 1:
            for topic in await admin.describe_topics([TOPIC]):
                if topic.get("error_code") or not topic["partitions"]:
                    raise NotYet(f"{TOPIC} not in the metadata yet")
                for partition in topic["partitions"]:
                    if len(partition["isr"]) < min(REPLICATION, BROKERS):
                        raise NotYet(f"{TOPIC}[{partition['partition']}] in-sync replicas {partition['isr']}")
    finally:
        await admin.close()
    marker = uuid.uuid4().hex.encode()
    producer = AIOKafkaProducer(bootstrap_servers=BOOTSTRAP, acks="all", request_timeout_ms=10000)
    await producer.start()
    try:
        await producer.send_and_wait(TOPIC, marker)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        TOPIC,
        bootstrap_servers=BOOTSTRAP,
        group_id="_loopwatch_readiness",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    try:

        async def until_marker() -> None:
            async for message in consumer:
                if message.value == marker:
                    return

        await asyncio.wait_for(until_marker(), timeout=30)
    finally:
        await consumer.stop()


def main() -> int:
    deadline = time.monotonic() + TIMEOUT
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            asyncio.run(asyncio.wait_for(probe(), timeout=max(1.0, deadline - time.monotonic())))
            return 0
        except Exception as exc:  # noqa: BLE001 - any failure means "not ready yet"
            last = exc
            time.sleep(1)
    print(f"wait_ready: kafka at {BOOTSTRAP} not ready after {TIMEOUT:.0f}s: {last!r}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
