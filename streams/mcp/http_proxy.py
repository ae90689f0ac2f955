"""``loopwatch mcp --upstream URL --listen HOST:PORT``: the proxy in front of a streamable HTTP
MCP server.

The proxy serves the upstream's MCP endpoint (the path of ``--upstream``) and relays every
request on it (POST, GET, DELETE, and the rest) to the upstream, and every answer back: JSON
bodies, SSE streams (event by event, each as it came unless changed), status and headers
(``Mcp-Session-Id``, ``MCP-Protocol-Version``, ``Last-Event-ID`` and the others; not the
hop-by-hop ones). The POSTed messages and the answers to them, on the POST's own stream or on a
GET stream, go through :class:`~streams.mcp.session.McpSession`:

* a refused call is answered by the proxy (HTTP 200, ``application/json``; in a batch with
  calls that go on, its answer is added to the upstream's JSON array, or sent first on its
  event stream);
* a session is an ``Mcp-Session-Id`` (one run, ``mcp-<session id>``); the name of its client
  is read from the ``initialize`` that opened it. A ``DELETE`` the upstream accepts ends it, as
  does a ``404`` for it (the upstream forgot it). Without session ids (a stateless server)
  the proxy's requests are one run. A session that sends nothing for ``state_ttl_s`` is
  forgotten by the proxy (not ended: the core forgets its run the same way).

Before relaying, each request is checked as the gateway checks its own (web safety): its
``Host`` must name the listen address or a loopback name (421, DNS rebinding; a proxy listening
on every address checks it only with allowed hosts); an ``Origin``, when there is one, must be
a loopback origin (``http://localhost:6274``) or one allowed (403), as the MCP specification
asks of servers against DNS rebinding; with tokens (``LOOPWATCH_GATEWAY_TOKENS``) a bearer
token is required (401), and the ``Authorization`` header is the proxy's (not relayed).
Without tokens it is relayed, so an upstream's own bearer token still reaches it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
import urllib.parse
import uuid
from collections import OrderedDict
from collections.abc import Iterable
from typing import Final, TextIO

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from loopwatch.detectors.input_limits import identity_problem
from loopwatch.streams.gateway.web_safety import WebSafety, is_loopback
from loopwatch.streams.mcp.deciders import Decider
from loopwatch.streams.mcp.messages import encode, read_client
from loopwatch.streams.mcp.session import McpSession
from loopwatch.streams.mcp.sse import EventSplitter, event_data, with_data

__all__ = ["MAX_BODY_BYTES", "McpHttpProxy", "describe", "origin_allowed"]

#: the largest POST body relayed (a tool call's arguments: a file written whole)
MAX_BODY_BYTES: Final = 64 << 20
SESSION_HEADER: Final = "Mcp-Session-Id"
_HOP_BY_HOP: Final = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "content-encoding",
        "accept-encoding",
    }
)
#: the client names of sessions the proxy forgot (idle), kept to name them again
_NAMES_KEPT: Final = 100_000


def origin_allowed(origin: str | None, allowed: Iterable[str] = ()) -> bool:
    """Whether a request with ``Origin: origin`` may go on: none (not a browser's cross-site
    request), a loopback origin (any port), or one of ``allowed``."""
    if origin is None:
        return True
    given = origin.strip().rstrip("/").lower()
    if given in {item.strip().rstrip("/").lower() for item in allowed}:
        return True
    try:
        parts = urllib.parse.urlsplit(given)
        host = parts.hostname
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and host is not None and is_loopback(host)


def _run_id(session_id: str) -> str:
    run_id = f"mcp-{session_id}"
    if identity_problem(run_id) is None:
        return run_id
    digest = hashlib.blake2b(session_id.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
    return f"mcp-session-{digest}"


def _jsonrpc_error(status: int, message: str) -> web.Response:
    error = {"code": -32600 if status < 500 else -32603, "message": message}
    body = {"jsonrpc": "2.0", "error": error, "id": None}
    return web.Response(status=status, body=encode(body), content_type="application/json")


class McpHttpProxy:
    """The proxy's app over one upstream (see the module's docstring)."""

    def __init__(
        self,
        upstream: str,
        decider: Decider,
        safety: WebSafety,
        origins: Iterable[str] = (),
        agent_id: str | None = None,
        state_ttl_s: float = 3600.0,
        err: TextIO | None = None,
    ) -> None:
        self.upstream = upstream
        self.path = urllib.parse.urlsplit(upstream).path or "/"
        self.decider = decider
        self.safety = safety
        self.origins = frozenset(origins)
        self.agent_id = agent_id
        self.state_ttl_s = state_ttl_s
        self.err = err
        self.sessions: OrderedDict[str, McpSession] = OrderedDict()
        self._names: OrderedDict[str, str] = OrderedDict()
        self.stateless = McpSession(decider, f"mcp-http-{uuid.uuid4().hex[:16]}", None, agent_id, err)
        self._client: aiohttp.ClientSession | None = None
        self._sweeper: asyncio.Task[None] | None = None

    # -- the app -------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        app.on_startup.append(self._start)
        app.on_cleanup.append(self._stop)
        return app

    async def _start(self, app: web.Application) -> None:
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30)
        self._client = aiohttp.ClientSession(timeout=timeout, auto_decompress=True)
        self._sweeper = asyncio.create_task(self._sweep_every(max(1.0, self.state_ttl_s / 4)))

    async def _stop(self, app: web.Application) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        if self._client is not None:
            await self._client.close()
        await self.decider.close()

    async def _sweep_every(self, interval: float) -> None:
        while True:
            await asyncio.sleep(min(interval, 60.0))
            self.sweep(time.monotonic())

    def sweep(self, now: float) -> None:
        """Forget the sessions idle for ``state_ttl_s`` (their runs are not ended: the core
        forgets them the same way, and a session that comes back is a run again)."""
        horizon = now - self.state_ttl_s
        for session_id, session in list(self.sessions.items()):
            if session.last_active < horizon and not session.waiting:
                del self.sessions[session_id]

    def _session(self, session_id: str, client_name: str | None = None) -> McpSession:
        session = self.sessions.get(session_id)
        if session is None:
            session = McpSession(self.decider, _run_id(session_id), session_id, self.agent_id, self.err)
            session.client_name = client_name or self._names.get(session_id)
            self.sessions[session_id] = session
        if session.client_name is not None and session_id not in self._names:
            self._names[session_id] = session.client_name
            while len(self._names) > _NAMES_KEPT:
                self._names.popitem(last=False)
        return session

    async def _forget(self, session_id: str) -> None:
        session = self.sessions.pop(session_id, None)
        self._names.pop(session_id, None)
        if session is not None:
            await session.end()

    def _refusal(self, request: web.Request) -> web.Response | None:
        host = request.headers.get("Host")
        if not self.safety.host_allowed(host):
            return _jsonrpc_error(421, f"host {host!r} is not served here (--allowed-hosts adds names)")
        origin = request.headers.get("Origin")
        if not origin_allowed(origin, self.origins):
            return _jsonrpc_error(403, f"origin {origin!r} is not allowed (--allowed-origins adds origins)")
        if not self.safety.token_ok(request.headers.get("Authorization")):
            response = _jsonrpc_error(401, "a bearer token of LOOPWATCH_GATEWAY_TOKENS is required")
            response.headers["WWW-Authenticate"] = "Bearer"
            return response
        return None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        refusal = self._refusal(request)
        if refusal is not None:
            return refusal
        if request.path != self.path:
            return _jsonrpc_error(404, f"no MCP endpoint at {request.path} (it is {self.path})")
        if request.method == "POST":
            return await self._post(request)
        return await self._relay(request, await request.read() if request.can_read_body else None)

    # -- relaying ------------------------------------------------------------------------

    def _upstream_headers(self, request: web.Request) -> CIMultiDict[str]:
        headers = CIMultiDict((k, v) for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP)
        if self.safety.tokens:
            headers.popall("Authorization", None)
        return headers

    @staticmethod
    def _downstream_headers(response: aiohttp.ClientResponse) -> CIMultiDict[str]:
        return CIMultiDict((k, v) for k, v in response.headers.items() if k.lower() not in _HOP_BY_HOP)

    async def _send(self, request: web.Request, body: bytes | None) -> aiohttp.ClientResponse:
        assert self._client is not None
        base, _, own_query = self.upstream.partition("?")
        query = request.query_string or own_query  # (the client's, else the upstream URL's own)
        return await self._client.request(
            request.method,
            f"{base}?{query}" if query else base,
            data=body,
            headers=self._upstream_headers(request),
            allow_redirects=False,
        )

    def _session_of(self, request: web.Request) -> McpSession:
        session_id = request.headers.get(SESSION_HEADER)
        return self._session(session_id) if session_id else self.stateless

    async def _relay(self, request: web.Request, body: bytes | None) -> web.StreamResponse:
        """GET (the server's stream), DELETE (the session's end) and anything else."""
        session_id = request.headers.get(SESSION_HEADER)
        try:
            response = await self._send(request, body)
        except aiohttp.ClientError as exc:
            return _jsonrpc_error(502, f"loopwatch mcp: the upstream {self.upstream} is unreachable: {exc}")
        async with response:
            if session_id and (response.status == 404 or (request.method == "DELETE" and response.ok)):
                await self._forget(session_id)
            session: McpSession | None = self.stateless
            if session_id:
                gone = session_id not in self.sessions and (
                    response.status == 404 or request.method == "DELETE"
                )
                session = None if gone else self._session(session_id)
            return await self._answer(request, response, session, [])

    async def _post(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        session_id = request.headers.get(SESSION_HEADER)
        session = self._session_of(request)
        step = await session.from_client(body)
        if step.forward is None:  # every message was a refused call: the proxy answers
            reply = step.replies[0] if len(step.replies) == 1 and not body.lstrip().startswith(b"[") else None
            answer = reply if reply is not None else b"[" + b",".join(step.replies) + b"]"
            return web.Response(body=answer, content_type="application/json")
        try:
            response = await self._send(request, step.forward)
        except aiohttp.ClientError as exc:
            return _jsonrpc_error(502, f"loopwatch mcp: the upstream {self.upstream} is unreachable: {exc}")
        async with response:
            if session_id and response.status == 404:
                await self._forget(session_id)
            opened = response.headers.get(SESSION_HEADER)
            if opened and not session_id:  # the initialize that opened a session: its client's name
                parsed = read_client(body)
                name = (
                    next((m.client_name for m in parsed.messages if m.client_name), None) if parsed else None
                )
                session = self._session(opened, name)
            if step.replies and response.status == 202:  # the rest needed no answer: the proxy's go alone
                answer = b"[" + b",".join(step.replies) + b"]"
                return web.Response(body=answer, content_type="application/json")
            return await self._answer(request, response, session, step.replies)

    async def _answer(
        self,
        request: web.Request,
        response: aiohttp.ClientResponse,
        session: McpSession | None,
        replies: list[bytes],
    ) -> web.StreamResponse:
        media = response.content_type
        if media == "text/event-stream" and session is not None:
            return await self._stream(request, response, session, replies)
        headers = self._downstream_headers(response)
        if media == "application/json" and session is not None:
            raw = await response.read()
            changed = await session.from_server(raw)
            answer = raw if changed is None else changed
            if replies:  # a batch: the proxy's answers join the upstream's
                stripped = answer.strip()
                inner = stripped[1:-1].strip() if stripped.startswith(b"[") else stripped
                answer = b"[" + b",".join([*([inner] if inner else []), *replies]) + b"]"
            return web.Response(status=response.status, body=answer, headers=headers)
        out = web.StreamResponse(status=response.status, headers=headers)
        await out.prepare(request)
        with contextlib.suppress(ConnectionResetError, aiohttp.ClientError):
            async for chunk in response.content.iter_any():
                await out.write(chunk)
            await out.write_eof()
        return out

    async def _stream(
        self,
        request: web.Request,
        response: aiohttp.ClientResponse,
        session: McpSession,
        replies: list[bytes],
    ) -> web.StreamResponse:
        out = web.StreamResponse(status=response.status, headers=self._downstream_headers(response))
        await out.prepare(request)
        events = EventSplitter()
        with contextlib.suppress(ConnectionResetError, aiohttp.ClientError):
            for reply in replies:
                await out.write(b"event: message\ndata: " + reply + b"\n\n")
            async for chunk in response.content.iter_any():
                for event in events.feed(chunk):
                    await out.write(await self._event(session, event))
            if rest := events.rest():
                await out.write(rest)
            await out.write_eof()
        return out

    @staticmethod
    async def _event(session: McpSession, event: bytes) -> bytes:
        data = event_data(event)
        if data is None or not data.strip():
            return event
        changed = await session.from_server(data)
        return event if changed is None else with_data(event, changed)

    async def end_all(self) -> None:
        """End every session's run (the proxy stops)."""
        for session_id in list(self.sessions):
            await self._forget(session_id)
        if self.stateless.calls:
            await self.stateless.end()


def describe(host: str, port: int, path: str, upstream: str, tokens: frozenset[str]) -> str:
    """The line the proxy prints when it listens: its MCP endpoint's URL."""
    auth = f"{len(tokens)} bearer token(s)" if tokens else "no token (set LOOPWATCH_GATEWAY_TOKENS)"
    shown = f"[{host}]" if ":" in host else host
    return f"loopwatch mcp: proxy for {upstream} at http://{shown}:{port}{path} ({auth})"
