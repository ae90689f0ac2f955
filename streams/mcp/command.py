"""What ``loopwatch mcp`` runs: the decider its flags ask for, then the stdio or HTTP proxy."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import uuid
from typing import TextIO

from loopwatch.config.errors import LoopwatchError
from loopwatch.streams.gateway.gateway_post import NOT_HTTP, http_url_problem
from loopwatch.streams.mcp.deciders import Decider, GatewayDecider, LocalDecider

__all__ = ["DEFAULT_LISTEN", "decider_of", "run_mcp"]

DEFAULT_LISTEN = "127.0.0.1:6071"


def _url(flag: str, url: str) -> str:
    problem = http_url_problem(url)
    if problem == NOT_HTTP:
        raise LoopwatchError(f"{flag} {url!r}: an http:// or https:// URL with a host")
    if problem is not None:
        raise LoopwatchError(f"{flag} {url!r} is {problem}")
    return url


def _state_ttl_s() -> float:
    from loopwatch.config.stream_settings import parse_stream_settings

    return float(parse_stream_settings(os.environ).state_ttl_s)


def decider_of(args: argparse.Namespace, err: TextIO) -> Decider:
    """A gateway's (``--gateway``), or the in-process core over ``--config``."""
    if args.gateway:
        if args.config is not None and not getattr(args.config, "variable", ""):
            raise LoopwatchError(
                "--config is for the in-process core: with --gateway the gateway's config holds"
            )
        url = _url("--gateway", args.gateway)
        token = os.environ.get("LOOPWATCH_GATEWAY_TOKEN")
        return GatewayDecider(url, token, args.timeout_ms / 1000, args.fail_closed, err)
    from loopwatch.detectors.facade import LoopDetector
    from loopwatch.streams.inputs.config_files import load_config

    config = load_config(args.config)
    return LocalDecider(LoopDetector(config, state_ttl_s=_state_ttl_s()), err)


def _check(args: argparse.Namespace) -> None:
    if args.server and args.upstream:
        raise LoopwatchError("give the server's command (after --) or --upstream URL, not both")
    if not args.server and not args.upstream:
        raise LoopwatchError(
            "no MCP server: give its command after -- (loopwatch mcp -- npx @modelcontextprotocol/"
            "server-filesystem /srv) or its URL (loopwatch mcp --upstream http://127.0.0.1:3001/mcp)"
        )
    if args.server and args.listen is not None:
        raise LoopwatchError("--listen is for --upstream (a stdio server is the proxy's own stdio)")


def run_mcp(args: argparse.Namespace, err: TextIO) -> int:
    _check(args)
    decider = decider_of(args, err)
    if args.server:
        from loopwatch.streams.mcp.session import McpSession
        from loopwatch.streams.mcp.stdio_proxy import run_stdio

        run_id = f"mcp-stdio-{uuid.uuid4().hex[:16]}"
        session = McpSession(decider, run_id, run_id, args.agent_id, err)
        try:
            return asyncio.run(run_stdio(args.server, session, err, decider.close))
        except FileNotFoundError as exc:
            raise LoopwatchError(f"cannot start the MCP server: no such program: {args.server[0]}") from exc
        except PermissionError as exc:
            raise LoopwatchError(f"cannot start the MCP server {args.server[0]}: {exc.strerror}") from exc
    try:
        asyncio.run(_serve(args, decider, err))
    except KeyboardInterrupt:
        return 130
    return 0


def _listed(text: str | None) -> list[str]:
    return [part for part in (text or "").split(",") if part.strip()]


async def _serve(args: argparse.Namespace, decider: Decider, err: TextIO) -> None:
    from aiohttp import web

    from loopwatch.streams.fleet_view.dashboard import parse_address
    from loopwatch.streams.gateway.web_safety import WebSafety, is_loopback
    from loopwatch.streams.logs import quiet_malformed_requests
    from loopwatch.streams.mcp.http_proxy import McpHttpProxy, describe

    upstream = _url("--upstream", args.upstream)
    listen = args.listen or DEFAULT_LISTEN
    host, port = parse_address(listen, "--listen", DEFAULT_LISTEN)
    raw = os.environ.get("LOOPWATCH_GATEWAY_TOKENS", "")
    tokens = frozenset(token.strip() for token in raw.split(",") if token.strip())
    if not tokens and not is_loopback(host) and not args.insecure_no_auth:
        raise LoopwatchError(
            f"--listen {listen}: a proxy reachable beyond this machine needs a token "
            "(LOOPWATCH_GATEWAY_TOKENS); --insecure-no-auth serves it without one"
        )
    safety = WebSafety.of(host, port, tokens, _listed(args.allowed_hosts))
    proxy = McpHttpProxy(
        upstream,
        decider,
        safety,
        _listed(args.allowed_origins),
        args.agent_id,
        _state_ttl_s(),
        err,
    )
    quiet_malformed_requests()
    # a client gone from a stream (an SSE GET it dropped): its handler ends, the upstream's closes
    runner = web.AppRunner(proxy.app(), access_log=None, handler_cancellation=True)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError as exc:
        await runner.cleanup()
        raise LoopwatchError(f"--listen {listen}: cannot listen there: {exc.strerror or exc}") from exc
    bound = runner.addresses[0][1] if runner.addresses else port
    print(describe(host, bound, proxy.path, upstream, tokens), file=err, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for number in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(number, stop.set)
    try:
        await stop.wait()
    finally:
        await proxy.end_all()
        await runner.cleanup()
