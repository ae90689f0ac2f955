"""``POST /v1/traces`` on the gateway: every answer in the client's encoding, OTLP/JSON's numbers
read as proto3's JSON mapping says, and the routes' trailing slash."""

from __future__ import annotations

import asyncio
import json
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
