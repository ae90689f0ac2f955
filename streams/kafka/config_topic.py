"""The compacted config topic: per-agent ``loopDetection`` overrides applied at run time.

Key = agent id, value = a ``loopDetection`` object (JSON5), or the agent's whole entry as
``agents.list[]`` holds it (an object with ``tools`` and/or ``loopwatch``: its block, its
``detectors`` and its ``preset``, e.g. ``{"loopwatch": {"preset": "agents"}}``), or empty to
remove the agent's overrides. Workers read the topic to its end before they start, then follow it.
"""

from __future__ import annotations

from typing import Any

import structlog
from aiokafka import AIOKafkaConsumer, TopicPartition

from loopwatch.config.errors import ConfigError
from loopwatch.config.fleet import FleetConfig
from loopwatch.config.stream_settings import StreamSettings
from loopwatch.streams.kafka.connect import aiokafka_auth

__all__ = ["apply_config_record", "apply_logged", "read_config_overrides"]

_log = structlog.get_logger("loopwatch.worker")


def apply_config_record(config: FleetConfig, key: bytes | None, value: bytes | None) -> FleetConfig:
    """A config-topic record applied: key = agent id, value = a loopDetection block, an agent
    entry (``tools`` / ``loopwatch``), or null."""
    if not key:
        raise ConfigError([], "config record without an agent id key")
    agent = key.decode("utf-8", "replace")
    block = None if not value else _json_object(value, agent)
    if block is None:
        return config.with_agent_entry(agent, None)
    if "tools" in block or "loopwatch" in block:
        return config.with_agent_entry(agent, block)
    return config.with_agent_block(agent, block)


def _json_object(value: bytes, agent: str) -> dict[str, Any] | None:
    import json5

    from loopwatch.config.errors import ConfigProblem

    try:
        block = json5.loads(value.decode("utf-8"))
    except ValueError as exc:
        raise ConfigError([ConfigProblem(f"agents.{agent}", f"not valid JSON: {exc}")]) from exc
    except RecursionError as exc:
        raise ConfigError([ConfigProblem(f"agents.{agent}", "nested too deeply")]) from exc
    if block is not None and not isinstance(block, dict):
        raise ConfigError([ConfigProblem(f"agents.{agent}.tools.loopDetection", "must be an object")])
    return block


async def read_config_overrides(settings: StreamSettings, config: FleetConfig) -> tuple[FleetConfig, int]:
    """The config topic read to its end; returns the config and the next offset."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.kafka_bootstrap, enable_auto_commit=False, **aiokafka_auth(settings)
    )
    await consumer.start()
    try:
        tp = TopicPartition(settings.topic_config, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        end = (await consumer.end_offsets([tp]))[tp]
        while await consumer.position(tp) < end:
            batch = await consumer.getmany(tp, timeout_ms=1000)
            for message in batch.get(tp, []):
                config = apply_logged(config, message.key, message.value)
        return config, end
    finally:
        await consumer.stop()


def apply_logged(config: FleetConfig, key: bytes | None, value: bytes | None) -> FleetConfig:
    try:
        updated = apply_config_record(config, key, value)
    except ConfigError as exc:
        _log.error(
            "config override refused",
            agent=(key or b"").decode("utf-8", "replace"),
            problems=[str(p) for p in exc.problems] or [str(exc)],
        )
        return config
    except Exception as exc:  # noqa: BLE001 - a record that breaks the parser must not stop workers
        _log.error(
            "config override refused",
            agent=(key or b"").decode("utf-8", "replace"),
            problems=[f"unreadable: {type(exc).__name__}: {exc}"],
        )
        return config
    _log.info("config override applied", agent=(key or b"").decode("utf-8", "replace"), removed=not value)
    return updated
