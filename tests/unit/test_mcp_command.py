"""``loopwatch mcp``'s command line, and its HTTP listener's origin rule and sessions, without a
server."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest

from loopwatch.detectors.facade import LoopDetector
from loopwatch.streams.gateway.web_safety import WebSafety
from loopwatch.streams.mcp.deciders import LocalDecider
from loopwatch.streams.mcp.http_proxy import McpHttpProxy, origin_allowed


@pytest.mark.parametrize(
    ("origin", "allowed"),
    [
        (None, True),  # not a browser's cross-site request
        ("http://localhost:6274", True),
        ("http://127.0.0.1", True),
        ("https://[::1]:8443", True),
        ("HTTP://LOCALHOST:3000/", True),
        ("http://evil.example", False),
        ("http://localhost.evil.example", False),
        ("http://127.0.0.1.nip.io", False),
        ("null", False),  # a sandboxed page or a file
        ("file://", False),
        ("http://[::1", False),  # not a URL
    ],
)
def test_an_origin_must_be_absent_or_loopback(origin: str | None, allowed: bool) -> None:
    assert origin_allowed(origin) is allowed


def test_allowed_origins_add_to_loopback() -> None:
    assert origin_allowed("https://ops.example.com", ["https://ops.example.com/"])
    assert not origin_allowed("https://ops.example.com.evil", ["https://ops.example.com"])


def mcp(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loopwatch", "mcp", *args], capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ((), "no MCP server"),
        (("--upstream", "http://127.0.0.1:1/mcp", "--", "node", "s.js"), "not both"),
        (("--listen", "127.0.0.1:0", "--", "node", "s.js"), "--listen is for --upstream"),
        (("--upstream", "ftp://x/mcp"), "--upstream 'ftp://x/mcp'"),
        (("--gateway", "localhost:6070", "--", "node", "s.js"), "--gateway 'localhost:6070'"),
        (("--", "/nonexistent/mcp-server"), "cannot start the MCP server"),
        (("--upstream", "http://127.0.0.1:1/mcp", "--listen", "0.0.0.0:0"), "needs a token"),
    ],
)
def test_a_command_line_that_cannot_work_says_why(args: tuple[str, ...], said: str) -> None:
    done = mcp(*args)
    assert done.returncode == 2, done
    assert said in done.stderr, done.stderr


def test_an_idle_http_session_is_forgotten_and_named_again_when_it_comes_back() -> None:
    decider = LocalDecider(LoopDetector(), io.StringIO())
    proxy = McpHttpProxy("http://127.0.0.1:1/mcp", decider, WebSafety(), state_ttl_s=60)
    session = proxy._session("abc", "claude-ai")
    assert (session.run_id, session.session_id, session.agent_id) == ("mcp-abc", "abc", "claude-ai")
    proxy.sweep(session.last_active + 30)
    assert proxy.sessions == {"abc": session}
    proxy.sweep(session.last_active + 61)
    assert proxy.sessions == {}
    again = proxy._session("abc")
    assert again is not session
    assert (again.run_id, again.agent_id) == ("mcp-abc", "claude-ai")
    long = proxy._session("x" * 600)
    assert long.run_id.startswith("mcp-session-")
