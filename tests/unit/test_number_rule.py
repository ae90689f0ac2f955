"""One number rule at every door (docs/wire-numbers.md).

A JSON number beyond a double (``1e400``, ``-1e309``, an integer of 400 digits) is what
JavaScript's ``JSON.parse`` makes of it, ±Infinity: inside ``params`` (any JSON value) it is
accepted and hashed as OpenClaw hashes it (``stableStringify`` writes ``"Infinity"``); where an
event's field is a number that must fit (``ts``, ``usage.cost_usd``) it is refused, naming the
field. ``NaN`` and ``Infinity`` are not JSON anywhere (``JSON.parse`` throws). The same body goes
through every door: ``/v1/decide`` (one call, a batch), ``/v1/events`` (object, NDJSON, array),
``/v1/hooks/claude-code``, ``/v1/traces`` (OTLP/JSON, protobuf), ``loopwatch run``,
``loopwatch import`` and the worker's record path.

What OpenClaw does is the expectation: it hashes ``{"x": 1e400}`` as the text
``{"x":"Infinity"}`` (OpenClaw 2026.9.6's ``stableStringify`` after ``JSON.parse``, run under
Node), so the generic-repeat warning of twelve such calls carries
``generic:<tool>:<tool>:<sha256 of that text>`` (spec §5.2, with ``digest: "sha256"``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest
from aiohttp.test_utils import TestClient, TestServer
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from loopwatch.config.fleet import FleetConfig, parse_config_value
from loopwatch.detectors.events import Output, ToolCall
from loopwatch.detectors.facade import BatchDecision, Decision
from loopwatch.detectors.stable_json import canonical_bytes, stable_stringify
from loopwatch.streams.embedded.runtime import EmbeddedRuntime
from loopwatch.streams.fleet_view.metrics import WorkerMetrics
from loopwatch.streams.fleet_view.view import FleetView
from loopwatch.streams.gateway.server import EmbeddedBackend, gateway_app
from loopwatch.streams.gateway.tolerant_json import dumps, loads
from loopwatch.streams.kafka.run_processor import RunProcessor
from tests.unit.test_run_processor import TOPICS, TP, Broker, Record

Client = TestClient[Any, Any]
CONFIG_VALUE = {"tools": {"loopDetection": {"enabled": True}}, "loopwatch": {"digest": "sha256"}}
#: OpenClaw's hash of the params {"x": 1e400}: sha256 of stableStringify(JSON.parse(...))
OPENCLAW_DIGEST = hashlib.sha256(b'{"x":"Infinity"}').hexdigest()
CALLS = 12  # OpenClaw's generic-repeat warning comes before the twelfth identical call
BIG = b"1e400"
TRACE = "0af7651916cd43dd8448eb211c80319c"


def config() -> FleetConfig:
    return parse_config_value(CONFIG_VALUE)


def warning_keys(outputs: list[dict[str, Any]]) -> set[str]:
    """The warning keys of the generic-repeat verdicts among ``outputs`` (wire JSON)."""
    return {o["warning_key"] for o in outputs if o.get("detector") == "generic_repeat"}


def hashed_as_openclaw(outputs: list[dict[str, Any]], tool: str) -> bool:
    return warning_keys(outputs) == {f"generic:{tool}:{tool}:{OPENCLAW_DIGEST}"}


def event_line(n: int, run: str = "r", **fields: bytes) -> bytes:
    """A tool_call of tool ``t`` whose params are ``{"x": 1e400}`` (the number as written),
    with ``fields`` as their raw JSON text."""
    extra = b"".join(b',"' + name.encode() + b'":' + value for name, value in fields.items())
    return b'{"type":"tool_call","event_id":"e%d","run_id":"%s","tool":"t","params":{"x":%s}%s}' % (
        n,
        run.encode(),
        BIG,
        extra,
    )


def call_body(run: str, **fields: bytes) -> bytes:
    """A proposed call (``/v1/decide``) of tool ``t`` with params ``{"x": 1e400}``."""
    extra = b"".join(b',"' + name.encode() + b'":' + value for name, value in fields.items())
    return b'{"run_id":"%s","tool":"t","params":{"x":%s}%s}' % (run.encode(), BIG, extra)


#: the refused bodies: (field named in the reason, the raw field)
REFUSED = [
    ("ts", {"ts": b"-1e309"}),
    ("usage.cost_usd", {"usage": b'{"cost_usd":-1e309}'}),
    ("usage.input_tokens", {"usage": b'{"input_tokens":1e400}'}),
    ("ts", {"ts": b"1" + b"0" * 400}),
]


def names(reason: str, field: str) -> bool:
    """Whether ``reason`` names ``field`` (as ``$.field`` or ``field:``)."""
    return f"$.{field}`" in reason or reason.startswith(f"{field}:") or f": {field}:" in reason


# -- the reading and writing the gateway does --------------------------------------------------


def test_the_gateway_s_reader_gives_javascript_s_value_and_writes_it_back_the_same() -> None:
    for surrogates in (b"", b',"s":"\\ud800"'):  # (a lone surrogate: the standard library reads it)
        body = b'{"x":1e400,"y":-1e309,"z":[1.5,-0.0,1e-400]' + surrogates + b"}"
        value, _ = loads(body)
        again, _ = loads(dumps(value, bool(surrogates)))
        for each in (value, again):
            assert (
                stable_stringify({k: each[k] for k in "xyz"})
                == '{"x":"Infinity","y":"-Infinity","z":[1.5,0,0]}'
            )
    for constant in (b"NaN", b"Infinity", b"-Infinity"):
        with pytest.raises(Exception, match="not valid JSON"):
            loads(b'{"x":' + constant + b"}")


def test_an_integer_beyond_a_double_is_hashed_as_openclaw_hashes_infinity() -> None:
    """``JSON.parse`` reads 400 digits as Infinity too (OpenClaw writes ``["Infinity","-Infinity"]``)."""
    digits = b"1" + b"0" * 400
    text = b"[" + digits + b",-" + digits + b"]"
    assert canonical_bytes(msgspec.Raw(text)) == b'["Infinity","-Infinity"]'
    assert canonical_bytes(loads(text)[0]) == b'["Infinity","-Infinity"]'
    assert stable_stringify([10**400, -(10**400)]) == '["Infinity","-Infinity"]'


# -- the gateway's doors -------------------------------------------------------------------------


class Recording(EmbeddedBackend):
    """The embedded backend, keeping every output it gives (as wire JSON)."""

    def __init__(self, runtime: EmbeddedRuntime) -> None:
        super().__init__(runtime)
        self.outputs: list[dict[str, Any]] = []

    def keep(self, outputs: list[Output]) -> None:
        self.outputs.extend(msgspec.to_builtins(output) for output in outputs)

    async def events(self, events: list[Any]) -> list[Output] | None:
        outputs = await super().events(events)
        self.keep(outputs or [])
        return outputs

    async def decide(self, call: ToolCall) -> tuple[Decision, bool]:
        decision, timed_out = await super().decide(call)
        self.keep(list(decision.outputs))
        return decision, timed_out

    async def decide_batch(self, calls: list[ToolCall]) -> BatchDecision:
        batch = await super().decide_batch(calls)
        for decision in batch.decisions:
            self.keep(list(decision.outputs))
        return batch


@asynccontextmanager
async def gateway() -> AsyncIterator[tuple[Client, Recording]]:
    view = FleetView("test gateway")
    async with EmbeddedRuntime(config(), view=view) as runtime:
        backend = Recording(runtime)
        client = TestClient(TestServer(gateway_app(backend, view, frozenset(), 1_048_576)))
        await client.start_server()
        try:
            yield client, backend
        finally:
            await client.close()


JSON = {"Content-Type": "application/json"}


def otlp_json(run: str) -> bytes:
    spans = [
        {
            "traceId": TRACE,
            "spanId": f"{n + 1:016x}",
            "name": "execute_tool t",
            "startTimeUnixNano": str(10**18 + n * 10**6),
            "attributes": [
                {"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}},
                {"key": "gen_ai.conversation.id", "value": {"stringValue": run}},
                {"key": "gen_ai.tool.call.arguments", "value": {"stringValue": '{"x":1e400}'}},
            ],
        }
        for n in range(CALLS)
    ]
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}).encode()


def otlp_protobuf(run: str, structured: bool) -> bytes:
    """``structured``: the arguments a kvlist whose double is infinite (protobuf's own
    Infinity), else the JSON text ``{"x":1e400}``."""
    request = ExportTraceServiceRequest()
    scope = request.resource_spans.add().scope_spans.add()
    for n in range(CALLS):
        span = scope.spans.add()
        span.trace_id = bytes.fromhex(TRACE)
        span.span_id = (n + 1).to_bytes(8, "big")
        span.name = "execute_tool t"
        span.start_time_unix_nano = 10**18 + n * 10**6
        for key, text in (("gen_ai.operation.name", "execute_tool"), ("gen_ai.conversation.id", run)):
            item = span.attributes.add()
            item.key, item.value.string_value = key, text
        arguments = span.attributes.add()
        arguments.key = "gen_ai.tool.call.arguments"
        if structured:
            entry = arguments.value.kvlist_value.values.add()
            entry.key, entry.value.double_value = "x", float("inf")
        else:
            arguments.value.string_value = '{"x":1e400}'
    return bytes(request.SerializeToString())


def test_a_number_beyond_a_double_in_params_is_hashed_as_openclaw_at_every_gateway_door() -> None:
    async def go() -> None:
        async with gateway() as (client, backend):

            async def door(name: str, send: Callable[[str], Any]) -> None:
                backend.outputs.clear()
                await send(name)
                assert hashed_as_openclaw(backend.outputs, "t"), (name, backend.outputs)

            async def decide(run: str) -> None:
                for _ in range(CALLS):
                    answer = await client.post("/v1/decide", data=call_body(run), headers=JSON)
                    assert answer.status == 200, await answer.text()

            async def batch(run: str) -> None:
                for _ in range(CALLS):
                    answer = await client.post("/v1/decide", data=b"[" + call_body(run) + b"]", headers=JSON)
                    assert answer.status == 200, await answer.text()

            async def one_event_each(run: str) -> None:
                for n in range(CALLS):
                    answer = await client.post("/v1/events", data=event_line(n, run), headers=JSON)
                    assert answer.status == 200, await answer.text()

            async def framed(run: str, opening: bytes, separator: bytes, closing: bytes) -> None:
                lines = separator.join(event_line(n, run) for n in range(CALLS))
                answer = await client.post("/v1/events", data=opening + lines + closing, headers=JSON)
                assert answer.status == 200, await answer.text()

            async def hook(run: str) -> None:
                for _ in range(CALLS):
                    body = (
                        b'{"session_id":"%s","hook_event_name":"PreToolUse","tool_name":"t",' % run.encode()
                    )
                    body += b'"tool_input":{"x":1e400}}'
                    answer = await client.post("/v1/hooks/claude-code", data=body, headers=JSON)
                    assert answer.status == 200, await answer.text()

            async def traces(body: bytes, media: str) -> None:
                answer = await client.post("/v1/traces", data=body, headers={"Content-Type": media})
                assert answer.status == 200, await answer.read()
                assert await answer.read() in (b"", b"{}")  # accepted whole: no partial success

            await door("decide", decide)
            await door("batch", batch)
            await door("event", one_event_each)
            await door("ndjson", lambda run: framed(run, b"", b"\n", b""))
            await door("array", lambda run: framed(run, b"[", b",", b"]"))
            await door("otlp-json", lambda run: traces(otlp_json(run), "application/json"))
            await door("otlp-pb", lambda run: traces(otlp_protobuf(run, False), "application/x-protobuf"))
            await door(
                "otlp-pb-double", lambda run: traces(otlp_protobuf(run, True), "application/x-protobuf")
            )
            backend.outputs.clear()
            await hook("hook")
            # (the hook's run and tool are the runtime's: its tool name as Claude Code gives it)
            keys = warning_keys(backend.outputs)
            assert len(keys) == 1, backend.outputs
            assert next(iter(keys)).endswith(f":{OPENCLAW_DIGEST}"), keys

    asyncio.run(go())


@pytest.mark.parametrize(
    ("field", "raw"), REFUSED, ids=[f"{f}={next(iter(r.values()))[:20]!r}" for f, r in REFUSED]
)
def test_a_number_beyond_a_double_where_a_number_must_fit_is_a_400_naming_the_field(
    field: str, raw: dict[str, bytes]
) -> None:
    async def go() -> None:
        async with gateway() as (client, backend):
            line = event_line(0, "refused", **raw)
            call = call_body("refused", **raw)
            for path, body in (
                ("/v1/decide", call),
                ("/v1/decide", b"[" + call + b"]"),
                ("/v1/events", line),
                ("/v1/events", line + b"\n" + line.replace(b'"e0"', b'"e1"')),
                ("/v1/events", b"[" + line + b"]"),
            ):
                answer = await client.post(path, data=body, headers=JSON)
                reason = (await answer.json())["error"]
                assert answer.status == 400, (path, body)
                assert names(reason, field), (path, reason)
            assert backend.outputs == []
            assert backend.runtime.events == 0  # nothing applied

    asyncio.run(go())


def test_a_start_time_beyond_a_double_is_a_400_naming_the_field() -> None:
    async def go() -> None:
        async with gateway() as (client, _):
            body = otlp_json("r").replace(
                b'"startTimeUnixNano": "1000000000000000000"', b'"startTimeUnixNano": -1e309'
            )
            answer = await client.post("/v1/traces", data=body, headers=JSON)
            assert answer.status == 400
            assert "spans[0].startTimeUnixNano: expected an integer" in (await answer.json())["message"]

    asyncio.run(go())


def test_nan_and_infinity_are_not_json_at_any_gateway_door() -> None:
    async def go() -> None:
        async with gateway() as (client, _):
            for constant in (b"NaN", b"Infinity", b"-Infinity"):
                line = event_line(0).replace(BIG, constant)
                call = call_body("r").replace(BIG, constant)
                hook = (
                    b'{"session_id":"s","hook_event_name":"PreToolUse","tool_name":"t","tool_input":{"x":%s}}'
                )
                for path, body in (
                    ("/v1/decide", call),
                    ("/v1/decide", b"[" + call + b"]"),
                    ("/v1/events", line),
                    ("/v1/events", line + b"\n" + line),
                    ("/v1/events", b"[" + line + b"]"),
                    ("/v1/hooks/claude-code", hook % constant),
                ):
                    answer = await client.post(path, data=body, headers=JSON)
                    assert answer.status == 400, (path, body)
                    assert "not valid JSON" in (await answer.json())["error"], (path, body)

    asyncio.run(go())


# -- the command line ------------------------------------------------------------------------------


def loopwatch(*args: str, stdin: bytes, tmp_path: Path) -> subprocess.CompletedProcess[bytes]:
    config_file = tmp_path / "openclaw.json"
    config_file.write_text(json.dumps(CONFIG_VALUE))
    command = [sys.executable, "-m", "loopwatch", *args]
    if args[0] == "run":
        command[4:4] = ["--config", str(config_file)]
    return subprocess.run(command, input=stdin, capture_output=True, timeout=120)


def test_loopwatch_run_hashes_params_as_openclaw_and_skips_a_typed_number_naming_the_field(
    tmp_path: Path,
) -> None:
    lines = [event_line(n) for n in range(CALLS)]
    refused = [event_line(100 + k, "refused", **raw) for k, (_, raw) in enumerate(REFUSED)]
    nan = event_line(200).replace(BIG, b"NaN")
    done = loopwatch("run", "-", stdin=b"\n".join([*lines, *refused, nan]) + b"\n", tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    assert hashed_as_openclaw([json.loads(line) for line in done.stdout.splitlines()], "t")
    errors = done.stderr.decode().splitlines()
    for number, (field, _) in enumerate(REFUSED, start=CALLS + 1):
        (said,) = [line for line in errors if f"<stdin>:{number}:" in line]
        assert names(said.split(f"<stdin>:{number}: ", 1)[1], field), said
    (said,) = [line for line in errors if f"<stdin>:{CALLS + len(REFUSED) + 1}:" in line]
    assert "not valid JSON" in said


def test_loopwatch_import_reads_such_a_number_as_openclaw_did(tmp_path: Path) -> None:
    """An OpenClaw transcript whose calls have ``{"x": 1e400}`` as arguments: ``import`` gives
    events that ``run`` hashes as OpenClaw hashed the calls."""
    entries: list[bytes] = [
        b'{"type":"session","version":3,"id":"s","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/"}',
        b'{"type":"message","id":"u","parentId":null,"timestamp":"2026-01-01T00:00:00.001Z",'
        b'"message":{"role":"user","content":[{"type":"text","text":"go"}]}}',
    ]
    for n in range(CALLS):
        entries.append(
            b'{"type":"message","id":"a%d","timestamp":"2026-01-01T00:00:01.000Z","message":{"role":'
            b'"assistant","content":[{"type":"toolCall","id":"c%d","name":"t","arguments":{"x":1e400}}],'
            b'"stopReason":"toolUse"}}' % (n, n)
        )
        entries.append(
            b'{"type":"message","id":"t%d","timestamp":"2026-01-01T00:00:02.000Z","message":{"role":'
            b'"toolResult","toolCallId":"c%d","toolName":"t","content":[{"type":"text","text":"same"}],'
            b'"isError":false}}' % (n, n)
        )
    transcript = tmp_path / "s.session.jsonl"
    transcript.write_bytes(b"\n".join(entries) + b"\n")
    imported = loopwatch("import", str(transcript), stdin=b"", tmp_path=tmp_path)
    assert imported.returncode == 0, imported.stderr
    calls = [json.loads(line) for line in imported.stdout.splitlines() if b'"tool_call"' in line]
    assert len(calls) == CALLS
    done = loopwatch("run", "-", stdin=imported.stdout, tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    assert hashed_as_openclaw([json.loads(line) for line in done.stdout.splitlines()], "t")


# -- the worker's record path ----------------------------------------------------------------------


def test_the_worker_hashes_params_as_openclaw_and_dead_letters_a_typed_number_naming_the_field() -> None:
    async def go() -> None:
        broker = Broker()
        fixed = config()
        proc = RunProcessor(
            {}, broker.send, broker.flush, broker.seek, lambda: fixed, WorkerMetrics(), TOPICS
        )
        proc.cursors.start(0, 0)
        values = [event_line(n) for n in range(CALLS)]
        values += [event_line(100 + k, "refused", **raw) for k, (_, raw) in enumerate(REFUSED)]
        values.append(event_line(200, "refused").replace(BIG, b"NaN"))
        batch = [Record("in", 0, offset, 1_000, b"r", value) for offset, value in enumerate(values)]
        await proc.process({TP("in", 0): batch})
        assert hashed_as_openclaw([json.loads(value) for value in broker.on("v")], "t")
        letters = [json.loads(value) for value in broker.on("dl")]
        assert [letter["offset"] for letter in letters] == list(range(CALLS, len(values)))
        for letter, (field, _) in zip(letters, REFUSED, strict=False):
            assert names(letter["reason"], field), letter
        assert "not valid JSON" in letters[-1]["reason"]

    asyncio.run(go())
