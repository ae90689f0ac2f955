"""A lean HTTP/1.1 client for the benches' load: keep-alive connections, one request at a time
on each, answers read by Content-Length.

The benches measure a gateway on a 2-core machine that also runs the load: a general client
(aiohttp's: ~400 µs of CPU per decision at 2,000/s) took as much CPU as the gateway it
measured, and the machine's cores are what every process of the path shares. This one does
only what the gateway's answers need: a request is one pre-built buffer, an answer is its
status line, its ``Content-Length`` and its body (a chunked answer, or one without a length,
is an error here: the gateway sends neither). On uvloop's event loop where it is installed.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit

T = TypeVar("T")


class HttpError(Exception):
    """An answer this client does not read (or a connection closed under a request)."""


class _Connection(asyncio.Protocol):
    """One keep-alive connection: a request written, its answer awaited, then the next."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._waiter: asyncio.Future[tuple[int, bytes]] | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # (uvloop's is not asyncio's class)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(HttpError(f"the connection closed under a request: {exc}"))

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        end = buffer.find(b"\r\n\r\n")
        if end < 0:
            return
        head = bytes(buffer[:end]).lower()
        at = head.find(b"\r\ncontent-length:")
        if at < 0:
            self._fail(HttpError(f"an answer without Content-Length: {bytes(buffer[:end])!r}"))
            return
        stop = head.find(b"\r\n", at + 2)
        length = int(head[at + 17 : stop if stop >= 0 else len(head)])
        whole = end + 4 + length
        if len(buffer) < whole:
            return
        status = int(buffer[9:12])
        body = bytes(buffer[end + 4 : whole])
        del buffer[:whole]
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result((status, body))

    def _fail(self, exc: Exception) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)
        self.close()

    def close(self) -> None:
        """Closed now (its ``connection_lost`` comes later): never lent again."""
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    @property
    def idle(self) -> bool:
        """Open, and no request of it waits for its answer (one cancelled does: closed then)."""
        return not self.closed and self._waiter is None

    def request(self, data: bytes) -> asyncio.Future[tuple[int, bytes]]:
        assert self.transport is not None
        assert self._waiter is None
        self._waiter = asyncio.get_running_loop().create_future()
        self.transport.write(data)
        return self._waiter


class LeanClient:
    """Connections to one server, each used by one request at a time (as many as are asked at
    once, up to ``limit``; more wait for one to be free)."""

    def __init__(self, url: str, limit: int = 256) -> None:
        parts = urlsplit(url)
        assert parts.hostname is not None, url
        assert parts.port is not None, url
        self._host, self._port = parts.hostname, parts.port
        self._host_header = f"{parts.hostname}:{parts.port}".encode()
        self._free: list[_Connection] = []
        self._opened = 0
        self._limit = limit
        self._waiting: deque[asyncio.Future[_Connection | None]] = deque()
        self._all: list[_Connection] = []

    async def _connection(self) -> _Connection:
        while True:
            while self._free:
                connection = self._free.pop()
                if connection.idle:
                    return connection
                self._gone(connection)
            if self._opened < self._limit:
                self._opened += 1
                try:
                    _, connection = await asyncio.get_running_loop().create_connection(
                        _Connection, self._host, self._port
                    )
                except BaseException:  # (refused, or cancelled: the slot is free again)
                    self._opened -= 1
                    self._wake(None)
                    raise
                self._all.append(connection)
                return connection
            waiter: asyncio.Future[_Connection | None] = asyncio.get_running_loop().create_future()
            self._waiting.append(waiter)
            try:
                given = await waiter  # (None: a slot is free, try again)
            except asyncio.CancelledError:  # (what it was given meanwhile goes to the next)
                if waiter.done() and not waiter.cancelled():
                    late = waiter.result()
                    if late is None:
                        self._wake(None)
                    else:
                        self._release(late)
                raise
            if given is not None:
                if given.idle:
                    return given
                self._gone(given)

    def _gone(self, connection: _Connection) -> None:
        """A connection that will not be lent again: its slot to whoever waits."""
        connection.close()
        self._opened -= 1
        self._wake(None)

    def _wake(self, given: _Connection | None) -> bool:
        """The first request still waiting gets ``given`` (None: a free slot); False if none waits."""
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(given)
                return True
        return False

    def _release(self, connection: _Connection) -> None:
        if not connection.idle:  # closed under its request, or its request cancelled
            self._gone(connection)
        elif not self._wake(connection):
            self._free.append(connection)

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        """The status and body of the answer to ``POST path`` with this JSON body."""
        data = (
            b"POST "
            + path.encode()
            + b" HTTP/1.1\r\nHost: "
            + self._host_header
            + b"\r\nContent-Type: application/json\r\nContent-Length: "
            + str(len(body)).encode()
            + b"\r\n\r\n"
            + body
        )
        connection = await self._connection()
        try:
            return await connection.request(data)
        finally:
            self._release(connection)

    async def close(self) -> None:
        for connection in self._all:
            if connection.transport is not None:
                connection.transport.close()
        await asyncio.sleep(0)  # (their closing callbacks, before the loop ends)


def run(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """``asyncio.run(main())`` on uvloop's event loop where it is installed."""
    try:
        import uvloop
    except ImportError:  # (not on Windows)
        return asyncio.run(main())
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main())
