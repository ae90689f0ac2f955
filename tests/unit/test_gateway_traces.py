"""``POST /v1/traces`` on the gateway: every answer in the client's encoding, OTLP/JSON's numbers
read as proto3's JSON mapping says, and the routes' trailing slash."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from google.rpc import status_pb2  # type: ignore[import-untyped]

from loopwatch.config import FleetConfig
from loopwatch.streams.embedded.runtime import EmbeddedRuntime
from loopwatch.streams.fleet_view.view import FleetView
from loopwatch.streams.gateway import server
from loopwatch.streams.gateway.otlp import OtlpError, parse_request
from loopwatch.streams.gateway.server import EmbeddedBackend, gateway_app

Client = TestClient[Any, Any]
JSON = "application/json"
PROTOBUF = "application/x-protobuf"
TRACE = "0af7651916cd43dd8448eb211c80319c"
SPAN = "b7ad6b7169203331"


@asynccontextmanager
async def gateway(max_bytes: int = 1_048_576) -> AsyncIterator[Client]:
    view = FleetView("test gateway")
    async with EmbeddedRuntime(FleetConfig.enabled_default(), view=view) as runtime:
        app = gateway_app(EmbeddedBackend(runtime), view, frozenset(), max_bytes)
        client = TestClient(TestServer(app))
        await client.start_server()
        try:
            yield client
        finally:
            await client.close()


def span_body(**span: Any) -> bytes:
    """An OTLP/JSON request of one span (``span``: its fields)."""
    whole = {"traceId": TRACE, "spanId": SPAN, "name": "execute_tool read", **span}
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [whole]}]}]}).encode()


def attribute_body(value: dict[str, Any]) -> bytes:
    return span_body(attributes=[{"key": "k", "value": value}])


# -- the numbers of OTLP/JSON ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (span_body(status={"code": "\u0662"}), "status.code: unknown status code"),
        (span_body(endTimeUnixNano="\u0661\u0662"), "endTimeUnixNano: expected an integer"),
        (span_body(startTimeUnixNano=" 12"), "startTimeUnixNano: expected an integer"),
        (span_body(startTimeUnixNano="1_000"), "startTimeUnixNano: expected an integer"),
        (span_body(startTimeUnixNano=-1), "startTimeUnixNano: out of the range of an unsigned 64-bit"),
        (span_body(startTimeUnixNano="-5"), "startTimeUnixNano: out of the range of an unsigned 64-bit"),
        (span_body(endTimeUnixNano=2**64), "endTimeUnixNano: out of the range of an unsigned 64-bit"),
        (span_body(status={"code": 2**31}), "status.code: out of the range of a signed 32-bit"),
        (attribute_body({"intValue": "\u0664\u0662"}), "intValue: expected an integer"),
        (attribute_body({"intValue": str(2**63)}), "intValue: out of the range of a signed 64-bit"),
        (attribute_body({"intValue": "1" * 30}), "intValue: expected an integer"),
        (attribute_body({"doubleValue": "\u0661.5"}), "doubleValue: expected a number"),
        (attribute_body({"doubleValue": "inf"}), "doubleValue: expected a number"),
        (attribute_body({"doubleValue": " 1.5"}), "doubleValue: expected a number"),
    ],
)
def test_otlp_json_integers_are_ascii_digits_within_their_field_s_range(body: bytes, reason: str) -> None:
    with pytest.raises(OtlpError) as caught:
        parse_request(body, protobuf=False)
    assert reason in caught.value.reason


def test_otlp_json_numbers_proto3_s_json_mapping_allows_are_read() -> None:
    (span,) = parse_request(
        span_body(
            startTimeUnixNano="18446744073709551615",
            endTimeUnixNano=0,
            status={"code": "2"},
            attributes=[
                {"key": "i", "value": {"intValue": "-9223372036854775808"}},
                {"key": "d", "value": {"doubleValue": "-2.5e3"}},
                {"key": "n", "value": {"doubleValue": 7}},
                {"key": "inf", "value": {"doubleValue": "-Infinity"}},
            ],
        ),
        protobuf=False,
    )
    assert (span.start_ns, span.end_ns, span.status_code) == (2**64 - 1, 0, 2)
    assert span.attributes == {"i": -(2**63), "d": -2500.0, "n": 7.0, "inf": float("-inf")}


# -- every answer in the client's encoding --------------------------------------------------------


def status_of(body: bytes, media: str) -> tuple[int, str]:
    """The code and message of a google.rpc.Status in ``media``."""
    if media == PROTOBUF:
        status = status_pb2.Status.FromString(body)
        return status.code, status.message
    value = json.loads(body)
    return value["code"], value["message"]


async def late_body(client: Client, path: str, media: str) -> tuple[int, str, bytes]:
    """A request whose body never comes (half of it is sent): its status, type and body."""
    reader, writer = await asyncio.open_connection(client.host, client.port)
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {client.host}:{client.port}\r\n"
        f"Content-Type: {media}\r\nContent-Length: 100\r\n\r\n"
    )
    writer.write(head.encode() + b"{" * 50)
    await writer.drain()
    status_line = await reader.readline()
    headers: dict[str, str] = {}
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers["content-length"]))
    writer.close()
    return int(status_line.split()[1]), headers["content-type"].split(";")[0], body


def test_every_refusal_of_v1_traces_is_a_status_in_the_client_s_encoding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """400 (not OTLP), 408 (the body never came), 413 (over maxEventBytes): a google.rpc.Status
    as protobuf to a protobuf client, as JSON to a JSON one."""
    monkeypatch.setattr(server, "BODY_TIMEOUT_S", 0.2)

    async def go() -> None:
        async with gateway(max_bytes=4096) as client:
            for media in (PROTOBUF, JSON):
                bad = await client.post("/v1/traces", data=b"\xff\xff\xff", headers={"Content-Type": media})
                assert (bad.status, bad.content_type) == (400, media)
                assert status_of(await bad.read(), media)[0] == 3  # INVALID_ARGUMENT
                big = await client.post("/v1/traces", data=b"{" * 5000, headers={"Content-Type": media})
                assert (big.status, big.content_type) == (413, media)
                assert "maxEventBytes (4096 bytes)" in status_of(await big.read(), media)[1]
                status, content_type, body = await late_body(client, "/v1/traces", media)
                assert (status, content_type) == (408, media)
                assert status_of(body, media) == (
                    4,
                    "the body was not sent within 0.2 s",
                )  # DEADLINE_EXCEEDED
            # the other routes answer as they did: JSON
            status, content_type, body = await late_body(client, "/v1/decide", JSON)
            assert (status, content_type) == (408, JSON)
            assert json.loads(body) == {"error": "the body was not sent within 0.2 s"}

    asyncio.run(go())


# -- the routes' paths ----------------------------------------------------------------------------


def test_a_trailing_slash_names_the_same_route_and_a_post_to_no_route_is_404() -> None:
    async def go() -> None:
        async with gateway() as client:
            call = {"run_id": "r", "tool": "read", "params": {"path": "a"}}
            for path in ("/v1/decide", "/v1/decide/"):
                answer = await client.post(path, json=call)
                assert answer.status == 200, path
                assert (await answer.json())["decision"] == "allow"
            event = {**call, "type": "tool_call", "event_id": "e1"}
            answer = await client.post("/v1/events/", json=event)
            assert (answer.status, await answer.json()) == (200, {"outputs": []})
            answer = await client.post("/v1/traces/", data=span_body(), headers={"Content-Type": PROTOBUF})
            assert (answer.status, answer.content_type) == (400, PROTOBUF)  # (taken as protobuf: it is not)
            hook = {"session_id": "s", "hook_event_name": "PreToolUse", "tool_name": "Read", "tool_input": {}}
            answer = await client.post("/v1/hooks/claude-code/", json=hook)
            assert answer.status == 200
            for path in ("/v1/hooks/", "/v1/hooks/claude-code/x", "/v1/decide//"):
                answer = await client.post(path, json=call)
                assert answer.status == 404, path
                assert (await answer.json())["error"] == f"no route {path}"
            answer = await client.get("/v1/decide/")
            assert answer.status == 405
            assert (await answer.json())["error"] == "/v1/decide/ takes POST, not GET"

    asyncio.run(go())


# -- bounded work per body -------------------------------------------------------------------------


def sdk_export(spans: int, events: int, attributes: int = 200) -> list[Any]:
    """What the real OpenTelemetry SDK finishes with its default limits (128 attributes per span
    and per event, 128 events) when each span is given ``attributes`` attributes and ``events``
    events of as many: ``spans`` tool spans of one conversation."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    logging.getLogger("opentelemetry.attributes").setLevel(logging.ERROR)  # (each drop is a warning)
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("limits")
    extra = {f"extra.{k}": f"value {k}" for k in range(attributes)}
    for n in range(spans):
        span = tracer.start_span(
            "execute_tool read",
            start_time=10**18 + n * 10**6,
            attributes={  # (the SDK keeps the newest 128: the tool's own last)
                **extra,
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "read",
                "gen_ai.conversation.id": "sdk-defaults",
                "gen_ai.tool.call.arguments": json.dumps({"path": f"/f{n}"}),
            },
        )
        for k in range(events):
            span.add_event(f"event {k}", extra)
        span.end(end_time=10**18 + n * 10**6 + 1)
    provider.shutdown()
    return list(memory.get_finished_spans())


def test_what_an_sdk_sends_with_its_default_limits_is_accepted_whole() -> None:
    """512 spans (the batch processor's default export) at 128 attributes each, and spans at 128
    events of 128 attributes: every tool span becomes its two events, none is rejected."""
    from opentelemetry.exporter.otlp.json.common.trace_encoder import encode_spans as encode_json
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as encode_protobuf

    from loopwatch.streams.gateway.otlp import convert

    for spans, events in ((512, 0), (4, 200)):
        finished = sdk_export(spans, events)
        assert all(len(span.attributes) == 128 for span in finished)  # (the SDK's own limit)
        assert all(len(span.events) == min(events, 128) for span in finished)
        protobuf = encode_protobuf(finished).SerializeToString()
        as_json = encode_json(finished).to_json().encode()
        for body, is_protobuf in ((protobuf, True), (as_json, False)):
            mapped = convert(body, is_protobuf)
            assert (mapped.rejected, mapped.ignored, len(mapped.events)) == (0, 0, 2 * spans), mapped.reasons
            answer = export_answer(mapped, is_protobuf)
            assert answer == {}, answer


def export_answer(mapped: Any, protobuf: bool) -> dict[str, Any]:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

    from loopwatch.streams.gateway.otlp import export_response

    body = export_response(mapped, protobuf)
    if protobuf:
        partial = ExportTraceServiceResponse.FromString(body).partial_success
        return (
            {"rejected": partial.rejected_spans, "message": partial.error_message}
            if partial.rejected_spans
            else {}
        )
    value = json.loads(body).get("partialSuccess", {})
    return {"rejected": int(value["rejectedSpans"]), "message": value["errorMessage"]} if value else {}


def limits_body(
    protobuf: bool, spans: int, attributes: int = 4, events: int = 0, event_attributes: int = 0
) -> bytes:
    """``spans`` tool spans (one of them with ``attributes``, ``events`` and ``event_attributes``
    as given, the others plain), as protobuf or OTLP/JSON."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest()
    scope = request.resource_spans.add().scope_spans.add()
    for n in range(spans):
        span = scope.spans.add()
        span.trace_id, span.span_id = bytes.fromhex(TRACE), (n + 1).to_bytes(8, "big")
        span.name, span.start_time_unix_nano = "execute_tool read", 10**18 + n
        given = (attributes, events, event_attributes) if n == 0 else (4, 0, 0)
        for k in range(given[0]):
            item = span.attributes.add()
            item.key, item.value.string_value = (
                ("gen_ai.operation.name", "execute_tool") if k == 0 else (f"k{k}", "v")
            )
        for _ in range(given[1]):
            event = span.events.add()
            event.name = "e"
            for k in range(given[2]):
                item = event.attributes.add()
                item.key, item.value.string_value = f"k{k}", "v"
    if protobuf:
        return bytes(request.SerializeToString())
    from google.protobuf.json_format import MessageToDict  # type: ignore[import-untyped]

    value = MessageToDict(request)
    for index, span in enumerate(value["resourceSpans"][0]["scopeSpans"][0]["spans"]):  # (OTLP: ids in hex)
        span["traceId"], span["spanId"] = TRACE, f"{index + 1:016x}"
    return json.dumps(value).encode()


@pytest.mark.parametrize("protobuf", [True, False], ids=["protobuf", "json"])
def test_a_span_over_a_limit_is_rejected_naming_it_and_the_others_applied(protobuf: bool) -> None:
    from loopwatch.streams.gateway.otlp import MAX_ATTRIBUTES, MAX_EVENTS, MAX_SPANS, convert

    for given, named in (
        (
            {"attributes": MAX_ATTRIBUTES + 1},
            f"{MAX_ATTRIBUTES + 1} attributes, more than the limit of {MAX_ATTRIBUTES}",
        ),
        ({"events": MAX_EVENTS + 1}, f"{MAX_EVENTS + 1} events, more than the limit of {MAX_EVENTS}"),
        (
            {"events": 1, "event_attributes": MAX_ATTRIBUTES + 1},
            f"an event with {MAX_ATTRIBUTES + 1} attributes, more than the limit of {MAX_ATTRIBUTES}",
        ),
    ):
        mapped = convert(limits_body(protobuf, 3, **given), protobuf)
        assert (mapped.rejected, mapped.limited, len(mapped.events)) == (1, 1, 4)  # the other two applied
        answer = export_answer(mapped, protobuf)
        assert answer["rejected"] == 1
        assert named in answer["message"], answer
        assert "128 with its default limits" in answer["message"]
    # at the limits: nothing rejected
    edge = limits_body(protobuf, 2, attributes=MAX_ATTRIBUTES, events=MAX_EVENTS, event_attributes=1)
    assert convert(edge, protobuf).rejected == 0
    edge = limits_body(protobuf, 1, events=1, event_attributes=MAX_ATTRIBUTES)
    assert convert(edge, protobuf).rejected == 0
    # the spans after the first MAX_SPANS are rejected unread, counted
    mapped = convert(limits_body(protobuf, MAX_SPANS + 3), protobuf)
    assert (mapped.rejected, len(mapped.events)) == (3, 2 * MAX_SPANS)
    answer = export_answer(mapped, protobuf)
    assert answer["rejected"] == 3
    assert f"3 span(s) after the first {MAX_SPANS} of the request" in answer["message"]


def test_a_resource_over_the_attribute_limit_has_its_spans_rejected() -> None:
    from loopwatch.streams.gateway.otlp import MAX_ATTRIBUTES, convert

    resource = [{"key": f"r{k}", "value": {"stringValue": "v"}} for k in range(MAX_ATTRIBUTES + 1)]
    tool = [{"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}}]
    body = {
        "resourceSpans": [
            {
                "resource": {"attributes": resource},
                "scopeSpans": [
                    {
                        "spans": [
                            {"traceId": TRACE, "spanId": SPAN, "name": "execute_tool t", "attributes": tool}
                        ]
                    }
                ],
            }
        ]
    }
    mapped = convert(json.dumps(body).encode(), protobuf=False)
    assert (mapped.rejected, mapped.events) == (1, [])
    assert f"its resource has {MAX_ATTRIBUTES + 1} attributes" in mapped.reasons[0]


def test_a_large_body_is_read_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """While a large body's conversion (``/v1/traces``) or decoding (``/v1/events``) is held up,
    ``/v1/decide`` is answered: the reading does not hold the event loop."""
    import threading

    from loopwatch.streams.gateway import otlp

    release = threading.Event()
    started = threading.Event()
    real_convert, real_decode = otlp.convert, server._decode_all

    def held(read: Any) -> Any:
        def run(*args: Any) -> Any:
            started.set()
            assert release.wait(20)
            return read(*args)

        return run

    monkeypatch.setattr(otlp, "convert", held(real_convert))
    monkeypatch.setattr(server, "_decode_all", held(real_decode))
    big_traces = limits_body(True, 2000)
    event = {"type": "tool_call", "run_id": "big", "tool": "read", "params": {"path": "x"}}
    big_events = b"\n".join(json.dumps({**event, "event_id": f"e{n}"}).encode() for n in range(1000))
    assert min(len(big_traces), len(big_events)) > server.OFFLOAD_ABOVE

    async def go() -> None:
        async with gateway() as client:
            for path, body, media in (("/v1/traces", big_traces, PROTOBUF), ("/v1/events", big_events, JSON)):
                release.clear()
                started.clear()
                sending = asyncio.ensure_future(client.post(path, data=body, headers={"Content-Type": media}))
                while not started.is_set():  # (the reading began, in its thread)
                    await asyncio.sleep(0.01)
                call = {"run_id": "meanwhile", "tool": "read", "params": {"path": path}}
                answer = await asyncio.wait_for(client.post("/v1/decide", json=call), 30)
                assert answer.status == 200
                assert not release.is_set()
                assert not sending.done()  # the large body still being read
                release.set()
                assert (await asyncio.wait_for(sending, 60)).status == 200

    asyncio.run(go())


def test_the_gateway_s_old_generation_is_collected_on_a_clock_not_on_allocations() -> None:
    import gc

    from loopwatch.streams.kafka.gc_policy import OLD_GENERATION_OFF

    original = gc.get_threshold()

    async def go() -> None:
        collector = asyncio.create_task(server.collect_on_a_clock(3600))
        await asyncio.sleep(0)  # (it runs up to its first sleep)
        assert gc.get_threshold() == (original[0], original[1], OLD_GENERATION_OFF)
        assert gc.get_freeze_count() > 0  # what start-up built is never walked again
        collector.cancel()

    try:
        asyncio.run(go())
    finally:
        gc.unfreeze()
        gc.set_threshold(*original)
