"""The phase of ``make bench-gateway`` with the largest bodies: ``/v1/decide`` at a fixed rate
while four clients send, as fast as the gateway takes them, the largest body a route accepts.

One route at a time: ``/v1/traces`` (protobuf and OTLP/JSON: as many attributes as the limits
of :mod:`streams.gateway.otlp` let one body of ``maxEventBytes`` hold), ``/v1/events`` (NDJSON
events filling the limit), ``/v1/decide`` batches (the most calls a batch holds, their params
filling the limit) and ``/v1/hooks/claude-code`` (one tool input filling it). Each body is sent
in several versions (new span and event ids), so the gateway converts and applies new work each
time rather than answering a retry. Per route: the paced ``/v1/decide`` p50 and p99 (median of
rounds), the bodies accepted per second, and the answers that were not 200.

Target (issue 42): ``/v1/decide`` p99 <= 50 ms under the OTLP bodies.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import aiohttp

from loopwatch.streams.gateway.otlp import MAX_ATTRIBUTES
from loopwatch.streams.gateway.server import MAX_BATCH_CALLS

__all__ = ["ROUTES", "measure_big_bodies"]

LIMIT = 1_048_576  # maxEventBytes, the gateway's default
SENDERS = 4
VERSIONS = 6
RATE = 200  # paced decisions per second
SECONDS = 10
ROUNDS = 3


def _largest(build: Callable[[int, int], bytes]) -> int:
    """The largest ``n`` whose body stays within the limit in every version (the last has the
    longest ids)."""
    last = VERSIONS * SENDERS - 1
    low, high = 1, 1
    while len(build(last, high)) <= LIMIT:
        low, high = high, high * 2
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if len(build(last, middle)) <= LIMIT else (low, middle)
    return low


def _tool_attributes(version: int, span: int) -> list[tuple[str, str]]:
    return [
        ("gen_ai.operation.name", "execute_tool"),
        ("gen_ai.tool.name", "read"),
        ("gen_ai.conversation.id", f"big-{version}-{span % 8}"),
        ("gen_ai.tool.call.arguments", json.dumps({"path": f"/f{span}"})),
    ]


def otlp_protobuf(version: int, spans: int) -> bytes:
    """Spans of :data:`MAX_ATTRIBUTES` attributes each (four of them a tool call's), as many as
    fit: the most attributes a body the limits accept can hold."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest()
    scope = request.resource_spans.add().scope_spans.add()
    for n in range(spans):
        span = scope.spans.add()
        span.trace_id = (version * 1_000_003 + n + 1).to_bytes(16, "big")
        span.span_id = (n + 1).to_bytes(8, "big")
        span.name = "execute_tool read"
        span.start_time_unix_nano = 10**18 + n
        span.end_time_unix_nano = 10**18 + n + 1
        for key, value in _tool_attributes(version, n):
            item = span.attributes.add()
            item.key, item.value.string_value = key, value
        for k in range(MAX_ATTRIBUTES - 4):
            item = span.attributes.add()
            item.key, item.value.string_value = f"k{k}", "v"
    return bytes(request.SerializeToString())


def otlp_json(version: int, spans: int) -> bytes:
    items = []
    for n in range(spans):
        attributes = [{"key": k, "value": {"stringValue": v}} for k, v in _tool_attributes(version, n)]
        attributes += [{"key": f"k{k}", "value": {"stringValue": "v"}} for k in range(MAX_ATTRIBUTES - 4)]
        items.append(
            {
                "traceId": f"{version * 1_000_003 + n + 1:032x}",
                "spanId": f"{n + 1:016x}",
                "name": "execute_tool read",
                "startTimeUnixNano": str(10**18 + n),
                "endTimeUnixNano": str(10**18 + n + 1),
                "attributes": attributes,
            }
        )
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": items}]}]}, separators=(",", ":")).encode()


def events_ndjson(version: int, count: int) -> bytes:
    lines = (
        json.dumps(
            {
                "type": "tool_call",
                "event_id": f"big-{version}-{n}",
                "run_id": f"big-events-{version}-{n % 64}",
                "tool": "read",
                "params": {"path": f"/f{n}"},
            },
            separators=(",", ":"),
        )
        for n in range(count)
    )
    return "\n".join(lines).encode()


def decide_batch(version: int, size: int) -> bytes:
    calls = [
        {
            "run_id": f"big-batch-{version}",
            "event_id": f"big-batch-{version}-{n}",
            "tool": "read",
            "params": {"path": f"/f{n}", "text": "x" * size},
        }
        for n in range(MAX_BATCH_CALLS)
    ]
    return json.dumps(calls, separators=(",", ":")).encode()


def hook_input(version: int, size: int) -> bytes:
    body = {
        "session_id": f"big-hook-{version}",
        "hook_event_name": "PreToolUse",
        "tool_use_id": f"toolu_{version}",  # (as Claude Code sends it: the call's key)
        "tool_name": "Write",
        "tool_input": {"file_path": "/f", "content": [f"line {n}" for n in range(size)]},
    }
    return json.dumps(body, separators=(",", ":")).encode()


#: route name -> (path, content type, body builder)
ROUTES: dict[str, tuple[str, str, Callable[[int, int], bytes]]] = {
    "/v1/traces protobuf": ("/v1/traces", "application/x-protobuf", otlp_protobuf),
    "/v1/traces JSON": ("/v1/traces", "application/json", otlp_json),
    "/v1/events NDJSON": ("/v1/events", "application/x-ndjson", events_ndjson),
    "/v1/decide batch": ("/v1/decide", "application/json", decide_batch),
    "/v1/hooks/claude-code": ("/v1/hooks/claude-code", "application/json", hook_input),
}


async def _decide(session: aiohttp.ClientSession, url: str, n: int) -> float:
    call = {"run_id": f"paced-{n % 100}", "tool": "read", "params": {"path": f"/p{n}"}}
    started = time.perf_counter()
    async with session.post(url + "/v1/decide", json=call) as answer:
        await answer.read()
        assert answer.status == 200, answer.status
    return time.perf_counter() - started


async def _round(
    url: str, path: str, media: str, bodies: list[bytes], offset: int
) -> tuple[list[float], int, int]:
    """One round: the paced decisions' latencies, the bodies answered 200, the others."""
    done = asyncio.Event()
    counts = [0, 0]

    async def sender(index: int) -> None:
        async with aiohttp.ClientSession() as session:
            k = index
            while not done.is_set():
                body = bodies[k % len(bodies)]
                k += SENDERS
                async with session.post(url + path, data=body, headers={"Content-Type": media}) as answer:
                    await answer.read()
                    counts[answer.status != 200] += 1

    senders = [asyncio.create_task(sender(i)) for i in range(SENDERS)]
    await asyncio.sleep(0.5)  # the senders under way
    latencies: list[float] = []
    try:
        async with aiohttp.ClientSession() as session:
            tasks = []
            started = time.perf_counter()
            for k in range(RATE * SECONDS):
                delay = started + k / RATE - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(_decide(session, url, offset + k)))
            latencies = list(await asyncio.gather(*tasks))
    finally:
        done.set()
        await asyncio.gather(*senders)
    return latencies, counts[0], counts[1]


def _ms(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100)[q - 1] * 1000


def measure_big_bodies(url: str, only: str | None = None) -> None:
    for name, (path, media, builder) in ROUTES.items():
        if only is not None and only not in name:
            continue
        largest = _largest(builder)
        bodies = [builder(version, largest) for version in range(VERSIONS * SENDERS)]
        size = statistics.median(len(body) for body in bodies)
        rounds = []
        for k in range(ROUNDS):
            started = time.perf_counter()
            latencies, ok, refused = asyncio.run(_round(url, path, media, bodies, 10_000_000 * (k + 1)))
            spent = time.perf_counter() - started
            rounds.append((_ms(latencies, 50), _ms(latencies, 99), ok / spent, refused))
        p99s = sorted(r[1] for r in rounds)
        print(
            f"gateway (embedded), /v1/decide at {RATE}/s while {SENDERS} clients send {name} bodies of "
            f"{size / 1024:,.0f} KiB, {ROUNDS} rounds of {SECONDS} s: median p50 "
            f"{statistics.median(r[0] for r in rounds):.2f} ms, median p99 {statistics.median(p99s):.2f} ms "
            f"(rounds {', '.join(f'{v:.1f}' for v in p99s)}; target: p99 <= 50 ms); bodies accepted "
            f"{statistics.median(r[2] for r in rounds):,.1f}/s, not accepted {sum(r[3] for r in rounds)}",
            flush=True,
        )


def main(argv: list[str] | None = None) -> Any:
    """``python -m tests.bench.big_bodies [--only NAME]``: this phase alone, on a gateway of its own."""
    import argparse
    import signal

    from tests.bench.gateway_bench import _gateway

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", help="the routes whose name holds this text")
    parser.add_argument("--url", help="a gateway already running (else one is started)")
    args = parser.parse_args(argv)
    if args.url:
        measure_big_bodies(args.url, args.only)
        return 0
    proc, url = _gateway([])
    try:
        measure_big_bodies(url, args.only)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
