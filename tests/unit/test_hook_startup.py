"""``loopwatch hook RUNTIME`` runs in a process of its own for every hook call of an agent: it
starts with the standard library's json and a socket, never the config model, the core or a
third-party package (what it adds to the interpreter's start is measured by ``make
bench-hooks``); its command line is read as argparse reads it; and whatever it is given, deep
input included, it ends in its documented answer. ``loopwatch --help`` loads no broker client,
config or core either."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopwatch.detectors import input_limits
from loopwatch.streams.cli.hook_args import hook_args
from loopwatch.streams.cli.main import build_parser
from loopwatch.streams.gateway.gateway_post import GatewayUnavailable, InputNotSent, post_json
from loopwatch.streams.gateway.hooks import plan as hook_plan
from loopwatch.streams.gateway.hooks.command import HookArgs
from tests.helpers import ROOT

WARN = {
    "decision": "warn",
    "reason": "generic_repeat",
    "verdicts": [
        {"type": "verdict", "action": "warn", "detector": "generic_repeat", "tool": "x", "count": 10}
    ],
}
#: a proposed call, in each runtime's hook input
CALLS = {
    "claude-code": {"hook_event_name": "PreToolUse", "tool_use_id": "t1"},
    "codex": {"hook_event_name": "PreToolUse", "turn_id": "t", "tool_use_id": "t1"},
    "gemini": {"hook_event_name": "BeforeTool"},
}
#: stdlib modules a hook must not need: each costs milliseconds of every hook call's start
HEAVY = (
    "argparse",
    "typing",
    "dataclasses",
    "http.client",
    "email",
    "ssl",
    "asyncio",
    "uuid",
    "socket",
    "hashlib",
)


def call(runtime: str, tool_input: str = '{"a": 1}') -> bytes:
    """A proposed call in ``runtime``'s hook input, its tool_input given as JSON text."""
    hook = json.dumps({"session_id": "s", "tool_name": "x", "tool_input": None, **CALLS[runtime]})
    return hook.replace('"tool_input": null', f'"tool_input": {tool_input}').encode()


class _Gateway(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.requests += 1  # type: ignore[attr-defined]
        body = json.dumps(WARN).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def gateway() -> Iterator[ThreadingHTTPServer]:
    """A URL that answers every decision with a warning (a gateway's answer, without a gateway)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Gateway)
    server.daemon_threads = True
    server.requests = 0  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def down() -> Iterator[str]:
    """A URL nothing answers at (a bound port that does not listen: refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def url_of(server: ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


def loopwatch(*args: str) -> list[str]:
    """``loopwatch ARGS``: the console script beside this Python (what a runtime runs)."""
    script = Path(sys.executable).with_name("loopwatch")
    return [str(script), *args] if script.exists() else ["-m", "loopwatch", *args]


def run(
    command: list[str], stdin: bytes = b"", env: dict[str, str] | None = None, importtime: bool = False
) -> subprocess.CompletedProcess[bytes]:
    flags = ["-X", "importtime"] if importtime else []
    return subprocess.run(
        [sys.executable, *flags, *command],
        input=stdin,
        capture_output=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )


def imported(stderr: bytes) -> list[str]:
    """The modules ``-X importtime`` says a process imported."""
    names = []
    for line in stderr.decode(errors="replace").splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":
                names.append(name)
    return names


def added_modules(command: list[str], stdin: bytes = b"", env: dict[str, str] | None = None) -> set[str]:
    """The modules ``command`` imports beyond those of the interpreter's own start here (site
    and what this environment's .pth files load)."""
    done = run(command, stdin, env, importtime=True)
    base = run(["-c", "pass"], importtime=True)
    return set(imported(done.stderr)) - set(imported(base.stderr))


#: the runtime texts (what a runtime is told): strings only, wherever they live; nothing else of
#: ``loopwatch.detectors`` (the core) or ``loopwatch.config`` may load
TEXTS = ("loopwatch.detectors.runtime_texts", "loopwatch.streams.gateway.runtime_texts")


def foreign(modules: set[str]) -> list[str]:
    """Third-party modules, and loopwatch's config and core (its texts aside)."""
    stdlib = sys.stdlib_module_names
    allowed = {"loopwatch.detectors"} if "loopwatch.detectors.runtime_texts" in modules else set()
    return sorted(
        name
        for name in modules - set(TEXTS) - allowed
        if (name.split(".")[0] not in stdlib and name.split(".")[0] != "loopwatch")
        or name.startswith(("loopwatch.config", "loopwatch.detectors"))
    )


@pytest.mark.parametrize("runtime", sorted(CALLS))
@pytest.mark.parametrize("gateway_up", [True, False], ids=["gateway up", "gateway down"])
def test_a_hook_call_imports_the_standard_library_only_and_no_config_or_core(
    runtime: str, gateway_up: bool, gateway: ThreadingHTTPServer, down: str, tmp_path: Path
) -> None:
    url = url_of(gateway) if gateway_up else down
    env = {"LOOPWATCH_HOOK_STATE_DIR": str(tmp_path)}
    modules = added_modules(loopwatch("hook", runtime, "--gateway", url), call(runtime), env)
    assert "loopwatch.streams.gateway.hooks.command" in modules  # (it did run the hook)
    assert foreign(modules) == []
    plans = {f"loopwatch.streams.gateway.hooks.{name.replace('-', '_')}" for name in CALLS}
    assert sorted(modules & plans) == [f"loopwatch.streams.gateway.hooks.{runtime.replace('-', '_')}"]
    assert sorted(modules & set(HEAVY)) == []
    done = run(loopwatch("hook", runtime, "--gateway", url), call(runtime), env)
    assert done.returncode == 0, done.stderr
    if gateway_up:  # the gateway's answer reached the runtime's own format (Gemini: with the result)
        assert gateway.requests == 2  # type: ignore[attr-defined]
        assert done.stderr == b""
        assert (b"loopwatch warning" in done.stdout) == (runtime != "gemini")
    else:
        assert b"allowing (fail open)" in done.stderr


def test_the_help_loads_no_broker_client_config_or_core() -> None:
    modules = added_modules(["-m", "loopwatch", "--help"])
    assert "loopwatch.streams.cli.commands.worker" in modules  # (every command's parser was built)
    assert foreign(modules) == []
    hook_help = run(["-m", "loopwatch", "hook", "--help"])
    assert hook_help.returncode == 0
    assert b"LOOPWATCH_HOOK_STATE_DIR" in hook_help.stdout


def test_the_hook_s_id_check_is_the_core_s() -> None:
    """The hook checks ids without the core: its copy of the check gives the core's answers."""
    assert hook_plan.MAX_ID_BYTES == input_limits.MAX_ID_BYTES
    size = input_limits.MAX_ID_BYTES
    samples = [
        "",
        "s",
        "s" * size,
        "s" * (size + 1),
        "会" * (size // 3),
        "会" * (size // 3 + 1),
        "s\ud800",
        "é",
    ]
    for value in samples:
        assert hook_plan.identity_problem(value) == input_limits.identity_problem(value), value


def _namespace(argv: list[str]) -> HookArgs | None:
    """What argparse makes of ``loopwatch hook ARGV`` (None: it refused it or showed help)."""
    try:
        args = build_parser().parse_args(["hook", *argv])
    except SystemExit:
        return None
    return HookArgs(
        args.runtime, args.gateway, args.agent_id, args.timeout_ms, args.fail_closed, args.show_warnings
    )


def _fields(args: HookArgs) -> tuple[Any, ...]:
    return tuple(getattr(args, name) for name in HookArgs.__slots__)


TOKENS = st.sampled_from(
    [
        "claude-code",
        "codex",
        "gemini",
        "claude",
        "--gateway",
        "--gateway=http://g:1",
        "--gateway=",
        "--agent-id",
        "--agent-id=a",
        "--timeout-ms",
        "--timeout-ms=50",
        "--timeout-ms=0",
        "--fail-closed",
        "--show-warnings",
        "--fail",
        "--fail-closed=1",
        "http://127.0.0.1:9",
        "7",
        "5_0",
        " 8",
        "0",
        "-5",
        "abc",
        "",
        "--",
        "-h",
    ]
)


@settings(max_examples=400)
@given(st.lists(TOKENS, max_size=6))
def test_the_hook_s_own_reading_of_its_command_line_is_argparse_s(argv: list[str]) -> None:
    """A command line the hook reads itself means what argparse makes of it; any other is
    argparse's to read (its help, its usage error: exit 1, or 2 under --fail-closed)."""
    mine = hook_args(argv)
    if mine is not None:
        theirs = _namespace(argv)
        assert theirs is not None, argv
        assert _fields(mine) == _fields(theirs), argv


@pytest.mark.parametrize(
    "argv",
    [
        ["claude-code"],
        ["codex"],
        ["gemini"],
        ["claude-code", "--fail-closed", "--show-warnings"],
        ["gemini", "--gateway", "http://127.0.0.1:6070", "--timeout-ms", "10000"],
        ["--agent-id=me", "codex", "--gateway=http://h:1"],
    ],
)
def test_the_documented_hook_command_lines_skip_argparse(argv: list[str]) -> None:
    mine = hook_args(argv)
    assert mine is not None
    theirs = _namespace(argv)
    assert theirs is not None
    assert _fields(mine) == _fields(theirs)


def _deep(depth: int) -> Any:
    value: Any = {}
    for _ in range(depth):
        value = {"a": value}
    return value


def _deep_text(depth: int) -> str:
    """``_deep(depth)`` as JSON (written here without recursion)."""
    return '{"a": ' * depth + "{}" + "}" * depth


@pytest.mark.parametrize("runtime", sorted(CALLS))
@pytest.mark.parametrize("gateway_up", [True, False], ids=["gateway up", "gateway down"])
def test_input_nested_too_deeply_for_json_ends_in_the_documented_answer(
    runtime: str, gateway_up: bool, gateway: ThreadingHTTPServer, down: str, tmp_path: Path
) -> None:
    """A tool_input nested about 1,000 deep, under --fail-closed: at some depths the hook reads
    it but cannot write it as JSON (nor would a gateway take it: 64 levels at most), deeper it
    cannot read it. Every depth ends in a documented answer, never a traceback: exit 0 and
    "allowing", or 2 (refused) where the input could be sent and the gateway is down."""
    url = url_of(gateway) if gateway_up else down
    env = {"LOOPWATCH_HOOK_STATE_DIR": str(tmp_path)}
    too_deep = 0
    for depth in range(976, 1000, 1 if not gateway_up else 2):
        command = loopwatch("hook", runtime, "--gateway", url, "--fail-closed")
        done = run(command, call(runtime, _deep_text(depth)), env)
        stderr = done.stderr.decode()
        assert "Traceback" not in stderr
        if done.returncode == 2:
            assert not gateway_up, stderr
            assert "refusing the tool call (--fail-closed)" in stderr
        else:
            assert done.returncode == 0, stderr
            assert "allowing" in stderr or (gateway_up and stderr == ""), stderr
        too_deep += "nests too deeply" in stderr
    assert too_deep > 0 or gateway_up  # (a depth was read and could not be sent)


def test_a_body_nested_too_deeply_for_json_is_not_sent_and_not_checked(gateway: ThreadingHTTPServer) -> None:
    with pytest.raises(InputNotSent, match="nests too deeply"):
        post_json(url_of(gateway), "/v1/decide", {"params": _deep(100_000)}, None, time.monotonic() + 5)
    assert gateway.requests == 0  # type: ignore[attr-defined]


class _Peer:
    """A TCP server that answers each request with ``answer``, whole, then closes."""

    def __init__(self, answer: bytes) -> None:
        self.answer = answer
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, _, body = data.partition(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                while len(body) < length:
                    body += conn.recv(65536)
                conn.sendall(self.answer)


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (
            b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{"a"\r\n4;x=y\r\n: 1}\r\n0\r\n\r\n',
            {"a": 1},
        ),
        (b'HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\n{"a": 1}', {"a": 1}),
        (b'HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{"a": 1}', {"a": 1}),  # to the end
        (b'HTTP/1.1 200 OK\r\ncontent-length:  8 \r\n\r\n{"a": 1}trailing', {"a": 1}),
    ],
)
def test_the_gateway_client_reads_every_framing_of_an_answer(answer: bytes, expected: dict[str, Any]) -> None:
    peer = _Peer(answer)
    try:
        for host in ("127.0.0.1", "localhost"):  # an address, and a name looked up
            assert (
                post_json(f"http://{host}:{peer.port}", "/v1/decide", {}, "t", time.monotonic() + 10)
                == expected
            )
    finally:
        peer.sock.close()


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("http://127.0.0.1:9/a b", "control characters or spaces"),
        ("http://[::1", "Invalid IPv6 URL"),
        ("http://127.0.0.1:x", "Port could not be cast"),
        ("ftp://127.0.0.1", "not an http:// or https:// URL"),
    ],
)
def test_a_url_no_request_can_go_to_is_unavailable_not_a_crash(url: str, said: str) -> None:
    with pytest.raises(GatewayUnavailable, match=said):
        post_json(url, "", {}, None, time.monotonic() + 5)


def test_a_token_with_a_line_break_is_never_sent_as_a_header(down: str) -> None:
    with pytest.raises(GatewayUnavailable, match="line break"):
        post_json(down, "/v1/decide", {}, "t\r\nX-Injected: 1", time.monotonic() + 5)


def _urlsplit(url: str) -> tuple[str, str, Any, str]:
    """``_split``'s answer as ``urllib.parse.urlsplit`` gives it (a ValueError: its type and text)."""
    import urllib.parse

    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError as exc:
        return "", "", ("ValueError", str(exc)), ""
    try:
        port: Any = parts.port
    except ValueError as exc:
        port = ("ValueError", str(exc))
    return (
        parts.scheme,
        parts.hostname or "",
        port,
        (parts.path or "/") + (f"?{parts.query}" if parts.query else ""),
    )


PIECES = [
    "http",
    "https",
    "HTTP",
    "ftp",
    "://",
    ":",
    "/",
    "//",
    "?",
    "#",
    "@",
    "[",
    "]",
    "::1",
    "%",
    "127.0.0.1",
    "Gateway.Example",
    "localhost",
    "80",
    "0",
    "65536",
    "x",
    "é",
]
#: URLs of the form the hook reads itself, and near misses of it
URLS = st.one_of(
    st.lists(st.sampled_from([*PIECES, " ", "\t"]), max_size=9).map("".join),
    st.tuples(
        st.sampled_from(["http", "https", "HTTP", "ftp"]),
        st.sampled_from(["://", ":/", "//"]),
        st.sampled_from(["127.0.0.1", "Gateway.Example", "localhost", "", "[::1]", "u@h", "h%20", "é"]),
        st.sampled_from(["", ":", ":80", ":6070", ":0", ":65536", ":x", ":٣"]),
        st.lists(
            st.sampled_from(["/", "v1", "decide", "?", "x=1", "#", ";p", " ", "\\", "\x7f"]), max_size=5
        ),
    ).map(lambda t: "".join([*t[:4], *t[4]])),
)


@settings(max_examples=2000)
@given(URLS)
def test_the_hook_reads_a_gateway_url_as_urllib_does(url: str) -> None:
    """The gateway client splits plain URLs itself (urllib.parse is a good part of a hook's
    start): every URL, plain or not, is read as urlsplit reads it."""
    from loopwatch.streams.gateway.gateway_post import _split

    scheme, host, port, target = _split(url)
    read = ("ValueError", str(port)) if isinstance(port, ValueError) else port
    assert (scheme, host, read, target) == _urlsplit(url), url
    plain = _split("http://Gateway.Example:6070/v1/decide?x=1")
    assert plain == ("http", "gateway.example", 6070, "/v1/decide?x=1")
