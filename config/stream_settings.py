"""Settings of the Kafka worker, the Redis cache and the client (DESIGN §5, §6).

Every setting has an environment variable ``LOOPWATCH_<NAME>`` (upper case); command-line
flags override the environment. :func:`parse_stream_settings` takes a plain mapping of
names to raw values (strings from the environment, typed values from flags), checks all of
them and reports every problem at once. Secrets never appear in :meth:`StreamSettings.masked`.
"""

from __future__ import annotations

import math
import re
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

import msgspec

from loopwatch.config.errors import ConfigError, ConfigProblem

__all__ = ["SECRET_FIELDS", "STORES", "StreamSettings", "env_name", "mask_url", "parse_stream_settings"]

SECRET_FIELDS = frozenset({"kafka_sasl_password", "kafka_ssl_password", "redis_password"})
_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
#: Where the worker keeps its tables' state between restarts (DESIGN §5)
STORES = ("memory", "rocksdb")


@dataclass(frozen=True)
class StreamSettings:
    """One frozen object: Kafka, topics, Redis, state lifetime, web and logging."""

    kafka_bootstrap: str = "127.0.0.1:9092"
    app_id: str = "loopwatch"
    partitions: int = 4
    replication_factor: int = 1
    topic_events: str = "loopwatch.tool-events"
    topic_verdicts: str = "loopwatch.verdicts"
    topic_dead_letter: str = "loopwatch.dead-letter"
    topic_config: str = "loopwatch.config"
    topic_alerts: str = "loopwatch.alerts"  # fleet_alert records (spec BEYOND-OPENCLAW F0)
    topic_fleet_facts: str = "loopwatch.fleet-facts"  # internal: facts re-keyed by tool / agent
    topic_replies: str = "loopwatch.decisions"  # the outputs of events that ask for them (gateway)
    kafka_security_protocol: str = "PLAINTEXT"
    kafka_sasl_mechanism: str = "PLAIN"
    kafka_sasl_username: str | None = None
    kafka_sasl_password: str | None = None
    kafka_ssl_cafile: str | None = None
    kafka_ssl_certfile: str | None = None
    kafka_ssl_keyfile: str | None = None
    kafka_ssl_password: str | None = None
    redis_url: str | None = None
    redis_password: str | None = None
    redis_ttl_s: int = 3600
    state_ttl_s: int = 3600
    #: Runs whose parsed state a worker keeps in memory (the least recently active beyond it
    #: are parsed again from their stored bytes on their next event).
    parsed_runs_max: int = 100_000
    #: Seconds without an event after which a run keeps only its stored bytes (parsed again on
    #: its next event).
    parsed_idle_s: float = 10.0
    ended_run_grace_s: int = 3600  # how long an ended run's tombstone turns away its events again
    expiry_interval_s: float = 60.0
    startup_timeout_s: float = 30.0
    kafka_session_timeout_s: float = 30.0  # a worker silent this long leaves the group (failover)
    gc_full_interval_s: float = 600.0  # the worker's full garbage collections (0: CPython's own)
    fleet_view: bool = True
    fleet_horizon_s: int = 3600  # how long the fleet view keeps its one-minute windows
    fleet_failing_runs: int = 3  # a tool failing in this many runs in a window is flagged
    dashboard_previews: bool = True  # the run page shows the start of tool arguments and results
    web_enabled: bool = True
    web_host: str = "127.0.0.1"
    web_port: int = 6066
    data_dir: str = ".loopwatch-data"
    store: str = "memory"  # memory: rebuilt from the changelogs at start; rocksdb: kept in data_dir
    standby_replicas: int = 0  # workers keeping a warm copy of each table partition (rocksdb only)
    log_format: str = "console"
    log_level: str = "info"

    def masked(self) -> dict[str, Any]:
        """Every setting, with secrets (and passwords inside URLs) replaced by ``***``."""
        out: dict[str, Any] = {}
        for spec in fields(self):
            value = getattr(self, spec.name)
            if spec.name in SECRET_FIELDS and value:
                value = "***"
            elif spec.name == "redis_url" and value:
                value = mask_url(value)
            out[spec.name] = value
        return out

    def __repr__(self) -> str:
        inner = ", ".join(f"{key}={value!r}" for key, value in self.masked().items())
        return f"StreamSettings({inner})"


def mask_url(url: str) -> str:
    """``redis://user:secret@host`` → ``redis://user:***@host`` (every ``://user:…@`` so).

    ``re.sub(r"(://[^:/@]*:)[^@]*@", ...)`` in one pass: that regex, tried at every ``://``,
    scanned to the end each time when no ``@`` followed (quadratic in a pasted URL's size)."""
    out: list[str] = []
    copied = start = 0
    while (scheme := url.find("://", start)) >= 0:
        user_end = scheme + 3
        while user_end < len(url) and url[user_end] not in ":/@":
            user_end += 1
        if user_end < len(url) and url[user_end] == ":":
            at = url.find("@", user_end + 1)
            if at < 0:
                break  # no "@" after this one: none after any later "://" either
            out.append(url[copied : user_end + 1] + "***@")
            copied = start = at + 1
        else:
            start = scheme + 1
    out.append(url[copied:])
    return "".join(out)


def env_name(field_name: str) -> str:
    """The environment variable of a setting."""
    return f"LOOPWATCH_{field_name.upper()}"


_BOOL_WORDS = {"yes": "true", "on": "true", "no": "false", "off": "false"}


def _type_name(hint: Any) -> str:
    base = [arg for arg in typing.get_args(hint) if arg is not type(None)] or [hint]
    return str(getattr(base[0], "__name__", base[0]))


def _convert(hint: Any, raw: Any) -> Any:
    """``raw`` (an environment string or a flag's value) as the field's type, by msgspec."""
    if raw is None or (type(None) in typing.get_args(hint) and raw == ""):
        return None
    if hint is bool and isinstance(raw, str):
        raw = _BOOL_WORDS.get(raw.strip().lower(), raw.strip().lower())
    return msgspec.convert(raw, hint, strict=False)


def _check_kafka(settings: StreamSettings, bad: Callable[[str, str], None]) -> None:
    if not settings.kafka_bootstrap.strip():
        bad("kafka_bootstrap", "must name at least one host:port")
    for part in settings.kafka_bootstrap.split(","):
        if part.strip() and not re.match(r"^[^:\s]+:\d{1,5}$", part.strip()):
            bad("kafka_bootstrap", f"{part.strip()!r} is not host:port")
    names = ("topic_events", "topic_verdicts", "topic_dead_letter", "topic_config", "topic_alerts")
    for name in (*names, "topic_fleet_facts", "topic_replies", "app_id"):
        if not _TOPIC.match(getattr(settings, name)):
            bad(name, "must be 1-249 characters of letters, digits, '.', '_' or '-'")
    topics = [getattr(settings, name) for name in (*names, "topic_fleet_facts", "topic_replies")]
    if len(set(topics)) != len(topics):
        bad("topic_events", f"the {len(topics)} topics must have different names")
    if settings.kafka_security_protocol not in _PROTOCOLS:
        bad("kafka_security_protocol", f"must be one of {', '.join(_PROTOCOLS)}")
    if settings.kafka_security_protocol.startswith("SASL"):
        if settings.kafka_sasl_mechanism not in _MECHANISMS:
            bad("kafka_sasl_mechanism", f"must be one of {', '.join(_MECHANISMS)}")
        if not settings.kafka_sasl_username or not settings.kafka_sasl_password:
            bad("kafka_sasl_username", "SASL needs a username and a password")
    if (settings.kafka_ssl_certfile is None) != (settings.kafka_ssl_keyfile is None):
        bad("kafka_ssl_certfile", "a client certificate needs its key file, and the other way round")


def _check_store(settings: StreamSettings, bad: Callable[[str, str], None]) -> None:
    if settings.store not in STORES:
        bad("store", f"must be {' or '.join(STORES)}")
    if settings.standby_replicas < 0:
        bad("standby_replicas", "must be 0 or a positive integer")
    elif settings.standby_replicas and settings.store != "rocksdb":
        bad(
            "standby_replicas",
            "standby replicas need LOOPWATCH_STORE=rocksdb (the memory store keeps no copy for a failover)",
        )


def _where(name: str, flags: Mapping[str, str]) -> str:
    """Where a setting was given: its flag when one gave it, else its variable."""
    return f"flag {flags[name]}" if name in flags else env_name(name)


def _check(settings: StreamSettings, flags: Mapping[str, str]) -> list[ConfigProblem]:
    problems: list[ConfigProblem] = []

    def bad(name: str, message: str) -> None:
        problems.append(ConfigProblem(_where(name, flags), message))

    _check_kafka(settings, bad)
    for name in (
        "partitions",
        "replication_factor",
        "redis_ttl_s",
        "state_ttl_s",
        "parsed_runs_max",
        "ended_run_grace_s",
        "fleet_horizon_s",
        "fleet_failing_runs",
    ):
        if getattr(settings, name) < 1:
            bad(name, "must be a positive integer")
    if not 3 <= settings.kafka_session_timeout_s <= 90:
        bad("kafka_session_timeout_s", "must be between 3 and 90 seconds")
    for name in ("expiry_interval_s", "startup_timeout_s", "parsed_idle_s"):
        if not 0 < getattr(settings, name) < math.inf:  # (NaN too)
            bad(name, "must be a positive number")
    if not 0 <= settings.gc_full_interval_s < math.inf:
        bad("gc_full_interval_s", "must be 0 (CPython's own schedule) or a positive number of seconds")
    if not 0 < settings.web_port < 65536:
        bad("web_port", "must be a port number (1-65535)")
    if not settings.web_host.strip() or settings.web_host != settings.web_host.strip():
        bad("web_host", "must be an address without spaces (127.0.0.1; 0.0.0.0 for every interface)")
    if not settings.data_dir.strip():
        bad("data_dir", "must name a folder (the worker's lock and faust's data are kept there)")
    if settings.redis_url is not None and not re.match(r"^(redis|rediss|unix)://", settings.redis_url):
        bad("redis_url", "must start with redis://, rediss:// (TLS) or unix://")
    _check_store(settings, bad)
    if settings.log_format not in ("console", "json"):
        bad("log_format", "must be console or json")
    if settings.log_level.lower() not in ("debug", "info", "warning", "error"):
        bad("log_level", "must be debug, info, warning or error")
    return problems


def parse_stream_settings(
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    flag_names: Mapping[str, str] | None = None,
) -> StreamSettings:
    """Settings from ``LOOPWATCH_*`` variables, then ``overrides`` (flags, by field name;
    ``flag_names``: the flag of a field whose flag is not ``--`` and its name, e.g.
    ``{"kafka_bootstrap": "--kafka"}``).

    Raises :class:`ConfigError` listing every problem.
    """
    env = env or {}
    overrides = {key: value for key, value in (overrides or {}).items() if value is not None}
    named = flag_names or {}
    flags = {name: named.get(name, "--" + name.replace("_", "-")) for name in overrides}
    values: dict[str, Any] = {}
    problems: list[ConfigProblem] = []
    hints = typing.get_type_hints(StreamSettings)
    for key in overrides:
        if key not in hints:
            problems.append(ConfigProblem(key, "unknown setting"))
    for name, hint in hints.items():
        raw = overrides.get(name, env.get(env_name(name)))
        if raw is None:
            continue
        try:
            values[name] = _convert(hint, raw)
        except msgspec.ValidationError:  # every field is tried: all problems are reported at once
            where = _where(name, flags)
            problems.append(ConfigProblem(where, f"cannot read {raw!r} as {_type_name(hint)}"))
    settings = StreamSettings(**values)  # unreadable values keep their defaults for the checks
    problems.extend(_check(settings, flags))
    if problems:
        raise ConfigError(problems, "stream settings")
    return settings
