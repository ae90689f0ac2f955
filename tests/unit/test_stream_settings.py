"""``LOOPWATCH_*`` settings and their flags: every problem listed, each where it was given."""

from __future__ import annotations

import pytest

from loopwatch.config.errors import ConfigError
from loopwatch.config.stream_settings import parse_stream_settings


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
