"""``loopwatch mcp`` between the official MCP SDK's client (``mcp`` on PyPI) and real MCP servers
from npm (``runtimes/mcp-servers.sh``: ``@modelcontextprotocol/server-everything`` and
``server-filesystem``, pinned), over stdio and streamable HTTP.

* Every capability the client uses works through the proxy as it does without it: the same
  client session against the same server, once direct and once proxied, gives the same answers
  (tools, tool results of every content type, resources, templates, prompts, completions,
  progress notifications, sampling and elicitation requests from the server, resource update
  and log notifications, a cancelled call).
* A call made again and again gets loopwatch's warning appended, then loopwatch's tool error,
  then the abort on every later call, at exactly the calls where the in-process core (``Engine``
  fed the calls and the results the server gave) says, under OpenClaw's rules with low
  thresholds and under the agents preset; in-process and through a real gateway.
* The gateway's view of the run: the client's name as agent, one run per session, ended with
  the session; with the gateway down the calls go on (fail open) or are refused
  (``--fail-closed``).
* The HTTP listener's web safety: a foreign ``Origin`` answers 403, a loopback one goes on; with
  ``LOOPWATCH_GATEWAY_TOKENS`` a request needs a bearer token.

Without npm the servers cannot be installed and these tests fail: they never skip.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPDeprecationWarning

from tests.gateway_process import gateway_process
from tests.integration.runtimes.mcp_servers import McpServers, free_port, proxied, proxy_http
from tests.mcp_expected import LOOP_CONFIGS, client_texts, core_decisions

CLIENT = types.Implementation(name="loopwatch-mcp-test", version="1.0")
ECHO = {"message": "same again"}
LOOP_CALLS = 12
WAIT_S = 20.0
REFUSED_UNCHECKED = "loopwatch could not check this call, so it was not run"

Server = StdioServerParameters | str
Seen = tuple[bool, list[str]]


@pytest.fixture(scope="module")
def servers() -> McpServers:
    """The pinned servers, installed once (``runtimes/mcp-servers.sh``)."""
    return McpServers.install()


def config_file(tmp_path: Path, name: str) -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(LOOP_CONFIGS[name]))
    return str(path)


def dump(value: Any) -> Any:
    return value.model_dump(mode="json", by_alias=True, exclude_none=True)


@dataclass
class Asked:
    """What the server asked of the client, and the notifications it sent."""

    sampling: list[str] = field(default_factory=list)
    elicitations: list[str] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    arrived: list[anyio.Event] = field(default_factory=list)  # (made in the event loop)

    async def sample(
        self, context: Any, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        content = params.messages[0].content
        self.sampling.append(content.text if isinstance(content, types.TextContent) else str(content))
        answer = types.TextContent(type="text", text="sampled by the test")
        return types.CreateMessageResult(role="assistant", content=answer, model="scripted")

    async def elicit(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.elicitations.append(params.message)
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append(params.level)
        self.arrived[0].set()

    async def notified(self, message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            self.updated.append(message.params.uri)
            self.arrived[1].set()


@asynccontextmanager
async def connect(
    server: Server, errlog: Path, asked: Asked | None = None, headers: dict[str, str] | None = None
) -> AsyncIterator[Client]:
    """The SDK's client on ``server`` (a URL: streamable HTTP; else a stdio command, its stderr
    appended to ``errlog``)."""
    asked = asked or Asked()
    asked.arrived = [anyio.Event(), anyio.Event()]
    callbacks: dict[str, Any] = {
        "client_info": CLIENT,
        "sampling_callback": asked.sample,
        "elicitation_callback": asked.elicit,
        "logging_callback": asked.log,
        "message_handler": asked.notified,
    }
    if isinstance(server, str):
        timeout = httpx2.Timeout(30.0, read=300.0)
        async with (
            httpx2.AsyncClient(headers=headers or {}, timeout=timeout) as http,
            Client(streamable_http_client(server, http_client=http), **callbacks) as client,
        ):
            yield client
        return
    with errlog.open("a") as err:
        async with Client(stdio_client(server, errlog=err), **callbacks) as client:
            yield client


async def exercise(server: Server, errlog: Path) -> dict[str, Any]:
    """One session using every capability of server-everything; what the client got."""
    asked = Asked()
    out: dict[str, Any] = {}
    async with connect(server, errlog, asked) as client:
        out["tools"] = sorted(tool.name for tool in (await client.list_tools()).tools)
        out["echo"] = dump(await client.call_tool("echo", {"message": "through"}))
        out["sum"] = dump(await client.call_tool("get-sum", {"a": 2, "b": 3}))
        out["image"] = dump(await client.call_tool("get-tiny-image", {}))
        out["structured"] = dump(await client.call_tool("get-structured-content", {"location": "New York"}))
        annotated = {"messageType": "error", "includeImage": True}
        out["annotated"] = dump(await client.call_tool("get-annotated-message", annotated))
        out["unknown tool"] = dump(await client.call_tool("no-such-tool", {}))
        resources = (await client.list_resources()).resources
        out["resources"] = [resource.uri for resource in resources]
        templates = (await client.list_resource_templates()).resource_templates
        out["templates"] = [template.uri_template for template in templates]
        out["read"] = dump(await client.read_resource(resources[0].uri))
        out["prompts"] = [prompt.name for prompt in (await client.list_prompts()).prompts]
        out["prompt"] = dump(await client.get_prompt("args-prompt", {"city": "Paris", "state": "TX"}))
        reference = types.PromptReference(type="ref/prompt", name="completable-prompt")
        out["completion"] = dump(await client.complete(reference, {"name": "department", "value": "E"}))
        reported: list[tuple[float, float | None]] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            reported.append((progress, total))

        steps = {"duration": 0.4, "steps": 4}
        long = await client.call_tool("trigger-long-running-operation", steps, progress_callback=on_progress)
        out["long"] = dump(long)
        out["progress"] = reported
        out["sampling"] = dump(await client.call_tool("trigger-sampling-request", {"prompt": "loop?"}))
        out["elicitation"] = dump(await client.call_tool("trigger-elicitation-request", {}))
        with warnings.catch_warnings():  # (deprecated for 2026-07-28 servers; these speak 2025-11-25)
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            await client.set_logging_level("debug")
            await client.subscribe_resource(resources[0].uri)
        await client.call_tool("toggle-subscriber-updates", {})
        await client.call_tool("toggle-simulated-logging", {})
        with anyio.fail_after(WAIT_S):
            await asked.arrived[0].wait()
            await asked.arrived[1].wait()
        await client.call_tool("toggle-subscriber-updates", {})  # (off again)
        await client.call_tool("toggle-simulated-logging", {})
        with anyio.move_on_after(0.5) as waited:  # cancelled: the SDK tells the server
            await client.call_tool("trigger-long-running-operation", {"duration": 30, "steps": 30})
        out["cancelled"] = waited.cancelled_caught
        out["after cancel"] = dump(await client.call_tool("echo", {"message": "after"}))
    out["sampling requests"] = asked.sampling
    out["elicitations"] = asked.elicitations
    out["updated"] = asked.updated[:1]
    out["logged"] = bool(asked.logs)
    return out


def check_everything_answered(got: dict[str, Any]) -> None:
    """What server-everything answers a client that uses all of it (so that comparing with the
    proxied session compares something)."""
    assert {"echo", "get-sum", "trigger-sampling-request", "trigger-elicitation-request"} <= set(got["tools"])
    assert got["echo"]["content"] == [{"type": "text", "text": "Echo: through"}]
    assert got["sum"]["content"][0]["text"].endswith("5.")
    assert [item["type"] for item in got["image"]["content"]] == ["text", "image", "text"]
    assert got["structured"]["structuredContent"]["temperature"] == 33
    assert got["unknown tool"]["isError"] is True
    assert got["read"]["contents"][0]["uri"] == got["resources"][0]
    assert "args-prompt" in got["prompts"]
    assert got["prompt"]["messages"][0]["content"]["text"] == "What's weather in Paris, TX?"
    assert got["completion"]["completion"]["values"] == ["Engineering"]
    assert got["progress"] == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert got["sampling requests"] == ["Resource trigger-sampling-request context: loop?"]
    assert "sampled by the test" in got["sampling"]["content"][0]["text"]
    assert len(got["elicitations"]) == 1
    assert "Ada" in json.dumps(got["elicitation"])
    assert got["updated"] == [got["resources"][0]]
    assert got["logged"] is True
    assert got["cancelled"] is True
    assert got["after cancel"]["content"] == [{"type": "text", "text": "Echo: after"}]


def test_every_capability_works_through_the_stdio_proxy_as_without_it(
    servers: McpServers, tmp_path: Path
) -> None:
    errlog = tmp_path / "stderr.log"
    direct = anyio.run(exercise, servers.everything_stdio(), errlog)
    check_everything_answered(direct)
    config = config_file(tmp_path, "thresholds")
    through = anyio.run(exercise, proxied(servers.everything_stdio(), "--config", config), errlog)
    assert through == direct
    assert "loopwatch mcp:" not in errlog.read_text()  # nothing failed, nothing was refused


def test_every_capability_works_through_the_http_proxy_as_without_it(
    servers: McpServers, tmp_path: Path
) -> None:
    errlog = tmp_path / "stderr.log"
    config = config_file(tmp_path, "thresholds")
    with servers.everything_http() as url, proxy_http(url, "--config", config) as proxy:
        direct = anyio.run(exercise, url, errlog)
        check_everything_answered(direct)
        through = anyio.run(exercise, proxy.ready.group(1), errlog)
    assert through == direct
    assert [line for line in proxy.lines if line.startswith("loopwatch mcp:")] == proxy.lines[:1]


async def call_again(
    server: Server, errlog: Path, tool: str, arguments: dict[str, Any], times: int
) -> list[Seen]:
    """``tool`` called ``times`` times with the same ``arguments`` in one session: what the
    client read each time (``isError``, the texts of the content)."""
    seen = []
    async with connect(server, errlog) as client:
        for _ in range(times):
            result = await client.call_tool(tool, arguments)
            texts = [item.text for item in result.content if isinstance(item, types.TextContent)]
            seen.append((result.is_error, texts))
    return seen


def check_loop(seen: list[Seen], config: dict[str, Any], tool: str, arguments: Any, tool_seen: Seen) -> None:
    """The client read, call by call, what the core decided for the same calls and results
    (``tool_seen``: what the server answers one such call, direct)."""
    tool_error, tool_texts = tool_seen
    if tool_error:
        outcome: dict[str, Any] = {"error": "\n".join(tool_texts)}
    else:
        outcome = {"result": [{"type": "text", "text": text} for text in tool_texts]}
    decisions = core_decisions(config, [(tool, arguments)] * len(seen), lambda _: outcome)
    actions = [decision.action for decision in decisions]
    assert {"warn", "block", "abort"} <= set(actions), actions  # (the loop is long enough to be stopped)
    assert seen == [client_texts(decision, tool_texts, tool_error) for decision in decisions]


@pytest.mark.parametrize("config_name", sorted(LOOP_CONFIGS))
def test_a_looping_call_is_warned_blocked_and_aborted_where_the_core_says_stdio(
    servers: McpServers, tmp_path: Path, config_name: str
) -> None:
    errlog = tmp_path / "stderr.log"
    (direct,) = anyio.run(call_again, servers.everything_stdio(), errlog, "echo", ECHO, 1)
    server = proxied(servers.everything_stdio(), "--config", config_file(tmp_path, config_name))
    seen = anyio.run(call_again, server, errlog, "echo", ECHO, LOOP_CALLS)
    check_loop(seen, LOOP_CONFIGS[config_name], "echo", ECHO, direct)


@pytest.mark.parametrize("config_name", sorted(LOOP_CONFIGS))
def test_a_looping_call_is_warned_blocked_and_aborted_where_the_core_says_http(
    servers: McpServers, tmp_path: Path, config_name: str
) -> None:
    errlog = tmp_path / "stderr.log"
    with (
        servers.everything_http() as url,
        proxy_http(url, "--config", config_file(tmp_path, config_name)) as proxy,
    ):
        (direct,) = anyio.run(call_again, url, errlog, "echo", ECHO, 1)
        seen = anyio.run(call_again, proxy.ready.group(1), errlog, "echo", ECHO, LOOP_CALLS)
    check_loop(seen, LOOP_CONFIGS[config_name], "echo", ECHO, direct)


async def browse(server: Server, errlog: Path, root: Path) -> list[Any]:
    async with connect(server, errlog) as client:
        listed = await client.call_tool("list_directory", {"path": str(root)})
        read = await client.call_tool("read_text_file", {"path": str(root / "PLAN.md")})
        return [dump(listed), dump(read)]


def test_server_filesystem_through_the_proxy_a_failing_read_in_a_loop_is_stopped(
    servers: McpServers, tmp_path: Path
) -> None:
    root = (tmp_path / "srv").resolve()
    root.mkdir()
    (root / "PLAN.md").write_text("step 1: read the plan\n")
    errlog = tmp_path / "stderr.log"
    config = config_file(tmp_path, "agents-preset")
    direct = anyio.run(browse, servers.filesystem_stdio(root), errlog, root)
    assert "PLAN.md" in json.dumps(direct[0])
    assert direct[1]["content"] == [{"type": "text", "text": "step 1: read the plan\n"}]
    server = proxied(servers.filesystem_stdio(root), "--config", config)
    assert anyio.run(browse, server, errlog, root) == direct

    missing = {"path": str(root / "NOTES.md")}
    (failing,) = anyio.run(call_again, servers.filesystem_stdio(root), errlog, "read_text_file", missing, 1)
    assert failing[0] is True  # the server's tool error: what loopwatch records as the failure
    seen = anyio.run(call_again, server, errlog, "read_text_file", missing, LOOP_CALLS)
    check_loop(seen, LOOP_CONFIGS["agents-preset"], "read_text_file", missing, failing)


def gateway_json(url: str, path: str) -> Any:
    with urllib.request.urlopen(f"{url}{path}", timeout=10) as page:
        return json.loads(page.read())


def agent_runs(gateway_url: str, agent: str) -> list[dict[str, Any]]:
    """The gateway's runs of ``agent`` with verdicts (``/fleet/overview``), each as ``/fleet/run``
    shows it once its end was recorded (waiting a bounded while for it)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        flagged = gateway_json(gateway_url, "/fleet/overview")["runs"]
        ids = [run["run"] for run in flagged if run["agent_id"] == agent]
        runs = [gateway_json(gateway_url, f"/fleet/run?id={urllib.parse.quote(run)}") for run in ids]
        if (runs and all(run["status"] == "ended" for run in runs)) or time.monotonic() > deadline:
            return runs
        time.sleep(0.1)


def test_through_a_gateway_each_session_is_a_run_of_the_client_ended_with_it(
    servers: McpServers, tmp_path: Path
) -> None:
    errlog = tmp_path / "stderr.log"
    config = config_file(tmp_path, "thresholds")
    (direct,) = anyio.run(call_again, servers.everything_stdio(), errlog, "echo", ECHO, 1)
    with gateway_process("--config", config) as gateway:
        server = proxied(servers.everything_stdio(), "--gateway", gateway.url, "--timeout-ms", "10000")
        seen = anyio.run(call_again, server, errlog, "echo", ECHO, LOOP_CALLS)
        check_loop(seen, LOOP_CONFIGS["thresholds"], "echo", ECHO, direct)
        with servers.everything_http() as url, proxy_http(url, "--gateway", gateway.url) as proxy:
            seen_http = anyio.run(call_again, proxy.ready.group(1), errlog, "echo", ECHO, LOOP_CALLS)
        runs = agent_runs(gateway.url, CLIENT.name)
    assert seen_http == seen
    assert len(runs) == 2, runs
    stdio_run, http_run = sorted(runs, key=lambda run: not run["run"].startswith("mcp-stdio-"))
    assert stdio_run["run"].startswith("mcp-stdio-")
    assert http_run["run"].startswith("mcp-")
    assert not http_run["run"].startswith("mcp-stdio-")
    proceeded = sum(not is_error for is_error, _ in seen)
    for run in runs:
        assert (run["status"], run["results"]) == ("ended", proceeded), run
    assert "loopwatch mcp:" not in errlog.read_text()


def test_with_the_gateway_down_calls_go_on_or_with_fail_closed_are_refused(
    servers: McpServers, tmp_path: Path
) -> None:
    down = f"http://127.0.0.1:{free_port()}"
    errlog = tmp_path / "open.log"
    server = proxied(servers.everything_stdio(), "--gateway", down)
    seen = anyio.run(call_again, server, errlog, "echo", ECHO, 6)
    assert seen == [(False, ["Echo: same again"])] * 6
    assert "allowing (fail open)" in errlog.read_text()

    errlog = tmp_path / "closed.log"
    server = proxied(servers.everything_stdio(), "--gateway", down, "--fail-closed")
    seen = anyio.run(call_again, server, errlog, "echo", ECHO, 3)
    assert all(is_error and texts[0].startswith(REFUSED_UNCHECKED) for is_error, texts in seen), seen
    assert "refusing the call (--fail-closed)" in errlog.read_text()


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "curl", "version": "1"},
    },
}


def post(url: str, headers: dict[str, str]) -> int:
    """POST an ``initialize`` to ``url``: the status of the answer."""
    body = json.dumps(INITIALIZE).encode()
    sent = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream", **headers}
    request = urllib.request.Request(url, data=body, headers=sent, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            answer.read()
            return int(answer.status)
    except urllib.error.HTTPError as refused:
        return refused.code


def test_the_http_proxy_refuses_foreign_origins_and_without_a_token(
    servers: McpServers, tmp_path: Path
) -> None:
    errlog = tmp_path / "stderr.log"
    with servers.everything_http() as url:
        with proxy_http(url) as proxy:
            endpoint = proxy.ready.group(1)
            assert post(endpoint, {"Origin": "http://evil.example"}) == 403
            assert post(endpoint, {"Origin": "http://localhost:6274"}) == 200
            assert post(endpoint, {}) == 200
            assert post(endpoint, {"Host": "evil.example"}) == 421
        with proxy_http(url, "--allowed-origins", "https://ops.example") as proxy:
            assert post(proxy.ready.group(1), {"Origin": "https://ops.example"}) == 200
        with proxy_http(url, env={"LOOPWATCH_GATEWAY_TOKENS": "s3cret"}) as proxy:
            endpoint = proxy.ready.group(1)
            assert post(endpoint, {}) == 401
            assert post(endpoint, {"Authorization": "Bearer wrong"}) == 401
            assert post(endpoint, {"Authorization": "Bearer s3cret"}) == 200

            async def listed() -> list[str]:
                async with connect(endpoint, errlog, headers={"Authorization": "Bearer s3cret"}) as client:
                    return [tool.name for tool in (await client.list_tools()).tools]

            assert "echo" in anyio.run(listed)


#: a stdio MCP server of a few lines that answers every request (a batch with a batch) with the
#: same text: what a batch looks like on the client's side of the proxy, which the SDK's clients
#: and servers no longer send (MCP 2025-06-18 dropped JSON-RPC batches)
BATCH_SERVER = """
import json, sys
def answer(m):
    return {"jsonrpc": "2.0", "id": m["id"], "result": {"content": [{"type": "text", "text": "same"}]}}
for line in sys.stdin:
    body = json.loads(line)
    out = [answer(m) for m in body if "id" in m] if isinstance(body, list) else answer(body)
    print(json.dumps(out), flush=True)
"""


def test_a_batch_gets_its_refusals_back_as_an_array_over_stdio(tmp_path: Path) -> None:
    """JSON-RPC 2.0 §6: the answer to a batch is an array. The refused members of a client's
    batch are answered by the proxy in one array; the members that go on reach the server as
    a batch of their own, and its array comes back as it sent it."""
    server = StdioServerParameters(command=sys.executable, args=["-c", BATCH_SERVER])
    command = proxied(server, "--config", config_file(tmp_path, "thresholds"))
    with subprocess.Popen(
        [command.command, *command.args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as proc:
        answers = _batch_after_abort(proc)
    assert all(isinstance(answer, list) for answer in answers), answers
    by_id = {member["id"]: member for answer in answers for member in answer}
    assert sorted(by_id) == ["c", "p"]
    assert by_id["c"]["result"]["isError"] is True
    assert by_id["p"]["result"]["content"] == [{"type": "text", "text": "same"}]


def _batch_after_abort(proc: subprocess.Popen[str]) -> list[Any]:
    """Calls the same tool through ``proc`` until the run is aborted, then sends a batch of a
    ping and a call; the two lines that come back."""
    assert proc.stdin is not None
    assert proc.stdout is not None

    def ask(message: Any) -> Any:
        assert proc.stdin is not None
        assert proc.stdout is not None
        proc.stdin.write(json.dumps(message) + "\n")
        proc.stdin.flush()
        return json.loads(proc.stdout.readline())

    def tool_call(request_id: Any, message: str) -> dict[str, Any]:
        params = {"name": "echo", "arguments": {"message": message}}
        return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}

    try:
        for n in range(LOOP_CALLS):  # the same call until the run is aborted
            answer = ask(tool_call(n, "same again"))
            if (
                answer["result"].get("isError")
                and "stopped this turn" in answer["result"]["content"][0]["text"]
            ):
                break
        else:
            pytest.fail("the repeated call was never aborted")
        ping = {"jsonrpc": "2.0", "id": "p", "method": "ping"}
        proc.stdin.write(json.dumps([ping, tool_call("c", "other")]) + "\n")
        proc.stdin.flush()
        return [json.loads(proc.stdout.readline()) for _ in range(2)]
    finally:
        proc.stdin.close()
        proc.wait(timeout=WAIT_S)
