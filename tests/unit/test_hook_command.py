"""``loopwatch hook``'s command never stands between the runtime and its work: whatever the hook
input, the state folder or the URL it is given, it answers in its own terms and in time."""

from __future__ import annotations

import argparse
import io
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from loopwatch.streams.gateway.hooks.command import run_hook

PRE_TOOL_USE = {
    "hook_event_name": "PreToolUse",
    "session_id": "s",
    "tool_name": "Write",
    "tool_input": {"file_path": "a", "content": "x"},
    "tool_use_id": "t1",
}


WARN = {
    "decision": "warn",
    "message": "WARNING: You have called run_shell_command 10 times with identical arguments.",
    "verdicts": [{"type": "verdict", "action": "warn", "detector": "generic_repeat", "count": 10}],
}


class _Peer(BaseHTTPRequestHandler):
    """What the URL given as the gateway answers: ``server.mode`` says how."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.requests += 1  # type: ignore[attr-defined]
        mode: str = self.server.mode  # type: ignore[attr-defined]
        if mode == "drip":  # one byte a second: a socket timeout alone never fires
            self.send_response(200)
            self.send_header("Content-Length", "100")
            self.end_headers()
            for _ in range(20):
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(1)
            return
        status, body = {
            "list": (200, b"[1, 2]"),
            "allow": (200, b'{"decision": "allow", "verdicts": []}'),
            "warn": (200, json.dumps(WARN).encode()),
            "too large": (413, b'{"error": "the body exceeds maxEventBytes"}'),
            "down": (503, b'{"error": "the broker is down"}'),
            "wrong token": (401, b'{"error": "a bearer token is required"}'),
            "not a gateway": (404, b"<html>no such page</html>"),
        }[mode]
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def peer() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Peer)
    server.daemon_threads = True
    server.mode = "allow"  # type: ignore[attr-defined]
    server.requests = 0  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def hook(
    stdin: bytes,
    url: str = "http://127.0.0.1:9",
    fail_closed: bool = False,
    timeout_ms: int = 2000,
    agent_id: str = "claude-code",
    runtime: str = "claude-code",
) -> tuple[int, str, str]:
    args = argparse.Namespace(
        runtime=runtime,
        gateway=url,
        agent_id=agent_id,
        timeout_ms=timeout_ms,
        fail_closed=fail_closed,
        show_warnings=False,
    )
    out, err = io.BytesIO(), io.StringIO()
    code = run_hook(args, io.BytesIO(stdin), out, err)
    return code, out.getvalue().decode(), err.getvalue()


@pytest.fixture(autouse=True)
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LOOPWATCH_HOOK_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def url_of(server: ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


def test_hook_input_nested_beyond_the_parser_s_depth_is_let_through() -> None:
    code, out, err = hook(b"[" * 100_000 + b"]" * 100_000)
    assert (code, out) == (0, "")
    assert "not JSON (nested too deeply); allowing" in err


def test_a_state_folder_that_cannot_be_written_lets_the_prompt_through(
    monkeypatch: pytest.MonkeyPatch, peer: ThreadingHTTPServer
) -> None:
    monkeypatch.setenv("LOOPWATCH_HOOK_STATE_DIR", "/dev/null/state")
    prompt = json.dumps({"hook_event_name": "UserPromptSubmit", "session_id": "s", "prompt": "go"})
    code, out, err = hook(prompt.encode(), url_of(peer))
    assert (code, out) == (0, "")
    assert "cannot keep the hook's state" in err


def test_a_long_non_ascii_session_keeps_its_prompt_number_in_a_file_the_disk_takes(
    state_dir: Path, peer: ThreadingHTTPServer
) -> None:
    session = "会" * 150  # 450 bytes: an id, but no file name
    for _ in range(2):
        prompt = json.dumps({"hook_event_name": "UserPromptSubmit", "session_id": session, "prompt": "go"})
        code, _, err = hook(prompt.encode(), url_of(peer))
        assert code == 0, err
        assert "cannot keep" not in err
    (kept,) = state_dir.rglob("*.prompt")
    assert len(kept.name.encode()) <= 255
    assert kept.read_text() == "2"


def test_an_agent_id_that_is_no_id_is_let_through_and_no_prompt_number_is_kept(state_dir: Path) -> None:
    prompt = json.dumps({"hook_event_name": "UserPromptSubmit", "session_id": "s", "prompt": "go"})
    code, out, err = hook(prompt.encode(), agent_id="a" * 600)
    assert (code, out) == (0, "")
    assert "agent_id: holds 600 bytes, more than the limit of 512" in err
    assert not state_dir.exists()


def test_a_session_id_too_long_for_a_run_id_is_let_through_and_nothing_is_kept(state_dir: Path) -> None:
    prompt = json.dumps({"hook_event_name": "UserPromptSubmit", "session_id": "s" * 600, "prompt": "go"})
    code, out, err = hook(prompt.encode())
    assert (code, out) == (0, "")
    assert "session_id: gives run ids of" in err
    assert not state_dir.exists()


def test_a_url_answering_json_that_is_not_an_object_fails_open(peer: ThreadingHTTPServer) -> None:
    peer.mode = "list"  # type: ignore[attr-defined]
    code, out, err = hook(json.dumps(PRE_TOOL_USE).encode(), url_of(peer))
    assert (code, out) == (0, "")
    assert "not an object" in err
    assert "allowing (fail open)" in err


def test_the_timeout_bounds_the_whole_request_not_each_read(peer: ThreadingHTTPServer) -> None:
    peer.mode = "drip"  # type: ignore[attr-defined]
    code, out, err = hook(json.dumps(PRE_TOOL_USE).encode(), url_of(peer), timeout_ms=500)
    assert (code, out) == (0, "")
    assert "slower than 500 ms; allowing (fail open)" in err
    closed = hook(json.dumps(PRE_TOOL_USE).encode(), url_of(peer), fail_closed=True, timeout_ms=500)
    assert closed[0] == 2
    assert "slower than 500 ms; refusing the tool call (--fail-closed)" in closed[2]


def test_fail_closed_refuses_only_when_the_gateway_is_down_not_when_it_refuses_the_input(
    peer: ThreadingHTTPServer,
) -> None:
    peer.mode = "too large"  # type: ignore[attr-defined]
    code, out, err = hook(json.dumps(PRE_TOOL_USE).encode(), url_of(peer), fail_closed=True)
    assert (code, out) == (0, "")
    assert "gateway answered 413" in err
    assert "the gateway refused the input, the call is not checked" in err
    for mode, status in (("down", 503), ("wrong token", 401), ("not a gateway", 404)):
        peer.mode = mode  # type: ignore[attr-defined]
        code, _, err = hook(json.dumps(PRE_TOOL_USE).encode(), url_of(peer), fail_closed=True)
        assert code == 2, mode
        assert f"gateway answered {status}" in err


def _leave_notes(folder: str, writer: int) -> None:
    from loopwatch.streams.gateway.hooks.plan import FilePrompts

    prompts = FilePrompts("gemini", Path(folder))
    for number in range(8):
        prompts.leave_note("s", f"call-{writer}-{number}", f"warning {writer}.{number}")


def test_notes_left_by_hooks_running_at_once_are_all_kept(tmp_path: Path) -> None:
    """Gemini CLI runs the hooks of parallel tool calls at once: each one's warning note must
    survive the others' (each reads the session's notes, adds its own and writes them back)."""
    import multiprocessing

    from loopwatch.streams.gateway.hooks.plan import FilePrompts

    context = multiprocessing.get_context("fork")
    writers = [context.Process(target=_leave_notes, args=(str(tmp_path), w)) for w in range(8)]
    for process in writers:
        process.start()
    for process in writers:
        process.join(60)
        assert process.exitcode == 0
    prompts = FilePrompts("gemini", tmp_path)
    taken = [prompts.take_note("s", f"call-{w}-{n}") for w in range(8) for n in range(8)]
    assert taken == [f"warning {w}.{n}" for w in range(8) for n in range(8)]


def test_a_warning_kept_for_a_gemini_result_reaches_the_model_with_the_gateway_gone(
    peer: ThreadingHTTPServer,
) -> None:
    """Gemini gets a warning with the warned call's result (AfterTool): the note, taken from the
    hook's state for that call, is answered even when the result cannot be reported."""
    call = {"session_id": "s", "tool_name": "run_shell_command", "tool_input": {"command": "ls"}}
    peer.mode = "warn"  # type: ignore[attr-defined]
    before = json.dumps({"hook_event_name": "BeforeTool", **call}).encode()
    code, out, err = hook(before, url_of(peer), runtime="gemini")
    assert (code, out) == (0, ""), err  # (the warning waits for the result)
    after = {
        "hook_event_name": "AfterTool",
        **call,
        "tool_response": {"llmContent": "a b", "returnDisplay": ""},
    }
    code, out, err = hook(json.dumps(after).encode(), runtime="gemini")  # no gateway
    assert code == 0
    assert "allowing (fail open)" in err
    context = json.loads(out)["hookSpecificOutput"]["additionalContext"]
    assert "called 10 times with identical arguments [generic_repeat]" in context


@pytest.mark.parametrize(
    ("runtime", "stdin", "said"),
    [
        ("claude-code", b"", "no hook input on stdin"),
        ("claude-code", b'{"session_id": "s"}', "no hook_event_name (claude-code sends one with every call)"),
        (
            "claude-code",
            b'{"session_id": "s", "hook_event_name": "BeforeTool", "tool_name": "x", "tool_input": {}}',
            "BeforeTool is a hook event of gemini, not of claude-code: check the hook's command",
        ),
        (
            "gemini",
            b'{"session_id": "s", "hook_event_name": "PreToolUse", "tool_name": "x", "tool_input": {}}',
            "PreToolUse is a hook event of claude-code and codex, not of gemini",
        ),
        (
            "codex",
            b'{"session_id": "s", "hook_event_name": "PreToolUseX"}',
            "no codex hook event 'PreToolUseX'",
        ),
    ],
)
def test_a_hook_call_loopwatch_cannot_act_on_says_why_and_lets_the_call_through(
    runtime: str, stdin: bytes, said: str, peer: ThreadingHTTPServer
) -> None:
    code, out, err = hook(stdin, url_of(peer), runtime=runtime, agent_id=runtime)
    assert (code, out) == (0, "")
    assert said in err
    assert peer.requests == 0  # type: ignore[attr-defined]  # nothing reached the gateway


def test_a_call_without_a_session_is_checked_and_the_shared_run_named(peer: ThreadingHTTPServer) -> None:
    code, _, err = hook(
        b'{"hook_event_name": "PreToolUse", "tool_name": "Read", "tool_input": {}}', url_of(peer)
    )
    assert code == 0
    assert "no session_id in the hook input: its calls share one run" in err
    assert peer.requests == 1  # type: ignore[attr-defined]  # still decided


def test_a_session_id_with_a_lone_surrogate_is_named_plainly(state_dir: Path) -> None:
    call = {**PRE_TOOL_USE, "session_id": "s\ud800"}
    code, out, err = hook(json.dumps(call).encode())
    assert (code, out) == (0, "")
    assert "session_id: must be valid Unicode (it holds a lone UTF-16 surrogate); allowing" in err
    assert not state_dir.exists() or not any(state_dir.iterdir())
