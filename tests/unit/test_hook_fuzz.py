"""The command hooks end every input in their documented answer (issue 42, item 3).

Each hook command (claude-code, codex, gemini), as a process, is fed hook inputs that are
malformed, deep, huge, or carry what JSON or a double cannot hold, with the gateway up (a real
``loopwatch gateway``), down (nothing listening), refusing (answering 400) and broken
(answering 500); by default it must exit 0, under ``--fail-closed`` 0 or 2, never with a
traceback, and print nothing or one JSON object.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Generator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.helpers import ROOT

DEEP = 1000  # deeper than any JSON encoder of Python's standard library writes


def _hook_input(runtime: str, tool_input: bytes) -> bytes:
    """A proposed call's hook input with ``tool_input`` as raw JSON text."""
    event = "BeforeTool" if runtime == "gemini" else "PreToolUse"
    head = {"hook_event_name": event, "session_id": "fuzz", "turn_id": "t1", "tool_name": "Bash"}
    head["tool_use_id"] = "call_1"
    text = json.dumps(head).encode()
    return text[:-1] + b', "tool_input": ' + tool_input + b"}"


#: (name, the tool_input's JSON text): values no door should crash on
TOOL_INPUTS: list[tuple[str, bytes]] = [
    ("plain", b'{"command": "ls"}'),
    ("deep list", b"[" * DEEP + b"]" * DEEP),
    ("deep object", b'{"a":' * DEEP + b"1" + b"}" * DEEP),
    ("huge string", b'{"command": "' + b"x" * 2_000_000 + b'"}'),
    ("number beyond a double", b'{"n": 1e400, "m": -1e309}'),
    ("lone surrogate", b'{"command": "\\ud800"}'),
    ("not an object", b'"just text"'),
    ("null", b"null"),
]

#: whole stdin bodies that are no hook input at all
BODIES: list[tuple[str, bytes]] = [
    ("empty", b""),
    ("not json", b"this is not json"),
    ("invalid utf-8", b'{"hook_event_name": "PreToolUse", "x": "\xff\xfe"}'),
    ("array", b"[1, 2, 3]"),
    ("NaN", b'{"hook_event_name": "PreToolUse", "session_id": "s", "tool_input": NaN}'),
    ("deep body", b"[" * DEEP + b"]" * DEEP),
]


class _Refusing(BaseHTTPRequestHandler):
    status = 400

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        body = json.dumps({"error": "refused by the test"}).encode()
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return


class _Broken(_Refusing):
    status = 500


def _serve(handler: type[BaseHTTPRequestHandler]) -> Generator[str, None, None]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def gateways() -> Iterator[dict[str, str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "loopwatch", "gateway", "--listen", "127.0.0.1:0"],
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert proc.stderr is not None
    found = re.search(r"gateway at (http://\S+)", proc.stderr.readline())
    assert found, "the gateway did not start"
    refusing, broken = _serve(_Refusing), _serve(_Broken)
    try:
        yield {
            "up": found.group(1),
            "down": f"http://127.0.0.1:{_free_port()}",
            "refusing": next(refusing),
            "broken": next(broken),
        }
    finally:
        for server in (refusing, broken):
            server.close()
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
        proc.stderr.close()


def _run(
    runtime: str, stdin: bytes, gateway: str, fail_closed: bool, state: Path
) -> subprocess.CompletedProcess[bytes]:
    command = [
        sys.executable,
        "-m",
        "loopwatch",
        "hook",
        runtime,
        "--gateway",
        gateway,
        "--timeout-ms",
        "3000",
    ]
    if fail_closed:
        command.append("--fail-closed")
    env = {**os.environ, "LOOPWATCH_HOOK_STATE_DIR": str(state)}
    return subprocess.run(command, input=stdin, capture_output=True, timeout=60, env=env, cwd=ROOT)


@pytest.mark.parametrize("runtime", ["claude-code", "codex", "gemini"])
def test_every_hook_ends_every_input_in_its_documented_answer(
    runtime: str, gateways: dict[str, str], tmp_path: Path
) -> None:
    inputs = [(name, _hook_input(runtime, value)) for name, value in TOOL_INPUTS] + BODIES
    wrong = []
    for state, gateway in gateways.items():
        for fail_closed in (False, True):
            for name, stdin in inputs:
                done = _run(runtime, stdin, gateway, fail_closed, tmp_path / "state")
                allowed = (0, 2) if fail_closed else (0,)
                out = done.stdout.strip()
                problems = []
                if done.returncode not in allowed:
                    problems.append(f"exit {done.returncode}")
                if b"Traceback" in done.stderr:
                    problems.append("a traceback")
                if out:
                    try:
                        if not isinstance(json.loads(out), dict):
                            problems.append("output not a JSON object")
                    except ValueError:
                        problems.append("output not JSON")
                if problems:
                    flag = " --fail-closed" if fail_closed else ""
                    wrong.append(
                        f"{name} (gateway {state}{flag}): {', '.join(problems)}: {done.stderr[-300:]!r}"
                    )
    assert wrong == []


def test_the_fuzz_reaches_the_gateway_and_can_fail(gateways: dict[str, str], tmp_path: Path) -> None:
    """The harness sees a refusal where there is one: with the gateway down, --fail-closed
    refuses a proposed call (exit 2), and a plain call through the live gateway is allowed."""
    plain = _hook_input("claude-code", b'{"command": "ls"}')
    assert _run("claude-code", plain, gateways["down"], True, tmp_path / "s").returncode == 2
    assert _run("claude-code", plain, gateways["up"], True, tmp_path / "s").returncode == 0
