"""The OpenClaw plugin inside the real OpenClaw: the ``openclaw`` npm package (pinned in
``integrations/openclaw/test/real-openclaw.sh``) installs the plugin with its own CLI and loads
it with its own plugin loader. Two ways of running tools, both offline:

* OpenClaw's Gateway with no model provider: a tool invoked through ``POST /tools/invoke`` goes
  through OpenClaw's ``before_tool_call`` hook runner, so through the plugin to a real
  ``loopwatch gateway``. ``/tools/invoke`` runs no ``after_tool_call`` hook, so that test
  reports each result to loopwatch itself, as the plugin's ``after_tool_call`` would.
* A whole agent turn (``openclaw agent --local``) against a scripted model served here (the
  OpenAI chat-completions API on 127.0.0.1): every hook the plugin uses runs as OpenClaw runs
  it (before/after_tool_call, the tool-result middleware, transcript updates, agent_end), and
  a recording proxy in front of the loopwatch gateway keeps what the plugin sent.

Without npm or the registry this fails: it never skips."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from loopwatch import LoopDetector
from loopwatch.detectors.events import Verdict
from loopwatch.streams.history.transcripts import transcript_events
from tests.helpers import ROOT, post_json

PLUGIN = ROOT / "integrations" / "openclaw"
TOKEN = "openclaw-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
RUN = "agent:main:main"  # the session OpenClaw resolves for /tools/invoke without a session key
# OpenClaw 2026.9's note on a warned call's result (internal-hooks-*.mjs, appendToolLoopWarning)
NOTE = (
    "[System note: Tool-loop warning after {count} repeated calls. "
    "Change your approach or stop if you are not making progress.]"
)
CONVERSATION_HOOK_BLOCKED = (
    'typed hook "agent_end" blocked because non-bundled plugins must set '
    "plugins.entries.loopwatch.hooks.allowConversationAccess=true"
)


def _post(url: str, body: object, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    return post_json(url, body, headers)


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as page:
        return json.loads(page.read())


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _stop(proc: subprocess.Popen[Any]) -> None:
    """The process and whatever it spawned (OpenClaw's Gateway starts helpers)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


class OpenClaw:
    def __init__(self, node: str, entry: str, home: Path) -> None:
        self.node, self.entry, self.home = node, entry, home
        self.env = {**os.environ, "HOME": str(home), "NO_COLOR": "1"}

    def cli(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.node, self.entry, *args], env=self.env, capture_output=True, text=True, timeout=timeout
        )

    @property
    def config_path(self) -> Path:
        return self.home / ".openclaw" / "openclaw.json"

    def install_plugin(self, **entry: Any) -> None:
        """Install (link) the plugin, then set its entry's keys (``config``, ``hooks``)."""
        installed = self.cli("plugins", "install", "--link", str(PLUGIN), "--force", "--accept-capabilities")
        assert installed.returncode == 0, installed.stdout + installed.stderr
        config = json.loads(self.config_path.read_text())
        loopwatch = config["plugins"]["entries"]["loopwatch"]
        for key, value in entry.items():
            if value is None:
                loopwatch.pop(key, None)
            else:
                loopwatch[key] = value
        self.config_path.write_text(json.dumps(config, indent=2))

    def inspect(self) -> dict[str, Any]:
        inspected = self.cli("plugins", "inspect", "loopwatch", "--runtime", "--json")
        assert inspected.returncode == 0, inspected.stdout + inspected.stderr
        report: dict[str, Any] = json.loads(inspected.stdout[inspected.stdout.index("{") :])
        return report


@pytest.fixture(scope="module")
def openclaw(tmp_path_factory: pytest.TempPathFactory) -> OpenClaw:
    done = subprocess.run(
        [str(PLUGIN / "test" / "real-openclaw.sh")], capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, f"installing openclaw failed: {done.stderr[-2000:]}"
    node, entry = done.stdout.split()[-2:]
    return OpenClaw(node, entry, tmp_path_factory.mktemp("openclaw-home"))


@pytest.fixture
def loopwatch_gateway() -> Iterator[tuple[subprocess.Popen[str], str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "loopwatch", "gateway", "--listen", "127.0.0.1:0"],
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        start_new_session=True,
    )
    assert proc.stderr is not None
    found = re.search(r"gateway at (http://\S+)", proc.stderr.readline())
    assert found, "the loopwatch gateway did not start"
    try:
        yield proc, found.group(1)
    finally:
        _stop(proc)
        proc.stderr.close()


def test_openclaw_installs_and_loads_the_plugin_with_its_hooks(openclaw: OpenClaw) -> None:
    # agent_end is a conversation hook: an installed plugin gets it only when the operator grants
    # conversation access; until then OpenClaw says so, and the other hooks work
    openclaw.install_plugin(hooks=None)
    report = openclaw.inspect()
    assert report["plugin"]["status"] == "loaded", report["plugin"]
    assert report["plugin"]["activated"] is True
    assert report["plugin"]["explicitlyEnabled"] is True  # tool-result middleware needs it
    assert report["plugin"]["contracts"] == {"agentToolResultMiddleware": ["openclaw"]}
    tool_and_subagent_hooks = {"before_tool_call", "after_tool_call", "subagent_spawned", "subagent_ended"}
    assert {hook["name"] for hook in report["typedHooks"]} == tool_and_subagent_hooks
    assert [d["message"] for d in report["diagnostics"]] == [CONVERSATION_HOOK_BLOCKED]

    openclaw.install_plugin(hooks={"allowConversationAccess": True})
    report = openclaw.inspect()
    assert report["plugin"]["status"] == "loaded", report["plugin"]
    names = {hook["name"] for hook in report["typedHooks"]}
    assert names == tool_and_subagent_hooks | {"agent_end"}
    # no diagnostics: the middleware registration was accepted too (a refusal is an error here)
    assert report["diagnostics"] == []


@contextmanager
def _openclaw_gateway(openclaw: OpenClaw, port: int | None = None) -> Iterator[str]:
    """OpenClaw's Gateway on loopback (``port``, else a free one), once a tool answers; its
    ``/tools/invoke`` URL."""
    port = port or _free_port()
    log = openclaw.home / "gateway.log"
    with log.open("wb") as out:
        gateway = subprocess.Popen(
            [
                *(openclaw.node, openclaw.entry, "gateway", "run", "--allow-unconfigured"),
                *("--auth", "token", "--token", TOKEN, "--port", str(port), "--bind", "loopback"),
            ],
            env=openclaw.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    invoke = f"http://127.0.0.1:{port}/tools/invoke"
    try:
        # ready once a tool answers (500 while the Gateway starts its methods); asked in another
        # session, so another run for loopwatch
        probe = {"tool": "sessions_list", "args": {}, "sessionKey": "agent:main:probe"}
        deadline = time.monotonic() + 120
        status = 0
        while time.monotonic() < deadline and gateway.poll() is None:
            try:
                status, _ = _post(invoke, probe, AUTH)
            except (ConnectionError, urllib.error.URLError):
                status = 0
            if status == 200:
                break
            time.sleep(0.5)
        assert status == 200, f"OpenClaw's Gateway did not serve /tools/invoke: {log.read_text()[-3000:]}"
        assert "loopwatch" in re.search(r"\(\d+ plugins: ([^;)]*)", log.read_text()).group(1)  # type: ignore[union-attr]
        yield invoke
    finally:
        _stop(gateway)


def test_a_looping_tool_call_is_refused_by_openclaw_with_loopwatch_s_verdict(
    openclaw: OpenClaw, loopwatch_gateway: tuple[subprocess.Popen[str], str]
) -> None:
    lw_proc, lw_url = loopwatch_gateway
    openclaw.install_plugin(config={"gatewayUrl": lw_url, "timeoutMs": 5000})

    auth = AUTH
    with _openclaw_gateway(openclaw) as invoke:
        # the same calls and outcomes through the in-process core give the expected verdicts
        core = LoopDetector(texts="openclaw")
        expected: list[tuple[str, str, str]] = []
        wanted: list[int] = []
        answers: list[int] = []
        for n in range(40):
            decision = core.before_tool_call(RUN, "sessions_list", {}, agent_id="main")
            expected += [
                (o.action, o.detector, o.message) for o in decision.outputs if isinstance(o, Verdict)
            ]
            wanted.append(200 if decision.proceed else 403)
            status, body = _post(invoke, {"tool": "sessions_list", "args": {}}, auth)
            answers.append(status)
            if status != 200:
                break
            core.after_tool_call(RUN, "sessions_list", {}, result=body["result"], agent_id="main")
            report = {
                "type": "tool_result",
                "event_id": f"openclaw-result-{n}",
                "run_id": RUN,
                "agent_id": "main",
                "tool": "sessions_list",
                "params": {},
                "result": body["result"],
            }
            assert _post(lw_url + "/v1/events", report)[0] == 200

        run = _get(f"{lw_url}/fleet/run?id={RUN}")
        verdicts = [(v["action"], v["detector"], v["message"]) for v in run["verdict_list"]]
        # OpenClaw's own loop detection is off by default: the refusal is loopwatch's verdict
        assert answers == wanted, (answers, wanted)
        assert answers[-1] == 403
        assert verdicts == expected
        assert expected[-1][0] == "block"
        assert body["error"]["type"] == "tool_call_blocked"
        assert body["error"]["message"] == verdicts[-1][2]
        assert run["calls"] == len(answers)
        assert run["agent_id"] == "main"

        # the next call is the run's second critical: an abort, refused with its sentence
        aborted = core.before_tool_call(RUN, "sessions_list", {}, agent_id="main")
        assert aborted.action == "abort"
        status, body = _post(invoke, {"tool": "sessions_list", "args": {}}, auth)
        assert (status, body["error"]["message"]) == (403, aborted.message)
        last = _get(f"{lw_url}/fleet/run?id={RUN}")["verdict_list"][-1]
        assert (last["kind"], last["message"]) == ("abort", aborted.message)

        # the loopwatch gateway gone: the aborted run's later calls are still refused (the
        # plugin remembers the abort), with the same sentence; another session's tool runs
        # (fail-open, the plugin's default)
        _stop(lw_proc)
        for tool in ("sessions_list", "session_status"):
            status, body = _post(invoke, {"tool": tool, "args": {}}, auth)
            assert (status, body["error"]["message"]) == (403, aborted.message), body
        other = {"tool": "sessions_list", "args": {}, "sessionKey": "agent:main:other"}
        status, body = _post(invoke, other, auth)
        assert status == 200, body


def test_a_gateway_slower_than_openclaw_s_own_hook_limit_meets_fail_open(openclaw: OpenClaw) -> None:
    """OpenClaw refuses a call whose before_tool_call handler outlasts its limit (15 s unless
    the plugin asks for another), whatever the plugin's failOpen says: with a timeoutMs above
    that, a silent gateway must still mean failOpen (the call runs), not OpenClaw's refusal."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)  # connections are taken and never answered
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        openclaw.install_plugin(config={"gatewayUrl": url, "timeoutMs": 16_000})
        with _openclaw_gateway(openclaw) as invoke:
            call = {"tool": "sessions_list", "args": {}, "sessionKey": "agent:main:silent"}
            status, body = _post(invoke, call, AUTH)
    assert status == 200, body
    assert "result" in body, body


# -- a whole agent turn against a scripted model -----------------------------------------------

MODEL = "loop-model"
CALLS = 25  # the scripted model asks for the same read until it has this many tool results


class _Served:
    """A ThreadingHTTPServer on 127.0.0.1 in a thread; ``requests`` keeps what it was sent."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.requests: list[dict[str, Any]] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.owner = self  # type: ignore[attr-defined]
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> _Served:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *_: object) -> None:
        pass

    @property
    def owner(self) -> _Served:
        return self.server.owner  # type: ignore[attr-defined, no-any-return]

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"{}")

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):  # the client cancelled (an aborted run)
            pass


class _Model(_Handler):
    """The OpenAI chat-completions API, streamed: the same ``read`` call until the request holds
    ``CALLS`` tool results, then a final answer. Turn n (n tool results so far) costs
    1000 + n input tokens and 50 output tokens."""

    def do_GET(self) -> None:
        self._send(200, json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]}).encode())

    def do_POST(self) -> None:
        request = self._body()
        self.owner.requests.append(request)
        turn = sum(1 for m in request.get("messages", []) if m.get("role") == "tool")
        if turn < CALLS:
            call = {"name": "read", "arguments": json.dumps({"path": "MISSING.md"})}
            delta: dict[str, Any] = {
                "role": "assistant",
                "tool_calls": [{"index": 0, "id": f"call_{turn}", "type": "function", "function": call}],
            }
            finish = "tool_calls"
        else:
            delta, finish = {"role": "assistant", "content": "I give up."}, "stop"
        usage = {"prompt_tokens": 1000 + turn, "completion_tokens": 50, "total_tokens": 1050 + turn}
        chunk = {"id": f"r{turn}", "object": "chat.completion.chunk", "created": 0, "model": MODEL}
        events = [
            {**chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
            {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
            {**chunk, "choices": [], "usage": usage},
        ]
        stream = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
        self._send(200, stream, "text/event-stream")


class _Recorder(_Handler):
    """Forwards every POST to the loopwatch gateway (``owner.upstream``) and keeps the request
    and the answer: what the plugin sent, and what it was told."""

    def do_POST(self) -> None:
        body = self._body()
        texts = self.headers.get("X-Loopwatch-Texts")  # the plugin asks for OpenClaw's sentences
        forwarded = urllib.request.Request(
            self.owner.upstream + self.path,  # type: ignore[attr-defined]
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", **({"X-Loopwatch-Texts": texts} if texts else {})},
            method="POST",
        )
        try:
            with urllib.request.urlopen(forwarded, timeout=30) as answer:
                status, raw = answer.status, answer.read()
        except urllib.error.HTTPError as refused:
            with refused:
                status, raw = refused.code, refused.read()
        self.owner.requests.append(
            {"path": self.path, "body": body, "status": status, "answer": json.loads(raw), "texts": texts}
        )
        self._send(status, raw)


def _transcript_lines(home: Path, session_id: str) -> list[bytes]:
    """The session's transcript entries as JSONL lines. OpenClaw 2026.9 keeps transcripts in
    SQLite (``agents/<agentId>/agent/openclaw-agent.sqlite``, table ``transcript_events``: one
    entry per row, the JSONL entry itself); rows stored compressed (``event_json`` NULL) are
    custom entries, which the importer ignores."""
    path = home / ".openclaw" / "agents" / "main" / "agent" / "openclaw-agent.sqlite"
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        rows = db.execute(
            "SELECT event_json, navigation_json FROM transcript_events WHERE session_id = ? ORDER BY seq",
            (session_id,),
        ).fetchall()
    db.close()
    lines = []
    for event_json, navigation in rows:
        if event_json is None:
            assert json.loads(navigation)["navigation"]["type"] == "custom", navigation
            continue
        lines.append(event_json.encode())
    return lines


@pytest.mark.parametrize("stops", [True, False], ids=["abort-stops-the-run", "abort-refuses-each-call"])
def test_an_agent_turn_through_the_plugin_warns_blocks_aborts_and_ends_the_run(
    openclaw: OpenClaw, loopwatch_gateway: tuple[subprocess.Popen[str], str], stops: bool
) -> None:
    """After the abort each later call of the run is refused with the abort's sentence until
    the model gives up (the default); with ``abortStopsRun: true`` OpenClaw stops the run after
    the aborted call, as its own tool-loop abort does: the refusal is the run's last entry, and
    no model turn follows it."""
    _, lw_url = loopwatch_gateway
    with _Served(_Model) as model, _Served(_Recorder) as recorder:
        recorder.upstream = lw_url  # type: ignore[attr-defined]
        plugin_config: dict[str, Any] = {"gatewayUrl": recorder.url, "timeoutMs": 5000}
        if stops:
            plugin_config["abortStopsRun"] = True
        openclaw.install_plugin(config=plugin_config, hooks={"allowConversationAccess": True})
        config = json.loads(openclaw.config_path.read_text())
        cost = {"input": 1, "output": 2, "cacheRead": 0, "cacheWrite": 0}  # USD per million tokens
        entry = {"id": MODEL, "name": "Loop", "reasoning": False, "input": ["text"], "cost": cost}
        provider: dict[str, Any] = {"baseUrl": f"{model.url}/v1", "apiKey": "offline"}
        provider["api"] = "openai-completions"
        provider["models"] = [{**entry, "contextWindow": 128000, "maxTokens": 4096}]
        config["models"] = {"mode": "merge", "providers": {"scripted": provider}}
        config.setdefault("agents", {}).setdefault("defaults", {})["model"] = {"primary": f"scripted/{MODEL}"}
        openclaw.config_path.write_text(json.dumps(config, indent=2))

        done = openclaw.cli(
            *("agent", "--local", "--agent", "main", "--session-key", f"agent:main:loop-{stops}"),
            *("--message", "Read MISSING.md", "--json"),
            timeout=600,
        )
        answer = json.loads(done.stdout[done.stdout.index("{") :])
        if stops:  # OpenClaw ends the run after the aborted call, as an aborted run
            assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
            assert answer["error"]["message"] == "agent run aborted", answer
        else:
            assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        sent = list(recorder.requests)
        asked = list(model.requests)
        run_id, session_id = sent[0]["body"]["run_id"], sent[0]["body"]["session_id"]
        if not stops:
            meta = answer["meta"]["agentMeta"]
            assert (run_id, session_id) == (meta["terminalReceipt"]["runId"], meta["sessionId"])

    decides = [r for r in sent if r["path"] == "/v1/decide"]
    results = [r["body"] for r in sent if r["path"] == "/v1/events" and r["body"]["type"] == "tool_result"]
    ends = [r["body"] for r in sent if r["path"] == "/v1/events" and r["body"]["type"] == "run_end"]
    assert all(r["status"] == 200 for r in sent), sent

    # every hook of the run names it the same way: OpenClaw's runId and sessionId
    scope = {"run_id": run_id, "session_id": session_id, "agent_id": "main"}
    for request in decides:
        assert {k: request["body"][k] for k in scope} == scope
    assert all({k: r[k] for k in scope} == scope for r in results + ends)

    # 22 calls asked (warn at the 11th, block at the 21st, abort at the 22nd); without the stop,
    # 3 more refused by the plugin without asking: the run was aborted
    assert [d["body"]["tool_call_id"] for d in decides] == [f"call_{n}" for n in range(22)]
    decisions = [(d["answer"]["decision"], d["answer"].get("sticky", False)) for d in decides]
    assert decisions == [("allow", False)] * 10 + [("warn", False)] + [("allow", False)] * 9 + [
        ("block", False),
        ("abort", False),
    ]
    assert {d["texts"] for d in decides} == {"openclaw"}  # so the answers carry OpenClaw's sentences
    abort = decides[21]["answer"]["message"]
    block = decides[20]["answer"]["message"]
    assert block == (
        "CRITICAL: Called read with identical arguments and identical outcomes 20 times. "
        "Session execution blocked to prevent runaway loops."
    )
    assert abort.startswith("OpenClaw stopped this run because tool-loop recovery encountered another")

    # the same calls and outcomes, as the plugin sent them, through the in-process core
    core = LoopDetector(texts="openclaw")
    for request in sent:
        body = request["body"]
        if request["path"] == "/v1/decide":
            decision = core.before_tool_call(
                body["run_id"],
                body["tool"],
                body["params"],
                tool_call_id=body["tool_call_id"],
                agent_id="main",
                session_id=body["session_id"],
                usage=body.get("usage"),
            )
            answer = request["answer"]
            assert (decision.action, decision.message) == (answer["decision"], answer["message"])
        elif body["type"] == "tool_result":
            outcome = {"error": body["error"]} if "error" in body else {"result": body["result"]}
            core.after_tool_call(
                body["run_id"],
                body["tool"],
                body["params"],
                tool_call_id=body["tool_call_id"],
                agent_id="main",
                session_id=body["session_id"],
                **outcome,
            )

    # each model turn's usage went with the turn's call (each turn proposed one call)
    for n, request in enumerate(decides):
        usage = request["body"]["usage"]
        assert (usage["input_tokens"], usage["output_tokens"]) == (1000 + n, 50)
        assert usage["cost_usd"] == pytest.approx((1000 + n) * 1e-6 + 50 * 2e-6)

    # results: the 20 calls that ran, matched by toolCallId, never with the warning note (so
    # the warned call's outcome hashed as the others: the block above is for 20 identical ones)
    assert [r["tool_call_id"] for r in results] == [f"call_{n}" for n in range(20)]
    assert all(r["params"] == {"path": "MISSING.md"} for r in results)
    assert "System note" not in json.dumps(results)

    # agent_end: the run's run_end, last
    assert len(ends) == 1
    assert sent[-1]["body"] is ends[0]
    run = _get(f"{lw_url}/fleet/run?id={run_id}")
    assert (run["status"], run["calls"], run["results"]) == ("ended", 22, 20)
    assert [(v["action"], v["count"]) for v in run["verdict_list"]] == [
        ("warn", 10),
        ("block", 20),
        ("block", 21),
        ("abort", None),
    ]

    # what the model read: the warned call's result with OpenClaw's note, nothing else noted;
    # the refusals in loopwatch's (OpenClaw's) exact sentences
    tool_messages = [m for m in asked[-1]["messages"] if m.get("role") == "tool"]
    texts = [m["content"] if isinstance(m["content"], str) else json.dumps(m) for m in tool_messages]
    if stops:
        # the run's last entries: the aborted call and its refusal; no model turn after them
        # (the next model request, if already sent, is aborted unanswered)
        transcript = [json.loads(line) for line in _transcript_lines(openclaw.home, session_id)]
        messages = [entry["message"] for entry in transcript if entry.get("type") == "message"]
        *_, proposed, refused = messages
        assert [call["id"] for call in proposed["content"]] == ["call_21"]
        assert (refused["toolCallId"], refused["content"][0]["text"]) == ("call_21", abort)
        assert len(asked) in (22, 23)
        assert len(texts) == len(asked) - 1
    else:
        assert len(asked) == CALLS + 1
        assert texts[21:] == [abort] * 4
    note = NOTE.format(count=10)
    assert texts[10].endswith("\n" + note), texts[10]
    assert [n for n, t in enumerate(texts) if "System note" in t] == [10]
    assert texts[20] == block

    # the sidecar (`loopwatch import`) names the run as the plugin does: OpenClaw's runId, the
    # transcript's session id, the agent
    imported = transcript_events(_transcript_lines(openclaw.home, session_id), "main", session_id)
    assert imported
    assert {(e.run_id, e.session_id, e.agent_id) for e in imported} == {(run_id, session_id, "main")}


# -- subagents: a delegation chain through OpenClaw's sessions_spawn ---------------------------

SUBAGENT_DEPTH = re.compile(r"running as a subagent \(depth (\d+)/(\d+)\)")
READS = 2  # each subagent reads this many times, then answers


class _SpawningModel(_Handler):
    """The OpenAI chat-completions API, streamed, for a chain of agents. The depth of the agent
    asking is what OpenClaw's subagent prompt says (``running as a subagent (depth N/M)``, none
    for the main agent). The main agent and the depth-1 subagent first spawn a subagent
    (``sessions_spawn``); each subagent then reads ``READS`` times; then each answers. Call ids
    name the depth (``call_d{depth}_{n}``); ``owner.limits`` keeps each M OpenClaw gave."""

    def do_GET(self) -> None:
        self._send(200, json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]}).encode())

    def do_POST(self) -> None:
        request = self._body()
        self.owner.requests.append(request)
        messages = request.get("messages", [])
        told = SUBAGENT_DEPTH.search(json.dumps(messages))
        depth = int(told.group(1)) if told else 0
        if told:
            self.owner.limits.add(int(told.group(2)))  # type: ignore[attr-defined]
        turn = sum(1 for m in messages if m.get("role") == "tool")
        call: dict[str, Any] | None = None
        if depth < 2 and turn == 0:
            call = {
                "name": "sessions_spawn",
                "arguments": json.dumps({"task": f"Read MISSING-{depth + 1}.md"}),
            }
        elif depth > 0 and turn <= READS and not (depth < 2 and turn == 0):
            call = {"name": "read", "arguments": json.dumps({"path": f"MISSING-{depth}.md"})}
        if call is not None:
            delta: dict[str, Any] = {
                "role": "assistant",
                "tool_calls": [
                    {"index": 0, "id": f"call_d{depth}_{turn}", "type": "function", "function": call}
                ],
            }
            finish = "tool_calls"
        else:
            delta, finish = {"role": "assistant", "content": "Done."}, "stop"
        chunk = {"id": f"r{depth}-{turn}", "object": "chat.completion.chunk", "created": 0, "model": MODEL}
        events = [
            {**chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
            {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
            {
                **chunk,
                "choices": [],
                "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
            },
        ]
        stream = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
        self._send(200, stream, "text/event-stream")


def test_subagents_spawned_by_openclaw_reach_loopwatch_as_a_delegation_chain(
    openclaw: OpenClaw, loopwatch_gateway: tuple[subprocess.Popen[str], str], tmp_path: Path
) -> None:
    """A real delegation chain: an agent turn through OpenClaw's Gateway (``openclaw agent``)
    whose model spawns a subagent (``sessions_spawn``), which spawns its own; each subagent
    calls tools. OpenClaw runs the plugin's ``subagent_spawned`` hook for each child: the
    child's first call reaches loopwatch with its parent's run, the chain's root and its depth
    (the depth OpenClaw's own prompt gives the child), its later calls with none (a run's chain
    is fixed by its first event). OpenClaw's ``subagent_ended`` ends each child's run: the
    plugin is installed without conversation access, so ``agent_end`` (which would end them
    too) never runs, and the main run stays open."""
    _, lw_url = loopwatch_gateway
    home = OpenClaw(openclaw.node, openclaw.entry, tmp_path)  # (a Gateway config of its own)
    port = _free_port()
    with _Served(_SpawningModel) as model, _Served(_Recorder) as recorder:
        model.limits = set()  # type: ignore[attr-defined]
        recorder.upstream = lw_url  # type: ignore[attr-defined]
        home.install_plugin(config={"gatewayUrl": recorder.url, "timeoutMs": 5000}, hooks=None)
        config = json.loads(home.config_path.read_text())
        cost = {"input": 1, "output": 2, "cacheRead": 0, "cacheWrite": 0}
        entry = {"id": MODEL, "name": "Loop", "reasoning": False, "input": ["text"], "cost": cost}
        provider: dict[str, Any] = {"baseUrl": f"{model.url}/v1", "apiKey": "offline"}
        provider["api"] = "openai-completions"
        provider["models"] = [{**entry, "contextWindow": 128000, "maxTokens": 4096}]
        config["models"] = {"mode": "merge", "providers": {"scripted": provider}}
        config.setdefault("agents", {}).setdefault("defaults", {})["model"] = {"primary": f"scripted/{MODEL}"}
        config.setdefault("tools", {})["toolSearch"] = False  # every tool offered (sessions_spawn too)
        # the CLI's `agent` goes through this Gateway (sessions_spawn needs one: --local has none)
        config["gateway"] = {
            "port": port,
            "mode": "local",
            "bind": "loopback",
            "auth": {"mode": "token", "token": TOKEN},
        }
        home.config_path.write_text(json.dumps(config, indent=2))

        with _openclaw_gateway(home, port):
            done = home.cli(
                *("agent", "--agent", "main", "--session-key", "agent:main:chain"),
                *("--message", "Delegate reading MISSING-1.md", "--json"),
                timeout=600,
            )
            assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

            def ended_runs() -> set[str]:
                return {
                    r["body"]["run_id"]
                    for r in list(recorder.requests)
                    if r["path"] == "/v1/events" and r["body"]["type"] == "run_end"
                }

            def decided() -> list[dict[str, Any]]:
                return [r for r in list(recorder.requests) if r["path"] == "/v1/decide"]

            # the subagents run on after the main turn's answer: wait for both to end
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline:
                seen = {
                    d["body"]["run_id"] for d in decided() if d["body"]["tool_call_id"].startswith("call_d")
                }
                if len(seen) == 3 and len(seen & ended_runs()) == 2:
                    break
                time.sleep(0.5)
        sent = list(recorder.requests)

    assert all(r["status"] == 200 for r in sent), sent
    # (the Gateway's readiness probe, a /tools/invoke call of another session, asked too)
    decides = [
        r["body"]
        for r in sent
        if r["path"] == "/v1/decide" and r["body"]["tool_call_id"].startswith("call_d")
    ]
    by_depth: dict[int, list[dict[str, Any]]] = {}
    for body in decides:
        by_depth.setdefault(int(body["tool_call_id"].split("_")[1][1:]), []).append(body)
    assert sorted(by_depth) == [0, 1, 2], decides
    runs = {depth: {b["run_id"] for b in bodies} for depth, bodies in by_depth.items()}
    assert all(len(ids) == 1 for ids in runs.values()), runs
    main, child, grandchild = (next(iter(runs[d])) for d in (0, 1, 2))
    assert len({main, child, grandchild}) == 3
    # each run's calls, in order: the main agent spawns; the child spawns, then reads; the
    # grandchild reads
    assert [b["tool"] for b in by_depth[0]] == ["sessions_spawn"]
    assert [b["tool"] for b in by_depth[1]] == ["sessions_spawn"] + ["read"] * READS
    assert [b["tool"] for b in by_depth[2]] == ["read"] * (READS + 1)
    chain_keys = ("parent_run_id", "root_run_id", "depth")
    assert not any(key in by_depth[0][0] for key in chain_keys)  # the main run is the root
    # a child's first call carries its chain, its later calls none
    assert {k: by_depth[1][0][k] for k in chain_keys} == {
        "parent_run_id": main,
        "root_run_id": main,
        "depth": 1,
    }
    assert {k: by_depth[2][0][k] for k in chain_keys} == {
        "parent_run_id": child,
        "root_run_id": main,
        "depth": 2,
    }
    assert not any(key in body for body in by_depth[1][1:] + by_depth[2][1:] for key in chain_keys)
    # OpenClaw told each subagent its depth out of its limit, maxSpawnDepth (5 unless configured)
    assert model.limits == {5}  # type: ignore[attr-defined]

    # loopwatch's view: the chain as the plugin sent it; each subagent's run ended by its
    # subagent_ended, the main run still open (its agent_end needs conversation access)
    fleet = {run_id: _get(f"{lw_url}/fleet/run?id={run_id}") for run_id in (main, child, grandchild)}
    assert {r: (v["parent_run_id"], v["root_run_id"], v["depth"]) for r, v in fleet.items()} == {
        main: (None, main, 0),
        child: (main, main, 1),
        grandchild: (child, main, 2),
    }
    assert {r: v["status"] for r, v in fleet.items()} == {main: "active", child: "ended", grandchild: "ended"}
    ended = [r["body"] for r in sent if r["path"] == "/v1/events" and r["body"]["type"] == "run_end"]
    assert {e["run_id"] for e in ended} >= {child, grandchild}
    assert main not in {e["run_id"] for e in ended}
