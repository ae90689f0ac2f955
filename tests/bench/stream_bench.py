"""``make bench-stream``: one loopwatch worker against a raw aiokafka passthrough, same broker.

(a) passthrough: an aiokafka consumer (group) that produces every record it reads to another
    topic — the ceiling for a Python worker on this machine; beside it, a faust agent that
    only forwards each event (faust's own per-event cost, the ceiling for a faust agent);
(b) loopwatch: one ``loopwatch worker`` process on the same events, then two of them; then
    one worker with the fleet-wide rules (tool outage, systemic loop: their facts re-keyed
    through the facts topic, the fleet table) on and off, alternating, medians side by side.

All three produce with the same settings (acks=all, linger 5 ms).

Both are measured live: the consumer side is running, then the benchmark produces the
events as fast as it can and times until the last output arrives. Then (c) the worker's
event-to-verdict latency (p50/p99) at a fixed offered load of half its measured maximum.
Events: a generated fleet (50 calls per run, 30 % of runs in a 40-call loop).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from loopwatch.detectors.decoding import decode_event
from loopwatch.detectors.events import run_scope
from tests.bench.workloads import Workload, generate, to_wire
from tests.integration.harness import Names, WorkerProcess, expected_outputs

BOOTSTRAP = "127.0.0.1:19092"


def workload(runs: int) -> list[tuple[bytes, bytes, str]]:
    """(key, value, event_id) for every event of a generated fleet."""
    lines = to_wire(generate(Workload("stream", 99, runs, 50, loop_pct=30)))
    out = []
    for line in lines:
        event = decode_event(line)
        out.append((run_scope(event).encode(), line, event.event_id))
    return out


async def create_topics(names: list[str], partitions: int = 4) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=BOOTSTRAP)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1) for name in names])
    finally:
        await admin.close()


async def produce_all(topic: str, records: list[tuple[bytes, bytes, str]]) -> float:
    producer = AIOKafkaProducer(bootstrap_servers=BOOTSTRAP, acks="all", linger_ms=5)
    await producer.start()
    start = time.perf_counter()
    try:
        for key, value, _ in records:
            await producer.send(topic, value, key=key)
        await producer.flush()
    finally:
        await producer.stop()
    return start


async def passthrough(records: list[tuple[bytes, bytes, str]]) -> float:
    """Events/s of consume → produce in one Python process."""
    tag = f"pt-{int(time.time())}"
    await create_topics([f"{tag}.in", f"{tag}.out"])
    consumer = AIOKafkaConsumer(
        f"{tag}.in",
        bootstrap_servers=BOOTSTRAP,
        group_id=tag,
        auto_offset_reset="earliest",
        enable_auto_commit=True,
    )
    producer = AIOKafkaProducer(bootstrap_servers=BOOTSTRAP, acks="all", linger_ms=5)
    sink = AIOKafkaConsumer(
        f"{tag}.out", bootstrap_servers=BOOTSTRAP, group_id=None, auto_offset_reset="earliest"
    )
    await asyncio.gather(consumer.start(), producer.start(), sink.start())

    async def pump() -> None:
        async for message in consumer:
            await producer.send(f"{tag}.out", message.value, key=message.key)

    async def drain() -> float:
        seen = 0
        while seen < len(records):
            batch = await sink.getmany(timeout_ms=500)
            seen += sum(len(messages) for messages in batch.values())
        return time.perf_counter()

    task = asyncio.create_task(pump())
    await asyncio.sleep(3)  # group joined
    start = await produce_all(f"{tag}.in", records)
    end = await drain()
    task.cancel()
    await asyncio.gather(consumer.stop(), producer.stop(), sink.stop(), return_exceptions=True)
    return len(records) / (end - start)


async def faust_noop(records: list[tuple[bytes, bytes, str]], tmp: str) -> float:
    """Events/s of a faust agent that forwards every event (separate process)."""
    import subprocess
    import sys

    tag = f"noop-{int(time.time())}"
    await create_topics([f"{tag}.in", f"{tag}.out"])
    log = Path(tmp) / "noop.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.bench.faust_noop", BOOTSTRAP, tag, f"{tag}.in", f"{tag}.out"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 90
        while b"Worker ready" not in log.read_bytes():
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit(f"faust no-op agent did not start:\n{log.read_text()[-2000:]}")
            await asyncio.sleep(0.2)
        sink = AIOKafkaConsumer(
            f"{tag}.out", bootstrap_servers=BOOTSTRAP, group_id=None, auto_offset_reset="earliest"
        )
        await sink.start()
        start = await produce_all(f"{tag}.in", records)
        seen = 0
        while seen < len(records):
            batch = await sink.getmany(timeout_ms=500)
            seen += sum(len(messages) for messages in batch.values())
        end = time.perf_counter()
        await sink.stop()
    finally:
        proc.terminate()
        proc.wait(30)
    return len(records) / (end - start)


async def collect(topic: str, want: set[str], sent: dict[str, float], deadline: float) -> dict[str, float]:
    """Arrival time of verdicts whose trigger is in ``want`` (all of them, or the deadline)."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=BOOTSTRAP, group_id=None, auto_offset_reset="earliest"
    )
    await consumer.start()
    arrived: dict[str, float] = {}
    try:
        while len(arrived) < len(want) and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=200)
            now = time.perf_counter()
            for messages in batch.values():
                for message in messages:
                    trigger = json.loads(message.value)["trigger_event_id"]
                    if trigger in want:
                        arrived.setdefault(trigger, now)
    finally:
        await consumer.stop()
    return arrived


RUN_ONLY = (
    "{tools: {loopDetection: {enabled: true}}, "
    "loopwatch: {detectors: {toolOutage: {enabled: false}, systemicLoop: {enabled: false}}}}"
)


def start_workers(
    names: Names, count: int, tmp: str, port: int, config: str | None = None
) -> list[WorkerProcess]:
    """``count`` worker processes of one group, all ready (the group settled)."""
    workers = []
    config_file = None
    if config is not None:
        config_file = Path(tmp) / f"{names.app_id}.json5"
        config_file.write_text(config)
    for index in range(count):
        env = names.env(
            BOOTSTRAP,
            LOOPWATCH_WEB_PORT=str(port + index),
            LOOPWATCH_DATA_DIR=f"{tmp}/{names.app_id}-{index}",
        )
        workers.append(WorkerProcess(env, Path(tmp) / f"{names.app_id}-{index}.log", config_file))
    for worker in workers:
        worker.wait_ready()
    if count > 1:  # every member ready once more after the last join's rebalance
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if workers[0].log.read_bytes().count(b"Worker ready") >= count:  # after each join
                break
            time.sleep(0.2)
        time.sleep(2)
    return workers


def _counted(workers: list[WorkerProcess], prefixes: tuple[str, ...]) -> int:
    """The sum of the workers' /metrics series starting with ``prefixes``."""
    import urllib.request

    total = 0
    for worker in workers:
        url = f"http://127.0.0.1:{worker.env['LOOPWATCH_WEB_PORT']}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            for line in response.read().decode().splitlines():
                if line.startswith(prefixes):
                    total += int(float(line.rsplit(" ", 1)[1]))
    return total


def _events_processed(workers: list[WorkerProcess]) -> int:
    """Events the workers processed so far (valid and invalid), from their /metrics."""
    return _counted(workers, ("loopwatch_events_total", "loopwatch_invalid_events_total"))


async def _fleet_caught_up(names: Names, workers: list[WorkerProcess], ends: AIOKafkaConsumer) -> None:
    """Until the workers applied every record of the fleet facts topic (none when the rules are off)."""
    partitions = [TopicPartition(names.facts, p) for p in range(4)]
    while True:
        end = sum((await ends.end_offsets(partitions)).values())
        if await asyncio.to_thread(_counted, workers, ("loopwatch_fleet_fact_records_total",)) >= end:
            return
        await asyncio.sleep(0.02)


async def worker_throughput(
    names: Names, records: list[tuple[bytes, bytes, str]], workers: list[WorkerProcess]
) -> float:
    """Events/s from the first record produced until the workers processed every record
    (their /metrics, polled every 20 ms), and every expected verdict is on the topic."""
    expected = expected_outputs(decode_event(value) for _, value, _ in records)
    want = {output["trigger_event_id"] for output in expected}
    collector = asyncio.create_task(collect(names.verdicts, want, {}, time.monotonic() + 600))
    ends = AIOKafkaConsumer(bootstrap_servers=BOOTSTRAP)  # started before: not timed
    await ends.start()
    await asyncio.sleep(1)
    try:
        start = await produce_all(names.events, records)
        while await asyncio.to_thread(_events_processed, workers) < len(records):
            await asyncio.sleep(0.02)
        await _fleet_caught_up(names, workers, ends)  # the fleet rules' part of the work done too
        end = time.perf_counter()
    finally:
        await ends.stop()
    arrived = await collector
    if len(arrived) < len(want):
        raise SystemExit(f"worker published {len(arrived)} of {len(want)} verdict triggers")
    return len(records) / (max(end, max(arrived.values())) - start)


async def paced_latency(
    names: Names, records: list[tuple[bytes, bytes, str]], rate: float, linger_ms: int = 1
) -> tuple[list[float], float]:
    """Event-to-verdict latencies (ms) at a paced offered load, and how far (ms) the load
    generator fell behind its schedule at worst (a saturated generator measures itself)."""
    expected = expected_outputs(decode_event(value) for _, value, _ in records)
    want = {output["trigger_event_id"] for output in expected}
    sent: dict[str, float] = {}
    collector = asyncio.create_task(collect(names.verdicts, want, sent, time.monotonic() + 600))
    await asyncio.sleep(1)
    producer = AIOKafkaProducer(bootstrap_servers=BOOTSTRAP, acks="all", linger_ms=linger_ms)
    await producer.start()
    start = time.perf_counter()
    behind = 0.0
    for index, (key, value, event_id) in enumerate(records):
        due = start + index / rate
        now = time.perf_counter()
        if due > now:
            await asyncio.sleep(due - now)
        else:
            behind = max(behind, now - due)
        sent[event_id] = time.perf_counter()
        await producer.send(names.events, value, key=key)
    await producer.flush()
    await producer.stop()
    arrived = await collector
    return sorted((arrived[t] - sent[t]) * 1000 for t in arrived if t in sent), behind * 1000


def fleet_cost(records: list[tuple[bytes, bytes, str]], tmp: str, rounds: int) -> dict[str, float]:
    """One worker with the fleet rules on and off (run-only), alternating; medians and their ratio."""
    measured: dict[str, list[float]] = {"on": [], "off": []}
    for _ in range(rounds):
        for mode in ("on", "off"):
            names = Names()
            workers = start_workers(names, 1, tmp, 16970, None if mode == "on" else RUN_ONLY)
            try:
                measured[mode].append(asyncio.run(worker_throughput(names, records, workers)))
            finally:
                workers[0].stop()
    on, off = statistics.median(measured["on"]), statistics.median(measured["off"])
    print(
        f"    fleet rules on / off:  {on:10,.0f} / {off:,.0f} events/s (medians of {rounds}, alternating): "
        f"on = {on / off:.0%} of run-only, cost {1 - on / off:.0%}",
        flush=True,
    )
    return {"fleet_on_eps": on, "fleet_off_eps": off, "fleet_on_ratio": on / off}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=400, help="runs of 50 calls (2 events each)")
    parser.add_argument("--latency-seconds", type=float, default=30.0)
    parser.add_argument("--fleet-rounds", type=int, default=3, help="fleet rules on/off pairs")
    args = parser.parse_args(argv)
    records = workload(args.runs)
    print(f"loopwatch stream benchmark: {len(records)} events, broker {BOOTSTRAP}, 4 partitions", flush=True)
    ceiling = asyncio.run(passthrough(records))
    print(f"(a) aiokafka passthrough:  {ceiling:10,.0f} events/s", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        noop = asyncio.run(faust_noop(records, tmp))
        print(
            f"    faust no-op agent:     {noop:10,.0f} events/s  ({noop / ceiling:.0%} of passthrough)",
            flush=True,
        )
        rates: dict[int, float] = {}
        for count in (1, 2):
            names = Names()
            workers = start_workers(names, count, tmp, 16990 + 2 * count)
            try:
                rates[count] = asyncio.run(worker_throughput(names, records, workers))
            finally:
                for worker in workers:
                    worker.stop()
            label = f"(b) loopwatch, {count} worker{'s' if count > 1 else ''}:"
            print(
                f"{label:26}{rates[count]:10,.0f} events/s  ({rates[count] / ceiling:.0%} of passthrough)",
                flush=True,
            )
        fleet = fleet_cost(records, tmp, args.fleet_rounds)
        rate = rates[1]
        offered = rate / 2
        count = min(len(records), int(offered * args.latency_seconds))
        second = Names()
        second_records = [
            (k, v.replace(b'"event_id":"e', b'"event_id":"l'), e.replace("e", "l", 1))
            for k, v, e in records[:count]
        ]
        workers = start_workers(second, 1, tmp, 16980)
        try:
            latencies, behind = asyncio.run(paced_latency(second, second_records, offered))
        finally:
            workers[0].stop()
    p50 = statistics.median(latencies)
    p99 = latencies[int(0.99 * (len(latencies) - 1))]
    print(
        f"(c) latency at {offered:,.0f} events/s offered ({count} events, {len(latencies)} verdicts): "
        f"p50 {p50:.1f} ms, p99 {p99:.1f} ms (load generator at most {behind:.0f} ms behind schedule)",
        flush=True,
    )
    results: dict[str, Any] = {
        "passthrough_eps": ceiling,
        "faust_noop_eps": noop,
        "worker_eps": rate,
        "ratio": rate / ceiling,
        "two_workers_eps": rates[2],
        "two_workers_ratio": rates[2] / ceiling,
        "offered_eps": offered,
        "p50_ms": p50,
        "p99_ms": p99,
        "generator_behind_ms": behind,
        **fleet,
    }
    Path(".bench").mkdir(exist_ok=True)
    Path(".bench/stream-results.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
