"""``loopwatch gateway`` on the embedded runtime: the same verdicts as the core, clear refusals."""

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from loopwatch.config import FleetConfig
from loopwatch.detectors.engine import Engine
from loopwatch.detectors.events import encode_event
from loopwatch.streams.embedded.runtime import EmbeddedRuntime
from loopwatch.streams.fleet_view.view import FleetView
from loopwatch.streams.gateway.server import EmbeddedBackend, gateway_app
from tests.helpers import FIXTURES, ROOT, Trace, post_json

Client = TestClient[Any, Any]


@asynccontextmanager
async def gateway(tokens: frozenset[str] = frozenset(), max_bytes: int = 1_048_576) -> AsyncIterator[Client]:
    view = FleetView("test gateway")
    async with EmbeddedRuntime(FleetConfig.enabled_default(), view=view) as runtime:
        app = gateway_app(EmbeddedBackend(runtime), view, tokens, max_bytes)
        client = TestClient(TestServer(app), headers={"Content-Type": "application/json"})
        await client.start_server()
        try:
            yield client
        finally:
            await client.close()


def run(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(scenario())


def test_events_give_the_cores_outputs_in_every_body_form() -> None:
    trace = Trace("r1")
    for _ in range(22):
        trace.both("read", {"path": "/missing"}, error="ENOENT")
    events = trace.events
    engine = Engine(FleetConfig.enabled_default())
    expected = [o for e in events for o in engine.process(e)]
    wire = [json.loads(encode_event(e)) for e in events]

    async def scenario() -> None:
        async with gateway() as client:
            half = len(wire) // 2
            first = await client.post("/v1/events", data=json.dumps(wire[:half]))
            assert first.status == 200
            lines = "\n".join(json.dumps(e) for e in wire[half:-1]) + "\n"
            second = await client.post("/v1/events", data=lines)
            third = await client.post("/v1/events", data=json.dumps(wire[-1]))
            got = [
                *(await first.json())["outputs"],
                *(await second.json())["outputs"],
                *(await third.json())["outputs"],
            ]
            assert [o["verdict_id"] for o in got] == [o.verdict_id for o in expected]
            assert [o["type"] for o in got] == ["verdict", "verdict", "verdict", "abort"]

    run(scenario)


def test_decide_answers_allow_warn_block_and_abort() -> None:
    async def scenario() -> None:
        async with gateway() as client:
            decisions = []
            for n in range(22):
                call = {"run_id": "r", "tool": "read", "params": {"path": "/x"}, "tool_call_id": f"c{n}"}
                answer = await client.post("/v1/decide", json=call)
                assert answer.status == 200
                body = await answer.json()
                decisions.append(body["decision"])
                result = {
                    "type": "tool_result",
                    "event_id": f"res-{n}",
                    "run_id": "r",
                    "tool": "read",
                    "params": {"path": "/x"},
                    "tool_call_id": f"c{n}",
                    "error": "ENOENT",
                }
                await client.post("/v1/events", json=result)
            assert decisions[:10] == ["allow"] * 10
            assert decisions[10] == "warn"
            assert decisions[19] == "allow"  # 19 identical outcomes so far
            assert decisions[20] == "block"
            assert decisions[21] == "abort"  # the second critical of the run (recovery exhausted)
            metrics = await (await client.get("/metrics")).text()
            assert 'loopwatch_events_total{type="tool_call"} 22.0' in metrics

    run(scenario)


def test_bad_input_gets_400_401_413_and_never_a_500() -> None:
    async def scenario() -> None:
        async with gateway(tokens=frozenset({"s3cret"}), max_bytes=2000) as client:
            ok = {"Authorization": "Bearer s3cret"}
            assert (await client.get("/health")).status == 200  # open
            assert (await client.post("/v1/decide", json={})).status == 401
            wrong = await client.post("/v1/decide", json={}, headers={"Authorization": "Bearer nope"})
            assert wrong.status == 401
            cases = [
                ("/v1/events", b"{not json", "not valid JSON"),
                ("/v1/events", b"[1, {", "not valid JSON"),
                ("/v1/events", b"", "no event"),
                (
                    "/v1/events",
                    b'{"type":"tool_call","event_id":"e","run_id":"r","tool":5,"params":{}}',
                    "event 0",
                ),
                ("/v1/decide", b"[]", "must be a JSON object"),
                ("/v1/decide", b'{"run_id":"r","tool":"read"}', "params / args_digest"),
                ("/v1/decide", b'{"run_id":"r","tool":"read","params":{},"usage":{"usd":1}}', "$.usage"),
            ]
            for path, body, reason in cases:
                answer = await client.post(path, data=body, headers=ok)
                assert answer.status == 400, (path, body)
                assert reason in (await answer.json())["error"], (path, body)
            big = await client.post("/v1/events", data=b"x" * 5000, headers=ok)
            assert big.status == 413
            assert "maxEventBytes" in (await big.json())["error"]
            assert (await client.get("/metrics", headers=ok)).status == 200

    run(scenario)


def test_the_command_serves_until_sigterm() -> None:
    env = {**os.environ, "LOOPWATCH_GATEWAY_TOKENS": "t1,t2"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "loopwatch", "gateway", "--listen", "127.0.0.1:0"],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        found = re.search(r"gateway at (http://\S+) \(2 bearer token", line)
        assert found, line
        url = found.group(1)
        event = (FIXTURES / "openclaw-post-compaction-abort.events.jsonl").read_bytes().splitlines()[0]
        assert post_json(url + "/v1/events", event, {"Authorization": "Bearer t2"}) == (200, {"outputs": []})
        assert post_json(url + "/v1/events", event)[0] == 401
        # a header line over aiohttp's 8 KB: answered 400, and no traceback in the log for it
        host, port = url.removeprefix("http://").rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as raw:
            raw.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n")
            assert raw.recv(100).startswith(b"HTTP/1.0 400")
    finally:
        proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.wait(5) == 0
        logged = proc.stderr.read() if proc.stderr is not None else ""
        if proc.stderr is not None:
            proc.stderr.close()
    assert "Traceback" not in logged
    assert "Error handling request" not in logged


def test_a_wrong_method_is_405_and_a_wrong_path_404_each_as_json() -> None:
    async def scenario() -> None:
        async with gateway() as client:
            for path in ("/v1/decide", "/v1/events", "/v1/hooks/claude-code"):
                answer = await client.get(path)
                assert answer.status == 405, path
                assert answer.headers["Allow"] == "POST"
                assert "takes POST, not GET" in (await answer.json())["error"]
            put = await client.put("/v1/decide", json={})
            assert put.status == 405
            for method in ("post", "delete"):
                answer = await getattr(client, method)("/v1/nope", json={})
                assert answer.status == 404, method
                assert (await answer.json())["error"] == "no route /v1/nope"

    run(scenario)


def test_a_wrong_token_is_told_from_a_missing_one_and_the_scheme_ignores_case() -> None:
    async def scenario() -> None:
        async with gateway(tokens=frozenset({"s3cret"})) as client:
            call = {"run_id": "r", "tool": "read", "params": {}}
            missing = await client.post("/v1/decide", json=call)
            assert "a bearer token is required" in (await missing.json())["error"]
            wrong = await client.post("/v1/decide", json=call, headers={"Authorization": "Bearer nope"})
            assert wrong.status == 401
            assert "not one of the gateway's" in (await wrong.json())["error"]
            for scheme in ("bearer", "BEARER"):
                ok = await client.post("/v1/decide", json=call, headers={"Authorization": f"{scheme} s3cret"})
                assert ok.status == 200, scheme

    run(scenario)


def test_health_answers_when_every_request_slot_is_taken() -> None:
    from loopwatch.streams.gateway import server

    async def scenario() -> None:
        async with gateway() as client:
            original = server.MAX_IN_FLIGHT
            server.MAX_IN_FLIGHT = 0  # every slot taken
            try:
                full = await client.post("/v1/decide", json={"run_id": "r", "tool": "read", "params": {}})
                assert full.status == 503
                health = await client.get("/health")
                assert health.status == 200
            finally:
                server.MAX_IN_FLIGHT = original

    run(scenario)


async def failing_reads(client: Client, calls: int, named: bool = False) -> list[dict[str, Any]]:
    """``calls`` identical reads of run ``r``, each failing; their answers (``named``: each
    call names its own event id, ``rc-N``)."""
    answers = []
    for n in range(calls):
        call: dict[str, Any] = {
            "run_id": "r",
            "tool": "read",
            "params": {"path": "/x"},
            "tool_call_id": f"c{n}",
        }
        if named:
            call["event_id"] = f"rc-{n}"
        answers.append(await (await client.post("/v1/decide", json=call)).json())
        result = {"type": "tool_result", "event_id": f"res-{n}", "run_id": "r", "tool": "read"}
        await client.post("/v1/events", json={**result, "params": {"path": "/x"}, "error": "ENOENT"})
    return answers


def test_a_batch_of_an_aborted_run_is_refused_as_a_whole() -> None:
    async def scenario() -> None:
        async with gateway() as client:
            await failing_reads(client, 22)  # as above: the 22nd call aborts the run
            batch = [{"run_id": "r", "tool": "ls", "params": {"n": n}} for n in range(2)]
            answer = await (await client.post("/v1/decide", json=batch)).json()
            assert [d["decision"] for d in answer["decisions"]] == ["abort", "abort"]
            assert answer["refused"] is True
            assert answer["refused_by"] is None

    run(scenario)


def test_a_retried_call_with_its_own_event_id_gets_the_same_answer() -> None:
    async def scenario() -> None:
        async with gateway() as client:
            answers = await failing_reads(client, 21, named=True)
            assert [answers[10]["decision"], answers[20]["decision"]] == ["warn", "block"]
            for n in (10, 20, 3):  # the answer lost on the way: the retry is answered the same
                call = {"run_id": "r", "tool": "read", "params": {"path": "/x"}, "tool_call_id": f"c{n}"}
                call["event_id"] = f"rc-{n}"  # the same call, sent again
                assert await (await client.post("/v1/decide", json=call)).json() == answers[n]
            metrics = await (await client.get("/metrics")).text()
            assert 'loopwatch_events_total{type="tool_call"} 21.0' in metrics  # retries add nothing

    run(scenario)


def test_nan_and_infinity_are_refused_where_they_stand() -> None:
    async def scenario() -> None:
        async with gateway() as client:
            for constant in (b"NaN", b"Infinity", b"-Infinity"):
                body = b'{"run_id":"r","tool":"read","params":{"n":' + constant + b"}}"
                answer = await client.post("/v1/decide", data=body)
                assert answer.status == 400
                error = (await answer.json())["error"]
                assert error.startswith("not valid JSON"), error
                at = int(re.search(r"\(byte (\d+)\)", error).group(1))  # type: ignore[union-attr]
                start = body.index(constant)
                assert start <= at < start + len(constant), error  # in the body as it was sent

    run(scenario)


def test_a_client_id_that_merely_starts_like_the_gateway_s_own_is_still_the_client_s() -> None:
    async def scenario() -> None:
        async with gateway() as client:
            answers = await failing_reads(client, 21)
            assert answers[20]["decision"] == "block"
            call = {"run_id": "r", "tool": "read", "params": {"path": "/x"}, "event_id": "gateway-mine"}
            first = await (await client.post("/v1/decide", json=call)).json()
            assert first["decision"] == "abort"  # the run's second critical
            assert await (await client.post("/v1/decide", json=call)).json() == first

    run(scenario)


def test_an_http_hook_call_loopwatch_cannot_act_on_is_answered_go_on_and_logged() -> None:
    from structlog.testing import capture_logs

    async def scenario() -> None:
        async with gateway() as client:
            gemini_call = {
                "session_id": "s",
                "hook_event_name": "BeforeTool",
                "tool_name": "x",
                "tool_input": {},
            }
            with capture_logs() as logs:
                answer = await client.post("/v1/hooks/claude-code", json=gemini_call)
            assert answer.status == 200
            assert await answer.json() == {}
            [entry] = [e for e in logs if e["event"] == "hook call loopwatch cannot act on"]
            assert entry["problem"].startswith("BeforeTool is a hook event of gemini, not of claude-code")

    run(scenario)


def test_a_body_in_utf_16_or_32_or_with_a_byte_order_mark_is_read_as_utf_8_on_every_route() -> None:
    """PowerShell and .NET clients may send UTF-16; JSON may begin with a byte order mark. Each
    encoding of the same loop gives the core's verdicts, through events, decide and a hook; a
    lone surrogate in a string (JavaScript's) survives the transcoding."""
    encodings = ["utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le"]

    def encoded(value: Any, encoding: str) -> bytes:
        return json.dumps(value, ensure_ascii=False).encode(encoding, "surrogatepass")

    async def scenario() -> None:
        async with gateway() as client:
            for encoding in encodings:
                trace = Trace(f"r-{encoding}")
                for _ in range(11):
                    trace.both("read", {"path": "/missing\ud800"}, error="ENOENT")
                wire = [json.loads(encode_event(e)) for e in trace.events]
                engine = Engine(FleetConfig.enabled_default())
                expected = [o.verdict_id for e in trace.events for o in engine.process(e)]
                assert expected  # the loop warns at the last call
                answer = await client.post("/v1/events", data=encoded(wire[:-2], encoding))
                assert answer.status == 200, (encoding, await answer.text())
                got = [o["verdict_id"] for o in (await answer.json())["outputs"]]
                decided = await client.post("/v1/decide", data=encoded(wire[-2], encoding))
                assert decided.status == 200, (encoding, await decided.text())
                got += [o["verdict_id"] for o in (await decided.json())["verdicts"]]
                assert got == expected, encoding
                hook = {
                    "session_id": f"s-{encoding}",
                    "hook_event_name": "PreToolUse",
                    "tool_name": "Read",
                    "tool_input": {"file_path": "/x\ud800"},
                }
                hooked = await client.post("/v1/hooks/claude-code", data=encoded(hook, encoding))
                assert hooked.status == 200, (encoding, await hooked.text())
            broken = await client.post("/v1/events", data=b"\xff\xfe{\x00\x00")  # half a code unit
            assert broken.status == 400
            assert "looks like UTF-16 but does not decode" in (await broken.json())["error"]

    run(scenario)
