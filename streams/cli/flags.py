"""Flags and argument types shared by the commands."""

from __future__ import annotations

import argparse
import os

__all__ = [
    "WORKER_SETTING_FLAGS",
    "EnvPath",
    "config_flag",
    "interval_seconds",
    "positive_int",
    "serve_flag",
    "setting_flags",
]

#: ``loopwatch worker``'s settings flags: flag name → (settings field, help); each also read
#: from ``LOOPWATCH_<FIELD>`` (``config.stream_settings.env_name``)
WORKER_SETTING_FLAGS: dict[str, tuple[str, str]] = {
    "--kafka": ("kafka_bootstrap", "Kafka bootstrap servers, host:port[,host:port]"),
    "--partitions": ("partitions", "partitions of the loopwatch topics"),
    "--redis-url": ("redis_url", "Redis URL for the decision cache (redis://, rediss:// or unix://)"),
    "--web-port": ("web_port", "port of the worker's web server (metrics, dashboard)"),
    "--state-ttl": ("state_ttl_s", "seconds after which an idle run's state expires"),
    "--log-format": ("log_format", "console or json"),
}


def setting_flags(parser: argparse.ArgumentParser, skip: tuple[str, ...] = ()) -> None:
    """``loopwatch worker``'s settings flags on ``parser`` (but the settings named in ``skip``)."""
    for flag, (field, text) in WORKER_SETTING_FLAGS.items():
        if field not in skip:
            parser.add_argument(
                flag,
                dest=field,
                metavar=field.split("_")[-1].upper(),
                help=f"{text} (env LOOPWATCH_{field.upper()})",
            )


def positive_int(text: str) -> int:
    """argparse type: a whole number of at least 1 (the message names what was given)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def interval_seconds(text: str) -> float:
    from loopwatch.streams.history.transcript_follower import interval_seconds

    return interval_seconds(text)


def serve_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--serve",
        nargs="?",
        const="127.0.0.1:6066",
        metavar="[HOST:]PORT",
        help="serve the live fleet dashboard (default 127.0.0.1:6066, /dashboard) and keep it up "
        "after the input ends, until Ctrl-C",
    )


class EnvPath(str):
    """A path an environment variable gave (``variable``): a problem with it names the variable."""

    variable: str = ""

    @classmethod
    def of(cls, variable: str) -> EnvPath | None:
        value = os.environ.get(variable)
        if not value:  # (set but empty: no file)
            return None
        path = cls(value)
        path.variable = variable
        return path


def config_flag(parser: argparse.ArgumentParser, text: str = "") -> None:
    """``--config FILE``, defaulting to ``LOOPWATCH_CONFIG``."""
    parser.add_argument(
        "--config",
        metavar="FILE",
        default=EnvPath.of("LOOPWATCH_CONFIG"),
        help=text or "OpenClaw-style config file (JSON5) (env LOOPWATCH_CONFIG)",
    )
