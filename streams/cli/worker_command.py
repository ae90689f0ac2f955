"""``loopwatch worker``: validate settings, wait for the broker, create topics, run faust."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from loopwatch.config.errors import both_or_every_problem
from loopwatch.config.fleet import FleetConfig
from loopwatch.config.stream_settings import StreamSettings, parse_stream_settings
from loopwatch.streams.cli.flags import WORKER_SETTING_FLAGS as SETTING_FLAGS
from loopwatch.streams.inputs.config_files import load_config
from loopwatch.streams.kafka.connect import check_session_timeout, ensure_topics, wait_for_broker
from loopwatch.streams.logs import configure_logging, limit_repeats, route_library_records_as_json

__all__ = ["SETTING_FLAGS", "build_worker", "run_worker", "stream_settings_from"]


def stream_settings_from(args: Any) -> StreamSettings:
    overrides = {field: getattr(args, field, None) for field, _ in SETTING_FLAGS.values()}
    flag_names = {field: flag for flag, (field, _) in SETTING_FLAGS.items()}
    return parse_stream_settings(os.environ, overrides, flag_names)


async def _prepare(settings: StreamSettings, config: FleetConfig) -> tuple[FleetConfig, int]:
    from loopwatch.streams.kafka.worker import read_config_overrides

    await wait_for_broker(settings)
    await ensure_topics(settings)
    await check_session_timeout(settings)
    return await read_config_overrides(settings, config)


def build_worker(settings: StreamSettings, config: FleetConfig) -> Any:
    """Everything before faust starts: broker check, topics, config overrides, the app."""
    from loopwatch.streams.kafka.redis_cache import DecisionCache
    from loopwatch.streams.kafka.worker import LoopwatchWorker

    config, offset = asyncio.run(_prepare(settings, config))
    asyncio.set_event_loop(asyncio.new_event_loop())
    cache = (
        DecisionCache(settings.redis_url, settings.redis_password, settings.redis_ttl_s)
        if settings.redis_url
        else None
    )
    return LoopwatchWorker(settings, config, offset, cache)


def _faust_worker_class(log_format: str = "console") -> Any:
    import logging

    import faust

    class QuietWorker(faust.Worker):
        """faust's worker without its terminal spinner, which sets the root logger to DEBUG:
        every library debug call then builds a log record (7 % of a busy worker's time); under
        ``LOOPWATCH_LOG_FORMAT=json`` its records are JSON lines as loopwatch's own are."""

        def on_setup_root_logger(self, logger: logging.Logger, level: int) -> None:
            self.spinner = None
            if log_format == "json":  # (faust has just put its own text handlers in place)
                route_library_records_as_json(logger)
            logger.setLevel(level or logging.INFO)
            logging.getLogger("aiokafka").setLevel(max(level, logging.WARNING))
            limit_repeats("aiokafka")  # a broker outage: the same errors, 200 a second

    return QuietWorker


def _check_web_port(host: str, port: int) -> None:
    """The worker's web server's address, free: taken, faust fails late with a long traceback
    (a second worker on one machine needs a port of its own)."""
    import errno
    import socket

    from loopwatch.config.errors import LoopwatchError

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server will bind it
        try:
            probe.bind((host, port))
        except OSError as exc:
            taken = exc.errno == errno.EADDRINUSE
            why = "is in use (each worker on a machine needs its own)" if taken else f"cannot be bound: {exc}"
            raise LoopwatchError(f"LOOPWATCH_WEB_PORT {port} on LOOPWATCH_WEB_HOST {host} {why}") from exc


def run_worker(args: Any) -> int:
    settings, config = both_or_every_problem(
        lambda: stream_settings_from(args), lambda: load_config(args.config)
    )
    configure_logging(settings.log_format, settings.log_level)
    _check_web_port(settings.web_host, settings.web_port)
    worker = build_worker(settings, config)
    from loopwatch.streams.kafka import gc_policy

    gc_policy.install(worker.app, settings.gc_full_interval_s)  # full collections on a clock
    worker_class = _faust_worker_class(settings.log_format)
    worker_class(worker.app, loglevel=settings.log_level.upper(), quiet=True).execute_from_commandline()
    return 0
