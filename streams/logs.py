"""structlog setup: JSON lines in production, readable console output in development."""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

from loopwatch.detectors.events import Verdict

__all__ = ["configure_logging", "quiet_malformed_requests", "verdict_log_fields"]


def configure_logging(fmt: str = "console", level: str = "info") -> None:
    """Configure structlog once per process."""
    renderer: Any = (
        structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    )
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
