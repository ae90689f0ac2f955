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


def test_library_records_are_json_lines_like_loopwatch_s_own_under_json() -> None:
    import io
    import json
    import logging

    from loopwatch.streams.logs import json_library_handler, route_library_records_as_json

    out = io.StringIO()
    logger = logging.getLogger("faust.tables.recovery.test")
    logger.propagate = False
    logger.addHandler(json_library_handler(out))
    try:
        logger.warning("Highwater for %s:\n| topic | %d |", "active", 3)
        try:
            raise RuntimeError("broker gone")
        except RuntimeError:
            logger.exception("fetch failed")
    finally:
        logger.handlers.clear()
        logger.propagate = True
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["event"] == "Highwater for active:\n| topic | 3 |"
    assert (first["level"], first["logger"]) == ("warning", "faust.tables.recovery.test")
    assert first["timestamp"].endswith("Z")
    assert second["event"] == "fetch failed"
    assert "RuntimeError: broker gone" in second["exception"]

    root = logging.Logger("root-for-test")  # what faust's worker leaves: its own text handler
    root.addHandler(logging.StreamHandler(io.StringIO()))
    route_library_records_as_json(root)
    route_library_records_as_json(root)  # once only, however often it is asked
    [handler] = root.handlers
    assert isinstance(handler.formatter, structlog.stdlib.ProcessorFormatter)


def test_the_worker_puts_its_json_handler_back_after_faust_s_own() -> None:
    import logging

    from loopwatch.streams.cli.worker_command import _faust_worker_class

    worker_class = _faust_worker_class("json")
    root = logging.Logger("root-for-test")
    root.addHandler(logging.StreamHandler())
    worker_class.on_setup_root_logger(object.__new__(worker_class), root, logging.INFO)
    [handler] = root.handlers
    assert isinstance(handler.formatter, structlog.stdlib.ProcessorFormatter)
    console = logging.Logger("root-for-test")
    console.addHandler(logging.StreamHandler())
    _faust_worker_class("console").on_setup_root_logger(object.__new__(worker_class), console, logging.INFO)
    assert not isinstance(console.handlers[0].formatter, structlog.stdlib.ProcessorFormatter)
