"""``LOOPWATCH_*`` settings and their flags: every problem listed, each where it was given."""

from __future__ import annotations

import pytest
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]

from loopwatch.config.errors import ConfigError, ConfigProblem
from loopwatch.config.schema import stream_settings_schema
from loopwatch.config.stream_settings import SECRET_FIELDS, StreamSettings, parse_stream_settings
from loopwatch.config.struct_decoding import decode_struct


def problems(env: dict[str, str], flags: dict[str, object] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as refused:
        parse_stream_settings(env, flags)
    return [f"{problem.path}: {problem.message}" for problem in refused.value.problems]


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "Infinity"])
def test_seconds_that_are_no_finite_number_are_refused(value: str) -> None:
    """A full collection or an expiry sweep waiting ``inf`` or ``nan`` seconds never runs."""
    env = {
        "LOOPWATCH_GC_FULL_INTERVAL_S": value,
        "LOOPWATCH_EXPIRY_INTERVAL_S": value,
        "LOOPWATCH_STARTUP_TIMEOUT_S": value,
        "LOOPWATCH_KAFKA_SESSION_TIMEOUT_S": value,
        "LOOPWATCH_PARSED_IDLE_S": value,
    }
    assert sorted(path.split(":")[0] for path in problems(env)) == sorted(env)


@pytest.mark.parametrize("value", ["0", "-1"])
def test_runs_are_forgotten_after_a_positive_idle_time(value: str) -> None:
    assert problems({"LOOPWATCH_PARSED_IDLE_S": value}) == [
        "LOOPWATCH_PARSED_IDLE_S: must be a positive number"
    ]


def test_a_flag_s_problem_names_the_flag_and_a_variable_s_the_variable() -> None:
    assert problems({"LOOPWATCH_PARTITIONS": "0"}, {"web_port": 0}) == [
        "LOOPWATCH_PARTITIONS: must be a positive integer",
        "flag --web-port: must be a port number (1-65535)",
    ]
    assert problems({"LOOPWATCH_WEB_PORT": "0"}) == ["LOOPWATCH_WEB_PORT: must be a port number (1-65535)"]


def test_finite_seconds_are_taken() -> None:
    env = {
        "LOOPWATCH_GC_FULL_INTERVAL_S": "0",
        "LOOPWATCH_EXPIRY_INTERVAL_S": "0.5",
        "LOOPWATCH_PARSED_IDLE_S": "2.5",
    }
    settings = parse_stream_settings(env)
    assert (settings.gc_full_interval_s, settings.expiry_interval_s, settings.parsed_idle_s) == (
        0.0,
        0.5,
        2.5,
    )
    assert parse_stream_settings({}).parsed_idle_s == 10.0


def test_a_flag_named_otherwise_than_its_setting_is_named_as_the_command_has_it() -> None:
    """``loopwatch worker --kafka … --state-ttl …``: the problems name those flags."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "loopwatch", "worker", "--kafka", "nohost", "--state-ttl", "-1"],
        capture_output=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )
    err = done.stderr.decode()
    assert done.returncode == 2, err
    assert "flag --kafka: 'nohost'" in err
    assert "flag --state-ttl: must be a positive integer" in err
    with pytest.raises(ConfigError) as refused:
        parse_stream_settings({}, {"kafka_bootstrap": "nohost"}, {"kafka_bootstrap": "--kafka"})
    assert [problem.path for problem in refused.value.problems] == ["flag --kafka"]


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("LOOPWATCH_WEB_HOST", ""),
        ("LOOPWATCH_WEB_HOST", " "),
        ("LOOPWATCH_WEB_HOST", " 127.0.0.1"),
        ("LOOPWATCH_DATA_DIR", ""),
        ("LOOPWATCH_DATA_DIR", "  "),
    ],
)
def test_an_address_or_a_folder_set_but_empty_is_refused(variable: str, value: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_stream_settings({variable: value})
    assert [problem.path for problem in raised.value.problems] == [variable]


def test_the_default_address_and_folder_are_taken() -> None:
    settings = parse_stream_settings({})
    assert (settings.web_host, settings.data_dir) == ("127.0.0.1", ".loopwatch-data")
    assert parse_stream_settings({"LOOPWATCH_WEB_HOST": "0.0.0.0"}).web_host == "0.0.0.0"


# -- the declaration: one Struct, read by the config's decoder -----------------------------------


def test_without_settings_every_setting_is_its_declared_default() -> None:
    settings = parse_stream_settings({})
    assert settings == StreamSettings()
    assert settings.kafka_bootstrap == "127.0.0.1:9092"
    assert (settings.partitions, settings.web_port, settings.store, settings.redis_url) == (
        4,
        6066,
        "memory",
        None,
    )


def test_environment_strings_are_read_as_the_setting_s_type() -> None:
    env = {
        "LOOPWATCH_PARTITIONS": "8",
        "LOOPWATCH_REPLICATION_FACTOR": "3.0",  # an integral number is the integer
        "LOOPWATCH_STARTUP_TIMEOUT_S": "5",
        "LOOPWATCH_FLEET_VIEW": "no",
        "LOOPWATCH_WEB_ENABLED": "OFF",
        "LOOPWATCH_DASHBOARD_PREVIEWS": "1",
        "LOOPWATCH_REDIS_URL": "",  # set but empty: unset (no cache)
        "LOOPWATCH_KAFKA_SASL_USERNAME": "",
        "LOOPWATCH_LOG_LEVEL": "WARNING",  # in any case, kept as given
    }
    settings = parse_stream_settings(env, {"web_port": "7000", "expiry_interval_s": 2})
    assert (settings.partitions, settings.replication_factor) == (8, 3)
    assert (type(settings.startup_timeout_s), settings.startup_timeout_s) == (float, 5.0)
    assert (type(settings.expiry_interval_s), settings.expiry_interval_s) == (float, 2.0)
    assert (settings.fleet_view, settings.web_enabled, settings.dashboard_previews) == (False, False, True)
    assert (settings.redis_url, settings.kafka_sasl_username) == (None, None)
    assert (settings.web_port, settings.log_level) == (7000, "WARNING")
    assert parse_stream_settings({"LOOPWATCH_FLEET_VIEW": " Yes "}).fleet_view is True


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("LOOPWATCH_FLEET_VIEW", "maybe", "cannot read 'maybe' as bool"),
        ("LOOPWATCH_PARTITIONS", "2.5", "cannot read '2.5' as int"),
        ("LOOPWATCH_PARTITIONS", "-3", "must be a positive integer"),
        ("LOOPWATCH_KAFKA_BOOTSTRAP", " ", "must name at least one host:port"),
        ("LOOPWATCH_KAFKA_BOOTSTRAP", "a:1,b", "'b' is not host:port"),
        ("LOOPWATCH_KAFKA_BOOTSTRAP", "a:123456", "'a:123456' is not host:port"),
        ("LOOPWATCH_APP_ID", "my app", "must be 1-249 characters of letters, digits, '.', '_' or '-'"),
        ("LOOPWATCH_TOPIC_ALERTS", "a" * 250, "must be 1-249 characters of letters, digits, '.', '_' or '-'"),
        (
            "LOOPWATCH_KAFKA_SECURITY_PROTOCOL",
            "TLS",
            "must be one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL",
        ),
        ("LOOPWATCH_KAFKA_SESSION_TIMEOUT_S", "91", "must be between 3 and 90 seconds"),
        ("LOOPWATCH_KAFKA_SESSION_TIMEOUT_S", "2.9", "must be between 3 and 90 seconds"),
        (
            "LOOPWATCH_GC_FULL_INTERVAL_S",
            "-0.5",
            "must be 0 (CPython's own schedule) or a positive number of seconds",
        ),
        ("LOOPWATCH_WEB_PORT", "65536", "must be a port number (1-65535)"),
        (
            "LOOPWATCH_WEB_HOST",
            "0.0.0.0\n",
            "must be an address without spaces (127.0.0.1; 0.0.0.0 for every interface)",
        ),
        ("LOOPWATCH_REDIS_URL", "http://cache", "must start with redis://, rediss:// (TLS) or unix://"),
        ("LOOPWATCH_STORE", "disk", "must be memory or rocksdb"),
        ("LOOPWATCH_LOG_FORMAT", "text", "must be console or json"),
        ("LOOPWATCH_LOG_LEVEL", "info\n", "must be debug, info, warning or error"),
        ("LOOPWATCH_LOG_LEVEL", "\u0130nfo", "must be debug, info, warning or error"),  # İ: no i of .lower()
    ],
)
def test_each_setting_s_problem_is_in_its_own_words(variable: str, value: str, message: str) -> None:
    assert problems({variable: value}) == [f"{variable}: {message}"]


def test_every_bad_part_of_the_bootstrap_servers_is_named() -> None:
    assert problems({}, {"kafka_bootstrap": "a:1, nohost ,,b:x"}) == [
        "flag --kafka-bootstrap: 'nohost' is not host:port; 'b:x' is not host:port"
    ]
    settings = parse_stream_settings({"LOOPWATCH_KAFKA_BOOTSTRAP": " a:1, b:9092 ,"})
    assert settings.kafka_bootstrap == " a:1, b:9092 ,"  # blank parts are left alone, as before


def test_an_unknown_flag_setting_is_named() -> None:
    assert problems({}, {"kafka_bootstrapp": "a:1"}) == ["kafka_bootstrapp: unknown setting"]


def test_the_checks_between_settings_follow_each_setting_s_own() -> None:
    env = {
        "LOOPWATCH_PARTITIONS": "0",
        "LOOPWATCH_TOPIC_ALERTS": "loopwatch.verdicts",
        "LOOPWATCH_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "LOOPWATCH_KAFKA_SASL_MECHANISM": "GSSAPI",
        "LOOPWATCH_KAFKA_SSL_KEYFILE": "client.key",
        "LOOPWATCH_STANDBY_REPLICAS": "1",
    }
    assert problems(env) == [
        "LOOPWATCH_PARTITIONS: must be a positive integer",
        "LOOPWATCH_TOPIC_EVENTS: the 7 topics must have different names",
        "LOOPWATCH_KAFKA_SASL_MECHANISM: must be one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512",
        "LOOPWATCH_KAFKA_SASL_USERNAME: SASL needs a username and a password",
        "LOOPWATCH_KAFKA_SSL_CERTFILE: a client certificate needs its key file, and the other way round",
        "LOOPWATCH_STANDBY_REPLICAS: standby replicas need LOOPWATCH_STORE=rocksdb "
        "(the memory store keeps no copy for a failover)",
    ]
    # the mechanism is read only with a SASL protocol, as before
    assert (
        parse_stream_settings({"LOOPWATCH_KAFKA_SASL_MECHANISM": "GSSAPI"}).kafka_sasl_mechanism == "GSSAPI"
    )
    sasl = {
        "LOOPWATCH_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "LOOPWATCH_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
        "LOOPWATCH_KAFKA_SASL_USERNAME": "worker",
        "LOOPWATCH_KAFKA_SASL_PASSWORD": "s3cret",
    }
    assert parse_stream_settings(sasl).kafka_security_protocol == "SASL_PLAINTEXT"


def test_secrets_are_masked_in_every_form_the_settings_are_shown() -> None:
    env = {
        "LOOPWATCH_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "LOOPWATCH_KAFKA_SASL_USERNAME": "worker",
        "LOOPWATCH_KAFKA_SASL_PASSWORD": "s3cret",
        "LOOPWATCH_REDIS_URL": "redis://cache:hunter2@redis:6379/0",
        "LOOPWATCH_REDIS_PASSWORD": "hunter3",
    }
    settings = parse_stream_settings(env)
    masked = settings.masked()
    assert list(masked) == list(StreamSettings.__struct_fields__)
    assert (masked["kafka_sasl_password"], masked["redis_password"], masked["kafka_ssl_password"]) == (
        "***",
        "***",
        None,
    )
    assert masked["redis_url"] == "redis://cache:***@redis:6379/0"
    assert set(masked) >= SECRET_FIELDS
    for shown in (repr(settings), str(settings)):
        assert "kafka_sasl_username='worker'" in shown
        assert not [secret for secret in ("s3cret", "hunter2", "hunter3") if secret in shown]
    assert settings.kafka_sasl_password == "s3cret"  # the value itself is kept for the clients


# -- the JSON Schema of the stream settings ------------------------------------------------------

STREAM_SCHEMA = stream_settings_schema()
STREAM_VALIDATOR = Draft202012Validator(STREAM_SCHEMA)


def decoder_accepts(document: dict[str, object]) -> bool:
    """Whether the config's decoder takes these values (read already: no strings from the
    environment to convert) against the declaration."""
    found: list[ConfigProblem] = []
    return decode_struct(document, StreamSettings, "", found) is not None


def test_the_stream_schema_is_written_from_the_declaration() -> None:
    Draft202012Validator.check_schema(STREAM_SCHEMA)
    properties = STREAM_SCHEMA["properties"]
    assert list(properties) == list(StreamSettings.__struct_fields__)
    assert STREAM_SCHEMA["additionalProperties"] is False
    assert properties["web_port"] == {
        "description": "The port of the worker's web server (flag --web-port).",
        "type": "integer",
        "minimum": 1,
        "maximum": 65535,
        "default": 6066,
    }
    assert properties["store"]["enum"] == ["memory", "rocksdb"]
    assert "standby_replicas above 0 needs store rocksdb" in STREAM_SCHEMA["description"]
    for name, field in properties.items():
        assert field["description"], name
        assert field["default"] == StreamSettings().masked()[name], name


def test_check_config_schema_stream_prints_it() -> None:
    import json
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "loopwatch", "check-config", "--schema", "--stream"],
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == STREAM_SCHEMA
    alone = subprocess.run(
        [sys.executable, "-m", "loopwatch", "check-config", "--stream", "x.json"],
        capture_output=True,
        timeout=120,
    )
    assert alone.returncode == 2
    assert b"--stream goes with --schema" in alone.stderr


STREAM_VALUES: list[object] = [
    None, True, False, 0, 1, -1, 2, 2.0, 2.5, 3, 90, 91, 65535, 65536, 10**20, "", " ", "x", "a:1",
    "a:1,b", " a:1 , b:2 ,", "nohost", "redis://h", "http://h", "memory", "rocksdb", "json", "INFO",
    "info\n", "\u0130nfo", "SSL", "TLS", "a b", "a\n", "a" * 249, "a" * 250, [], {},
]  # fmt: skip


def test_every_setting_gets_one_verdict_from_the_decoder_and_the_schema() -> None:
    differ = []
    for name in StreamSettings.__struct_fields__:
        for value in STREAM_VALUES:
            decoded, valid = decoder_accepts({name: value}), STREAM_VALIDATOR.is_valid({name: value})
            if decoded != valid:
                differ.append(f"{name}={value!r}: decoder {decoded}, schema {valid}")
    assert differ == []
    assert (decoder_accepts({"not_a_setting": 1}), STREAM_VALIDATOR.is_valid({"not_a_setting": 1})) == (
        False,
        False,
    )


def test_the_settings_check_config_prints_are_valid_by_the_schema() -> None:
    shown = [
        parse_stream_settings({}),
        parse_stream_settings(
            {
                "LOOPWATCH_REDIS_URL": "rediss://u:p@cache",
                "LOOPWATCH_REDIS_PASSWORD": "p",
                "LOOPWATCH_STORE": "rocksdb",
            }
        ),
    ]
    for settings in shown:
        assert STREAM_VALIDATOR.is_valid(settings.masked())
    # the checks between settings are loopwatch's alone (the schema's description names them)
    between = {"topic_events": "same", "topic_verdicts": "same", "standby_replicas": 1}
    assert (STREAM_VALIDATOR.is_valid(between), decoder_accepts(between)) == (True, True)
    with pytest.raises(ConfigError):
        parse_stream_settings({}, between)
