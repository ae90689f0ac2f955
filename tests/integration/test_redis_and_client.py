"""Redis decision cache and the orchestrator client through the real pipeline."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import time
from pathlib import Path

import pytest

from loopwatch.config.stream_settings import parse_stream_settings
from loopwatch.streams.client.example_agent import agent_loop
from loopwatch.streams.client.kafka_client import LoopwatchClient
from tests.integration.harness import (
    Names,
    WorkerProcess,
    consume,
    event_records,
    expected_outputs,
    per_run,
    produce,
    run,
)
from tests.integration.test_worker import fleet_events, start_worker

pytestmark = pytest.mark.integration


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """A private redis-server for one test, so it can be stopped and started again."""

    def __init__(self, tmp: Path) -> None:
        self.port = free_port()
        self.dir = tmp
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.dir),
            ],
            stdout=subprocess.DEVNULL,
        )
        for _ in range(100):
            if self.cli("ping") == "PONG":
                return
            time.sleep(0.05)
        raise AssertionError("redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None

    def cli(self, *args: str) -> str:
        done = subprocess.run(["redis-cli", "-p", str(self.port), *args], capture_output=True, text=True)
        return done.stdout.strip()


@pytest.fixture
def private_redis(tmp_path: Path, redis_url: str) -> object:
    server = RedisServer(tmp_path)
    server.start()
    yield server
    server.stop()


def test_detection_survives_redis_and_the_cache_catches_up(
    kafka_bootstrap: str,
    names: Names,
    tmp_path: Path,
    workers: list[WorkerProcess],
    private_redis: RedisServer,
) -> None:
    events = fleet_events(runs=60, seed=5)
    expected = expected_outputs(events)
    start_worker(names, kafka_bootstrap, tmp_path, workers, "w1", LOOPWATCH_REDIS_URL=private_redis.url)
    half = len(events) // 2
    run(produce(kafka_bootstrap, names.events, event_records(events[:half])))
    first = run(consume(kafka_bootstrap, names.verdicts, until=1, timeout=60))
    assert first
    private_redis.stop()
    run(produce(kafka_bootstrap, names.events, event_records(events[half:])))
    got = run(consume(kafka_bootstrap, names.verdicts, until=len(expected), timeout=90, settle=2))
    assert per_run(got) == per_run(expected)  # verdicts kept flowing with Redis down
    private_redis.start()
    latest: dict[str, dict[str, object]] = {}
    for output in expected:
        scope = str(output["run_id"])
        if latest.get(scope, {}).get("type") != "abort":
            latest[scope] = output
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        cached = {
            scope: private_redis.cli("hget", f"loopwatch:run:{scope}", "verdict_id") for scope in latest
        }
        if all(cached[scope] == latest[scope]["verdict_id"] for scope in latest):
            break
        time.sleep(0.5)
    assert cached == {scope: output["verdict_id"] for scope, output in latest.items()}
    some = next(iter(latest))
    assert private_redis.cli("ttl", f"loopwatch:run:{some}") not in ("-1", "-2")


def test_example_agent_is_warned_then_blocked_then_aborted(
    kafka_bootstrap: str, names: Names, tmp_path: Path, workers: list[WorkerProcess], redis_url: str
) -> None:
    start_worker(names, kafka_bootstrap, tmp_path, workers, "w1", LOOPWATCH_REDIS_URL=redis_url)
    env = names.env(kafka_bootstrap, LOOPWATCH_REDIS_URL=redis_url)
    settings = parse_stream_settings({k: v for k, v in env.items() if k.startswith("LOOPWATCH_")})

    async def scenario() -> list[str]:
        async with LoopwatchClient(settings, agent_id="example") as client:
            return await agent_loop(client, f"{names.app_id}-run")

    said = asyncio.run(scenario())
    firsts = [action for index, action in enumerate(said) if action not in said[:index]]
    assert firsts == ["warn", "block", "abort"]
    assert said[-1] == "abort"


def test_replay_reads_history_from_a_kafka_topic(kafka_bootstrap: str, names: Names, tmp_path: Path) -> None:
    import json
    import os
    import sys

    from tests.helpers import FIXTURES

    path = FIXTURES / "openclaw-read-error-loop.events.jsonl"
    records = [(b"s3", line) for line in path.read_bytes().splitlines()]
    run(produce(kafka_bootstrap, names.events, records))
    env = {**os.environ, "LOOPWATCH_KAFKA_BOOTSTRAP": kafka_bootstrap}
    command = [sys.executable, "-m", "loopwatch", "replay", "--json"]
    from_topic = subprocess.run(
        [*command, f"kafka:{names.events}", "--since", "2000-01-01T00:00:00"],
        env=env,
        capture_output=True,
        check=True,
        timeout=120,
    )
    from_file = subprocess.run([*command, str(path)], capture_output=True, check=True, timeout=120)
    assert json.loads(from_topic.stdout)["runs"] == json.loads(from_file.stdout)["runs"]
    missing = subprocess.run(
        [*command, "kafka:no-such-topic-here"], env=env, capture_output=True, timeout=120
    )
    assert missing.returncode == 2
    assert b"no such topic" in missing.stderr
