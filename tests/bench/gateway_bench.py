"""``make bench-gateway``: ``POST /v1/decide`` on ``loopwatch gateway``, embedded and on Kafka.

A real gateway process and a concurrent aiohttp client on this machine: the round trips per
second at full speed (16 requests in flight), then the latency at a fixed 500 decisions per
second (p50 / p99, medians of three rounds of 10 s). Then the same with ``--kafka`` in front
of one real worker on the local broker (every decision goes through the input topic, the
worker and its reply). Each decision is a proposed call of one of 500 runs, half of them
looping (the same failing call again and again: warnings, blocks, aborts), the rest healthy;
results are reported in between, as an agent runtime does. Last, on the embedded gateway: the
same paced phase with 100,000 live runs held and four clients scraping ``/metrics`` as fast as
they can (target: p99 <= 10 ms); then ``/v1/decide`` at 200/s while four clients send the
largest body each route accepts (:mod:`tests.bench.big_bodies`; target: p99 <= 50 ms).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from typing import Any

import aiohttp

RUNS = 500
#: The broker of the Kafka phase: ``make`` exports the local test broker's address (docker/services.sh).
BOOTSTRAP = os.environ.get("LOOPWATCH_TEST_KAFKA", "127.0.0.1:19092")


def _call(n: int) -> tuple[dict[str, object], dict[str, object]]:
    run = f"bench-{n % RUNS}"
    looping = n % RUNS < RUNS // 2
    params = {"path": "/missing"} if looping else {"path": f"/f{n}"}
    call: dict[str, object] = {
        "run_id": run,
        "agent_id": "bench",
        "tool": "read",
        "params": params,
        "tool_call_id": f"c{n}",
    }
    result: dict[str, object] = {
        "type": "tool_result",
        "event_id": f"r{n}",
        "run_id": run,
        "agent_id": "bench",
        "tool": "read",
        "params": params,
        "tool_call_id": f"c{n}",
    }
    if looping:
        result["error"] = "ENOENT"
    else:
        result["result"] = {"content": [{"type": "text", "text": f"line {n}"}]}
    return call, result


TIMED_OUT = [0]
PACED_ROUNDS = 3
#: call number -> when its /v1/decide was sent and answered (wall clock, for the Kafka stages)
STAMPS: dict[int, tuple[float, float]] = {}


async def _one(session: aiohttp.ClientSession, url: str, n: int) -> float:
    call, result = _call(n)
    wall = time.time()
    started = time.perf_counter()
    async with session.post(url + "/v1/decide", json=call) as answer:
        body = await answer.json()
    spent = time.perf_counter() - started
    STAMPS[n] = (wall, wall + spent)
    TIMED_OUT[0] += bool(body.get("timed_out"))
    if body["decision"] in ("allow", "warn"):
        async with session.post(url + "/v1/events", json=result) as answer:
            await answer.read()
    return spent


async def full_speed(url: str, total: int, in_flight: int = 16) -> tuple[float, list[float]]:
    latencies: list[float] = []
    counter = iter(range(total))
    async with aiohttp.ClientSession() as session:

        async def worker() -> None:
            for n in counter:
                latencies.append(await _one(session, url, n))

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(in_flight)))
        return total / (time.perf_counter() - started), latencies


async def fixed_rate(url: str, rate: float, seconds: float, offset: int) -> list[float]:
    latencies: list[float] = []
    tasks = []
    async with aiohttp.ClientSession() as session:
        started = time.perf_counter()
        for k in range(int(rate * seconds)):
            delay = started + k / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(_one(session, url, offset + k)))
        latencies = list(await asyncio.gather(*tasks))
    return latencies


def _ms(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] * 1000


def _gateway(
    args: list[str], env: dict[str, str] | None = None, trace_to: str | None = None
) -> tuple[subprocess.Popen[str], str]:
    """A gateway process and its URL; ``trace_to``: under :mod:`tests.bench.worker_trace` (its GC pauses)."""
    probe = ["tests.bench.worker_trace", trace_to] if trace_to else ["loopwatch"]
    proc = subprocess.Popen(
        [sys.executable, "-m", *probe, "gateway", "--listen", "127.0.0.1:0", *args],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stderr is not None
    found = re.search(r"gateway at (http://\S+)", proc.stderr.readline())
    assert found, "the gateway did not start"
    return proc, found.group(1)


def measure(label: str, url: str, total: int, target: str) -> None:
    TIMED_OUT[0] = 0
    rps, latencies = asyncio.run(full_speed(url, total))
    print(
        f"gateway ({label}), /v1/decide at full speed, 16 in flight: {rps:,.0f} decisions/s, "
        f"p50 {_ms(latencies, 50):.2f} ms, p99 {_ms(latencies, 99):.2f} ms",
        flush=True,
    )
    # the paced phase three times: the median of each figure, and the spread of the p99
    rounds = []
    for k in range(PACED_ROUNDS):
        TIMED_OUT[0] = 0
        paced = asyncio.run(fixed_rate(url, 500, 10, 100_000 * (k + 1)))
        rounds.append((_ms(paced, 50), _ms(paced, 99), TIMED_OUT[0]))
    p50 = statistics.median(r[0] for r in rounds)
    p99s = sorted(r[1] for r in rounds)
    print(
        f"gateway ({label}), /v1/decide at 500/s, {PACED_ROUNDS} rounds of 10 s: median p50 {p50:.2f} ms, "
        f"median p99 {statistics.median(p99s):.2f} ms (rounds {', '.join(f'{v:.1f}' for v in p99s)}; "
        f"target: p99 <= {target}); timed out: {sum(r[2] for r in rounds)} of {PACED_ROUNDS * 5000}",
        flush=True,
    )


LIVE_RUNS = 100_000
SCRAPERS = 4


async def _hold_live_runs(url: str, runs: int) -> None:
    """One call each for ``runs`` runs that never end (NDJSON, 2,000 a request)."""
    async with aiohttp.ClientSession() as session:
        for start in range(0, runs, 2_000):
            lines = [
                json.dumps(
                    {
                        "type": "tool_call",
                        "event_id": f"live-{n}",
                        "run_id": f"live-{n}",
                        "tool": "read",
                        "params": {"path": f"/f{n}"},
                    }
                )
                for n in range(start, min(runs, start + 2_000))
            ]
            headers = {"Content-Type": "application/x-ndjson"}
            async with session.post(url + "/v1/events", data="\n".join(lines), headers=headers) as answer:
                assert answer.status == 200, await answer.text()


async def _paced_while_scraped(url: str, offset: int) -> tuple[list[float], int]:
    scrapes = [0]
    done = asyncio.Event()

    async def scrape() -> None:
        async with aiohttp.ClientSession() as session:
            while not done.is_set():
                async with session.get(url + "/metrics") as answer:
                    await answer.read()
                scrapes[0] += 1

    scrapers = [asyncio.create_task(scrape()) for _ in range(SCRAPERS)]
    try:
        return await fixed_rate(url, 500, 10, offset), scrapes[0]
    finally:
        done.set()
        await asyncio.gather(*scrapers)


def measure_scraped(url: str) -> None:
    started = time.perf_counter()
    asyncio.run(_hold_live_runs(url, LIVE_RUNS))
    held = time.perf_counter() - started
    rounds = [asyncio.run(_paced_while_scraped(url, 1_000_000 * (k + 1))) for k in range(PACED_ROUNDS)]
    p99s = sorted(_ms(latencies, 99) for latencies, _ in rounds)
    p50 = statistics.median(_ms(latencies, 50) for latencies, _ in rounds)
    scrapes = statistics.median(count / 10 for _, count in rounds)
    print(
        f"gateway (embedded, {LIVE_RUNS:,} live runs held in {held:.0f} s, {SCRAPERS} clients scraping "
        f"/metrics, median {scrapes:,.0f} scrapes/s), /v1/decide at 500/s, {PACED_ROUNDS} rounds of 10 s: "
        f"median p50 {p50:.2f} ms, median p99 {statistics.median(p99s):.2f} ms "
        f"(rounds {', '.join(f'{v:.1f}' for v in p99s)}; target: p99 <= 10 ms)",
        flush=True,
    )


LOG_APPEND_TIME = {"message.timestamp.type": "LogAppendTime"}


async def _create_stamped_topics(names: Any) -> None:
    """The input and replies topics with the broker's append time on every record."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=BOOTSTRAP)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(topic, 4, 1, topic_configs=LOG_APPEND_TIME) for topic in (names.events, names.replies)]
        )
    finally:
        await admin.close()


async def _read_all(topic: str) -> list[Any]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=BOOTSTRAP, enable_auto_commit=False)
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in range(4)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        records: list[Any] = []
        while [tp for tp in partitions if await consumer.position(tp) < ends[tp]]:
            for batch in (await consumer.getmany(timeout_ms=1000)).values():
                records.extend(batch)
        return records
    finally:
        await consumer.stop()


def kafka_stages(names: Any, first: int) -> None:
    """Each paced decision (call numbers from ``first``) split at the broker's append times:
    gateway in (request to the call's append on the input topic: HTTP, decode, produce with
    acks=all), worker (that append to the reply's append: fetch, apply, reply produce) and
    answer (the reply's append to the client's answer: the gateway's reply consumer, HTTP).
    Medians over all, means over the slowest 1 %; append times are whole milliseconds."""
    events, replies = asyncio.run(_read_all(names.events)), asyncio.run(_read_all(names.replies))
    call_ids: dict[str, tuple[int, int]] = {}  # event id -> (call number, appended ms)
    for record in events:
        event = json.loads(record.value)
        if event.get("type") == "tool_call" and str(event.get("tool_call_id", "")).startswith("c"):
            call_ids[event["event_id"]] = (int(event["tool_call_id"][1:]), record.timestamp)
    rows = []
    for record in replies:
        found = call_ids.get((record.key or b"").decode())
        if found is None or found[0] < first or found[0] not in STAMPS:
            continue
        sent, answered = STAMPS[found[0]]
        appended, replied = found[1] / 1000, record.timestamp / 1000
        rows.append((answered - sent, (appended - sent, replied - appended, answered - replied)))
    if not rows:
        print("    stages: no paced decision found on the topics", flush=True)
        return
    rows.sort()
    tail = rows[int(0.99 * (len(rows) - 1)) :]
    labels = ("gateway in", "worker", "answer", "total")
    for label, chosen, pick in (
        ("median", rows, statistics.median),
        ("slowest 1 %", tail, statistics.fmean),
    ):
        figures = [pick(row[1][i] * 1000 for row in chosen) for i in range(3)]
        figures.append(pick(row[0] * 1000 for row in chosen))
        print(
            f"    stages (ms), {label}, of {len(chosen):,} decisions: "
            + ", ".join(f"{name} {value:.1f}" for name, value in zip(labels, figures, strict=True)),
            flush=True,
        )


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--only",
        choices=("embedded", "kafka", "bodies"),
        help="measure one backend only (bodies: the embedded gateway's largest-bodies phase alone)",
    )
    parser.add_argument(
        "--trace",
        action="store_true",
        help="Kafka: worker and gateway with GC probes (tests.bench.worker_trace)",
    )
    args = parser.parse_args(argv)
    if args.only in (None, "embedded"):
        proc, url = _gateway([])
        try:
            measure("embedded", url, 10_000, "5 ms")
            measure_scraped(url)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(20)
    if args.only in (None, "embedded", "bodies"):
        from tests.bench.big_bodies import measure_big_bodies

        proc, url = _gateway([])  # (a gateway of its own: none of the runs above held)
        try:
            measure_big_bodies(url)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(20)
    if args.only in ("embedded", "bodies"):
        return 0
    import tempfile
    from pathlib import Path

    from tests.bench.stream_bench import TracedWorker, _gc_summary
    from tests.integration.harness import Names, WorkerProcess

    bootstrap = BOOTSTRAP
    names = Names()
    asyncio.run(_create_stamped_topics(names))
    with tempfile.TemporaryDirectory() as tmp:
        env = names.env(bootstrap, LOOPWATCH_WEB_PORT="16960", LOOPWATCH_DATA_DIR=f"{tmp}/worker")
        traces = {"worker": Path(tmp) / "worker-trace.json", "gateway": Path(tmp) / "gateway-trace.json"}
        log = Path(tmp) / "worker.log"
        worker = TracedWorker(env, log, traces["worker"]) if args.trace else WorkerProcess(env, log)
        try:
            worker.wait_ready()
            gateway_trace = str(traces["gateway"]) if args.trace else None
            proc, url = _gateway(["--kafka", bootstrap], names.env(bootstrap), gateway_trace)
            try:
                measure("Kafka, 1 worker", url, 3_000, "30 ms")
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(20)
        finally:
            worker.stop()
        for name, path in traces.items():
            if args.trace and path.exists():
                pauses = [(c[0], c[1], c[2]) for c in json.loads(path.read_text())["gc"]]
                print(f"    GC pauses in the {name} process: {_gc_summary(pauses)}", flush=True)
    kafka_stages(names, 100_000)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
