"""``loopwatch mcp -- COMMAND ...``: the proxy in front of a stdio MCP server.

The server is started as a child process; its stderr is the proxy's. Newline-delimited
JSON-RPC goes both ways, each line as it came unless :class:`~streams.mcp.session.McpSession`
changes it (a refused call is answered by the proxy itself; a warned call's answer carries the
warning). The session is the process's lifetime, one run: it ends when the server exits (the
client closed its stdin, or the server stopped by itself), and its ``run_end`` is recorded.
SIGTERM, SIGINT and SIGHUP are passed on to the server; the proxy exits with the server's
status (128 + the signal when a signal ended it).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Final, TextIO

from loopwatch.streams.mcp.session import McpSession
from loopwatch.streams.mcp.sse import LineSplitter

__all__ = ["run_stdio"]

_CHUNK: Final = 1 << 16
#: how long the server has to exit after a signal was passed on, before it is killed
_KILL_AFTER_S: Final = 10.0
#: how long the proxy waits, at its end, for the client to read what is left for it
_FLUSH_S: Final = 5.0

Read = Callable[[], Awaitable[bytes]]
Write = Callable[[bytes], Awaitable[None]]


async def _stdin_reader() -> Read:
    """Reads of this process's stdin, without a thread where it is a pipe (the usual case)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=_CHUNK)
    try:
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin.buffer)
    except (ValueError, OSError):  # a regular file: read it on a thread
        fd = sys.stdin.fileno()

        async def read_file() -> bytes:
            return await asyncio.to_thread(os.read, fd, _CHUNK)

        return read_file

    async def read_pipe() -> bytes:
        return await reader.read(_CHUNK)

    return read_pipe


class _Output:
    """This process's stdout: writes wait while the client does not read; :meth:`close`
    flushes what is left."""

    def __init__(self) -> None:
        self._writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            transport, protocol = await loop.connect_write_pipe(
                asyncio.streams.FlowControlMixin, sys.stdout.buffer
            )
        except (ValueError, OSError):  # a regular file: plain writes
            return
        self._writer = asyncio.StreamWriter(transport, protocol, None, loop)

    async def write(self, data: bytes) -> None:
        if self._writer is None:
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
            return
        self._writer.write(data)
        await self._writer.drain()

    async def close(self) -> None:
        """Wait (a bounded while) until what was written left, then close."""
        if self._writer is None:
            return
        transport = self._writer.transport
        deadline = time.monotonic() + _FLUSH_S
        while (
            transport.get_write_buffer_size() and not transport.is_closing() and time.monotonic() < deadline
        ):
            await asyncio.sleep(0.01)
        transport.close()


def _exit_status(returncode: int | None) -> int:
    if returncode is None:
        return 1
    return 128 - returncode if returncode < 0 else returncode


async def _client_to_server(
    read: Read, write: Write, proc: asyncio.subprocess.Process, session: McpSession
) -> None:
    assert proc.stdin is not None
    server = proc.stdin
    lines = LineSplitter()
    try:
        while chunk := await read():
            for line in lines.feed(chunk):
                message = line.strip()
                if not message:
                    server.write(line)
                    continue
                step = await session.from_client(message)
                if step.replies and message.startswith(b"["):  # a batch's refusals: one array (JSON-RPC §6)
                    await write(b"[" + b",".join(step.replies) + b"]\n")
                else:
                    for reply in step.replies:
                        await write(reply + b"\n")
                if step.forward is message:
                    server.write(line)
                elif step.forward is not None:
                    server.write(step.forward + b"\n")
                await server.drain()
        if rest := lines.rest():
            server.write(rest)
            await server.drain()
    except (BrokenPipeError, ConnectionResetError):  # the server is gone: its exit ends the proxy
        return
    finally:
        with contextlib.suppress(OSError):
            server.close()  # the client closed its side: so does the proxy (MCP's shutdown)


async def _server_to_client(write: Write, proc: asyncio.subprocess.Process, session: McpSession) -> None:
    assert proc.stdout is not None
    lines = LineSplitter()
    while chunk := await proc.stdout.read(_CHUNK):
        for line in lines.feed(chunk):
            message = line.strip()
            changed = await session.from_server(message) if message else None
            await write(line if changed is None else changed + b"\n")
    if rest := lines.rest():
        await write(rest)


def _pass_signals(proc: asyncio.subprocess.Process) -> list[int]:
    """SIGTERM, SIGINT and SIGHUP go to the server; it is killed if it lingers after one."""
    loop = asyncio.get_running_loop()
    handled: list[int] = []

    def kill_later() -> None:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()

    def forward(number: int) -> None:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(number)
            loop.call_later(_KILL_AFTER_S, kill_later)

    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(number, forward, number)
            handled.append(number)
    return handled


async def run_stdio(
    command: Sequence[str],
    session: McpSession,
    err: TextIO,
    close: Callable[[], Awaitable[None]] | None = None,
) -> int:
    """Run ``command`` behind the proxy until it exits; its exit status. ``close``: an async
    callable awaited after the run's end (the decider's requests still being sent)."""
    proc = await asyncio.create_subprocess_exec(
        *command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )
    handled = _pass_signals(proc)
    read = await _stdin_reader()
    output = _Output()
    await output.open()
    write = output.write
    upstream = asyncio.create_task(_client_to_server(read, write, proc, session))
    try:
        try:
            await _server_to_client(write, proc, session)
        except (BrokenPipeError, ConnectionResetError):  # the client is gone: so goes the server
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
        status = await proc.wait()
    finally:
        upstream.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await upstream
        loop = asyncio.get_running_loop()
        for number in handled:
            loop.remove_signal_handler(number)
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
        await session.end()
        if close is not None:
            await close()
        await output.close()
    return _exit_status(status)
