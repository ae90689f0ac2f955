"""``make bench-stream``: one loopwatch worker against a raw aiokafka passthrough, same broker.

(a) passthrough: an aiokafka consumer (group) that produces every record it reads to another
    topic — the ceiling for a Python worker on this machine; beside it, a faust agent that
    only forwards each event (faust's own per-event cost, the ceiling for a faust agent);
(b) loopwatch: one ``loopwatch worker`` process on the same events, then two of them; then
    one worker with the fleet-wide rules (tool outage, systemic loop: their facts re-keyed
    through the facts topic, the fleet table) on and off, alternating, medians side by side.

All three produce with the same settings (acks=all, no linger: the worker's since 2026-12-04;
linger 5 ms before).

Both are measured live: the consumer side is running, then the benchmark produces the
events as fast as it can and times until the last output arrives. Then (c) the worker's
event-to-verdict latency (p50/p99) at a fixed offered load of half its measured maximum:
``--latency-rounds`` rounds (3) of ``--latency-seconds`` (30 s), each on a fresh worker and
fresh topics; each round's figures, then the medians and the p99's spread. Its topics stamp
records with the broker's append time, so every verdict's latency is split into stages (load
generator's send, worker, collector); ``--trace`` runs the workers under
:mod:`tests.bench.worker_trace` and splits the worker's part too (fetch, batch, produce, GC).
``--offered N`` measures (c) alone, at N events/s. The broker: ``LOOPWATCH_TEST_KAFKA``.
Events: a generated fleet (50 calls per run, 30 % of runs in a 40-call loop).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from loopwatch.detectors.decoding import decode_event
from loopwatch.detectors.events import run_scope
from tests.bench.workloads import Workload, generate, to_wire
from tests.helpers import ROOT
from tests.integration.harness import Names, WorkerProcess, expected_outputs

#: The broker: ``make`` exports the local test broker's address (docker/services.sh).
BOOTSTRAP = os.environ.get("LOOPWATCH_TEST_KAFKA", "127.0.0.1:19092")


def workload(runs: int) -> list[tuple[bytes, bytes, str]]:
    """(key, value, event_id) for every event of a generated fleet."""
    lines = to_wire(generate(Workload("stream", 99, runs, 50, loop_pct=30)))
    out = []
    for line in lines:
        event = decode_event(line)
        out.append((run_scope(event).encode(), line, event.event_id))
    return out


async def create_topics(names: list[str], partitions: int = 4, configs: dict[str, str] | None = None) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=BOOTSTRAP)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(name, partitions, 1, topic_configs=configs or {}) for name in names]
        )
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
    producer = AIOKafkaProducer(bootstrap_servers=BOOTSTRAP, acks="all", linger_ms=0)  # as the worker
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


class TracedWorker(WorkerProcess):
    """A worker process under :mod:`tests.bench.worker_trace` (its probes written to ``trace_to``)."""

    PROBE = "tests.bench.worker_trace"

    def __init__(self, env: dict[str, str], log: Path, trace_to: Path, config: Path | None = None) -> None:
        self.env = env
        self.log = log
        args = [sys.executable, "-m", self.PROBE, str(trace_to), "worker"]
        if config is not None:
            args += ["--config", str(config)]
        self._out = log.open("ab")
        self.proc = subprocess.Popen(args, env=env, stdout=self._out, stderr=subprocess.STDOUT, cwd=ROOT)


class ProfiledWorker(TracedWorker):
    """A worker process under :mod:`tests.bench.profiled` (its statistics written to the path given)."""

    PROBE = "tests.bench.profiled"


def start_workers(
    names: Names,
    count: int,
    tmp: str,
    port: int,
    config: str | None = None,
    trace_to: Path | None = None,
) -> list[WorkerProcess]:
    """``count`` worker processes of one group, all ready (the group settled); ``trace_to``:
    one worker with the probes of :mod:`tests.bench.worker_trace`."""
    workers: list[WorkerProcess] = []
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
        log = Path(tmp) / f"{names.app_id}-{index}.log"
        if trace_to is not None:
            workers.append(TracedWorker(env, log, trace_to, config_file))
        else:
            workers.append(WorkerProcess(env, log, config_file))
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


#: The paced phase's topics stamp records with the broker's append time, so that every
#: verdict's latency splits into stages on one clock (:func:`stages`).
LOG_APPEND_TIME = {"message.timestamp.type": "LogAppendTime"}
#: How long the collector waits for missing verdicts once the load generator is done.
SETTLE_S = 10.0


class Paced(NamedTuple):
    """One paced round, per event id: when it was due, sent (wall clock, s) and appended
    (broker, ms); per verdict trigger: when its verdict was appended (ms) and received (s)."""

    due: dict[str, float]
    sent: dict[str, float]
    appended: dict[str, int]
    arrived: dict[str, tuple[float, int]]
    bench_gc: list[tuple[float, float, int]]  # this process's collections: (start, s, generation)
    expected: int  # verdict triggers the in-process core gives for the same events

    def latencies(self) -> list[float]:
        """Event-to-verdict latencies (ms), from the event's send to its verdict's arrival."""
        sent = self.sent
        return sorted((at - sent[t]) * 1000 for t, (at, _) in self.arrived.items() if t in sent)

    def behind_ms(self) -> list[float]:
        """How far (ms) behind its schedule each event was sent."""
        return sorted((self.sent[t] - due) * 1000 for t, due in self.due.items() if t in self.sent)


def _gc_probe(into: list[tuple[float, float, int]]) -> Any:
    started = [0.0]

    def probe(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            spent = time.perf_counter() - started[0]
            into.append((time.time() - spent, spent, int(info["generation"])))

    return probe


async def paced_latency(
    names: Names, records: list[tuple[bytes, bytes, str]], rate: float, linger_ms: int = 1
) -> Paced:
    """Every event sent on its schedule (``rate`` per second), every verdict collected.

    The generator sends, at each wake-up, every event whose time has come; ``behind`` says
    how late each one went out (a generator that falls behind sends a burst, and a
    saturated one measures itself). The collector is a task of the same process.
    """
    expected = expected_outputs(decode_event(value) for _, value, _ in records)
    want = {output["trigger_event_id"] for output in expected}
    collections: list[tuple[float, float, int]] = []
    gc.collect()
    gc.freeze()  # the workload and its expected verdicts: never scanned again while pacing
    probe = _gc_probe(collections)
    gc.callbacks.append(probe)
    due: dict[str, float] = {}
    sent: dict[str, float] = {}
    appended: dict[str, int] = {}
    arrived: dict[str, tuple[float, int]] = {}
    done = asyncio.Event()
    consumer = AIOKafkaConsumer(
        names.verdicts,
        bootstrap_servers=BOOTSTRAP,
        group_id=None,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=20,
    )
    producer = AIOKafkaProducer(bootstrap_servers=BOOTSTRAP, acks="all", linger_ms=linger_ms)
    await asyncio.gather(consumer.start(), producer.start())

    async def collect() -> None:
        settled = None
        while len(arrived) < len(want):
            if done.is_set():
                settled = settled or time.monotonic() + SETTLE_S
                if time.monotonic() > settled:
                    return
            batch = await consumer.getmany(timeout_ms=100)
            now = time.time()
            for messages in batch.values():
                for message in messages:
                    trigger = json.loads(message.value)["trigger_event_id"]
                    if trigger in want and trigger not in arrived:
                        arrived[trigger] = (now, message.timestamp)

    def on_append(event_id: str, future: asyncio.Future[Any]) -> None:
        if not future.cancelled() and future.exception() is None:
            appended[event_id] = future.result().timestamp

    collector = asyncio.create_task(collect())
    try:
        await asyncio.sleep(1)
        start = time.time() + 0.01
        index, count = 0, len(records)
        while index < count:
            now = time.time()
            first_due = start + index / rate
            if first_due > now:
                await asyncio.sleep(first_due - now)
                continue
            while index < count and start + index / rate <= now:  # everything due by now
                key, value, event_id = records[index]
                due[event_id] = start + index / rate
                sent[event_id] = time.time()
                future = await producer.send(names.events, value, key=key)
                future.add_done_callback(functools.partial(on_append, event_id))
                index += 1
        await producer.flush()
        done.set()
        await collector
    finally:
        gc.callbacks.remove(probe)
        gc.unfreeze()
        collector.cancel()
        await asyncio.gather(consumer.stop(), producer.stop(), return_exceptions=True)
    return Paced(due, sent, appended, arrived, collections, len(want))


def _pct(values: list[float], q: float) -> float:
    """The q-quantile of sorted ``values``, as the bench has always taken it."""
    return values[int(q * (len(values) - 1))] if values else float("nan")


def stages(paced: Paced, trace: dict[str, Any] | None) -> dict[str, dict[str, float]]:
    """Each verdict's latency split into stages (ms): the median over all verdicts, and the
    mean over the slowest 1 % (those at or above the p99).

    Without the worker's trace: to broker (the event's send to its append: generator
    producer's linger and round trip), worker (event append to verdict append), to
    collector (verdict append to its arrival here). With it, ``worker`` splits into fetch
    (event append to the start of the batch holding it), in batch (until the event's outputs
    were handed to the producer) and produce (from there to the verdict's append); beside
    them (not part of the sum), the length of the batch and the garbage collector's time in
    the worker between the two appends (``worker GC``).
    Broker timestamps are whole milliseconds: a stage next to one is ±1 ms.
    """
    rows: list[tuple[float, dict[str, float]]] = []
    published = (trace or {}).get("published", {})
    batches = (trace or {}).get("batches", [])
    worker_gc = sorted((trace or {}).get("gc", []))
    for trigger, (arrival, verdict_ms) in paced.arrived.items():
        if trigger not in paced.sent or trigger not in paced.appended:
            continue
        sent, appended = paced.sent[trigger], paced.appended[trigger] / 1000
        verdict = verdict_ms / 1000
        row = {"to broker": appended - sent}
        seen = published.get(trigger)
        if seen is not None and seen[1] < len(batches):
            batch_start, batch_end, _ = batches[seen[1]]
            row["fetch"] = batch_start - appended
            row["in batch"] = seen[0] - batch_start
            row["produce"] = verdict - seen[0]
            row["batch length"] = batch_end - batch_start
        else:
            row["worker"] = verdict - appended
        if trace is not None:
            row["worker GC"] = sum(
                spent for at, spent, _ in worker_gc if appended <= at + spent and at <= verdict
            )
        row["to collector"] = arrival - verdict
        rows.append((arrival - sent, {k: v * 1000 for k, v in row.items()}))
    if not rows:
        return {}
    rows.sort(key=lambda row: row[0])
    tail = rows[int(0.99 * (len(rows) - 1)) :]
    names = list(dict.fromkeys(k for _, row in rows for k in row))
    out = {
        "median": {k: statistics.median(row.get(k, 0.0) for _, row in rows) for k in names},
        "slowest 1 %": {k: statistics.fmean(row.get(k, 0.0) for _, row in tail) for k in names},
    }
    out["median"]["total"] = statistics.median(total * 1000 for total, _ in rows)
    out["slowest 1 %"]["total"] = statistics.fmean(total * 1000 for total, _ in tail)
    return out


def _gc_summary(collections: list[tuple[float, float, int]]) -> str:
    if not collections:
        return "none"
    by_gen = [sorted(s * 1000 for _, s, g in collections if g == gen) for gen in range(3)]
    return ", ".join(
        f"gen{gen} {len(spent)}× (max {max(spent):.1f} ms, total {sum(spent):.0f} ms)"
        for gen, spent in enumerate(by_gen)
        if spent
    )


def latency_round(
    records: list[tuple[bytes, bytes, str]], rate: float, tmp: str, port: int, trace: bool
) -> dict[str, Any]:
    """One paced round on a fresh worker and fresh topics; its figures (and stages), the load
    average before it started, and the CPU the worker and this process used (share of one core)."""
    load_before = os.getloadavg()[0]
    names = Names()
    asyncio.run(create_topics([names.events, names.verdicts], configs=LOG_APPEND_TIME))
    trace_file = Path(tmp) / f"{names.app_id}-trace.json"
    workers = start_workers(names, 1, tmp, port, trace_to=trace_file if trace else None)
    try:
        wall, own, worker_cpu = time.monotonic(), time.process_time(), _cpu_seconds(workers[0].proc.pid)
        paced = asyncio.run(paced_latency(names, records, rate))
        wall = time.monotonic() - wall
        own, worker_cpu = time.process_time() - own, _cpu_seconds(workers[0].proc.pid) - worker_cpu
    finally:
        workers[0].stop()
    traced = json.loads(trace_file.read_text()) if trace and trace_file.exists() else None
    latencies = paced.latencies()
    behind = paced.behind_ms()
    return {
        "events": len(paced.sent),
        "verdicts": len(latencies),
        "missing_verdicts": paced.expected - len(paced.arrived),
        "p50_ms": statistics.median(latencies),
        "p99_ms": _pct(latencies, 0.99),
        "max_ms": latencies[-1],
        "generator_behind_p99_ms": _pct(behind, 0.99),
        "generator_behind_ms": behind[-1],
        "stages_ms": stages(paced, traced),
        "bench_gc": _gc_summary(paced.bench_gc),
        "worker_gc": _gc_summary([(c[0], c[1], c[2]) for c in traced["gc"]]) if traced else None,
        "worker_tracked": traced["tracked"] if traced else None,
        "load_average_before": load_before,
        "load_average": os.getloadavg()[0],
        "worker_cpu": worker_cpu / wall,
        "bench_cpu": own / wall,
    }


def _cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of a process so far (Linux ``/proc``; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def print_round(k: int, result: dict[str, Any]) -> None:
    missing = result["missing_verdicts"]
    print(
        f"    round {k}: p50 {result['p50_ms']:.1f} ms, p99 {result['p99_ms']:.1f} ms, "
        f"max {result['max_ms']:.0f} ms ({result['verdicts']:,} verdicts of {result['events']:,} events"
        f"{f', {missing:,} MISSING' if missing else ''}); "
        f"generator behind: p99 {result['generator_behind_p99_ms']:.1f} ms, at most "
        f"{result['generator_behind_ms']:.0f} ms; load average {result['load_average_before']:.2f} before, "
        f"{result['load_average']:.2f} after; CPU: worker {result['worker_cpu']:.0%}, "
        f"load generator and collector {result['bench_cpu']:.0%} of a core",
        flush=True,
    )
    table = result["stages_ms"]
    if table:
        names = list(table["median"])
        print("      stages (ms)   " + "".join(f"{n:>14}" for n in names), flush=True)
        for label, row in table.items():
            print(f"      {label:14}" + "".join(f"{row[n]:14.1f}" for n in names), flush=True)
    print(f"      GC pauses: bench {result['bench_gc']}", end="", flush=True)
    print(f"; worker {result['worker_gc']}" if result["worker_gc"] else "", flush=True)
    if result["worker_tracked"]:
        print(
            f"      objects tracked by the worker's collector at the end: {result['worker_tracked']}",
            flush=True,
        )


def latency_rounds(rate: float, seconds: float, rounds: int, tmp: str, trace: bool) -> dict[str, Any]:
    """(c): ``rounds`` paced rounds of ``seconds`` at ``rate``; medians and spread."""
    runs = max(1, math.ceil(rate * seconds / 100))  # 100 events a run
    records = [
        (k, v.replace(b'"event_id":"e', b'"event_id":"l'), e.replace("e", "l", 1))
        for k, v, e in workload(runs)[: int(rate * seconds)]
    ]
    print(
        f"(c) latency at {rate:,.0f} events/s offered, {rounds} rounds of {len(records):,} events "
        f"({len(records) / rate:.0f} s), each on a fresh worker:",
        flush=True,
    )
    results = []
    for k in range(rounds):
        result = latency_round(records, rate, tmp, 16980, trace)
        print_round(k + 1, result)
        results.append(result)
    p99s = sorted(r["p99_ms"] for r in results)
    p50 = statistics.median(r["p50_ms"] for r in results)
    p99 = statistics.median(p99s)
    print(
        f"    median of {rounds} rounds: p50 {p50:.1f} ms, p99 {p99:.1f} ms "
        f"(rounds {', '.join(f'{v:.1f}' for v in p99s)}; target: p99 <= 25 ms)",
        flush=True,
    )
    return {
        "offered_eps": rate,
        "p50_ms": p50,
        "p99_ms": p99,
        "p99_spread_ms": [p99s[0], p99s[-1]],
        "generator_behind_ms": max(r["generator_behind_ms"] for r in results),
        "latency_rounds": results,
    }


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
    parser.add_argument("--latency-seconds", type=float, default=30.0, help="length of one paced round")
    parser.add_argument("--latency-rounds", type=int, default=3, help="paced rounds (medians and spread)")
    parser.add_argument("--fleet-rounds", type=int, default=3, help="fleet rules on/off pairs")
    parser.add_argument(
        "--offered",
        type=float,
        help="only (c), at this many events/s (results in .bench/stream-latency-results.json)",
    )
    parser.add_argument(
        "--trace",
        action="store_true",
        help="(c) on workers with timing probes (tests.bench.worker_trace): fetch, batch, produce, GC",
    )
    args = parser.parse_args(argv)
    Path(".bench").mkdir(exist_ok=True)
    print(f"loopwatch stream benchmark: broker {BOOTSTRAP}, 4 partitions", flush=True)
    if args.offered is not None:
        with tempfile.TemporaryDirectory() as tmp:
            latency = latency_rounds(args.offered, args.latency_seconds, args.latency_rounds, tmp, args.trace)
        Path(".bench/stream-latency-results.json").write_text(json.dumps(latency, indent=1))
        return 0
    records = workload(args.runs)
    print(f"throughput: {len(records)} events", flush=True)
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
        latency = latency_rounds(rate / 2, args.latency_seconds, args.latency_rounds, tmp, args.trace)
    results: dict[str, Any] = {
        "passthrough_eps": ceiling,
        "faust_noop_eps": noop,
        "worker_eps": rate,
        "ratio": rate / ceiling,
        "two_workers_eps": rates[2],
        "two_workers_ratio": rates[2] / ceiling,
        **latency,
        **fleet,
    }
    Path(".bench/stream-results.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
