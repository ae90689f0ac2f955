"""structlog setup: JSON lines in production, readable console output in development."""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

from loopwatch.detectors.events import Verdict

__all__ = ["configure_logging", "verdict_log_fields"]


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
