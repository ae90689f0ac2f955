"""The OTLP → events mapping (:mod:`streams.gateway.otlp`), its answers, the content-type rule of
``/v1/traces``, the verdict attributes of OTLP out, and the gateway without the otlp extra."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from google.rpc import status_pb2  # type: ignore[import-untyped]
from opentelemetry.exporter.otlp.json.common.trace_encoder import encode_spans as encode_json
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as encode_protobuf
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from loopwatch.detectors.events import Abort, ToolCall, ToolResult, Verdict
from loopwatch.detectors.stable_json import from_python
from loopwatch.streams.gateway.otlp import (
    Mapped,
    OtlpError,
    Span,
    events_of,
    export_response,
    parse_request,
    span_events,
    status_body,
)
from loopwatch.streams.gateway.web_safety import WebSafety
from loopwatch.streams.otlp_verdicts import verdict_attributes
from tests.helpers import ROOT

TRACE = "0af7651916cd43dd8448eb211c80319c"
SPAN = "b7ad6b7169203331"


def tool_span(**attributes: Any) -> Span:
    base: dict[str, Any] = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "read"}
    return Span(TRACE, SPAN, "execute_tool read", 5_000_000, 9_000_000, {**base, **attributes})


def test_a_tool_span_is_a_call_and_a_result() -> None:
    span = tool_span(
        **{
            "gen_ai.tool.call.id": "c1",
            "gen_ai.tool.call.arguments": '{"path": "a.txt", "n": 1.0}',
            "gen_ai.tool.call.result": '{"text": "hi"}',
            "gen_ai.conversation.id": "conv-1",
            "gen_ai.agent.name": "coder",
            "gen_ai.agent.id": "ignored-when-a-name-is-there",
        }
    )
    call, result = span_events(span) or []
    params = from_python({"path": "a.txt", "n": 1.0})
    common = {"run_id": "conv-1", "agent_id": "coder", "tool": "read", "tool_call_id": "c1", "params": params}
    assert call == ToolCall(event_id=f"otlp:{TRACE}:{SPAN}:call", ts=5, **common)
    assert result == ToolResult(
        event_id=f"otlp:{TRACE}:{SPAN}:result", ts=9, result=from_python({"text": "hi"}), **common
    )


def test_run_and_agent_fall_back_to_the_trace_the_agent_id_and_the_resource() -> None:
    call = (span_events(tool_span(**{"gen_ai.agent.id": "a-7"})) or [])[0]
    assert (call.run_id, call.agent_id) == (TRACE, "a-7")
    plain = (span_events(tool_span()) or [])[0]
    assert (plain.run_id, plain.agent_id) == (TRACE, "default")
    on_resource = Span(
        TRACE,
        SPAN,
        attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "x"},
        resource={"gen_ai.agent.name": "from-resource", "gen_ai.conversation.id": "conv-r"},
    )
    call = (span_events(on_resource) or [])[0]
    assert (call.run_id, call.agent_id, call.ts) == ("conv-r", "from-resource", None)


@pytest.mark.parametrize(
    ("arguments", "params"),
    [
        ('{"a": [1, 2]}', {"a": [1, 2]}),
        ("[1, 2]", [1, 2]),
        ("ls -la", "ls -la"),
        ("{not json", "{not json"),
        ("42", "42"),
        ({"a": {"b": True}}, {"a": {"b": True}}),
        (None, {}),
    ],
)
def test_arguments_become_params(arguments: Any, params: Any) -> None:
    span = tool_span(**{"gen_ai.tool.call.arguments": arguments})
    call = (span_events(span) or [])[0]
    assert isinstance(call, ToolCall)
    assert call.params == from_python(params)


def test_an_error_status_is_the_error_and_a_missing_result_is_null() -> None:
    def error_of(span: Span) -> Any:
        result = (span_events(span) or [])[1]
        assert isinstance(result, ToolResult)
        return result.error

    base = tool_span(**{"gen_ai.tool.call.result": "ignored on error", "error.type": "FileNotFoundError"})
    exception = (("exception", {"exception.type": "OSError", "exception.message": "ENOENT"}),)
    assert (
        error_of(Span(TRACE, SPAN, attributes=base.attributes, status_code=2, status_message="boom"))
        == "boom"
    )
    assert (
        error_of(Span(TRACE, SPAN, attributes=base.attributes, status_code=2, events=exception)) == "ENOENT"
    )
    assert error_of(Span(TRACE, SPAN, attributes=base.attributes, status_code=2)) == "FileNotFoundError"
    assert error_of(Span(TRACE, SPAN, attributes=tool_span().attributes, status_code=2)) == "error"
    # status OK or unset: the result, even with an exception event
    ok = (
        span_events(Span(TRACE, SPAN, attributes=tool_span().attributes, status_code=1, events=exception))
        or []
    )[1]
    assert isinstance(ok, ToolResult)
    assert ok.result is None
    assert ok.error is msgspec_unset()


def msgspec_unset() -> Any:
    from msgspec import UNSET

    return UNSET


def test_the_tool_name_falls_back_to_the_span_name() -> None:
    span = Span(TRACE, SPAN, "execute_tool web_search", attributes={"gen_ai.operation.name": "execute_tool"})
    assert (span_events(span) or [])[0].tool == "web_search"  # type: ignore[union-attr]


def test_other_spans_are_ignored_and_bad_tool_spans_rejected_with_reasons() -> None:
    chat = Span(TRACE, "1" * 16, attributes={"gen_ai.operation.name": "chat"})
    nameless = Span(TRACE, "2" * 16, "execute_tool", attributes={"gen_ai.operation.name": "execute_tool"})
    wrong_type = Span(TRACE, "3" * 16, attributes={**tool_span().attributes, "gen_ai.conversation.id": 7})
    short_id = Span("ab", "4" * 16, attributes=tool_span().attributes)
    good = tool_span()
    mapped = events_of([chat, nameless, wrong_type, short_id, good])
    assert (mapped.ignored, mapped.rejected, mapped.tool_spans, len(mapped.events)) == (1, 3, 4, 2)
    assert "gen_ai.tool.name: missing" in mapped.reasons[0]
    assert "gen_ai.conversation.id: must be a string" in mapped.reasons[1]
    assert "trace id" in mapped.reasons[2]
    assert "3 execute_tool span(s) rejected" in mapped.message()
    assert "1 span(s) ignored" in mapped.message()


def test_input_limits_reject_the_span_not_the_request() -> None:
    deep: Any = "x"
    for _ in range(80):
        deep = [deep]
    mapped = events_of([tool_span(**{"gen_ai.tool.call.arguments": json.dumps(deep)}), tool_span()])
    assert mapped.rejected == 1
    assert "nests more than" in mapped.reasons[0]
    assert len(mapped.events) == 2
    long_id = events_of([tool_span(**{"gen_ai.tool.call.id": "x" * 600})])
    assert long_id.rejected == 1
    assert "tool_call_id" in long_id.reasons[0]


def test_spans_are_applied_in_start_order_and_ids_are_deterministic() -> None:
    late = Span(TRACE, "2" * 16, start_ns=2_000_000, attributes=tool_span().attributes)
    early = Span(TRACE, "1" * 16, start_ns=1_000_000, attributes=tool_span().attributes)
    ids = [event.event_id for event in events_of([late, early]).events]
    assert ids == [f"otlp:{TRACE}:{n * 16}:{kind}" for n in "12" for kind in ("call", "result")]
    assert ids == [event.event_id for event in events_of([late, early]).events]


def sdk_spans() -> list[Any]:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("t")
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "exec",
        "gen_ai.tool.call.arguments": '{"cmd": "make", "timeout": 2.5}',
        "gen_ai.conversation.id": "c",
        "tags": ["a", "b"],
        "n": 3,
        "ok": True,
    }
    span = tracer.start_span("execute_tool exec", attributes=attributes, start_time=10**15)
    span.record_exception(RuntimeError("exit 2"))
    span.set_status(Status(StatusCode.ERROR))
    span.end(end_time=2 * 10**15)
    tracer.start_span("chat", attributes={"gen_ai.operation.name": "chat"}).end()
    provider.shutdown()
    return list(memory.get_finished_spans())


def test_protobuf_and_json_of_the_real_sdk_map_to_the_same_events() -> None:
    spans = sdk_spans()
    from_protobuf = events_of(parse_request(encode_protobuf(spans).SerializeToString(), protobuf=True))
    from_json = events_of(parse_request(encode_json(spans).to_json().encode(), protobuf=False))
    assert from_protobuf == from_json
    assert (from_json.ignored, from_json.rejected) == (1, 0)
    call, result = from_json.events
    assert isinstance(call, ToolCall)
    assert isinstance(result, ToolResult)
    assert (call.run_id, call.tool, call.ts, result.ts, result.error) == (
        "c",
        "exec",
        10**9,
        2 * 10**9,
        "exit 2",
    )


def test_otlp_json_field_forms() -> None:
    """Proto field names, int64 as numbers, enum names for the status code."""
    body = {
        "resource_spans": [
            {
                "scope_spans": [
                    {
                        "spans": [
                            {
                                "trace_id": TRACE,
                                "span_id": SPAN,
                                "start_time_unix_nano": 3_000_000,
                                "status": {"code": "STATUS_CODE_ERROR", "message": "bad"},
                                "attributes": [
                                    {
                                        "key": "gen_ai.operation.name",
                                        "value": {"string_value": "execute_tool"},
                                    },
                                    {"key": "gen_ai.tool.name", "value": {"stringValue": "t"}},
                                    {"key": "n", "value": {"intValue": "12"}},
                                    {"key": "f", "value": {"doubleValue": 1.5}},
                                    {"key": "b", "value": {"bytesValue": "AAE="}},
                                    {"key": "empty", "value": {}},
                                ],
                            }
                        ]
                    }
                ]
            }
        ]
    }
    (span,) = parse_request(json.dumps(body).encode(), protobuf=False)
    assert span.attributes["n"] == 12
    assert span.attributes["f"] == 1.5
    assert span.attributes["b"] == b"\x00\x01"
    assert span.attributes["empty"] is None
    assert (span.status_code, span.status_message, span.start_ns) == (2, "bad", 3_000_000)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"", "not valid JSON"),
        (b"{", "not valid JSON"),
        (b"null", "expected an object"),
        (b'{"resourceSpans": 3}', "resourceSpans: expected an array"),
        (b'{"resourceSpans": [{"scopeSpans": [{"spans": ["x"]}]}]}', "expected an object"),
        (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "xyz"}]}]}]}', "traceId: expected hex"),
        (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"status": {"code": "NOPE"}}]}]}]}', "status code"),
        (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"endTimeUnixNano": 1e30}]}]}]}', "endTimeUnixNano"),
        (b'{"resourceSpans": [{"resource": {"attributes": [{"value": {}}]}}]}', "key: required"),
        (
            b'{"resourceSpans": [{"resource": {"attributes": [{"key": "k", "value": {"boolValue": 1}}]}}]}',
            "boolValue",
        ),
        (
            b'{"resourceSpans": [{"resource": {"attributes": '
            b'[{"key": "k", "value": {"bytesValue": "!"}}]}}]}',
            "base64",
        ),
        (b'{"resourceSpans": [' + b"[" * 5000 + b"]" * 5000 + b"]}", "nested too deeply"),
    ],
)
def test_malformed_json_is_an_otlp_error_with_the_reason(body: bytes, reason: str) -> None:
    with pytest.raises(OtlpError) as caught:
        parse_request(body, protobuf=False)
    assert reason in caught.value.reason


def test_deeply_nested_kvlists_are_an_otlp_error_not_a_crash() -> None:
    inner = '{"stringValue": "x"}'
    for _ in range(3000):
        inner = '{"kvlistValue": {"values": [{"key": "k", "value": ' + inner + "}]}}"
    text = (
        '{"resourceSpans": [{"resource": {"attributes": [{"key": "k", "value": ' + inner + "}]}}]}"
    ).encode()
    with pytest.raises(OtlpError):
        parse_request(text, protobuf=False)


@pytest.mark.parametrize("body", [b"\xff\xff\xff", b"\x0a\x05\x0a", b"\x0a\x02\x0a\x00\x0a"])
def test_bad_protobuf_is_an_otlp_error(body: bytes) -> None:
    with pytest.raises(OtlpError) as caught:
        parse_request(body, protobuf=True)
    assert "not a protobuf ExportTraceServiceRequest" in caught.value.reason


def test_answers_follow_otlp_http() -> None:
    fine = Mapped()
    assert export_response(fine, protobuf=False) == b"{}"
    assert export_response(fine, protobuf=True) == b""
    partial = Mapped(rejected=2, ignored=1, reasons=["span x: bad"])
    answer = ExportTraceServiceResponse.FromString(export_response(partial, protobuf=True))
    assert answer.partial_success.rejected_spans == 2
    assert "span x: bad" in answer.partial_success.error_message
    as_json = json.loads(export_response(partial, protobuf=False))
    assert as_json["partialSuccess"]["rejectedSpans"] == "2"
    status = status_pb2.Status.FromString(status_body("bad ü" * 100, protobuf=True))
    assert (status.code, status.message) == (3, "bad ü" * 100)
    assert json.loads(status_body("bad", protobuf=False)) == {"code": 3, "message": "bad", "error": "bad"}


def test_protobuf_content_type_is_allowed_on_v1_traces_only() -> None:
    safety = WebSafety.of("127.0.0.1", 6070, [])
    host = "127.0.0.1:6070"
    assert safety.check("POST", "/v1/traces", host=host, content_type="application/x-protobuf") is None
    assert safety.check("POST", "/v1/traces", host=host, content_type="application/json") is None
    refused = safety.check("POST", "/v1/events", host=host, content_type="application/x-protobuf")
    assert refused is not None
    assert refused.status == 415
    text = safety.check("POST", "/v1/traces", host=host, content_type="text/plain")
    assert text is not None
    assert text.status == 415


def test_verdict_attributes() -> None:
    verdict = Verdict(
        verdict_id="v1",
        run_id="r1",
        agent_id="a",
        session_id=None,
        tool_call_id="c1",
        trigger_event_id="e1",
        level="warning",
        action="warn",
        detector="generic_repeat",
        count=10,
        message="m",
        warning_key="k",
        paired_tool=None,
        tool="read",
        ts=5,
    )
    attributes = verdict_attributes(verdict)
    assert attributes["loopwatch.verdict.level"] == "warning"
    assert attributes["loopwatch.verdict.detector"] == "generic_repeat"
    assert attributes["loopwatch.verdict.count"] == 10
    assert attributes["gen_ai.conversation.id"] == "r1"
    assert "loopwatch.verdict.session_id" not in attributes
    abort = Abort(
        verdict_id="v2",
        run_id="r1",
        agent_id="a",
        session_id=None,
        trigger_event_id="e2",
        reason="tool_loop_recovery_exhausted",
        tool="read",
        count=None,
        message="stop",
        ts=None,
    )
    attributes = verdict_attributes(abort)
    assert (attributes["loopwatch.verdict.action"], attributes["loopwatch.verdict.detector"]) == (
        "abort",
        "tool_loop_recovery_exhausted",
    )
    assert "loopwatch.verdict.count" not in attributes


WITHOUT_EXTRA = """
import asyncio, importlib.abc, sys

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ("google", "opentelemetry"):
            raise ImportError(f"blocked: {name}")
        return None

sys.meta_path.insert(0, Block())
from aiohttp.test_utils import TestClient, TestServer
from loopwatch.config import FleetConfig
from loopwatch.streams.embedded.runtime import EmbeddedRuntime
from loopwatch.streams.fleet_view.view import FleetView
from loopwatch.streams.gateway.server import EmbeddedBackend, gateway_app
import loopwatch.streams.kafka.worker
from loopwatch.streams.otlp_verdicts import verdict_exporter_from_env
from loopwatch.config.errors import LoopwatchError

assert verdict_exporter_from_env("x", {}) is None
try:
    verdict_exporter_from_env("x", {"LOOPWATCH_OTLP_ENDPOINT": "http://127.0.0.1:1"})
except LoopwatchError as exc:
    assert "otlp extra" in str(exc)
else:
    raise AssertionError("no refusal")

async def main():
    view = FleetView("t")
    async with EmbeddedRuntime(FleetConfig.enabled_default(), view=view) as runtime:
        client = TestClient(TestServer(gateway_app(EmbeddedBackend(runtime), view, frozenset(), 1 << 20)))
        await client.start_server()
        try:
            protobuf = {"Content-Type": "application/x-protobuf"}
            answer = await client.post("/v1/traces", data=b"\\x0a\\x00", headers=protobuf)
            print(answer.status, (await answer.json())["error"])
            body = '{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "%s", "spanId": "%s", '
            body += '"attributes": [{"key": "gen_ai.operation.name", '
            body += '"value": {"stringValue": "execute_tool"}}, '
            body += '{"key": "gen_ai.tool.name", "value": {"stringValue": "read"}}]}]}]}]}'
            body = body % ("ab" * 16, "cd" * 8)
            answer = await client.post("/v1/traces", data=body, headers={"Content-Type": "application/json"})
            print(answer.status, await answer.text(), sum(view.metrics.events.values()))
        finally:
            await client.close()

asyncio.run(main())
assert not [m for m in sys.modules if m.startswith(("opentelemetry", "google"))]
"""


def test_the_gateway_runs_without_the_otlp_extra() -> None:
    done = subprocess.run([sys.executable, "-c", WITHOUT_EXTRA], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    protobuf, as_json = done.stdout.splitlines()
    assert protobuf.startswith("415 OTLP protobuf needs the otlp extra")
    assert as_json == "200 {} 2"


@pytest.mark.parametrize(
    ("endpoint", "problem"),
    [
        ("not-a-url", "an OTLP/HTTP URL with http:// or https:// and a host is needed"),
        ("ftp://collector:4318", "an OTLP/HTTP URL with http:// or https:// and a host is needed"),
        ("http://:4318", "an OTLP/HTTP URL with http:// or https:// and a host is needed"),
        ("http://collector:port", "not a URL"),
    ],
)
def test_an_otlp_endpoint_that_is_no_url_is_refused_at_startup(endpoint: str, problem: str) -> None:
    from loopwatch.config.errors import LoopwatchError
    from loopwatch.streams.otlp_verdicts import verdict_exporter_from_env

    with pytest.raises(LoopwatchError, match=f"LOOPWATCH_OTLP_ENDPOINT={endpoint!r}: {problem}"):
        verdict_exporter_from_env("test", {"LOOPWATCH_OTLP_ENDPOINT": endpoint})
    for good, url in (
        ("http://collector:4318", "http://collector:4318/v1/logs"),
        (" https://c.example/v1/logs ", "https://c.example/v1/logs"),
    ):
        exporter = verdict_exporter_from_env("test", {"LOOPWATCH_OTLP_ENDPOINT": good})
        assert exporter is not None
        assert exporter.url == url
        exporter.shutdown()
