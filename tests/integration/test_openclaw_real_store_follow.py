"""``loopwatch import --follow`` beside the real OpenClaw (npm ``openclaw`` 2026.9.6, pinned in
``integrations/openclaw/test/real-openclaw.sh``), which keeps its transcripts in SQLite
(``agents/<id>/agent/openclaw-agent.sqlite``, table ``transcript_events``; it writes no JSONL
transcript). Two offline agent turns (``openclaw agent --local``) against a scripted model
served here, while the sidecar follows the agents folder from before the store exists: the
store appearing, rows committed during and after a turn, the first run's end once the second
run starts, a restart. What the sidecar published (to a recording gateway) is compared with
what ``loopwatch import`` reads from the finished store; OpenClaw's own exit status and output
say its writer was never refused a lock.

Without npm or the registry this fails: it never skips."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from loopwatch.detectors.events import RunEnd, ToolCall, ToolResult, encode_event
from loopwatch.streams.history.transcripts_sqlite import read_sqlite_store
from tests.helpers import ROOT, wait_for_line

PLUGIN = ROOT / "integrations" / "openclaw"
MODEL = "loop-model"
PROMPTS = {"Read MISSING.md": 4, "Try again": 2}  # each prompt: that many failing reads, then "I give up."


class _Model(BaseHTTPRequestHandler):
    """The OpenAI chat-completions API, streamed: after the last prompt, the same ``read`` call
    until it has as many results as the prompt asks, then a final answer."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *_: object) -> None:
        pass

    def _send(self, body: bytes, content_type: str) -> None:
        try:
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def do_GET(self) -> None:
        self._send(
            json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]}).encode(),
            "application/json",
        )

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        messages = request.get("messages", [])
        asked = [  # (position, calls wanted) of each user message holding a prompt (OpenClaw adds others)
            (n, calls)
            for n, m in enumerate(messages)
            if m.get("role") == "user"
            for prompt, calls in PROMPTS.items()
            if prompt in json.dumps(m.get("content"))
        ]
        last, wanted = asked[-1] if asked else (0, 0)
        done = sum(1 for m in messages[last:] if m.get("role") == "tool")
        prompt = len(asked)
        if done < wanted:
            call = {"name": "read", "arguments": json.dumps({"path": "MISSING.md"})}
            tool_call = {"index": 0, "id": f"call_{prompt}_{done}", "type": "function", "function": call}
            delta: dict[str, Any] = {"role": "assistant", "tool_calls": [tool_call]}
            finish = "tool_calls"
        else:
            delta, finish = {"role": "assistant", "content": "I give up."}, "stop"
        chunk = {"id": f"r{prompt}-{done}", "object": "chat.completion.chunk", "created": 0, "model": MODEL}
        events = [
            {**chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
            {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
            {
                **chunk,
                "choices": [],
                "usage": {"prompt_tokens": 1000, "completion_tokens": 50, "total_tokens": 1050},
            },
        ]
        stream = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
        self._send(stream, "text/event-stream")


class _Gateway(BaseHTTPRequestHandler):
    """A gateway stand-in: ``POST /v1/events`` (NDJSON) is kept and accepted."""

    def log_message(self, *_: object) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        lines: list[bytes] = self.server.lines  # type: ignore[attr-defined]
        lines.extend(line for line in body.split(b"\n") if line)
        answer = json.dumps({"accepted": body.count(b"\n") + 1}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)


def _serve(handler: type[BaseHTTPRequestHandler]) -> tuple[ThreadingHTTPServer, str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture(scope="module")
def openclaw() -> tuple[str, str]:
    done = subprocess.run(
        [str(PLUGIN / "test" / "real-openclaw.sh")], capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, f"installing openclaw failed: {done.stderr[-2000:]}"
    node, entry = done.stdout.split()[-2:]
    return node, entry


@pytest.fixture
def gateway() -> Iterator[tuple[str, list[bytes]]]:
    server, url = _serve(_Gateway)
    server.lines = []  # type: ignore[attr-defined]
    yield url, server.lines  # type: ignore[attr-defined]
    server.shutdown()
    server.server_close()


def _sidecar(agents: Path, url: str, offsets: Path) -> subprocess.Popen[str]:
    args = [
        "import",
        "--follow",
        str(agents),
        "--gateway",
        url,
        "--offsets",
        str(offsets),
        "--interval",
        "0.1",
    ]
    return subprocess.Popen(
        [sys.executable, "-m", "loopwatch", *args], stderr=subprocess.PIPE, text=True, cwd=ROOT
    )


def _stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    assert proc.stderr is not None
    said = proc.stderr.read()
    proc.stderr.close()
    return said


def _wait_for(condition: Callable[[], bool], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert condition(), "condition not met in time"


def test_the_sidecar_follows_the_store_the_real_openclaw_writes(
    openclaw: tuple[str, str], gateway: tuple[str, list[bytes]], tmp_path: Path
) -> None:
    node, entry = openclaw
    url, published = gateway
    home = tmp_path / "home"
    agents = home / ".openclaw" / "agents"
    agents.mkdir(parents=True)  # followed before OpenClaw created anything in it
    store = agents / "main" / "agent" / "openclaw-agent.sqlite"
    env = {**os.environ, "HOME": str(home), "NO_COLOR": "1"}
    model, model_url = _serve(_Model)
    cost = {"input": 1, "output": 2, "cacheRead": 0, "cacheWrite": 0}
    entry_model = {"id": MODEL, "name": "Loop", "reasoning": False, "input": ["text"], "cost": cost}
    provider = {
        "baseUrl": f"{model_url}/v1",
        "apiKey": "offline",
        "api": "openai-completions",
        "models": [{**entry_model, "contextWindow": 128000, "maxTokens": 4096}],
    }
    config = {
        "models": {"mode": "merge", "providers": {"scripted": provider}},
        "agents": {"defaults": {"model": {"primary": f"scripted/{MODEL}"}}},
    }
    (home / ".openclaw" / "openclaw.json").write_text(json.dumps(config, indent=2))

    def turn(message: str) -> None:
        command = ["--message", message, "--json"]
        done = subprocess.run(
            [
                node,
                entry,
                "agent",
                "--local",
                "--agent",
                "main",
                "--session-key",
                "agent:main:loop",
                *command,
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        output = done.stdout + done.stderr
        assert done.returncode == 0, output[-4000:]
        for refusal in ("database is locked", "SQLITE_BUSY", "SQLITE_LOCKED"):  # its writer never refused
            assert refusal not in output, output[-4000:]

    def imported() -> list[Any]:
        err = io.StringIO()
        events = read_sqlite_store(store, None, err)
        assert err.getvalue() == ""
        return list(events or [])

    offsets = tmp_path / "offsets.json"
    sidecar = _sidecar(agents, url, offsets)
    try:
        turn("Read MISSING.md")
        # OpenClaw 2026.9.6 wrote its transcript to the SQLite store only
        assert store.is_file()
        assert not list(agents.rglob("*.jsonl"))
        first = imported()
        assert isinstance(first[-1], RunEnd)
        calls = [e for e in first if isinstance(e, ToolCall)]
        assert [(c.tool, c.params) for c in calls] == [("read", {"path": "MISSING.md"})] * 4
        assert all(isinstance(e.error, str) for e in first if isinstance(e, ToolResult))
        # the first run, less its end (held back until a later run starts)
        _wait_for(lambda: len(published) >= len(first) - 1)
        assert [json.loads(line)["event_id"] for line in published] == [e.event_id for e in first[:-1]]

        turn("Try again")  # the same session: a second run
        final = imported()
        assert len({e.run_id for e in final}) == 2
        want = final[:-1] if isinstance(final[-1], RunEnd) else final
        _wait_for(lambda: len(published) >= len(want))
        time.sleep(1)  # ten more scans: nothing published twice
    finally:
        said = _stop(sidecar)
        model.shutdown()
        model.server_close()
    assert published == [encode_event(e) for e in want], said  # the same events as import, once each
    assert "Traceback" not in said
    assert "skipped" not in said

    again = _sidecar(agents, url, offsets)  # a restart resumes after the last row read
    try:
        assert again.stderr is not None
        line = wait_for_line(again.stderr, "first scan")
        assert (
            f"first scan: 0 transcripts, 1 SQLite store, {len(want)} events published before, 0 now" in line
        )
    finally:
        _stop(again)
    assert len(published) == len(want)
