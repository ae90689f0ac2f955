"""The worker's topics on a real broker: a replication factor the cluster cannot meet stops
the worker with each topic's reason, and leaves no topic behind for the broker to make up."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from loopwatch.config.stream_settings import parse_stream_settings
from loopwatch.streams.kafka.connect import TopicMismatch, ensure_topics


async def _topics(bootstrap: str) -> set[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    await admin.start()
    try:
        return set(await admin.list_topics())
    finally:
        await admin.close()


def test_a_replication_factor_above_the_brokers_is_refused_with_each_topic(kafka_bootstrap: str) -> None:
    tag = f"rf{uuid.uuid4().hex[:8]}"
    env = {
        "LOOPWATCH_REPLICATION_FACTOR": "3",  # one broker here
        "LOOPWATCH_APP_ID": tag,
        **{f"LOOPWATCH_TOPIC_{name.upper()}": f"{tag}.{name}" for name in ("events", "verdicts", "config")},
        **{
            f"LOOPWATCH_TOPIC_{name.upper()}": f"{tag}.{name.replace('_', '-')}"
            for name in ("dead_letter", "alerts", "fleet_facts", "replies")
        },
    }
    settings = parse_stream_settings(env, {"kafka_bootstrap": kafka_bootstrap})
    with pytest.raises(TopicMismatch) as refused:
        asyncio.run(ensure_topics(settings))
    message = str(refused.value)
    assert "the broker did not create loopwatch's topics" in message
    assert f"{tag}.events: " in message
    assert "(LOOPWATCH_REPLICATION_FACTOR)" in message
    assert not {topic for topic in asyncio.run(_topics(kafka_bootstrap)) if topic.startswith(tag)}
