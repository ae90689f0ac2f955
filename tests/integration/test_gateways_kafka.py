"""Several ``loopwatch gateway --kafka`` processes in front of one worker group answer as one
gateway would: every call decided once, by the workers, with the decision the in-process
core gives for the same sequence, whichever gateway each call of a run went through; a run
aborted through one gateway is refused through the other; a call retried with its own event
id through the other gateway gets its first answer; and the counts the gateways and the
workers show add up to what was sent. Real processes on the real broker."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer

from loopwatch.detectors.facade import Decision, LoopDetector
from tests.helpers import ROOT, post_json
from tests.integration.harness import Names, WorkerProcess, run
from tests.integration.test_worker import start_worker

pytestmark = pytest.mark.integration

AGENT = "coder"
#: The gateways' wait for the workers: long enough that a loaded machine never times out a
#: call the workers answer (a timed-out call would be allowed: the test checks none is).
DECIDE_TIMEOUT_MS = 5000


class KafkaGateway:
    """``loopwatch gateway --kafka`` as a child process, its log in a file."""

    def __init__(self, names: Names, bootstrap: str, log: Path, **env: str) -> None:
        self.log = log
        self._out = log.open("ab")
        args = ["gateway", "--kafka", bootstrap, "--listen", "127.0.0.1:0"]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "loopwatch", *args, "--decide-timeout-ms", str(DECIDE_TIMEOUT_MS)],
            stdout=self._out,
            stderr=subprocess.STDOUT,
            env=names.env(bootstrap, **env),
            cwd=ROOT,
        )
        deadline = time.monotonic() + 60
        while (found := re.search(r"gateway at (http://[^\s\"]+)", log.read_text(errors="replace"))) is None:
            assert self.proc.poll() is None, f"the gateway exited:\n{log.read_text(errors='replace')}"
            assert time.monotonic() < deadline, f"no gateway address:\n{log.read_text(errors='replace')}"
            time.sleep(0.1)
        self.url = found.group(1)

    def post(self, path: str, body: Any) -> dict[str, Any]:
        status, answer = post_json(self.url + path, body)
        assert status in (200, 202), (status, answer)
        return dict(answer)

    def totals(self) -> dict[str, int]:
        return overview_totals(self.url)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._out.close()


def overview_totals(base: str) -> dict[str, int]:
    with urllib.request.urlopen(base + "/fleet/overview", timeout=10) as answer:
        return dict(json.loads(answer.read())["totals"])


def worker_url(worker: WorkerProcess) -> str:
    return f"http://127.0.0.1:{worker.env['LOOPWATCH_WEB_PORT']}"


@pytest.fixture
def gateways() -> Iterator[list[KafkaGateway]]:
    started: list[KafkaGateway] = []
    yield started
    for gateway in started:
        gateway.stop()


@dataclass(frozen=True)
class Step:
    tool: str
    params: dict[str, Any]
    result: dict[str, Any]


def same(n: int) -> list[Step]:
    """The same read, the same result: allowed, warned, blocked, then aborted."""
    return [Step("read", {"path": "notes.md"}, {"text": "unchanged"})] * n


def ping_pong(n: int) -> list[Step]:
    return [Step("read", {"path": "ab"[k % 2] + ".md"}, {"text": "unchanged"}) for k in range(n)]


def varied(n: int) -> list[Step]:
    return [Step("read", {"path": f"f{k}.md"}, {"text": str(k)}) for k in range(n)]


def polling(n: int) -> list[Step]:
    return [Step("status", {"job": 1}, {"state": "running"}) for _ in range(n)]


def after_abort() -> list[Step]:
    """Two more calls of an aborted run (any tool: the sticky abort)."""
    return [Step("write", {"path": "x"}, {"ok": True}), Step("exec", {"cmd": "ls"}, {"ok": True})]


@dataclass
class Driven:
    """One run's answers through the gateways and the core's decisions for the same calls."""

    answers: list[dict[str, Any]]
    expected: list[Decision]
    results: list[Decision]  # the core's decision on each reported result
    sent: int  # events posted (calls and results)


def shape(answer: dict[str, Any]) -> tuple[Any, ...]:
    return (answer["decision"], answer["message"], answer.get("reason"), answer.get("sticky", False))


def core_shape(decision: Decision) -> tuple[Any, ...]:
    return (decision.action, decision.message, decision.reason, decision.sticky)


def drive(
    run_id: str,
    steps: list[Step],
    route: Callable[[int], KafkaGateway],
    named: bool = False,
    core: LoopDetector | None = None,
    start: int = 0,
) -> Driven:
    """The run's calls one after the other, call ``n`` through ``route(n)``; an allowed or
    warned call's result reported through the same gateway (a blocked or aborted one does not
    run). The in-process core (``core``, going on from earlier calls) is fed the same calls
    and results; ``named``: each call names its event id (``start``: the first call's number)."""
    core = core or LoopDetector(agent_id=AGENT)
    driven = Driven([], [], [], 0)
    for n, step in enumerate(steps, start):
        gateway = route(n)
        body: dict[str, Any] = {"run_id": run_id, "agent_id": AGENT, "tool": step.tool, "params": step.params}
        if named:
            body["event_id"] = f"{run_id}-call-{n}"
        answer = gateway.post("/v1/decide", body)
        driven.answers.append(answer)
        driven.sent += 1
        expected = core.before_tool_call(run_id, step.tool, step.params)
        driven.expected.append(expected)
        if not expected.proceed:
            continue
        gateway.post(
            "/v1/events",
            {
                "type": "tool_result",
                "event_id": f"{answer['event_id']}-result",
                "run_id": run_id,
                "agent_id": AGENT,
                "tool": step.tool,
                "params": step.params,
                "result": step.result,
            },
        )
        driven.sent += 1
        driven.results.append(core.after_tool_call(run_id, step.tool, step.params, result=step.result))
    return driven


def test_two_gateways_in_front_of_two_workers_answer_as_one(
    kafka_bootstrap: str,
    names: Names,
    tmp_path: Path,
    workers: list[WorkerProcess],
    gateways: list[KafkaGateway],
) -> None:
    start_worker(names, kafka_bootstrap, tmp_path, workers, "w1")
    start_worker(names, kafka_bootstrap, tmp_path, workers, "w2")
    a = KafkaGateway(names, kafka_bootstrap, tmp_path / "gateway-a.log")
    gateways.append(a)
    b = KafkaGateway(names, kafka_bootstrap, tmp_path / "gateway-b.log")
    gateways.append(b)
    both = (a, b)

    def alternating(offset: int) -> Callable[[int], KafkaGateway]:
        return lambda n: both[(n + offset) % 2]

    plans: dict[str, tuple[list[Step], Callable[[int], KafkaGateway]]] = {}
    for k in range(4):  # aborted runs whose calls alternate between the gateways
        plans[f"same-{k}"] = (same(22) + after_abort(), alternating(k))
    for k in range(3):
        plans[f"ping-pong-{k}"] = (ping_pong(30), alternating(k))
        plans[f"varied-{k}"] = (varied(10), alternating(k))
    for k in range(2):
        plans[f"polling-{k}"] = (polling(24), alternating(k))
    # aborted through A alone, then asked through B
    plans["through-a"] = (same(22) + after_abort(), lambda n: a if n < 22 else b)

    with ThreadPoolExecutor(6) as pool:
        futures = {
            run_id: pool.submit(drive, run_id, steps, route) for run_id, (steps, route) in plans.items()
        }
        driven = {run_id: future.result() for run_id, future in futures.items()}

    decisions: set[str] = set()
    for run_id, outcome in driven.items():
        assert [a.get("timed_out", False) for a in outcome.answers] == [False] * len(outcome.answers), run_id
        assert [shape(a) for a in outcome.answers] == [core_shape(d) for d in outcome.expected], run_id
        decisions |= {answer["decision"] for answer in outcome.answers}
    assert decisions == {"allow", "warn", "block", "abort"}
    aborted_through_a = driven["through-a"].answers
    assert aborted_through_a[21]["decision"] == "abort"
    assert "sticky" not in aborted_through_a[21]
    for later in aborted_through_a[22:]:  # asked through B: the abort A saw, from the workers
        assert (later["decision"], later["message"], later["sticky"]) == (
            "abort",
            aborted_through_a[21]["message"],
            True,
        )

    # a call named by its client, retried through the other gateway, gets its first answer
    core = LoopDetector(agent_id=AGENT)
    named = drive("named", ping_pong(21), lambda n: a, named=True, core=core)
    assert [shape(x) for x in named.answers] == [core_shape(d) for d in named.expected]
    assert {x["decision"] for x in named.answers} == {"allow", "warn", "block"}
    time.sleep(1)  # (B reads the answers A was given as they come: every 50 ms)
    for n, (answer, step) in enumerate(zip(named.answers, ping_pong(21), strict=True)):
        body = {"run_id": "named", "agent_id": AGENT, "tool": step.tool, "params": step.params}
        again = b.post("/v1/decide", {**body, "event_id": f"named-call-{n}"})
        assert again == answer, n
    # ... and counted once: the run goes on as the core, which never saw the retries
    more = drive("named", ping_pong(24)[21:], lambda n: b, named=True, core=core, start=21)
    assert [shape(x) for x in more.answers] == [core_shape(d) for d in more.expected]

    # the counts: the gateways' add up to what was sent, each worker's (its own partitions and
    # the other's, followed) is all of it
    outcomes = [*driven.values(), named, more]
    events = sum(o.sent for o in outcomes)
    call_verdicts = sum(len(d.outputs) for o in outcomes for d in o.expected)
    verdicts = call_verdicts + sum(len(d.outputs) for o in outcomes for d in o.results)
    assert call_verdicts > 0

    totals = [gateway.totals() for gateway in both]
    assert sum(t["events"] for t in totals) == events
    assert sum(t["verdicts"] for t in totals) == call_verdicts
    assert min(t["events"] for t in totals) > 0
    for worker in workers:
        url = worker_url(worker)
        deadline = time.monotonic() + 60
        while (shown := overview_totals(url)) != {**shown, "events": events, "verdicts": verdicts}:
            assert time.monotonic() < deadline, (
                f"{worker.log.name}: {shown}, sent {events} events, {verdicts} verdicts"
            )
            time.sleep(0.3)


def replies_seen(bootstrap: str, topic: str, event_id: str, timeout: float = 30) -> dict[str, Any]:
    """The reply the workers published for ``event_id`` (read from the replies topic's start)."""

    async def read() -> dict[str, Any]:
        consumer = AIOKafkaConsumer(
            topic, bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest"
        )
        await consumer.start()
        try:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                batch = await consumer.getmany(timeout_ms=500)
                for messages in batch.values():
                    for message in messages:
                        reply = json.loads(message.value or b"{}")
                        if reply.get("event_id") == event_id:
                            return dict(reply)
        finally:
            await consumer.stop()
        raise AssertionError(f"no reply for {event_id} on {topic} within {timeout} s")

    result: dict[str, Any] = run(read())
    return result


def test_every_gateway_knows_an_abort_and_a_run_end_when_the_workers_do_not_answer(
    kafka_bootstrap: str,
    names: Names,
    tmp_path: Path,
    workers: list[WorkerProcess],
    gateways: list[KafkaGateway],
) -> None:
    """With the workers gone, a gateway answers a call of a run it knows aborted with that
    abort (timed out). It knows as much as any other gateway: the aborts every gateway was
    answered, and the end of an aborted run, whichever gateway sent it."""
    worker = start_worker(names, kafka_bootstrap, tmp_path, workers, "w1")
    a = KafkaGateway(names, kafka_bootstrap, tmp_path / "gateway-a.log")
    gateways.append(a)
    b = KafkaGateway(names, kafka_bootstrap, tmp_path / "gateway-b.log")
    gateways.append(b)
    quiet = drive("quiet", same(22), lambda n: a)  # aborted through A; never asked through B
    ended = drive("ended", same(22), lambda n: a)  # aborted through A, asked through B, ended
    assert quiet.answers[-1]["decision"] == ended.answers[-1]["decision"] == "abort"
    assert b.post("/v1/decide", {"run_id": "ended", "tool": "write", "params": {}})["decision"] == "abort"
    a.post("/v1/events", {"type": "run_end", "event_id": "ended-end", "run_id": "ended"})
    announced = replies_seen(kafka_bootstrap, names.replies, "ended-end")  # the workers say it
    assert "aborted" not in announced
    time.sleep(1)  # (the gateways read it as well, every 50 ms)
    worker.stop()

    refused = b.post("/v1/decide", {"run_id": "quiet", "tool": "write", "params": {}})
    assert (refused["decision"], refused["message"], refused["sticky"], refused["timed_out"]) == (
        "abort",
        quiet.answers[-1]["message"],
        True,
        True,
    )
    for gateway in (a, b):  # the run ended: a new run under its id is not refused
        fresh = gateway.post("/v1/decide", {"run_id": "ended", "tool": "write", "params": {}})
        assert (fresh["decision"], fresh["timed_out"]) == ("allow", True)
