"""OpenTelemetry in and out against real processes.

In: the real opentelemetry-sdk's OTLP/HTTP exporters (protobuf with gzip, and JSON) send the
``execute_tool`` spans of a looping run and of a healthy run to a real ``loopwatch gateway``;
the looping run's verdicts (dashboard, ``/metrics``) are the in-process core's, fed events the
test builds itself from the span data (the documented mapping rules), and the healthy run has
none. Out: the verdicts reach an OTLP receiver (aiohttp, decoding with opentelemetry-proto) as
log records, from the embedded gateway and from a Kafka worker.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import re
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from google.rpc import status_pb2  # type: ignore[import-untyped]
from opentelemetry.exporter.otlp.json.http.trace_exporter import OTLPSpanExporter as JsonSpanExporter
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode, set_span_in_context

from loopwatch.config.fleet import FleetConfig
from loopwatch.detectors.engine import Engine
from loopwatch.detectors.events import Event, Output, ToolCall, ToolResult, Verdict, shape_of
from loopwatch.detectors.stable_json import from_python
from tests.gateway_process import gateway_process
from tests.helpers import Trace
from tests.integration.harness import Names, WorkerProcess
from tests.integration.test_gateway_kafka import Gateway
from tests.integration.test_worker import start_worker

pytestmark = pytest.mark.integration

TOKEN = "otlp-t0ken"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
T0 = 1_800_000_000_000_000_000  # ns


# -- spans made with the real SDK ------------------------------------------------------------------


def make_spans(loop_run: str) -> tuple[list[ReadableSpan], list[ReadableSpan]]:
    """The finished spans of a looping run (conversation ``loop_run``: 22 identical failing
    reads, and a chat span) and of a healthy run (no conversation id: the trace is the run;
    12 reads of different files under an ``invoke_agent`` span)."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("agent-under-test")
    clock = iter(range(T0, T0 + 10**12, 1_000_000))
    for n in range(22):
        start = next(clock)
        span = tracer.start_span(
            "execute_tool read",
            start_time=start,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "read",
                "gen_ai.tool.call.id": f"call-{n}",
                "gen_ai.tool.call.arguments": json.dumps({"path": "/missing", "lines": 20}),
                "gen_ai.conversation.id": loop_run,
                "gen_ai.agent.name": "coder",
            },
        )
        span.record_exception(FileNotFoundError("ENOENT: /missing"))
        span.set_status(Status(StatusCode.ERROR, "ENOENT: no such file /missing"))
        span.end(end_time=next(clock))
        if n == 3:
            chat = tracer.start_span(
                "chat gpt", start_time=next(clock), attributes={"gen_ai.operation.name": "chat"}
            )
            chat.end(end_time=next(clock))
    loop = list(memory.get_finished_spans())
    memory.clear()
    parent = tracer.start_span("invoke_agent helper", start_time=next(clock))
    context = set_span_in_context(parent)
    for n in range(12):
        span = tracer.start_span(
            "execute_tool read",
            context=context,
            start_time=next(clock),
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "read",
                "gen_ai.tool.call.id": f"h-{n}",
                "gen_ai.tool.call.arguments": json.dumps({"path": f"/src/{n}.py"}),
                "gen_ai.tool.call.result": json.dumps({"text": f"contents of {n}", "bytes": n * 10.5}),
                "gen_ai.agent.id": "helper-id",
            },
        )
        span.end(end_time=next(clock))
    parent.end(end_time=next(clock))
    healthy = list(memory.get_finished_spans())
    provider.shutdown()
    return loop, healthy


def expected_events(spans: list[ReadableSpan]) -> list[Event]:
    """The events the documented mapping gives, built here from the span data."""
    events: list[Event] = []
    tool_spans = [s for s in spans if (s.attributes or {}).get("gen_ai.operation.name") == "execute_tool"]
    for span in sorted(tool_spans, key=lambda s: s.start_time or 0):
        attrs = dict(span.attributes or {})
        assert span.context is not None
        trace = f"{span.context.trace_id:032x}"
        base = f"otlp:{trace}:{span.context.span_id:016x}"
        run = str(attrs.get("gen_ai.conversation.id") or trace)
        agent = str(attrs.get("gen_ai.agent.name") or attrs.get("gen_ai.agent.id") or "default")
        params = from_python(json.loads(str(attrs["gen_ai.tool.call.arguments"])))
        tool, call_id = str(attrs["gen_ai.tool.name"]), str(attrs["gen_ai.tool.call.id"])
        common: dict[str, Any] = {"run_id": run, "agent_id": agent, "tool": tool, "tool_call_id": call_id}
        events.append(
            ToolCall(event_id=f"{base}:call", ts=(span.start_time or 0) // 10**6, params=params, **common)
        )
        outcome: dict[str, Any] = {}
        if span.status.status_code is StatusCode.ERROR:
            outcome["error"] = span.status.description
        else:
            outcome["result"] = from_python(json.loads(str(attrs["gen_ai.tool.call.result"])))
        events.append(
            ToolResult(
                event_id=f"{base}:result",
                ts=(span.end_time or 0) // 10**6,
                params=params,
                **common,
                **outcome,
            )
        )
    return events


def core_outputs(events: list[Event]) -> list[Output]:
    engine = Engine(FleetConfig.enabled_default())
    return [output for event in events for output in engine.process(event)]


# -- HTTP helpers ------------------------------------------------------------------------------------


def get_json(url: str) -> Any:
    request = urllib.request.Request(url, headers=AUTH)
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read())


def get_text(url: str) -> str:
    request = urllib.request.Request(url, headers=AUTH)
    with urllib.request.urlopen(request, timeout=10) as answer:
        return str(answer.read().decode())


def post(url: str, body: bytes, content_type: str, **headers: str) -> tuple[int, str, bytes]:
    request = urllib.request.Request(
        url, data=body, method="POST", headers={"Content-Type": content_type, **AUTH, **headers}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.headers.get("Content-Type", ""), answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("Content-Type", ""), error.read()


def metric(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{key}="{value}"' in line for key, value in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


# -- an OTLP receiver ----------------------------------------------------------------------------------


@dataclass
class Receiver:
    url: str
    records: list[dict[str, Any]] = field(default_factory=list)
    services: set[str] = field(default_factory=set)

    def wait_for(self, count: int, timeout: float = 60.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while len(self.records) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        return list(self.records)


def _any_value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    return None if kind is None else getattr(value, kind)


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    """A small OTLP/HTTP logs receiver (aiohttp, in a thread of its own)."""
    loop = asyncio.new_event_loop()
    receiver = Receiver("")

    async def logs(request: web.Request) -> web.Response:
        body = await request.read()
        export = ExportLogsServiceRequest()
        export.ParseFromString(
            gzip.decompress(body) if request.headers.get("Content-Encoding") == "gzip" else body
        )
        for resource_logs in export.resource_logs:
            for attribute in resource_logs.resource.attributes:
                if attribute.key == "service.name":
                    receiver.services.add(attribute.value.string_value)
            for scope_logs in resource_logs.scope_logs:
                for record in scope_logs.log_records:
                    fields = {a.key: _any_value(a.value) for a in record.attributes}
                    fields["_body"] = record.body.string_value
                    fields["_severity"] = record.severity_number
                    fields["_event_name"] = record.event_name
                    fields["_ts_ns"] = record.time_unix_nano
                    receiver.records.append(fields)
        answer = ExportLogsServiceResponse().SerializeToString()
        return web.Response(body=answer, content_type="application/x-protobuf")

    app = web.Application()
    app.router.add_post("/v1/logs", logs)
    runner = web.AppRunner(app, access_log=None)
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", 0).start())
    receiver.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.run_until_complete(runner.cleanup())
        loop.close()


def assert_records_are(records: list[dict[str, Any]], expected: list[Output]) -> None:
    got = {r["loopwatch.verdict.id"]: r for r in records}
    assert sorted(got) == sorted(o.verdict_id for o in expected)
    for output in expected:
        record = got[output.verdict_id]
        level, detector, action = shape_of(output)
        assert record["loopwatch.verdict.level"] == level
        assert record["loopwatch.verdict.action"] == action
        assert record["loopwatch.verdict.detector"] == detector
        assert record.get("loopwatch.verdict.count") == output.count  # an abort may have none
        assert record["loopwatch.verdict.run_id"] == output.run_id
        assert record["gen_ai.conversation.id"] == output.run_id
        assert record["loopwatch.verdict.tool"] == output.tool
        assert record["loopwatch.verdict.message"] == output.message == record["_body"]
        assert record["_event_name"] == (
            "loopwatch.verdict" if isinstance(output, Verdict) else "loopwatch.abort"
        )
        assert record["_ts_ns"] == (output.ts or 0) * 10**6


# -- the tests ----------------------------------------------------------------------------------------------


def test_otlp_spans_in_give_the_cores_verdicts_and_verdicts_go_out(tmp_path: Path) -> None:
    loop_spans, healthy_spans = make_spans("otlp-loop-run")
    loop_expected = core_outputs(expected_events(loop_spans))
    healthy_events = expected_events(healthy_spans)
    assert [shape_of(o)[2] for o in loop_expected][:: len(loop_expected) - 1] == ["warn", "abort"]
    assert core_outputs(healthy_events) == []
    env = {"LOOPWATCH_GATEWAY_TOKENS": TOKEN, "OTEL_BLRP_SCHEDULE_DELAY": "50"}
    with (
        otlp_receiver() as receiver,
        gateway_process(env={**env, "LOOPWATCH_OTLP_ENDPOINT": receiver.url}) as gw,
    ):
        endpoint = gw.url + "/v1/traces"
        protobuf = OTLPSpanExporter(endpoint=endpoint, headers=AUTH, compression=Compression.Gzip)
        assert protobuf.export(loop_spans) is SpanExportResult.SUCCESS
        as_json = JsonSpanExporter(endpoint=endpoint, headers=AUTH)
        assert as_json.export(healthy_spans) is SpanExportResult.SUCCESS

        run = get_json(f"{gw.url}/fleet/run?id=otlp-loop-run")
        got = [
            (v["verdict_id"], v["detector"], v["action"], v["count"], v["message"])
            for v in run["verdict_list"]
        ]
        want = [(o.verdict_id, shape_of(o)[1], shape_of(o)[2], o.count, o.message) for o in loop_expected]
        assert got == want
        assert run["calls"] == 22
        assert run["agent_id"] == "coder"
        healthy_run = healthy_events[0].run_id
        assert healthy_run is not None
        assert re.fullmatch("[0-9a-f]{32}", healthy_run)
        healthy = get_json(f"{gw.url}/fleet/run?id={healthy_run}")
        assert healthy["verdict_list"] == []
        assert healthy["calls"] == 12
        assert healthy["agent_id"] == "helper-id"

        metrics = get_text(gw.url + "/metrics")
        for output in loop_expected:
            level, detector, action = shape_of(output)
            want_n = sum(1 for o in loop_expected if shape_of(o) == (level, detector, action))
            assert metric(metrics, "loopwatch_verdicts_total", detector=detector, action=action) == want_n
        assert metric(metrics, "loopwatch_verdicts_total") == len(loop_expected)
        assert metric(metrics, "loopwatch_events_total", type="tool_call") == 22 + 12
        assert metric(metrics, "loopwatch_events_total", type="tool_result") == 22 + 12

        # the exporter's retry of the same spans: the same event ids, no verdict again
        assert protobuf.export(loop_spans) is SpanExportResult.SUCCESS
        again = get_json(f"{gw.url}/fleet/run?id=otlp-loop-run")["verdict_list"]
        assert [v["verdict_id"] for v in again] == [o.verdict_id for o in loop_expected]
        assert metric(get_text(gw.url + "/metrics"), "loopwatch_verdicts_total") == len(loop_expected)

        records = receiver.wait_for(len(loop_expected))
        assert_records_are(records, loop_expected)
        assert receiver.services == {"loopwatch-gateway"}


def test_malformed_otlp_answers_400_with_a_reason_never_500() -> None:
    with gateway_process(env={"LOOPWATCH_GATEWAY_TOKENS": TOKEN}) as gw:
        url = gw.url + "/v1/traces"
        for body in (b"\xff\xff\xff\xff", b"\x0a\x05\x0a\x03\x0a", b"\x12"):
            status, media, answer = post(url, body, "application/x-protobuf")
            assert status == 400, body
            assert media == "application/x-protobuf"
            refusal = status_pb2.Status.FromString(answer)
            assert refusal.code == 3
            assert "not a protobuf ExportTraceServiceRequest" in refusal.message
        span = {"traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": "b7ad6b7169203331", "name": "x"}
        cases: list[tuple[bytes, str]] = [
            (b"{", "not valid JSON"),
            (b"[]", "expected an object"),
            (json.dumps({"resourceSpans": {}}).encode(), "resourceSpans: expected an array"),
            (
                json.dumps(
                    {"resourceSpans": [{"scopeSpans": [{"spans": [{**span, "traceId": "zz"}]}]}]}
                ).encode(),
                "traceId",
            ),
            (
                json.dumps(
                    {"resourceSpans": [{"scopeSpans": [{"spans": [{**span, "startTimeUnixNano": "soon"}]}]}]}
                ).encode(),
                "startTimeUnixNano",
            ),
            (
                json.dumps(
                    {
                        "resourceSpans": [
                            {
                                "scopeSpans": [
                                    {
                                        "spans": [
                                            {**span, "attributes": [{"key": "k", "value": {"intValue": []}}]}
                                        ]
                                    }
                                ]
                            }
                        ]
                    }
                ).encode(),
                "intValue",
            ),
            (
                json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [{**span, "name": 5}]}]}]}).encode(),
                "name",
            ),
        ]
        for body, reason in cases:
            status, media, answer = post(url, body, "application/json")
            assert status == 400, body
            assert media == "application/json"
            assert reason in json.loads(answer)["message"], (body, answer)
        status, _, answer = post(
            url, b"not gzip at all", "application/x-protobuf", **{"Content-Encoding": "gzip"}
        )
        assert status == 400
        assert "does not decode" in status_pb2.Status.FromString(answer).message
        status, _, answer = post(gw.url + "/v1/events", b"\x0a\x00", "application/x-protobuf")
        assert status == 415  # protobuf on /v1/traces only
        # a tool span that cannot be events is rejected, the rest applied (200, partial_success)
        bad_tool = {
            **span,
            "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}}],
        }
        status, media, answer = post(
            url,
            json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [bad_tool]}]}]}).encode(),
            "application/json",
        )
        assert status == 200
        partial = json.loads(answer)["partialSuccess"]
        assert partial["rejectedSpans"] == "1"
        assert "gen_ai.tool.name" in partial["errorMessage"]
        status, media, answer = post(url, b"", "application/x-protobuf")
        assert (status, media) == (200, "application/x-protobuf")
        assert ExportTraceServiceResponse.FromString(answer).partial_success.rejected_spans == 0
        assert gw.proc.poll() is None


def test_on_kafka_spans_reach_the_workers_and_the_worker_exports_verdicts(
    kafka_bootstrap: str, names: Names, tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    loop_spans, _ = make_spans("otlp-kafka-run")
    expected = core_outputs(expected_events(loop_spans))
    with otlp_receiver() as receiver:
        worker = start_worker(
            names,
            kafka_bootstrap,
            tmp_path,
            workers,
            "w1",
            LOOPWATCH_OTLP_ENDPOINT=receiver.url + "/v1/logs",
            OTEL_BLRP_SCHEDULE_DELAY="50",
        )
        worker.wait_ready()
        gateway = Gateway(names, kafka_bootstrap, 2000)
        try:
            exporter = OTLPSpanExporter(endpoint=gateway.url + "/v1/traces")
            assert exporter.export(loop_spans) is SpanExportResult.SUCCESS
            records = receiver.wait_for(len(expected), timeout=90)
        finally:
            gateway.stop()
        assert_records_are(records, expected)
        assert receiver.services == {"loopwatch-worker"}


def test_a_verdict_time_out_of_otlp_s_range_costs_no_other_verdict_its_export() -> None:
    """A client's clock before 1970 (or beyond 2554) gives verdict times OTLP cannot hold: such
    a record is sent with the time of its export, and the batch it is in still goes out."""
    import msgspec

    from loopwatch.streams.otlp_verdicts import VerdictExporter

    trace = Trace("clock", agent_id="coder")
    for _ in range(12):
        trace.both("read", {"path": "/missing"}, error="ENOENT")
    engine = Engine(FleetConfig.enabled_default())
    outputs = [output for event in trace.events for output in engine.process(event)]
    assert outputs
    odd = [msgspec.structs.replace(o, ts=-100_000_000_000) for o in outputs] + [
        msgspec.structs.replace(o, verdict_id=o.verdict_id + "-late", ts=2**62) for o in outputs
    ]
    with otlp_receiver() as receiver:
        exporter = VerdictExporter(receiver.url, "loopwatch-test", schedule_delay_ms=50)
        exporter.export([*outputs, *odd[: len(outputs)]])
        exporter.export(odd[len(outputs) :])
        exporter.shutdown()
        records = receiver.wait_for(len(outputs) * 2, timeout=30)
    assert sorted(r["loopwatch.verdict.id"] for r in records) == sorted(
        [o.verdict_id for o in outputs] + [o.verdict_id + "-late" for o in outputs]
    )
    assert all(0 < r["_ts_ns"] < 2**63 for r in records)
