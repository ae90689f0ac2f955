"""``loopwatch gateway --kafka``: the HTTP gateway in front of real workers on the real broker."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loopwatch.config.fleet import FleetConfig
from loopwatch.detectors.engine import Engine
from loopwatch.detectors.events import ToolCall, ToolResult
from loopwatch.detectors.facade import decision_of
from loopwatch.detectors.stable_json import from_python
from tests.helpers import ROOT, post_json
from tests.integration.harness import Names, WorkerProcess, consume, run
from tests.integration.test_worker import start_worker

pytestmark = pytest.mark.integration


class Gateway:
    def __init__(
        self, names: Names, bootstrap: str, timeout_ms: int, env: dict[str, str] | None = None
    ) -> None:
        args = [
            "gateway",
            "--kafka",
            bootstrap,
            "--listen",
            "127.0.0.1:0",
            "--decide-timeout-ms",
            str(timeout_ms),
        ]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "loopwatch", *args],
            stderr=subprocess.PIPE,
            text=True,
            env={**names.env(bootstrap), **(env or {})},
            cwd=ROOT,
        )
        assert self.proc.stderr is not None
        seen = []
        for line in self.proc.stderr:  # a new topic's first fetch may warn before the address
            seen.append(line)
            found = re.search(r"gateway at (http://\S+)", line)
            if found:
                self.url = found.group(1)
                break
            assert len(seen) < 50, "".join(seen)
        else:
            raise AssertionError("the gateway exited: " + "".join(seen))

    def post(self, path: str, body: Any) -> tuple[int, dict[str, Any]]:
        status, answer = post_json(self.url + path, body)
        return status, answer

    def runs_on_uvloop(self) -> bool:
        """Whether the process has uvloop's event loop loaded (Linux: its mapped files)."""
        return "/uvloop/" in Path(f"/proc/{self.proc.pid}/maps").read_text()

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            assert self.proc.wait(20) == 0
        finally:
            if self.proc.stderr is not None:
                self.proc.stderr.close()


@pytest.fixture
def gateways() -> Iterator[list[Gateway]]:
    started: list[Gateway] = []
    yield started
    for gateway in started:
        gateway.stop()


def expected_decisions(steps: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[str]:
    """What the core decides for each call of a run whose calls and results are ``steps``."""
    engine = Engine(FleetConfig.enabled_default())
    decisions: list[str] = []
    for n, (params, result) in enumerate(steps):
        call = ToolCall(event_id=f"c{n}", run_id="r", tool="read", params=from_python(params))
        decision = decision_of(engine.process(call)).action
        decisions.append(decision)
        if decision in ("block", "abort"):
            continue  # not executed: no result
        engine.process(
            ToolResult(
                event_id=f"r{n}", run_id="r", tool="read", params=call.params, result=from_python(result)
            )
        )
    return decisions


@pytest.mark.parametrize("event_loop", ["uvloop", "asyncio"])
def test_decisions_come_from_the_workers_and_allowed_calls_do_not_wait(
    kafka_bootstrap: str,
    names: Names,
    tmp_path: Path,
    workers: list[WorkerProcess],
    gateways: list[Gateway],
    event_loop: str,
) -> None:
    """On uvloop's event loop (the gateway's own: a dependency) and on asyncio's, the same answers."""
    start_worker(names, kafka_bootstrap, tmp_path, workers, "w1")
    told = {"LOOPWATCH_EVENT_LOOP": "asyncio" if event_loop == "asyncio" else ""}
    gateway = Gateway(names, kafka_bootstrap, timeout_ms=5000, env=told)
    gateways.append(gateway)
    assert gateway.runs_on_uvloop() == (event_loop == "uvloop")
    same = ({"path": "notes.md"}, {"content": [{"type": "text", "text": "unchanged"}]})
    steps = [same] * 22
    want = expected_decisions(steps)
    assert {"allow", "warn", "block"} <= set(want)
    got, waited = [], []
    for params, result in steps:
        started = time.monotonic()
        status, answer = gateway.post(
            "/v1/decide", {"run_id": "kafka-loop", "tool": "read", "params": params}
        )
        waited.append(time.monotonic() - started)
        assert status == 200, answer
        assert "timed_out" not in answer
        got.append(answer["decision"])
        if answer["decision"] in ("block", "abort"):
            continue  # a blocked call is not executed
        event = {"type": "tool_result", "event_id": answer["event_id"] + "-r", "run_id": "kafka-loop"}
        status, accepted = gateway.post(
            "/v1/events", {**event, "tool": "read", "params": params, "result": result}
        )
        assert (status, accepted) == (202, {"accepted": 1})
    assert got == want
    assert max(waited) < 5  # every call answered by the worker, none waited out the timeout


def test_without_a_worker_decisions_time_out_to_allow_and_bad_input_is_dead_lettered(
    kafka_bootstrap: str, names: Names, gateways: list[Gateway]
) -> None:
    gateway = Gateway(names, kafka_bootstrap, timeout_ms=150)
    gateways.append(gateway)
    started = time.monotonic()
    status, answer = gateway.post("/v1/decide", {"run_id": "r", "tool": "read", "params": {}})
    assert time.monotonic() - started < 5
    assert status == 200
    assert (answer["decision"], answer["timed_out"], answer["verdicts"]) == ("allow", True, [])
    status, answer = gateway.post("/v1/events", b'{"type":"tool_call","run_id":"r","tool":7}')
    assert status == 400
    assert "event 0" in answer["error"]
    letters = run(consume(kafka_bootstrap, names.dead_letter, until=1, timeout=30))
    assert len(letters) == 1
    assert letters[0]["topic"] == "gateway"
    assert "tool" in letters[0]["reason"]


def test_an_aborted_run_stays_aborted_on_the_kafka_backend(
    kafka_bootstrap: str, names: Names, tmp_path: Path, workers: list[WorkerProcess], gateways: list[Gateway]
) -> None:
    start_worker(names, kafka_bootstrap, tmp_path, workers, "w1")
    gateway = Gateway(names, kafka_bootstrap, timeout_ms=5000)
    gateways.append(gateway)
    same = ({"path": "notes.md"}, {"content": [{"type": "text", "text": "unchanged"}]})
    want = expected_decisions([same] * 22)
    assert want[-1] == "abort"
    got = []
    for params, result in [same] * 22:
        status, answer = gateway.post(
            "/v1/decide", {"run_id": "kafka-abort", "tool": "read", "params": params}
        )
        assert status == 200, answer
        got.append(answer["decision"])
        if answer["decision"] in ("allow", "warn"):
            event = {"type": "tool_result", "event_id": answer["event_id"] + "-r", "run_id": "kafka-abort"}
            gateway.post("/v1/events", {**event, "tool": "read", "params": params, "result": result})
    assert got == want
    first_abort = answer
    for tool in ("write", "exec"):  # any later call of the run: the same abort, from the worker
        status, later = gateway.post("/v1/decide", {"run_id": "kafka-abort", "tool": tool, "params": {}})
        assert status == 200
        assert "timed_out" not in later
        assert (later["decision"], later["message"], later["sticky"]) == (
            "abort",
            first_abort["message"],
            True,
        )
    status, _ = gateway.post(
        "/v1/events", {"type": "run_end", "event_id": "kafka-abort-end", "run_id": "kafka-abort"}
    )
    assert status == 202
    deadline = time.monotonic() + 30
    while True:  # the run_end reaches the worker: a new run under the same id starts afresh
        status, fresh = gateway.post(
            "/v1/decide", {"run_id": "kafka-abort", "tool": "write", "params": {"n": 1}}
        )
        if fresh["decision"] == "allow" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert fresh["decision"] == "allow"
