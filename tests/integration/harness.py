"""Integration harness: real worker processes, a real broker, real Redis (no fakes)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgspec
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from loopwatch.config.fleet import FleetConfig
from loopwatch.detectors.decoding import decode_event
from loopwatch.detectors.engine import Engine
from loopwatch.detectors.events import Event, encode_event, encode_output, run_scope
from tests.helpers import FIXTURES, ROOT

LOOPWATCH = str(Path(sys.executable).with_name("loopwatch"))
#: ``loopwatch`` on the sources of the core even where compiled modules sit beside them
#: (``LOOPWATCH_PURE_PYTHON=1``: :mod:`tests.pure_python`); run from the repository's root.
PURE_WORKER = (
    "import sys; from tests.pure_python import use_sources; use_sources(); "
    "from loopwatch.streams.cli.main import main; sys.exit(main())"
)


#: The app ids of this process's :class:`Names`: their topics are deleted when the session ends
#: (tests/integration/conftest.py), so a broker that serves many test runs does not keep them.
CREATED_APP_IDS: list[str] = []


class Names:
    """Unique app id and topic names for one test."""

    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:8]
        self.app_id = f"lwt-{tag}"
        CREATED_APP_IDS.append(self.app_id)
        self.events = f"lwt-{tag}.events"
        self.verdicts = f"lwt-{tag}.verdicts"
        self.dead_letter = f"lwt-{tag}.dead-letter"
        self.config = f"lwt-{tag}.config"
        self.alerts = f"lwt-{tag}.alerts"
        self.facts = f"lwt-{tag}.fleet-facts"
        self.replies = f"lwt-{tag}.decisions"

    def env(self, bootstrap: str, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            LOOPWATCH_KAFKA_BOOTSTRAP=bootstrap,
            LOOPWATCH_APP_ID=self.app_id,
            LOOPWATCH_TOPIC_EVENTS=self.events,
            LOOPWATCH_TOPIC_VERDICTS=self.verdicts,
            LOOPWATCH_TOPIC_DEAD_LETTER=self.dead_letter,
            LOOPWATCH_TOPIC_CONFIG=self.config,
            LOOPWATCH_TOPIC_ALERTS=self.alerts,
            LOOPWATCH_TOPIC_FLEET_FACTS=self.facts,
            LOOPWATCH_TOPIC_REPLIES=self.replies,
            LOOPWATCH_PARTITIONS="4",
            LOOPWATCH_LOG_FORMAT="json",
            LOOPWATCH_STARTUP_TIMEOUT_S="30",
        )
        env.update(extra)
        return env


class WorkerProcess:
    """``loopwatch worker`` as a child process, with its log in a file."""

    def __init__(
        self, env: dict[str, str], log: Path, config: Path | None = None, tree: Path | None = None
    ) -> None:
        """``tree``: run the release checked out there (:mod:`tests.release_tree`) instead."""
        self.env = env
        self.log = log
        args = [LOOPWATCH, "worker"] if tree is None else [sys.executable, "-m", "loopwatch", "worker"]
        if tree is None and env.get("LOOPWATCH_PURE_PYTHON"):  # the interpreted core, as the tests use
            args = [sys.executable, "-c", PURE_WORKER, "worker"]
        if config is not None:
            args += ["--config", str(config)]
        self._out = log.open("ab")
        self.proc = subprocess.Popen(
            args, env=env, stdout=self._out, stderr=subprocess.STDOUT, cwd=ROOT if tree is None else tree
        )

    def wait_ready(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if b"Worker ready" in self.log.read_bytes():
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"worker exited ({self.proc.returncode}):\n{self.tail()}")
            time.sleep(0.2)
        raise AssertionError(f"worker not ready after {timeout}s:\n{self.tail()}")

    def wait_for_log(self, text: bytes, timeout: float = 60.0) -> None:
        """Until the worker's log holds ``text`` (fails with the log's tail after ``timeout``)."""
        deadline = time.monotonic() + timeout
        while text not in self.log.read_bytes():
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} not logged in {timeout}s:\n{self.tail()}")
            time.sleep(0.1)

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def kill(self) -> None:
        """``kill -9``: no shutdown, no commit."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self._out.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._out.close()


def fixture_events(prefix_runs: bool = True) -> list[Event]:
    """Every real fixture's events, run and session ids prefixed by the fixture's name."""
    events: list[Event] = []
    for path in sorted(FIXTURES.glob("*.events.jsonl")):
        name = path.name.split(".")[0].removeprefix("openclaw-")
        for line in path.read_bytes().splitlines():
            event = decode_event(line)
            if prefix_runs:
                event = msgspec.structs.replace(
                    event,
                    run_id=f"{name}/{event.run_id}" if event.run_id else None,
                    session_id=f"{name}/{event.session_id}" if event.session_id else None,
                )
            events.append(event)
    return events


def expected_outputs(events: Iterable[Event], config: FleetConfig | None = None) -> list[dict[str, Any]]:
    engine = Engine(config or FleetConfig.enabled_default())
    return [json.loads(encode_output(out)) for event in events for out in engine.process(event)]


async def delete_topics(bootstrap: str, app_ids: Iterable[str]) -> None:
    """The topics of these app ids (their :class:`Names` and their workers' internal ones)."""
    from aiokafka.admin import AIOKafkaAdminClient

    ours = tuple(f"{app_id}{sep}" for app_id in app_ids for sep in ".-")
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    await admin.start()
    try:
        names = [topic for topic in await admin.list_topics() if topic.startswith(ours)]
        if names:
            await admin.delete_topics(names)
    finally:
        await admin.close()


async def produce(bootstrap: str, topic: str, records: Iterable[tuple[bytes | None, bytes]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all")
    await producer.start()
    try:
        for key, value in records:
            await producer.send(topic, value, key=key)
        await producer.flush()
    finally:
        await producer.stop()


def event_records(events: Iterable[Event]) -> list[tuple[bytes | None, bytes]]:
    return [(run_scope(event).encode(), encode_event(event)) for event in events]


async def consume(
    bootstrap: str, topic: str, until: int, timeout: float = 60.0, settle: float = 0.0
) -> list[dict[str, Any]]:
    """Read ``topic`` from the start until ``until`` records arrived (or the timeout)."""
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=None,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    out: list[dict[str, Any]] = []
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and len(out) < until:
            batch = await consumer.getmany(timeout_ms=500)
            for messages in batch.values():
                out.extend(json.loads(message.value) for message in messages)
        if settle:
            end = time.monotonic() + settle
            while time.monotonic() < end:
                batch = await consumer.getmany(timeout_ms=200)
                for messages in batch.values():
                    out.extend(json.loads(message.value) for message in messages)
    finally:
        await consumer.stop()
    return out


def per_run(outputs: Iterable[dict[str, Any]], dedupe: bool = False) -> dict[str, list[dict[str, Any]]]:
    """Outputs grouped by run (scope), in order; optionally without repeated verdict ids."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    seen: set[str] = set()
    for output in outputs:
        if dedupe:
            if output["verdict_id"] in seen:
                continue
            seen.add(output["verdict_id"])
        scope = output["run_id"] or f"session:{output['session_id']}"
        grouped.setdefault(scope, []).append(output)
    return grouped


def run(coro: Any) -> Any:
    return asyncio.run(coro)
