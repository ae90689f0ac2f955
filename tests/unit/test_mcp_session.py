"""One MCP session through ``loopwatch mcp``'s session logic (``streams/mcp/session.py``), with
the in-process core or a real gateway deciding: the client reads what the core (``Engine`` fed
the same events) decided, call by call; everything else goes on byte for byte."""

from __future__ import annotations

import asyncio
import io
import json
import socket
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from loopwatch.config.fleet import parse_config_value
from loopwatch.detectors.facade import LoopDetector
from loopwatch.detectors.outcomes import MISSING
from loopwatch.streams.mcp.deciders import Decider, GatewayDecider, LocalDecider, McpCall, Ruling
from loopwatch.streams.mcp.session import McpSession, call_id_of
from tests.gateway_process import gateway_process
from tests.mcp_expected import LOOP_CONFIGS, client_texts, core_decisions

ECHO = {"message": "hi"}
ECHO_TEXTS = ["Echo: hi"]
MISSING_FILE = {"path": "/srv/nope.txt"}
ENOENT = ["Error: ENOENT: no such file or directory, open '/srv/nope.txt'"]
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "desk", "version": "1"},
    },
}


def line(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def call(request_id: Any, tool: str, arguments: Any) -> bytes:
    params = {"name": tool, "arguments": arguments}
    return line({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params})


def tool_answer(request_id: Any, texts: list[str], is_error: bool = False) -> bytes:
    result: dict[str, Any] = {"content": [{"type": "text", "text": text} for text in texts]}
    if is_error:
        result["isError"] = True
    return line({"result": result, "jsonrpc": "2.0", "id": request_id})


class Recording:
    """A decider that keeps what it was asked, and asks the real one."""

    def __init__(self, inner: Decider) -> None:
        self.inner = inner
        self.calls: list[McpCall] = []
        self.outcomes: list[tuple[str, Any, str | None]] = []
        self.ended: list[tuple[str, str]] = []

    async def before(self, call: McpCall) -> Ruling:
        self.calls.append(call)
        return await self.inner.before(call)

    async def after(self, call: McpCall, result: Any, error: str | None) -> Ruling:
        self.outcomes.append((call.call_id, result, error))
        return await self.inner.after(call, result, error)

    async def end(self, run_id: str, agent_id: str, session_id: str | None) -> None:
        self.ended.append((run_id, agent_id))
        await self.inner.end(run_id, agent_id, session_id)

    async def close(self) -> None:
        await self.inner.close()


def local(config: Any) -> LocalDecider:
    return LocalDecider(LoopDetector(parse_config_value(config)), io.StringIO())


async def one_call(session: McpSession, request: bytes, answer: bytes) -> tuple[bool, list[str], bool]:
    """What the client reads for ``request`` (``isError``, texts) and whether it was forwarded;
    the server answers ``answer`` to a forwarded one."""
    step = await session.from_client(request)
    if step.forward is None:
        (reply,) = step.replies
        read = json.loads(reply)
        forwarded = False
    else:
        assert step.forward == request
        assert step.replies == []
        changed = await session.from_server(answer)
        read = json.loads(answer if changed is None else changed)
        forwarded = True
    assert read["id"] == json.loads(request)["id"]
    result = read["result"]
    return result.get("isError", False), [item["text"] for item in result["content"]], forwarded


@pytest.mark.parametrize("config_name", sorted(LOOP_CONFIGS))
def test_a_looping_call_is_warned_blocked_and_aborted_where_the_core_says(config_name: str) -> None:
    config = LOOP_CONFIGS[config_name]
    count = 14
    decisions = core_decisions(
        config, [("echo", ECHO)] * count, lambda _: {"result": [{"type": "text", "text": "Echo: hi"}]}
    )
    actions = [d.action for d in decisions]
    assert {"warn", "block", "abort"} <= set(actions), actions

    async def drive() -> list[tuple[bool, list[str], bool]]:
        session = McpSession(local(config), "mcp-run")
        return [
            await one_call(session, call(n, "echo", ECHO), tool_answer(n, ECHO_TEXTS)) for n in range(count)
        ]

    seen = asyncio.run(drive())
    for decision, (is_error, texts, forwarded) in zip(decisions, seen, strict=True):
        assert (is_error, texts) == client_texts(decision, ECHO_TEXTS)
        assert forwarded == decision.proceed


def test_a_call_that_keeps_failing_counts_its_errors_as_the_core_does() -> None:
    config = LOOP_CONFIGS["agents-preset"]
    count = 8
    decisions = core_decisions(
        config, [("read_text_file", MISSING_FILE)] * count, lambda _: {"error": ENOENT[0]}
    )
    assert any(not d.proceed for d in decisions)
    recording = Recording(local(config))

    async def drive() -> list[tuple[bool, list[str], bool]]:
        session = McpSession(recording, "mcp-run")
        calls = [call(f"r{n}", "read_text_file", MISSING_FILE) for n in range(count)]
        return [await one_call(session, c, tool_answer(f"r{n}", ENOENT, True)) for n, c in enumerate(calls)]

    seen = asyncio.run(drive())
    for decision, (is_error, texts, _) in zip(decisions, seen, strict=True):
        assert (is_error, texts) == client_texts(decision, ENOENT, tool_error=True)
    assert [(result, error) for _, result, error in recording.outcomes] == [(MISSING, ENOENT[0])] * sum(
        d.proceed for d in decisions
    )


def test_the_call_is_recorded_with_the_mcp_names_and_the_client_as_agent() -> None:
    recording = Recording(local(LOOP_CONFIGS["thresholds"]))

    async def drive() -> None:
        session = McpSession(recording, "mcp-run", "sess-1")
        assert (await session.from_client(line(INITIALIZE))).forward == line(INITIALIZE)
        await one_call(
            session, call(7, "get-sum", {"a": 1, "b": 2}), tool_answer(7, ["The sum of 1 and 2 is 3."])
        )
        await session.end()
        await session.end()  # once

    asyncio.run(drive())
    (recorded,) = recording.calls
    assert recorded == McpCall("mcp-run", "desk", "sess-1", "get-sum", {"a": 1, "b": 2}, "7")
    assert recording.outcomes == [("7", [{"type": "text", "text": "The sum of 1 and 2 is 3."}], None)]
    assert recording.ended == [("mcp-run", "desk")]


def test_agent_id_given_wins_over_the_client_name() -> None:
    recording = Recording(local(LOOP_CONFIGS["thresholds"]))

    async def drive() -> None:
        session = McpSession(recording, "mcp-run", agent_id="ops-bot")
        await session.from_client(line(INITIALIZE))
        await one_call(session, call(1, "echo", ECHO), tool_answer(1, ECHO_TEXTS))

    asyncio.run(drive())
    assert recording.calls[0].agent_id == "ops-bot"


def test_other_messages_go_on_unchanged_while_a_call_waits() -> None:
    async def drive() -> None:
        session = McpSession(local(LOOP_CONFIGS["thresholds"]), "mcp-run")
        step = await session.from_client(call(4, "trigger-sampling-request", {"prompt": "x"}))
        assert step.forward is not None
        # the server's own request with the same id, a progress notification: not the answer
        sampling = b'{"method":"sampling/createMessage","params":{"maxTokens":9},"jsonrpc":"2.0","id":4}'
        progress = (
            b'{"method":"notifications/progress","params":{"progress":1,"progressToken":4},"jsonrpc":"2.0"}'
        )
        other = b'{"result":{"tools":[]},"jsonrpc":"2.0","id":5}'
        for message in (sampling, progress, other):
            assert await session.from_server(message) is None
        client_answer = b'{"jsonrpc":"2.0","id":4,"result":{"model":"m","role":"assistant","content":{}}}'
        assert (await session.from_client(client_answer)).forward == client_answer
        assert b"4" in session.waiting
        assert await session.from_server(tool_answer(4, ["LLM sampling result"])) is None
        assert not session.waiting

    asyncio.run(drive())


def test_a_cancelled_call_reports_no_outcome() -> None:
    recording = Recording(local(LOOP_CONFIGS["thresholds"]))

    async def drive() -> None:
        session = McpSession(recording, "mcp-run")
        await session.from_client(call(9, "trigger-long-running-operation", {"duration": 5}))
        cancel = line({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 9}})
        assert (await session.from_client(cancel)).forward == cancel
        late = tool_answer(9, ["Long running operation completed."])
        assert await session.from_server(late) is None

    asyncio.run(drive())
    assert len(recording.calls) == 1
    assert recording.outcomes == []


def test_in_a_batch_only_the_refused_call_is_answered_by_the_proxy() -> None:
    config = LOOP_CONFIGS["thresholds"]

    async def drive() -> None:
        session = McpSession(local(config), "mcp-run")
        n = 0
        while True:  # loop until the run is aborted
            is_error, texts, _ = await one_call(session, call(n, "echo", ECHO), tool_answer(n, ECHO_TEXTS))
            n += 1
            if is_error and texts[0].startswith("loopwatch stopped this turn"):
                break
        listing = b'{"jsonrpc":"2.0","id":"l","method":"tools/list"}'
        refused = call("c", "echo", {"message": "other"})
        step = await session.from_client(b"[" + listing + b", " + refused + b"]")
        assert step.forward == b"[" + listing + b"]"
        (reply,) = step.replies
        answer = json.loads(reply)
        assert answer["id"] == "c"
        assert answer["result"]["isError"] is True
        assert answer["result"]["content"][0]["text"].startswith("loopwatch stopped this turn")

    asyncio.run(drive())


def test_call_ids_are_the_json_rpc_ids() -> None:
    assert [call_id_of(v) for v in (0, 17, "abc", 1.5)] == ["0", "17", "abc", "1.5"]
    long = "x" * 600
    assert call_id_of(long).startswith("mcp-id-")
    assert call_id_of(long) != call_id_of("y" * 600)
    assert call_id_of("\ud800").startswith("mcp-id-")


def _free_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


def test_a_gateway_that_cannot_be_asked_lets_calls_go_on_or_refuses_them_with_fail_closed() -> None:
    async def ask(fail_closed: bool) -> tuple[Ruling, str]:
        err = io.StringIO()
        decider = GatewayDecider(_free_url(), None, 2.0, fail_closed, err)
        ruling = await decider.before(McpCall("r", "a", None, "echo", ECHO, "1"))
        await decider.after(McpCall("r", "a", None, "echo", ECHO, "1"), [], None)
        await decider.close()
        return ruling, err.getvalue()

    ruling, err = asyncio.run(ask(False))
    assert ruling.action == "allow"
    assert "unreachable" in err
    assert "allowing (fail open)" in err
    ruling, err = asyncio.run(ask(True))
    assert ruling.action == "block"
    assert not ruling.proceed
    assert ruling.text is not None
    assert ruling.text.startswith("loopwatch could not check this call")
    assert "refusing the call (--fail-closed)" in err


def test_through_a_real_gateway_the_client_reads_what_the_core_decided(tmp_path: Path) -> None:
    config = LOOP_CONFIGS["thresholds"]
    path = tmp_path / "loopwatch.json"
    path.write_text(json.dumps(config))
    count = 10
    decisions = core_decisions(
        config, [("echo", ECHO)] * count, lambda _: {"result": [{"type": "text", "text": "Echo: hi"}]}
    )

    async def drive(url: str) -> list[tuple[bool, list[str], bool]]:
        err = io.StringIO()
        decider = GatewayDecider(url, None, 10.0, False, err)
        session = McpSession(decider, "mcp-gateway-run")
        seen = [
            await one_call(session, call(n, "echo", ECHO), tool_answer(n, ECHO_TEXTS)) for n in range(count)
        ]
        await session.end()
        await decider.close()
        assert err.getvalue() == ""
        return seen

    with gateway_process("--config", str(path)) as gateway:
        seen = asyncio.run(drive(gateway.url))
        with urllib.request.urlopen(f"{gateway.url}/fleet/run?id=mcp-gateway-run") as page:
            run = json.loads(page.read())
    for decision, (is_error, texts, _) in zip(decisions, seen, strict=True):
        assert (is_error, texts) == client_texts(decision, ECHO_TEXTS)
    assert run["status"] == "ended"
    assert run["agent_id"] == "mcp"
    assert run["results"] == sum(d.proceed for d in decisions)


def test_an_aborted_session_that_sends_nothing_for_the_state_ttl_is_usable_again() -> None:
    now = [0.0]
    detector = LoopDetector(
        parse_config_value(LOOP_CONFIGS["thresholds"]), state_ttl_s=60, clock=lambda: now[0]
    )
    decider = LocalDecider(detector, io.StringIO())

    async def drive() -> tuple[list[bool], bool]:
        session = McpSession(decider, "mcp-run")
        refused = []
        for n in range(8):
            _, texts, forwarded = await one_call(session, call(n, "echo", ECHO), tool_answer(n, ECHO_TEXTS))
            refused.append(not forwarded and texts[0].startswith("loopwatch stopped this turn"))
        now[0] += 61  # a client that kept the server, idle for longer than the TTL
        _, _, forwarded = await one_call(session, call(99, "echo", ECHO), tool_answer(99, ECHO_TEXTS))
        return refused, forwarded

    refused, forwarded_after = asyncio.run(drive())
    assert refused[-1], refused  # aborted before the pause
    assert forwarded_after


class BrokenBefore(Recording):
    """A decider with a fault of its own before a call."""

    async def before(self, call: McpCall) -> Ruling:
        raise RuntimeError("a bug")


class BrokenAfter(Recording):
    """A decider with a fault of its own when it records a result."""

    async def after(self, call: McpCall, result: Any, error: str | None) -> Ruling:
        raise RuntimeError("another bug")


def test_a_fault_of_loopwatch_s_own_lets_the_messages_go_on_as_they_came() -> None:
    err = io.StringIO()

    async def drive() -> None:
        request, answer = call(1, "echo", ECHO), tool_answer(1, ECHO_TEXTS)
        session = McpSession(BrokenBefore(local(LOOP_CONFIGS["thresholds"])), "mcp-run", err=err)
        assert (await session.from_client(request)).forward == request
        session = McpSession(BrokenAfter(local(LOOP_CONFIGS["thresholds"])), "mcp-run", err=err)
        assert (await session.from_client(request)).forward == request
        assert b"1" in session.waiting
        assert await session.from_server(answer) is None

    asyncio.run(drive())
    lines = err.getvalue().splitlines()
    assert len(lines) == 2, lines
    assert all("internal error" in line and "it goes on unchecked" in line for line in lines)
    assert "a bug" in lines[0]
    assert "another bug" in lines[1]
