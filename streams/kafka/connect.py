"""Kafka connection settings for aiokafka and faust: TLS, SASL, and a bounded wait for the broker."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

import structlog
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaError

from loopwatch.config.errors import LoopwatchError
from loopwatch.config.stream_settings import StreamSettings

__all__ = [
    "BrokerUnavailable",
    "KafkaUnreachable",
    "SessionTimeoutRefused",
    "TopicMismatch",
    "aiokafka_auth",
    "check_session_timeout",
    "creation_problems",
    "ensure_topics",
    "faust_credentials",
    "partition_problems",
    "replication_configs",
    "session_timeout_problems",
    "start_client",
    "wait_for_broker",
]

_log = structlog.get_logger("loopwatch.worker")

#: With this many replicas or more, a write with acks=all needs :data:`MIN_INSYNC_REPLICAS` of them.
REPLICATED_FROM: Final = 3
MIN_INSYNC_REPLICAS: Final = 2


class BrokerUnavailable(LoopwatchError):
    """The Kafka broker did not answer within the configured startup timeout."""


class KafkaUnreachable(LoopwatchError):
    """A command's Kafka client could not connect (what and where in the message)."""


async def start_client(
    start: Callable[[], Awaitable[Any]], stop: Callable[[], Awaitable[Any]], bootstrap: str, given_by: str
) -> None:
    """``await start()`` (of an aiokafka producer, consumer or a client of them): when Kafka
    does not answer, ``stop()`` and :class:`KafkaUnreachable` naming the bootstrap and where it
    was given (``given_by``: a flag or a variable), not a traceback."""
    from aiokafka.errors import KafkaError

    try:
        await start()
    except KafkaError as exc:
        await stop()
        raise KafkaUnreachable(f"Kafka at {bootstrap} ({given_by}): {exc}") from exc
    except BaseException:  # anything else half-way (a Redis URL that is none): close what started
        with contextlib.suppress(Exception):
            await stop()
        raise


class SessionTimeoutRefused(LoopwatchError):
    """The brokers would refuse the worker's session timeout: it could never join its group."""


class TopicMismatch(LoopwatchError):
    """Existing topics have partition counts the worker cannot work with (each one named)."""


def _ssl_context(settings: StreamSettings) -> ssl.SSLContext | None:
    if "SSL" not in settings.kafka_security_protocol:
        return None
    context = ssl.create_default_context(cafile=settings.kafka_ssl_cafile)
    if settings.kafka_ssl_certfile:
        context.load_cert_chain(
            settings.kafka_ssl_certfile, settings.kafka_ssl_keyfile, settings.kafka_ssl_password
        )
    return context


def aiokafka_auth(settings: StreamSettings) -> dict[str, Any]:
    """Keyword arguments for aiokafka clients (security protocol, TLS context, SASL)."""
    auth: dict[str, Any] = {"security_protocol": settings.kafka_security_protocol}
    context = _ssl_context(settings)
    if context is not None:
        auth["ssl_context"] = context
    if settings.kafka_security_protocol.startswith("SASL"):
        auth.update(
            sasl_mechanism=settings.kafka_sasl_mechanism,
            sasl_plain_username=settings.kafka_sasl_username,
            sasl_plain_password=settings.kafka_sasl_password,
        )
    return auth


def faust_credentials(settings: StreamSettings) -> Any:
    """faust's credentials object for the same settings (``None`` for PLAINTEXT)."""
    import faust

    protocol = settings.kafka_security_protocol
    context = _ssl_context(settings)
    if protocol.startswith("SASL"):
        return faust.SASLCredentials(
            username=settings.kafka_sasl_username,
            password=settings.kafka_sasl_password,
            mechanism=settings.kafka_sasl_mechanism,
            ssl_context=context,
        )
    if protocol == "SSL":
        return faust.SSLCredentials(context)
    return None


async def wait_for_broker(settings: StreamSettings) -> None:
    """Return once the broker answers; :class:`BrokerUnavailable` after the startup timeout."""
    deadline = time.monotonic() + settings.startup_timeout_s
    last: BaseException | None = None
    while time.monotonic() < deadline:
        admin = AIOKafkaAdminClient(
            bootstrap_servers=settings.kafka_bootstrap, request_timeout_ms=5000, **aiokafka_auth(settings)
        )
        try:
            await asyncio.wait_for(admin.start(), timeout=max(1.0, deadline - time.monotonic()))
            await admin.list_topics()
            return
        except (TimeoutError, KafkaError, OSError) as exc:
            last = exc
        finally:
            await admin.close()
        await asyncio.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
    raise BrokerUnavailable(
        f"Kafka broker at {settings.kafka_bootstrap} unreachable after "
        f"{settings.startup_timeout_s:g}s ({type(last).__name__ if last else 'timeout'}: {last})"
    )


def replication_configs(settings: StreamSettings) -> dict[str, str]:
    """Topic configs every loopwatch topic (changelogs included) gets for its replication.

    With ``LOOPWATCH_REPLICATION_FACTOR`` 3 or more, ``min.insync.replicas`` 2: a write that
    the producer (acks=all) sees confirmed is on two brokers, so the loss of one (the leader
    included) loses nothing, and writes go on while one broker is down.
    """
    if settings.replication_factor >= REPLICATED_FROM:
        return {"min.insync.replicas": str(MIN_INSYNC_REPLICAS)}
    return {}


async def ensure_topics(settings: StreamSettings) -> None:
    """Create loopwatch's topics with the configured partitions and replication factor (and
    :func:`replication_configs`; the config topic compacted). Existing topics are kept as they are."""
    admin = AIOKafkaAdminClient(
        bootstrap_servers=settings.kafka_bootstrap, request_timeout_ms=10000, **aiokafka_auth(settings)
    )
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        rf = settings.replication_factor
        replicated = replication_configs(settings)
        wanted = [
            NewTopic(settings.topic_events, settings.partitions, rf, topic_configs=replicated),
            NewTopic(settings.topic_verdicts, settings.partitions, rf, topic_configs=replicated),
            NewTopic(settings.topic_dead_letter, settings.partitions, rf, topic_configs=replicated),
            NewTopic(settings.topic_alerts, settings.partitions, rf, topic_configs=replicated),
            NewTopic(
                settings.topic_replies,
                settings.partitions,
                rf,
                topic_configs={**replicated, "retention.ms": "3600000"},
            ),
            # partitioned like the input: its partitions and the fleet table's go together
            NewTopic(settings.topic_fleet_facts, settings.partitions, rf, topic_configs=replicated),
            NewTopic(settings.topic_config, 1, rf, topic_configs={**replicated, "cleanup.policy": "compact"}),
        ]
        missing = [topic for topic in wanted if topic.name not in existing]
        if missing:
            refused = creation_problems(await admin.create_topics(missing))
            if refused:
                raise TopicMismatch(
                    "the broker did not create loopwatch's topics:\n  " + "\n  ".join(refused)
                )
        needed = {topic.name: topic.num_partitions for topic in wanted}
        # the tables' changelogs (faust creates them) go with the input's partitions too
        for table in ("runs", "fleet"):
            changelog = f"{settings.app_id}-{table}-changelog"
            if changelog in existing:
                needed[changelog] = settings.partitions
        found = {
            described["topic"]: len(described["partitions"])
            for described in await admin.describe_topics(list(needed))
            if not described.get("error_code")
        }
    finally:
        await admin.close()
    problems = partition_problems(needed, found)
    if problems:
        raise TopicMismatch(
            "existing topics do not have the partitions loopwatch needs "
            "(LOOPWATCH_PARTITIONS, or recreate the topics):\n  " + "\n  ".join(problems)
        )


#: Kafka's TOPIC_ALREADY_EXISTS: another worker created it meanwhile (not a problem)
_ALREADY_EXISTS = 36


def creation_problems(response: Any) -> list[str]:
    """Each topic the broker refused to create, with its reason (a replication factor above
    the brokers' count names LOOPWATCH_REPLICATION_FACTOR)."""
    problems = []
    for entry in getattr(response, "topic_errors", ()):
        topic, code = entry[0], entry[1]
        if code in (0, _ALREADY_EXISTS):
            continue
        reason = entry[2] if len(entry) > 2 and entry[2] else f"error code {code}"
        hint = " (LOOPWATCH_REPLICATION_FACTOR)" if "replication" in reason.lower() else ""
        problems.append(f"{topic}: {reason}{hint}")
    return problems


def partition_problems(needed: dict[str, int], found: dict[str, int]) -> list[str]:
    """One line per topic whose partition count is not the one needed."""
    return [
        f"topic {name}: {found[name]} partition(s) found, {count} needed"
        for name, count in needed.items()
        if name in found and found[name] != count
    ]


_SESSION_LIMITS: Final = ("group.min.session.timeout.ms", "group.max.session.timeout.ms")


async def check_session_timeout(settings: StreamSettings) -> None:
    """Refuse to start with a session timeout the brokers refuse (:class:`SessionTimeoutRefused`).

    A broker answers a join with a timeout outside its ``group.min/max.session.timeout.ms``
    with a fatal error that the consumer only logs: the worker would wait forever, never
    ready. Brokers whose configs cannot be read (no permission) are not checked (a warning).
    """
    admin = AIOKafkaAdminClient(
        bootstrap_servers=settings.kafka_bootstrap, request_timeout_ms=10000, **aiokafka_auth(settings)
    )
    await admin.start()
    try:
        cluster = await admin.describe_cluster()
        resources = [
            ConfigResource(ConfigResourceType.BROKER, str(broker["node_id"]), dict.fromkeys(_SESSION_LIMITS))
            for broker in cluster["brokers"]
        ]
        responses = await admin.describe_configs(resources)
    except (KafkaError, OSError, TimeoutError) as exc:  # the join itself will say more
        _log.warning("broker session timeout limits not checked", error=f"{type(exc).__name__}: {exc}")
        return
    finally:
        await admin.close()
    limits: dict[str, dict[str, int]] = {}
    for response in responses:
        for error_code, error_message, _type, name, entries in response.resources:
            if error_code:
                _log.warning("broker session timeout limits not checked", broker=name, error=error_message)
                continue
            limits[name] = {
                entry[0]: int(entry[1])
                for entry in entries
                if entry[0] in _SESSION_LIMITS and str(entry[1]).lstrip("-").isdigit()
            }
    problems = session_timeout_problems(settings.kafka_session_timeout_s, limits)
    if problems:
        raise SessionTimeoutRefused(
            f"LOOPWATCH_KAFKA_SESSION_TIMEOUT_S={settings.kafka_session_timeout_s:g} is refused by "
            "the brokers, so the worker could never join its group:\n  " + "\n  ".join(problems)
        )


def session_timeout_problems(timeout_s: float, limits: dict[str, dict[str, int]]) -> list[str]:
    """One line per broker whose ``group.min/max.session.timeout.ms`` excludes ``timeout_s``."""
    wanted = int(timeout_s * 1000)
    problems = []
    for broker, found in sorted(limits.items()):
        low = found.get(_SESSION_LIMITS[0])
        high = found.get(_SESSION_LIMITS[1])
        if low is not None and wanted < low:
            problems.append(
                f"broker {broker}: group.min.session.timeout.ms is {low} ms, above {wanted} ms: "
                f"set LOOPWATCH_KAFKA_SESSION_TIMEOUT_S to {low / 1000:g} or more, or lower "
                "group.min.session.timeout.ms on every broker"
            )
        if high is not None and wanted > high:
            problems.append(
                f"broker {broker}: group.max.session.timeout.ms is {high} ms, below {wanted} ms: "
                f"set LOOPWATCH_KAFKA_SESSION_TIMEOUT_S to {high / 1000:g} or less"
            )
    return problems
