"""structlog setup: JSON lines in production, readable console output in development.

loopwatch's own records go through structlog; the libraries' (faust, mode, aiokafka,
aiohttp) through the standard ``logging`` module. Under ``LOOPWATCH_LOG_FORMAT=json`` both
come out as one JSON object a line on standard error, with the same ``event``, ``level`` and
``timestamp`` keys (a library's record adds its ``logger``), so a log pipeline reads every
line; under ``console`` the libraries keep their own readable format.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog

from loopwatch.detectors.events import Verdict

__all__ = [
    "RepeatLimit",
    "configure_logging",
    "json_library_handler",
    "limit_repeats",
    "quiet_malformed_requests",
    "route_library_records_as_json",
    "verdict_log_fields",
]


def configure_logging(fmt: str = "console", level: str = "info") -> None:
    """Configure structlog once per process (and, under ``json``, the libraries' records)."""
    renderer: Any = (
        structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    )
    if fmt == "json":
        route_library_records_as_json(logging.getLogger())
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper(), logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )


def json_library_handler(stream: TextIO | None = None) -> logging.Handler:
    """A ``logging`` handler writing each record as loopwatch's JSON log lines are written:
    ``event`` (the message, its arguments filled in), ``level``, ``logger``, ``timestamp``
    (ISO 8601, UTC) and ``exception`` (the traceback, when there is one)."""
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
        ],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
    )
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(formatter)
    handler.set_name(_JSON_HANDLER)
    return handler


_JSON_HANDLER = "loopwatch-json"


def route_library_records_as_json(root: logging.Logger) -> None:
    """Make ``root``'s handlers the one :func:`json_library_handler` (faust's worker installs
    its own text handlers at start: it calls this again after)."""
    if [handler.get_name() for handler in root.handlers] != [_JSON_HANDLER]:
        root.handlers[:] = [json_library_handler()]


class _MalformedRequest(logging.Filter):
    """Drops aiohttp's traceback for a request it could not parse (a header line over 8 KB, a
    bad request line): the client was answered 400, and any client could fill the log."""

    def filter(self, record: logging.LogRecord) -> bool:
        from aiohttp.http_exceptions import HttpProcessingError

        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, HttpProcessingError)


def quiet_malformed_requests() -> None:
    """Install :class:`_MalformedRequest` on aiohttp's server logger (once per process)."""
    server = logging.getLogger("aiohttp.server")
    if not any(isinstance(existing, _MalformedRequest) for existing in server.filters):
        server.addFilter(_MalformedRequest())


class RepeatLimit(logging.Filter):
    """Lets one record of a kind (logger and message template) through per ``window_s``; the
    next one let through says how many were held back. A broker that is down makes aiokafka log
    the same few errors about 200 times a second, which buries everything else."""

    def __init__(self, window_s: float = 10.0, clock: Any = None) -> None:
        super().__init__()
        import time

        self.window_s = window_s
        self.clock = clock or time.monotonic
        self._last: dict[tuple[str, str], float] = {}
        self._held: dict[tuple[str, str], int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        kind = (record.name, str(record.msg))
        now = self.clock()
        last = self._last.get(kind)
        if last is not None and now - last < self.window_s:
            self._held[kind] = self._held.get(kind, 0) + 1
            return False
        self._last[kind] = now
        held = self._held.pop(kind, 0)
        if held:
            record.msg = f"{record.msg} ({held} more like it in the last {self.window_s:g} s not shown)"
        if len(self._last) > 1000:  # (kinds are few; a bound all the same)
            self._last.clear()
        return True


def limit_repeats(prefix: str = "aiokafka", window_s: float = 10.0) -> None:
    """Install one :class:`RepeatLimit` on every logger named ``prefix`` or under it (a filter
    acts on the logger that makes the record: each module's own)."""
    limit = RepeatLimit(window_s)
    names = [prefix, *(name for name in logging.root.manager.loggerDict if name.startswith(prefix + "."))]
    for name in names:
        logger = logging.getLogger(name)
        if not any(isinstance(existing, RepeatLimit) for existing in logger.filters):
            logger.addFilter(limit)


def verdict_log_fields(output: Any, session_key: str) -> dict[str, Any]:
    """The loop-event fields of spec §7.4 for one verdict or abort."""
    fields: dict[str, Any] = {
        "sessionId": output.session_id or "unknown",
        "sessionKey": session_key,
        "agentId": output.agent_id,
        "toolName": output.tool,
        "verdict_id": output.verdict_id,
        "trigger_event_id": output.trigger_event_id,
        "count": output.count,
        "message": output.message,
        "enforced": output.enforced,
    }
    fields.update(level=output.level, action=output.action, detector=output.detector)
    if type(output) is Verdict:
        fields["pairedToolName"] = output.paired_tool
    return fields
