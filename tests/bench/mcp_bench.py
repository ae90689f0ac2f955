"""``make bench-mcp``: what ``loopwatch mcp`` adds to a ``tools/call`` round trip.

The official MCP SDK's client (``mcp`` on PyPI) calls server-everything's ``echo`` (from npm,
pinned: ``tests/integration/runtimes/mcp-servers.sh``) over stdio, once directly and once
through ``loopwatch mcp --`` with in-process decisions (the product default config, or
``--config FILE``): two sessions open side by side, rounds alternating between them, each
round ``--calls`` sequential round trips (a new message each time: a healthy agent, every call
decided and its result recorded). Reported per path: the median over rounds of each round's
median and p99, and what the proxy adds. ``--http`` does the same over streamable HTTP
(server-everything's HTTP server direct, and ``loopwatch mcp --upstream``).

First, the proxy's own work alone: a session's ``tools/call`` requests and their answers through
``McpSession`` with the in-process core, no pipes (microseconds per call and answer).

The issue's bar: at most 2 ms added at p99 over stdio.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from loopwatch.config.fleet import FleetConfig
from loopwatch.detectors.facade import LoopDetector
from loopwatch.streams.inputs.config_files import load_config
from loopwatch.streams.mcp.deciders import LocalDecider
from loopwatch.streams.mcp.session import McpSession
from tests.integration.runtimes.mcp_servers import McpServers, proxied, proxy_http

CLIENT = types.Implementation(name="loopwatch-mcp-bench", version="1.0")


@asynccontextmanager
async def _client(server: StdioServerParameters | str, errlog: Any) -> AsyncIterator[Client]:
    if isinstance(server, str):
        async with (
            httpx2.AsyncClient(timeout=httpx2.Timeout(30.0, read=300.0)) as http,
            Client(streamable_http_client(server, http_client=http), client_info=CLIENT) as client,
        ):
            yield client
        return
    async with Client(stdio_client(server, errlog=errlog), client_info=CLIENT) as client:
        yield client


async def _round(client: Client, calls: int, start: int) -> list[float]:
    """``calls`` round trips, each timed (seconds)."""
    times = []
    for n in range(start, start + calls):
        began = time.perf_counter()
        result = await client.call_tool("echo", {"message": f"bench message {n}"})
        times.append(time.perf_counter() - began)
        if result.is_error:
            raise SystemExit(f"the call {n} was refused: {result.content}")
    return times


def _messages(n: int) -> tuple[bytes, bytes]:
    """The ``n``-th call of ``echo`` and its answer, as server-everything writes them."""
    params = {"name": "echo", "arguments": {"message": f"bench message {n}"}}
    request = {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params}
    result = {"content": [{"type": "text", "text": f"Echo: bench message {n}"}]}
    answer = {"result": result, "jsonrpc": "2.0", "id": n}
    return json.dumps(request).encode(), json.dumps(answer).encode()


def session_alone(config: FleetConfig, calls: int = 20_000) -> float:
    """Microseconds of the proxy's own work per call and its answer (no pipes, no server)."""
    messages = [_messages(n) for n in range(calls)]

    async def run() -> float:
        session = McpSession(LocalDecider(LoopDetector(config), io.StringIO()), "bench-run")
        began = time.perf_counter()
        for request, answer in messages:
            await session.from_client(request)
            await session.from_server(answer)
        return (time.perf_counter() - began) / calls * 1e6

    return asyncio.run(run())


def _p99(times: list[float]) -> float:
    return statistics.quantiles(times, n=100, method="inclusive")[98]


async def _compare(
    paths: dict[str, StdioServerParameters | str], rounds: int, calls: int, errlog: Any
) -> dict[str, Any]:
    figures: dict[str, dict[str, list[float]]] = {name: {"median": [], "p99": []} for name in paths}
    async with AsyncExitStack() as stack:
        clients = {
            name: await stack.enter_async_context(_client(server, errlog)) for name, server in paths.items()
        }
        for client in clients.values():  # warm up: imports, JIT, the first decisions
            await _round(client, max(50, calls // 10), 10_000_000)
        for number in range(rounds):
            order = list(clients) if number % 2 == 0 else list(reversed(clients))
            for name in order:
                times = await _round(clients[name], calls, number * calls)
                figures[name]["median"].append(statistics.median(times))
                figures[name]["p99"].append(_p99(times))
    return {
        name: {stat: statistics.median(values) * 1000 for stat, values in stats.items()}
        for name, stats in figures.items()
    }


def _report(title: str, figures: dict[str, Any]) -> list[str]:
    direct, proxy = figures["direct"], figures["proxy"]
    return [
        f"{title}: tools/call round trips, ms (median over rounds of each round's figure)",
        f"  {'':10} {'median':>8} {'p99':>8}",
        f"  {'direct':10} {direct['median']:8.3f} {direct['p99']:8.3f}",
        f"  {'proxy':10} {proxy['median']:8.3f} {proxy['p99']:8.3f}",
        f"  {'added':10} {proxy['median'] - direct['median']:8.3f} {proxy['p99'] - direct['p99']:8.3f}",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=400, help="round trips per round (default 400)")
    parser.add_argument("--config", help="the proxy's config file (default: loopwatch's default)")
    parser.add_argument("--http", action="store_true", help="also over streamable HTTP")
    parser.add_argument("--json", action="store_true", help="the figures as JSON")
    args = parser.parse_args(argv)
    servers = McpServers.install()
    flags = ["--config", args.config] if args.config else []
    results: dict[str, Any] = {"session alone, us per call": session_alone(load_config(args.config))}
    with tempfile.TemporaryDirectory() as folder, (Path(folder) / "stderr.log").open("a") as errlog:
        stdio: dict[str, StdioServerParameters | str] = {
            "direct": servers.everything_stdio(),
            "proxy": proxied(servers.everything_stdio(), *flags),
        }
        results["stdio"] = anyio.run(_compare, stdio, args.rounds, args.calls, errlog)
        if args.http:
            with servers.everything_http() as url, proxy_http(url, *flags) as proxy:
                http: dict[str, StdioServerParameters | str] = {"direct": url, "proxy": proxy.ready.group(1)}
                results["http"] = anyio.run(_compare, http, args.rounds, args.calls, errlog)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"loopwatch mcp bench: {args.rounds} rounds of {args.calls} calls, server-everything echo")
    alone = results["session alone, us per call"]
    print(f"the proxy's own work (McpSession, in-process core): {alone:.1f} us per call and its answer")
    for title in ("stdio", "http"):
        if title in results:
            print("\n".join(_report(title, results[title])))
    added = results["stdio"]["proxy"]["p99"] - results["stdio"]["direct"]["p99"]
    print(f"stdio p99 added: {added:.3f} ms ({'within' if added <= 2.0 else 'over'} the 2 ms bar)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
