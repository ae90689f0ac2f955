"""Real MCP servers from npm (``mcp-servers.sh``: ``@modelcontextprotocol/server-everything`` and
``server-filesystem``, pinned) for the proxy's tests and bench: their stdio commands, direct or
behind ``loopwatch mcp``, and server-everything's streamable HTTP server and the HTTP proxy as
processes of the test (their URLs read from their first lines, their process groups stopped at
the end). Without npm the install fails: the tests that need it fail, they never skip."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from mcp.client.stdio import StdioServerParameters

from tests.integration.runtimes.process import install

__all__ = ["McpServers", "Started", "free_port", "loopwatch_argv", "proxied", "proxy_http", "started"]

HERE = Path(__file__).resolve().parent


def loopwatch_argv() -> list[str]:
    """The ``loopwatch`` command beside this Python (or ``python -m loopwatch``)."""
    script = Path(sys.executable).with_name("loopwatch")
    return [str(script)] if script.exists() else [sys.executable, "-m", "loopwatch"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass(frozen=True)
class McpServers:
    node: str
    everything: str
    filesystem: str

    @classmethod
    def install(cls) -> McpServers:
        node, everything, filesystem = install(HERE / "mcp-servers.sh")
        return cls(node, everything, filesystem)

    def everything_stdio(self) -> StdioServerParameters:
        return StdioServerParameters(command=self.node, args=[self.everything, "stdio"])

    def filesystem_stdio(self, *roots: Path) -> StdioServerParameters:
        return StdioServerParameters(command=self.node, args=[self.filesystem, *map(str, roots)])

    @contextmanager
    def everything_http(self) -> Iterator[str]:
        """server-everything's streamable HTTP server: its MCP endpoint's URL."""
        port = free_port()
        command = [self.node, self.everything, "streamableHttp"]
        with started(command, rf"listening on port {port}", env={"PORT": str(port)}):
            yield f"http://127.0.0.1:{port}/mcp"


def proxied(
    server: StdioServerParameters, *flags: str, env: Mapping[str, str] | None = None
) -> StdioServerParameters:
    """``server`` behind ``loopwatch mcp FLAGS --``: the command a client config gets, prefixed."""
    argv = loopwatch_argv()
    args = [*argv[1:], "mcp", *flags, "--", server.command, *server.args]
    return StdioServerParameters(command=argv[0], args=args, env=dict(env) if env else None)


@dataclass
class Started:
    """A process of the test: the match of its ready line, and every line it printed."""

    ready: re.Match[str]
    lines: list[str]


@contextmanager
def started(
    command: Sequence[str], ready: str, *, env: Mapping[str, str] | None = None, timeout: float = 60.0
) -> Iterator[Started]:
    """``command`` running until the block ends, once it printed a line matching ``ready`` (on
    its stdout or stderr, merged); its lines are kept as it prints them."""
    proc = subprocess.Popen(
        list(command),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {})},
        start_new_session=True,
    )
    lines: list[str] = []
    try:
        yield Started(_wait_for(proc, ready, timeout, lines), lines)
    finally:
        _stop(proc)
        for thread in threading.enumerate():
            if thread.name == f"mcp-output-{proc.pid}":
                thread.join(10)
        assert proc.stdout is not None
        proc.stdout.close()


def _wait_for(proc: subprocess.Popen[str], ready: str, timeout: float, lines: list[str]) -> re.Match[str]:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    for line in proc.stdout:
        lines.append(line)
        found = re.search(ready, line)
        if found:
            _keep_reading(proc.stdout, lines, f"mcp-output-{proc.pid}")
            return found
        if time.monotonic() > deadline:
            break
    raise AssertionError(f"{proc.args!r} did not print {ready!r}:\n{''.join(lines)[-3000:]}")


def _keep_reading(stream: IO[str], lines: list[str], name: str) -> None:
    """Keep reading the process's output into ``lines`` (a full pipe would block it)."""

    def read() -> None:
        for line in stream:
            lines.append(line)

    threading.Thread(target=read, name=name, daemon=True).start()


def _stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


@contextmanager
def proxy_http(upstream: str, *flags: str, env: Mapping[str, str] | None = None) -> Iterator[Started]:
    """``loopwatch mcp --upstream UPSTREAM --listen 127.0.0.1:0 FLAGS`` (its endpoint's URL:
    ``ready.group(1)``)."""
    command = [*loopwatch_argv(), "mcp", "--upstream", upstream, "--listen", "127.0.0.1:0", *flags]
    with started(command, r"at (http://\S+) \(", env=env) as proxy:
        yield proxy
