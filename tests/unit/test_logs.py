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


def test_a_repeated_library_error_is_let_through_once_a_window_with_the_count_held_back() -> None:
    import logging

    from loopwatch.streams.logs import RepeatLimit

    now = [0.0]
    limit = RepeatLimit(window_s=10, clock=lambda: now[0])

    def record(msg: str, name: str = "aiokafka.conn") -> logging.LogRecord:
        return logging.LogRecord(name, logging.ERROR, __file__, 1, msg, None, None)

    shown = []
    for second in range(25):  # one outage: the same two errors, twice a second
        now[0] = float(second)
        for msg in ("Unable connect to %r", "Unable connect to %r", "Unable to update metadata"):
            made = record(msg)
            if limit.filter(made):
                shown.append((second, made.msg))
    assert shown == [
        (0, "Unable connect to %r"),
        (0, "Unable to update metadata"),
        (10, "Unable connect to %r (19 more like it in the last 10 s not shown)"),
        (10, "Unable to update metadata (9 more like it in the last 10 s not shown)"),
        (20, "Unable connect to %r (19 more like it in the last 10 s not shown)"),
        (20, "Unable to update metadata (9 more like it in the last 10 s not shown)"),
    ]
    assert limit.filter(record("Unable connect to %r", "aiokafka.cluster"))  # another logger's own
