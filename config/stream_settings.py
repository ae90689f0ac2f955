"""Settings of the Kafka worker, the Redis cache and the client (DESIGN §5, §6), declared once.

:class:`StreamSettings` is the declaration: each setting's name, type, ``Meta`` constraints
(ranges, patterns, choices as ``Literal`` types), default and description. The config's
decoder (:mod:`config.struct_decoding`) checks values against it, and ``loopwatch
check-config --schema --stream`` writes its JSON Schema from it (:mod:`config.schema`).

Every setting has an environment variable ``LOOPWATCH_<NAME>`` (upper case); command-line
flags override the environment. :func:`parse_stream_settings` takes a plain mapping of names
to raw values (strings from the environment, values from flags) and reads each in two steps:

* as its type (an integer, a number, a boolean: ``yes``/``on``/``no``/``off`` too; an empty
  string is ``None`` where the setting may be unset), by msgspec's lax conversion: a value
  that is none is ``cannot read 'two' as int``;
* against its declaration, by the decoder: ``must be a positive integer``, or the words a
  setting's ``Meta`` gives (``extra={"problem": ...}``).

The checks between settings (:func:`_between`: distinct topics, SASL's credentials, a client
certificate and its key, standby replicas on RocksDB) follow, on the values read (an
unreadable one at its default). Every problem is reported at once, named by the flag that gave
it or else its variable. Secrets never appear in :meth:`StreamSettings.masked`.

This module defines a msgspec Struct, so it stays interpreted (not in setup.py's list).
"""

from __future__ import annotations

import functools
import re
import types
import typing
from collections.abc import Callable, Mapping
from typing import Annotated, Any, ClassVar, Literal, Union, get_args, get_origin

import msgspec
from msgspec import Meta

from loopwatch.config.errors import ConfigError, ConfigProblem
from loopwatch.config.struct_decoding import decode_field

__all__ = [
    "SECRET_FIELDS",
    "STORES",
    "StreamSettings",
    "env_name",
    "mask_url",
    "parse_stream_settings",
]

SECRET_FIELDS = frozenset({"kafka_sasl_password", "kafka_ssl_password", "redis_password"})
SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
Store = Literal["memory", "rocksdb"]
#: Where the worker keeps its tables' state between restarts (DESIGN §5)
STORES: tuple[str, ...] = get_args(Store)

#: ``(?![\s\S])``: the end of the text (``$`` also matches before a final newline, and JSON
#: Schema's regular expressions have no ``\Z``)
_END = r"(?![\s\S])"
_HOST_PORT = r"[^:\s,]+:\d{1,5}"
#: host:port[,host:port]: some text, and every comma-separated part blank or host:port
_BOOTSTRAP = rf"^(?=[\s\S]*\S)\s*(?:{_HOST_PORT}\s*)?(?:,\s*(?:{_HOST_PORT}\s*)?)*{_END}"
_PART = re.compile(rf"^{_HOST_PORT}$")
_TOPIC = r"^[A-Za-z0-9._-]{1,249}$"
_LOG_LEVELS = ("debug", "info", "warning", "error")


def _any_case(word: str) -> str:
    """``word`` in any case, as ``str.lower()`` compares it (``(?i)`` also takes ``İ`` for ``i``)."""
    return "".join(f"[{c}{c.upper()}]" if c.isalpha() else re.escape(c) for c in word)


_LOG_LEVEL = f"^(?:{'|'.join(_any_case(level) for level in _LOG_LEVELS)}){_END}"


def _says(message: str) -> Callable[[object], str]:
    """A setting's problem in its own words, whatever the value."""
    return lambda _value: message


def _bootstrap_problem(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        return "must name at least one host:port"
    parts = (part.strip() for part in value.split(","))
    return "; ".join(f"{part!r} is not host:port" for part in parts if part and not _PART.match(part))


def _positive(description: str) -> Meta:
    return Meta(ge=1, description=description)


def _seconds(description: str) -> Meta:
    return Meta(gt=0, description=description)


def _topic(description: str) -> Meta:
    return Meta(
        pattern=_TOPIC,
        description=description,
        extra={"problem": _says("must be 1-249 characters of letters, digits, '.', '_' or '-'")},
    )


class StreamSettings(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The stream settings, each from ``LOOPWATCH_<NAME>`` or a flag: Kafka, topics, Redis,
    state lifetime, web and logging."""

    kafka_bootstrap: Annotated[
        str,
        Meta(
            pattern=_BOOTSTRAP,
            description="Bootstrap servers, host:port[,host:port] (flag --kafka).",
            extra={"problem": _bootstrap_problem},
        ),
    ] = "127.0.0.1:9092"
    app_id: Annotated[str, _topic("The consumer group (and table names) of the workers.")] = "loopwatch"
    partitions: Annotated[int, _positive("Partitions of the loopwatch topics (flag --partitions).")] = 4
    replication_factor: Annotated[
        int, _positive("Replicas of the loopwatch topics and of the tables' changelogs; 3 on a cluster.")
    ] = 1
    topic_events: Annotated[str, _topic("The topic of the tool events.")] = "loopwatch.tool-events"
    topic_verdicts: Annotated[str, _topic("The topic of the verdicts.")] = "loopwatch.verdicts"
    topic_dead_letter: Annotated[str, _topic("The topic of the records that could not be read.")] = (
        "loopwatch.dead-letter"
    )
    topic_config: Annotated[str, _topic("The compacted topic of per-agent config overrides.")] = (
        "loopwatch.config"
    )
    topic_alerts: Annotated[str, _topic("The topic of the fleet_alert records (fleet-wide rules).")] = (
        "loopwatch.alerts"
    )
    topic_fleet_facts: Annotated[
        str, _topic("Internal: the fleet rules' facts, re-keyed by tool or agent.")
    ] = "loopwatch.fleet-facts"
    topic_replies: Annotated[
        str, _topic("The outputs of events that ask for them (the answers to the gateways).")
    ] = "loopwatch.decisions"
    kafka_security_protocol: Annotated[
        SecurityProtocol,
        Meta(
            description="How the clients talk to the brokers.",
            extra={"problem": _says(f"must be one of {', '.join(get_args(SecurityProtocol))}")},
        ),
    ] = "PLAINTEXT"
    kafka_sasl_mechanism: Annotated[
        str,
        Meta(description=f"With a SASL protocol: {', '.join(_MECHANISMS)} (checked then only)."),
    ] = "PLAIN"
    kafka_sasl_username: (
        Annotated[str, Meta(description="SASL's username (needed with a SASL protocol).")] | None
    ) = None
    kafka_sasl_password: Annotated[str, Meta(description="SASL's password (masked everywhere).")] | None = (
        None
    )
    kafka_ssl_cafile: Annotated[str, Meta(description="TLS: the brokers' certificate authority.")] | None = (
        None
    )
    kafka_ssl_certfile: (
        Annotated[str, Meta(description="TLS: the client certificate (with its key file).")] | None
    ) = None
    kafka_ssl_keyfile: Annotated[str, Meta(description="TLS: the client certificate's key file.")] | None = (
        None
    )
    kafka_ssl_password: Annotated[str, Meta(description="TLS: the key file's password (masked).")] | None = (
        None
    )
    redis_url: (
        Annotated[
            str,
            Meta(
                pattern="^(redis|rediss|unix)://",
                description="The decision cache's Redis (flag --redis-url); unset: no cache.",
                extra={"problem": _says("must start with redis://, rediss:// (TLS) or unix://")},
            ),
        ]
        | None
    ) = None
    redis_password: Annotated[str, Meta(description="Redis's password (masked).")] | None = None
    redis_ttl_s: Annotated[int, _positive("Seconds a cached decision lives.")] = 3600
    state_ttl_s: Annotated[
        int, _positive("Seconds after which an idle run's state expires (flag --state-ttl).")
    ] = 3600
    parsed_runs_max: Annotated[
        int,
        _positive(
            "Runs whose parsed state a worker keeps in memory (the least recently active beyond it "
            "are parsed again from their stored bytes on their next event)."
        ),
    ] = 100_000
    parsed_idle_s: Annotated[
        float,
        _seconds(
            "Seconds without an event after which a run keeps only its stored bytes (parsed again "
            "on its next event)."
        ),
    ] = 10.0
    ended_run_grace_s: Annotated[
        int, _positive("Seconds an ended run's tombstone turns away its events again.")
    ] = 3600
    expiry_interval_s: Annotated[float, _seconds("How often a worker looks for expired runs (seconds).")] = (
        60.0
    )
    startup_timeout_s: Annotated[
        float, _seconds("Seconds a worker waits for the broker before refusing to start.")
    ] = 30.0
    kafka_session_timeout_s: Annotated[
        float,
        Meta(
            ge=3,
            le=90,
            description="Seconds after which a silent worker leaves the group (failover).",
            extra={"problem": _says("must be between 3 and 90 seconds")},
        ),
    ] = 30.0
    gc_full_interval_s: Annotated[
        float,
        Meta(
            ge=0,
            description="Seconds between the worker's full garbage collections (0: CPython's own schedule).",
            extra={"problem": _says("must be 0 (CPython's own schedule) or a positive number of seconds")},
        ),
    ] = 600.0
    fleet_view: Annotated[bool, Meta(description="The fleet-wide view and dashboard in the worker.")] = True
    fleet_horizon_s: Annotated[int, _positive("Seconds the fleet view keeps its one-minute windows.")] = 3600
    fleet_failing_runs: Annotated[
        int, _positive("A tool failing in this many runs in a window is flagged.")
    ] = 3
    dashboard_previews: Annotated[
        bool, Meta(description="The run page shows the start of tool arguments and results.")
    ] = True
    web_enabled: Annotated[bool, Meta(description="The worker's web server (false: none).")] = True
    web_host: Annotated[
        str,
        Meta(
            pattern=rf"^\S(?:[\s\S]*\S)?{_END}",
            description="The address the web pages listen on (0.0.0.0: every interface).",
            extra={
                "problem": _says("must be an address without spaces (127.0.0.1; 0.0.0.0 for every interface)")
            },
        ),
    ] = "127.0.0.1"
    web_port: Annotated[
        int,
        Meta(
            ge=1,
            le=65535,
            description="The port of the worker's web server (flag --web-port).",
            extra={"problem": _says("must be a port number (1-65535)")},
        ),
    ] = 6066
    data_dir: Annotated[
        str,
        Meta(
            pattern=r"\S",
            description="The worker's data directory (its lock, RocksDB's tables).",
            extra={
                "problem": _says("must name a folder (the worker's lock and faust's data are kept there)")
            },
        ),
    ] = ".loopwatch-data"
    store: Annotated[
        Store,
        Meta(
            description="memory: rebuilt from the changelogs at start; rocksdb: kept in data_dir.",
            extra={"problem": _says(f"must be {' or '.join(STORES)}")},
        ),
    ] = "memory"
    standby_replicas: Annotated[
        int,
        Meta(
            ge=0,
            description="Workers keeping a warm copy of each table partition (rocksdb only).",
            extra={"problem": _says("must be 0 or a positive integer")},
        ),
    ] = 0
    log_format: Annotated[
        Literal["console", "json"],
        Meta(
            description="console, or json: one JSON object a line (flag --log-format).",
            extra={"problem": _says("must be console or json")},
        ),
    ] = "console"
    log_level: Annotated[
        str,
        Meta(
            pattern=_LOG_LEVEL,
            description="debug, info, warning or error (in any case).",
            extra={"problem": _says("must be debug, info, warning or error")},
        ),
    ] = "info"

    #: what the checks between settings (:func:`_between`) require, for the schema's description
    checked_between: ClassVar[tuple[str, ...]] = (
        "the seven topics have different names",
        f"with a SASL protocol, kafka_sasl_mechanism is one of {', '.join(_MECHANISMS)} and "
        "kafka_sasl_username and kafka_sasl_password are set",
        "kafka_ssl_certfile and kafka_ssl_keyfile are set together",
        "standby_replicas above 0 needs store rocksdb",
    )

    def masked(self) -> dict[str, Any]:
        """Every setting, with secrets (and passwords inside URLs) replaced by ``***``."""
        out: dict[str, Any] = {}
        for name in self.__struct_fields__:
            value = getattr(self, name)
            if name in SECRET_FIELDS and value:
                value = "***"
            elif name == "redis_url" and value:
                value = mask_url(value)
            out[name] = value
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


def _carrier(tp: Any) -> Any:
    """The type a raw value is read as before its declaration is checked: ``tp`` without its
    ``Meta`` and with a ``Literal`` as the type of its values (``SecurityProtocol`` is read as a ``str``,
    then must be one of them)."""
    options = get_args(tp) if get_origin(tp) in (Union, types.UnionType) else (tp,)
    plain = []
    for option in options:
        inner = get_args(option)[0] if get_origin(option) is Annotated else option
        plain.append(type(get_args(inner)[0]) if get_origin(inner) is Literal else inner)
    return plain[0] if len(plain) == 1 else Union[tuple(plain)]  # noqa: UP007 (a tuple of types)


@functools.cache
def _carriers() -> dict[str, Any]:
    """Every setting's name and carrier type, in the declaration's order."""
    hints = typing.get_type_hints(StreamSettings, include_extras=True)
    return {name: _carrier(hints[name]) for name in StreamSettings.__struct_fields__}


def _type_name(hint: Any) -> str:
    base = [arg for arg in get_args(hint) if arg is not type(None)] or [hint]
    return str(getattr(base[0], "__name__", base[0]))


def _read(hint: Any, raw: Any) -> Any:
    """``raw`` (an environment string or a flag's value) as ``hint``, by msgspec's lax
    conversion (``"2"`` is 2, ``"true"`` and ``"yes"`` are true, ``""`` is ``None`` where
    ``hint`` takes it)."""
    if raw is None or (type(None) in get_args(hint) and raw == ""):
        return None
    if hint is bool and isinstance(raw, str):
        raw = _BOOL_WORDS.get(raw.strip().lower(), raw.strip().lower())
    return msgspec.convert(raw, hint, strict=False)


def _between(settings: StreamSettings, bad: Callable[[str, str], None]) -> None:
    """The checks a setting's declaration cannot make alone (on the values read, each
    unreadable one at its default)."""
    topics = [getattr(settings, name) for name in settings.__struct_fields__ if name.startswith("topic_")]
    if len(set(topics)) != len(topics):
        bad("topic_events", f"the {len(topics)} topics must have different names")
    if settings.kafka_security_protocol.startswith("SASL"):
        if settings.kafka_sasl_mechanism not in _MECHANISMS:
            bad("kafka_sasl_mechanism", f"must be one of {', '.join(_MECHANISMS)}")
        if not settings.kafka_sasl_username or not settings.kafka_sasl_password:
            bad("kafka_sasl_username", "SASL needs a username and a password")
    if (settings.kafka_ssl_certfile is None) != (settings.kafka_ssl_keyfile is None):
        bad("kafka_ssl_certfile", "a client certificate needs its key file, and the other way round")
    if settings.standby_replicas > 0 and settings.store != "rocksdb":
        bad(
            "standby_replicas",
            "standby replicas need LOOPWATCH_STORE=rocksdb (the memory store keeps no copy for a failover)",
        )


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

    def where(name: str) -> str:
        """Where a setting was given: its flag when one gave it, else its variable."""
        return f"flag {flags[name]}" if name in flags else env_name(name)

    carriers = _carriers()
    problems = [ConfigProblem(key, "unknown setting") for key in overrides if key not in carriers]
    values: dict[str, Any] = {}  # read as their types (each setting's checks still to come)
    for name, hint in carriers.items():
        raw = overrides.get(name, env.get(env_name(name)))
        if raw is None:
            continue
        try:
            values[name] = _read(hint, raw)
        except msgspec.ValidationError:  # every setting is tried: all problems are reported at once
            problems.append(ConfigProblem(where(name), f"cannot read {raw!r} as {_type_name(hint)}"))
            continue
        decode_field(StreamSettings, name, values[name], where(name), problems)
    settings = StreamSettings(**values)  # (a Struct's __init__ checks nothing: the values as read)
    _between(settings, lambda name, message: problems.append(ConfigProblem(where(name), message)))
    if problems:
        raise ConfigError(problems, "stream settings")
    return settings
