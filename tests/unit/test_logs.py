"""The canonical verdict log line carries the loop-event fields of spec §7.4."""

import structlog
from structlog.testing import capture_logs

from loopwatch.config import FleetConfig
from loopwatch.detectors.engine import Engine
from loopwatch.detectors.events import Verdict
from loopwatch.streams.logs import verdict_log_fields
from tests.helpers import Trace


def test_one_line_per_verdict_with_the_loop_event_fields() -> None:
    trace = Trace("run-9")
    for _ in range(11):
        trace.both("read", {"path": "/x"}, error="ENOENT")
    engine = Engine(FleetConfig.enabled_default())
    outputs = [out for event in trace.events for out in engine.process(event)]
    log = structlog.get_logger("loopwatch.worker")
    with (
        capture_logs() as captured,
        structlog.contextvars.bound_contextvars(run_id="run-9", partition=2, offset=7),
    ):
        for output in outputs:
            log.warning("tool loop", **verdict_log_fields(output, "run-9"))
    [line] = captured
    assert isinstance(outputs[0], Verdict)
    assert line["event"] == "tool loop"
    for field in (
        "sessionId",
        "sessionKey",
        "agentId",
        "toolName",
        "level",
        "action",
        "detector",
        "count",
        "message",
        "pairedToolName",
    ):
        assert field in line, field
    assert (line["toolName"], line["level"], line["action"], line["detector"], line["count"]) == (
        "read",
        "warning",
        "warn",
        "generic_repeat",
        10,
    )
    assert line["sessionId"] == "unknown"
