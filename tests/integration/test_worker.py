"""The worker on a real Kafka broker: same verdicts as the in-process core, whatever happens."""

from __future__ import annotations

import base64
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec
import pytest

from loopwatch.config.fleet import FleetConfig
from loopwatch.detectors.decoding import decode_event
from loopwatch.detectors.events import Event, RunEnd, run_scope
from tests.bench.workloads import Workload, generate, to_wire
from tests.helpers import listening_addresses
from tests.integration.harness import (
    Names,
    WorkerProcess,
    consume,
    event_records,
    expected_outputs,
    fixture_events,
    per_run,
    produce,
    run,
)

pytestmark = pytest.mark.integration


def fleet_events(runs: int = 60, seed: int = 7) -> list[Event]:
    """A generated fleet: 50 calls per run, 30 % of runs stuck in a 40-call loop."""
    data = generate(Workload("fleet", seed, runs, 50, loop_pct=30))
    events = [decode_event(line) for line in to_wire(data)]
    return [msgspec.structs.replace(e, event_id=f"fleet-{e.event_id}", agent_id="fleet") for e in events]


def start_worker(
    names: Names,
    bootstrap: str,
    tmp_path: Path,
    workers: list[WorkerProcess],
    label: str,
    config: str | None = None,
    **env: str,
) -> WorkerProcess:
    port = str(17000 + len(workers) + hash(names.app_id) % 500 * 4)
    config_file = None
    if config is not None:
        config_file = tmp_path / f"{label}.json5"
        config_file.write_text(config)
    env.setdefault("LOOPWATCH_DATA_DIR", str(tmp_path / label))
    worker = WorkerProcess(
        names.env(bootstrap, LOOPWATCH_WEB_PORT=port, **env),
        tmp_path / f"{label}.log",
        config_file,
    )
    workers.append(worker)
    worker.wait_ready()
    return worker


def test_a_session_timeout_the_broker_refuses_stops_the_worker_with_the_reason(
    kafka_bootstrap: str, names: Names, tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    """The test broker keeps Kafka's default group.min.session.timeout.ms (6 s): a worker
    asked for 3 s used to log one error and wait forever, never ready; now it exits at once."""
    env = names.env(
        kafka_bootstrap,
        LOOPWATCH_KAFKA_SESSION_TIMEOUT_S="3",
        LOOPWATCH_WEB_PORT=str(17000 + hash(names.app_id) % 500 * 4),
        LOOPWATCH_DATA_DIR=str(tmp_path / "refused"),
    )
    worker = WorkerProcess(env, tmp_path / "refused.log")
    workers.append(worker)
    assert worker.proc.wait(timeout=60) == 2, worker.tail()
    log = worker.tail()
    assert "LOOPWATCH_KAFKA_SESSION_TIMEOUT_S=3 is refused by the brokers" in log
    assert "group.min.session.timeout.ms is 6000 ms, above 3000 ms" in log


def test_round_trip_gives_exactly_the_core_verdicts(
    kafka_bootstrap: str, names: Names, tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    events = fixture_events() + fleet_events()
    expected = expected_outputs(events)
    assert len(expected) > 300  # the fleet's loops and the real read-error loop
    worker = start_worker(names, kafka_bootstrap, tmp_path, workers, "w1")
    # its web server (dashboard, run details, metrics) listens where LOOPWATCH_WEB_HOST says
    # (127.0.0.1 by default), not on every interface
    assert listening_addresses(int(worker.env["LOOPWATCH_WEB_PORT"])) == {"127.0.0.1"}
    run(produce(kafka_bootstrap, names.events, event_records(events)))
    got = run(consume(kafka_bootstrap, names.verdicts, until=len(expected), timeout=120, settle=2))
    assert per_run(got) == per_run(expected)
    assert len(got) == len(expected)
    # LOOPWATCH_LOG_FORMAT=json: every line of its log is a JSON object, faust's and aiokafka's too
    lines = worker.log.read_text().splitlines()
    assert any('"logger": "faust.' in line for line in lines)
    assert [line for line in lines if not (line.startswith("{") and isinstance(json.loads(line), dict))] == []


def test_bad_input_is_dead_lettered_and_nothing_else_changes(
    kafka_bootstrap: str, names: Names, tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    events = fixture_events()
    good = event_records(events)
    bad: list[tuple[bytes | None, bytes]] = [
        (b"r", b"{not json"),
        (b"r", b'{"type":"tool_call","event_id":"x","run_id":"r","tool":7,"params":{}}'),
        (b"r", b'{"type":"tool_call","run_id":"r","tool":"read","params":{}}'),
        (b"r", b'{"type":"tool_result","event_id":"y","run_id":"r","tool":"read","params":{}}'),
        (
            b"r",
            b'{"type":"tool_call","event_id":"u","run_id":"r","tool":"read","params":{},"usage":{"usd":1}}',
        ),
        (
            b"r",
            b'{"type":"tool_call","event_id":"z","run_id":"r","tool":"read","params":"'
            + b"x" * 200_000
            + b'"}',
        ),
    ]
    mixed = list(good)
    for index, record in enumerate(bad):
        mixed.insert(1 + index * (len(good) // len(bad)), record)
    limits = "{tools: {loopDetection: {enabled: true}}, loopwatch: {maxEventBytes: 100000}}"
    worker = start_worker(names, kafka_bootstrap, tmp_path, workers, "w1", config=limits)
    run(produce(kafka_bootstrap, names.events, mixed))
    expected = expected_outputs(events)
    got = run(consume(kafka_bootstrap, names.verdicts, until=len(expected), timeout=90, settle=2))
    assert per_run(got) == per_run(expected)
    letters = run(consume(kafka_bootstrap, names.dead_letter, until=len(bad), timeout=30))
    reasons = sorted(letter["reason"] for letter in letters)
    assert len(letters) == len(bad)
    assert any(r.startswith("not valid JSON") for r in reasons)
    assert any("Expected `str`, got `int` - at `$.tool`" in r for r in reasons)
    assert any("missing required field `event_id`" in r for r in reasons)
    assert any("exactly one of them is required" in r for r in reasons)
    assert any("exceeds the limit" in r for r in reasons)
    assert any("unknown field `usd` - at `$.usage`" in r for r in reasons)
    assert all(letter["topic"] == names.events and letter["offset"] >= 0 for letter in letters)
    metrics = scrape(worker)
    kinds = Counter(type(event).__name__ for event in events)
    assert metrics["loopwatch_invalid_events_total"] == len(bad)
    assert metrics['loopwatch_events_total{type="tool_call"}'] == kinds["ToolCall"]
    assert metrics['loopwatch_events_total{type="run_end"}'] == kinds["RunEnd"]
    published = sum(v for k, v in metrics.items() if k.startswith("loopwatch_verdicts_total"))
    assert published == len(expected)
    assert (
        metrics[
            'loopwatch_verdicts_total{action="abort",detector="compaction_loop_persisted",level="critical"}'
        ]
        == 1
    )
    assert metrics["loopwatch_processing_seconds_count"] == len(mixed)
    assert metrics["loopwatch_active_runs"] == 0  # every fixture run ended
    ended_scopes = {run_scope(event) for event in events if isinstance(event, RunEnd)}
    assert metrics["loopwatch_ended_runs"] == len(ended_scopes)  # their tombstones
    wanted = Counter(o["action"] if o["type"] == "verdict" else "abort" for o in expected)
    fleet = poll_fleet(
        worker,
        lambda view: (
            view["verdicts"] == dict(wanted) and view["events"].get("tool_call") == kinds["ToolCall"]
        ),
    )
    assert fleet["verdicts"] == dict(wanted)
    assert fleet["events"]["tool_call"] == kinds["ToolCall"]
    assert fleet["per_detector"]["compaction_loop_persisted"] == 1


def poll_fleet(worker: WorkerProcess, done: Any, timeout: float = 30.0) -> dict[str, Any]:
    """The worker's /fleet view, once ``done(view)`` holds (or the timeout)."""
    import time
    import urllib.request

    port = worker.env["LOOPWATCH_WEB_PORT"]
    deadline = time.monotonic() + timeout
    while True:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/fleet", timeout=10) as response:
            view: dict[str, Any] = json.loads(response.read())
        if done(view) or time.monotonic() > deadline:
            return view
        time.sleep(0.5)


def scrape(worker: WorkerProcess) -> dict[str, float]:
    """The worker's /metrics, as name{labels} -> value."""
    import urllib.request

    port = worker.env["LOOPWATCH_WEB_PORT"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


def test_second_worker_joining_mid_backlog_changes_no_verdict(
    kafka_bootstrap: str, names: Names, tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    events = fleet_events(runs=80, seed=21)
    expected = expected_outputs(events)
    start_worker(names, kafka_bootstrap, tmp_path, workers, "w1")
    run(produce(kafka_bootstrap, names.events, event_records(events)))  # the whole fleet as a backlog
    assert len(run(consume(kafka_bootstrap, names.verdicts, until=len(expected) // 8, timeout=60))) > 0
    start_worker(names, kafka_bootstrap, tmp_path, workers, "w2")  # while w1 is mid-backlog
    got = run(consume(kafka_bootstrap, names.verdicts, until=len(expected), timeout=120, settle=3))
    assert per_run(got, dedupe=True) == per_run(expected)


def test_the_fleet_view_shows_every_event_once_through_a_join_and_a_leave(
    kafka_bootstrap: str, names: Names, tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    """A worker shows its fleet view the events of its own partitions as it applies them and
    follows the others' (streams.kafka.view_handoff): when a second worker joins, and when it
    leaves, partitions change hands both ways, and the first worker's view still counts every
    event exactly once."""
    events = fleet_events(runs=90, seed=44)
    parts = [events[: len(events) // 3], events[len(events) // 3 : 2 * len(events) // 3]]
    parts.append(events[2 * len(events) // 3 :])
    expected = expected_outputs(events)
    first = start_worker(names, kafka_bootstrap, tmp_path, workers, "w1")
    run(produce(kafka_bootstrap, names.events, event_records(parts[0])))
    run(consume(kafka_bootstrap, names.verdicts, until=1, timeout=60))
    second = start_worker(names, kafka_bootstrap, tmp_path, workers, "w2")  # takes partitions of w1
    second.wait_for_log(b"partitions ready", timeout=90)
    run(produce(kafka_bootstrap, names.events, event_records(parts[1])))
    run(
        consume(kafka_bootstrap, names.verdicts, until=len(expected_outputs(parts[0] + parts[1])), timeout=90)
    )
    second.stop()  # its partitions back to w1
    run(produce(kafka_bootstrap, names.events, event_records(parts[2])))
    got = run(consume(kafka_bootstrap, names.verdicts, until=len(expected), timeout=120, settle=3))
    assert per_run(got, dedupe=True) == per_run(expected)
    kinds = Counter(type(event).__name__ for event in events)
    view = poll_fleet(first, lambda v: v["events"].get("tool_call", 0) >= kinds["ToolCall"], timeout=60)
    time.sleep(2)  # (a record shown twice would come now)
    view = poll_fleet(first, lambda v: True)
    assert view["events"]["tool_call"] == kinds["ToolCall"]
    assert view["events"]["tool_result"] == kinds["ToolResult"]
    assert sum(view["events"].values()) == len(events)


def test_an_exception_in_one_event_loses_no_other_event(
    kafka_bootstrap: str, names: Names, tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    events = fleet_events(runs=20, seed=5)
    failing = [events[40].event_id, events[333].event_id]
    start_worker(names, kafka_bootstrap, tmp_path, workers, "w1", LOOPWATCH_FAULT_EVENT_IDS=",".join(failing))
    run(produce(kafka_bootstrap, names.events, event_records(events)))
    expected = expected_outputs(e for e in events if e.event_id not in failing)
    assert expected != expected_outputs(events)  # the failing events matter
    got = run(consume(kafka_bootstrap, names.verdicts, until=len(expected), timeout=90, settle=2))
    assert per_run(got) == per_run(expected)
    letters = run(consume(kafka_bootstrap, names.dead_letter, until=2, timeout=30))
    assert sorted(json.loads(base64.b64decode(x["value_base64"]))["event_id"] for x in letters) == sorted(
        failing
    )
    assert all(x["reason"].startswith("processing failed: InjectedFault") for x in letters)


def test_kill_minus_nine_loses_and_invents_nothing(
    kafka_bootstrap: str, names: Names, tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    events = fleet_events(runs=80, seed=33)
    expected = expected_outputs(events)
    first = start_worker(names, kafka_bootstrap, tmp_path, workers, "w1")
    cut = len(events) // 2
    run(produce(kafka_bootstrap, names.events, event_records(events[:cut])))
    run(consume(kafka_bootstrap, names.verdicts, until=len(expected) // 4, timeout=60))
    first.kill()
    run(produce(kafka_bootstrap, names.events, event_records(events[cut:])))
    second = start_worker(names, kafka_bootstrap, tmp_path, workers, "w2")
    got = run(consume(kafka_bootstrap, names.verdicts, until=len(expected), timeout=120, settle=3))
    assert per_run(got, dedupe=True) == per_run(expected)
    by_id: dict[str, dict[str, object]] = {}
    for output in got:  # a repeated verdict id is the same verdict
        assert by_id.setdefault(output["verdict_id"], output) == output
    assert b"Recovery complete" in second.log.read_bytes()


def test_config_override_changes_one_agent_only(
    kafka_bootstrap: str, names: Names, tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    def loop(agent: str) -> list[Event]:
        from tests.helpers import Trace

        trace = Trace(f"{agent}-run", agent_id=agent)
        for _ in range(8):
            trace.both("read", {"path": "/missing"}, error="ENOENT")
        return trace.events

    worker = start_worker(names, kafka_bootstrap, tmp_path, workers, "w1")
    override = {"enabled": True, "warningThreshold": 3, "criticalThreshold": 5}
    run(produce(kafka_bootstrap, names.config, [(b"tuned", json.dumps(override).encode())]))
    worker.wait_for_log(b"config override applied")
    events = loop("tuned") + loop("plain")
    run(produce(kafka_bootstrap, names.events, event_records(events)))
    config = FleetConfig.enabled_default().with_agent_block("tuned", override)
    expected = expected_outputs(events, config)
    got = run(consume(kafka_bootstrap, names.verdicts, until=len(expected), timeout=60, settle=2))
    assert per_run(got) == per_run(expected)
    assert {o["agent_id"] for o in got} == {"tuned"}
    assert [o["action"] for o in got if o["type"] == "verdict"][:2] == ["warn", "block"]


def test_the_agents_preset_set_through_the_config_topic_survives_a_kill(
    kafka_bootstrap: str, names: Names, tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    """An agent put on the agents preset by a config-topic record gets the preset's verdicts
    (a same-call streak and the same failure, both under OpenClaw's thresholds), the other
    agent none; a worker killed mid-loop and replaced gives exactly the uninterrupted core's."""

    def loop(agent: str) -> list[Event]:
        from tests.helpers import Trace

        trace = Trace(f"{agent}-run", agent_id=agent)
        for index in range(8):
            line = f"/bin/bash: line {4100 + 15 * index}: javac: command not found"
            trace.both("javac", {"command": "javac -cp . Main.java"}, result=line)
        return trace.events

    entry = {"loopwatch": {"preset": "agents"}}
    first = start_worker(names, kafka_bootstrap, tmp_path, workers, "w1")
    run(produce(kafka_bootstrap, names.config, [(b"tuned", json.dumps(entry).encode())]))
    first.wait_for_log(b"config override applied")
    events = loop("tuned") + loop("plain")
    config = FleetConfig.enabled_default().with_agent_entry("tuned", entry)
    expected = expected_outputs(events, config)
    assert {o["detector"] for o in expected if o["type"] == "verdict"} == {"same_call_streak"}
    cut = 7  # mid-streak: "tuned" warned at its third call, its fourth proposed
    run(produce(kafka_bootstrap, names.events, event_records(events[:cut])))
    run(consume(kafka_bootstrap, names.verdicts, until=1, timeout=60))
    first.kill()
    run(produce(kafka_bootstrap, names.events, event_records(events[cut:])))
    second = start_worker(names, kafka_bootstrap, tmp_path, workers, "w2")
    got = run(consume(kafka_bootstrap, names.verdicts, until=len(expected), timeout=120, settle=3))
    assert per_run(got, dedupe=True) == per_run(expected)
    assert {o["agent_id"] for o in got} == {"tuned"}
    actions = [o["action"] for o in got if o["type"] == "verdict"]
    assert actions[0] == "warn"
    assert "block" in actions
    assert b"Recovery complete" in second.log.read_bytes()
