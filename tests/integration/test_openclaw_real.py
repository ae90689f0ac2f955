"""The OpenClaw plugin inside the real OpenClaw: the ``openclaw`` npm package (pinned in
``integrations/openclaw/test/real-openclaw.sh``) installs the plugin with its own CLI, loads it
with its own plugin loader, and runs its Gateway with no model provider configured. A tool
invoked through the Gateway's ``POST /tools/invoke`` goes through OpenClaw's
``before_tool_call`` hook runner, so through the plugin to a real ``loopwatch gateway``.

``/tools/invoke`` runs no ``after_tool_call`` hook (OpenClaw runs that one in agent turns,
which need a model), so the test reports each result to loopwatch itself, as the plugin's
``after_tool_call`` would. Without npm or the registry this fails: it never skips."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loopwatch import LoopDetector
from loopwatch.detectors.events import Verdict
from tests.helpers import ROOT, post_json

PLUGIN = ROOT / "integrations" / "openclaw"
TOKEN = "openclaw-test-token"
RUN = "agent:main:main"  # the session OpenClaw resolves for /tools/invoke without a session key


def _post(url: str, body: object, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    return post_json(url, body, headers)


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

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.node, self.entry, *args], env=self.env, capture_output=True, text=True, timeout=180
        )

    @property
    def config_path(self) -> Path:
        return self.home / ".openclaw" / "openclaw.json"


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


def test_openclaw_installs_and_loads_the_plugin_with_both_tool_hooks(openclaw: OpenClaw) -> None:
    installed = openclaw.cli("plugins", "install", "--link", str(PLUGIN), "--force", "--accept-capabilities")
    assert installed.returncode == 0, installed.stdout + installed.stderr
    inspected = openclaw.cli("plugins", "inspect", "loopwatch", "--runtime", "--json")
    assert inspected.returncode == 0, inspected.stdout + inspected.stderr
    report = json.loads(inspected.stdout[inspected.stdout.index("{") :])
    assert report["plugin"]["status"] == "loaded", report["plugin"]
    assert report["plugin"]["activated"] is True
    assert {hook["name"] for hook in report["typedHooks"]} == {"before_tool_call", "after_tool_call"}
    assert report["diagnostics"] == []


def test_a_looping_tool_call_is_refused_by_openclaw_with_loopwatch_s_verdict(
    openclaw: OpenClaw, loopwatch_gateway: tuple[subprocess.Popen[str], str]
) -> None:
    lw_proc, lw_url = loopwatch_gateway
    installed = openclaw.cli("plugins", "install", "--link", str(PLUGIN), "--force", "--accept-capabilities")
    assert installed.returncode == 0, installed.stdout + installed.stderr
    config = json.loads(openclaw.config_path.read_text())
    config["plugins"]["entries"]["loopwatch"]["config"] = {"gatewayUrl": lw_url, "timeoutMs": 5000}
    openclaw.config_path.write_text(json.dumps(config, indent=2))

    port = _free_port()
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
    auth = {"Authorization": f"Bearer {TOKEN}"}
    try:
        # ready once a tool answers (500 while the Gateway starts its methods); asked in another
        # session, so another run for loopwatch
        probe = {"tool": "sessions_list", "args": {}, "sessionKey": "agent:main:probe"}
        deadline = time.monotonic() + 120
        status = 0
        while time.monotonic() < deadline and gateway.poll() is None:
            try:
                status, _ = _post(invoke, probe, auth)
            except (ConnectionError, urllib.error.URLError):
                status = 0
            if status == 200:
                break
            time.sleep(0.5)
        assert status == 200, f"OpenClaw's Gateway did not serve /tools/invoke: {log.read_text()[-3000:]}"
        assert "loopwatch" in re.search(r"\(\d+ plugins: ([^;)]*)", log.read_text()).group(1)  # type: ignore[union-attr]

        # the same calls and outcomes through the in-process core give the expected verdicts
        core = LoopDetector()
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

        with urllib.request.urlopen(f"{lw_url}/fleet/run?id={RUN}", timeout=10) as page:
            run = json.loads(page.read())
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

        # the loopwatch gateway gone: the plugin fails open (its default), OpenClaw runs the tool
        _stop(lw_proc)
        status, body = _post(invoke, {"tool": "sessions_list", "args": {}}, auth)
        assert status == 200, body
    finally:
        _stop(gateway)
