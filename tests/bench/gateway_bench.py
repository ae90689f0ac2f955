"""``make bench-gateway``: ``POST /v1/decide`` on ``loopwatch gateway``, embedded and on Kafka.

A real gateway process and a concurrent lean HTTP client (:mod:`tests.bench.http_load`) on this
machine: the round trips per second at full speed (16 requests in flight), then the latency at
a fixed 500 decisions per second (p50 / p99, medians of three rounds of 10 s). Then the same
with ``--kafka`` in front of one real worker on the local broker (every decision goes through
the input topic, the worker and its reply): full speed in three rounds (issue 43: >= 2,500
decisions/s per gateway process), then 500/s, 2,000/s and 2,500/s, three rounds of 10 s each
(p99 <= 30 ms at 2,000/s; at 2,500/s: the share of a core the gateway needs for it). Each phase
prints the CPU per decision of every process of the path (user + system, every thread, from
``/proc``): the gateway, the worker, the broker when it is this machine's JVM, and this
process, the load generator; with what that makes per core of each (the decisions one core of
it would do at that CPU per decision). Last come the stages of each Kafka phase, split at the
broker's append times (:func:`kafka_stages`). Each decision is a proposed call of one of 500
runs, half of them looping (the same failing call again and again: warnings, blocks, aborts),
the rest healthy; results are reported in between, as an agent runtime does. Last, on the
embedded gateway: the same paced phase with 100,000 live runs held and four clients scraping
``/metrics`` as fast as they can (target: p99 <= 10 ms); then ``/v1/decide`` at 200/s while
four clients send the largest body each route accepts (:mod:`tests.bench.big_bodies`; target:
p99 <= 50 ms).

``--only kafka --tree DIR`` measures the gateway and the worker of another checkout (a
worktree of an earlier commit with its core compiled in place) with this bench: run it in
turns with and without ``--tree`` for a before/after in one session.
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
from collections.abc import Callable, Coroutine
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import msgspec

from tests.bench import http_load
from tests.bench.http_load import LeanClient

RUNS = 500
T = TypeVar("T")
_ENCODE = msgspec.json.encode
_DECODE: Callable[[bytes], Any] = msgspec.json.decode
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


class _AiohttpClient:
    """``--client aiohttp``: the load sent with aiohttp's client (as before the lean one)."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._session = aiohttp.ClientSession()

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        headers = {"Content-Type": "application/json"}
        async with self._session.post(self._url + path, data=body, headers=headers) as answer:
            return answer.status, await answer.read()

    async def close(self) -> None:
        await self._session.close()


#: ``--client``: which client sends the load (the lean one: less of the machine's CPU).
CLIENT = "lean"


def _client(url: str) -> LeanClient | _AiohttpClient:
    return _AiohttpClient(url) if CLIENT == "aiohttp" else LeanClient(url)


def _run(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """The load's event loop: uvloop's with the lean client, asyncio's with aiohttp's (as before)."""
    return asyncio.run(main()) if CLIENT == "aiohttp" else http_load.run(main)


async def _one(client: LeanClient | _AiohttpClient, n: int) -> float:
    call, result = _call(n)
    wall = time.time()
    started = time.perf_counter()
    status, answer = await client.post("/v1/decide", _ENCODE(call))
    spent = time.perf_counter() - started
    assert status == 200, (status, answer)
    body = _DECODE(answer)
    STAMPS[n] = (wall, wall + spent)
    TIMED_OUT[0] += bool(body.get("timed_out"))
    if body["decision"] in ("allow", "warn"):
        status, answer = await client.post("/v1/events", _ENCODE(result))
        assert status in (200, 202), (status, answer)
    return spent


async def full_speed(url: str, total: int, in_flight: int = 16, offset: int = 0) -> tuple[float, list[float]]:
    latencies: list[float] = []
    counter = iter(range(offset, offset + total))
    client = _client(url)

    async def worker() -> None:
        for n in counter:
            latencies.append(await _one(client, n))

    try:
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(in_flight)))
        return total / (time.perf_counter() - started), latencies
    finally:
        await client.close()


async def fixed_rate(url: str, rate: float, seconds: float, offset: int) -> list[float]:
    tasks = []
    client = _client(url)
    try:
        started = time.perf_counter()
        for k in range(int(rate * seconds)):
            delay = started + k / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(_one(client, offset + k)))
        return list(await asyncio.gather(*tasks))
    finally:
        await client.close()


def _ms(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] * 1000


#: ``--tree``: the checkout whose gateway and worker are measured (None: this one).
TREE: str | None = None


def _tree_env(env: dict[str, str] | None) -> dict[str, str] | None:
    """``env`` (None: this process's) with ``--tree``'s code first on the path."""
    if TREE is None:
        return env
    return {**(os.environ if env is None else env), "PYTHONPATH": TREE}


def _gateway(
    args: list[str],
    env: dict[str, str] | None = None,
    trace_to: str | None = None,
    profile_to: str | None = None,
) -> tuple[subprocess.Popen[str], str]:
    """A gateway process and its URL; ``trace_to``: under :mod:`tests.bench.worker_trace` (its GC
    pauses); ``profile_to``: under :mod:`tests.bench.profiled` (cProfile, on its CPU time)."""
    probe = ["loopwatch"]
    if trace_to:
        probe = ["tests.bench.worker_trace", trace_to]
    elif profile_to:
        probe = ["tests.bench.profiled", profile_to]
    proc = subprocess.Popen(
        [sys.executable, "-m", *probe, "gateway", "--listen", "127.0.0.1:0", *args],
        stderr=subprocess.PIPE,
        text=True,
        env=_tree_env(env),
        cwd=TREE,  # (``-m`` puts the working directory first on sys.path)
    )
    assert proc.stderr is not None
    found = re.search(r"gateway at (http://\S+)", proc.stderr.readline())
    assert found, "the gateway did not start"
    return proc, found.group(1)


def measure(label: str, url: str, total: int, target: str, meter: CpuMeter | None = None) -> None:
    TIMED_OUT[0] = 0
    if meter is not None:
        meter.start()
    rps, latencies = _run(lambda: full_speed(url, total))
    print(
        f"gateway ({label}), /v1/decide at full speed, 16 in flight: {rps:,.0f} decisions/s, "
        f"p50 {_ms(latencies, 50):.2f} ms, p99 {_ms(latencies, 99):.2f} ms",
        flush=True,
    )
    if meter is not None:
        meter.report(total)
    # the paced phase three times: the median of each figure, and the spread of the p99
    rounds = []
    for k in range(PACED_ROUNDS):
        TIMED_OUT[0] = 0
        paced = _run(partial(fixed_rate, url, 500, 10, 100_000 * (k + 1)))
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
    rounds = [_run(partial(_paced_while_scraped, url, 1_000_000 * (k + 1))) for k in range(PACED_ROUNDS)]
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


def kafka_stages(
    names: Any, phases: list[tuple[str, range]], batches: list[tuple[float, float, int]] | None = None
) -> None:
    """Each Kafka decision of each phase (its call numbers) split at the broker's append times:
    gateway in (request to the call's append on the input topic: HTTP, decode, produce with
    acks=all), worker (that append to the reply's append: fetch, apply, reply produce) and
    answer (the reply's append to the client's answer: the gateway's reply consumer, HTTP).
    Medians over all, means over the slowest 1 %; append times are whole milliseconds.

    ``batches`` (``--trace``: the worker's input batches, when each began and ended) split the
    worker's stage at the batch that applied the call (the first to begin after its append):
    fetch (the append to the batch's start), batch (its start to its end: every record of it
    applied, its facts and table writes) and reply (the batch's end to the reply's append:
    negative when the reply left before the batch ended)."""
    import bisect

    events, replies = asyncio.run(_read_all(names.events)), asyncio.run(_read_all(names.replies))
    call_ids: dict[str, tuple[int, int]] = {}  # event id -> (call number, appended ms)
    for record in events:
        event = json.loads(record.value)
        if event.get("type") == "tool_call" and str(event.get("tool_call_id", "")).startswith("c"):
            call_ids[event["event_id"]] = (int(event["tool_call_id"][1:]), record.timestamp)
    begins = [batch[0] for batch in batches or ()]
    split: dict[int, tuple[float, tuple[float, ...]]] = {}  # call number -> total, stages
    for record in replies:
        found = call_ids.get((record.key or b"").decode())
        if found is None or found[0] not in STAMPS:
            continue
        sent, answered = STAMPS[found[0]]
        appended, replied = found[1] / 1000, record.timestamp / 1000
        stages: tuple[float, ...] = (appended - sent, replied - appended, answered - replied)
        if batches:
            at = bisect.bisect_left(begins, appended)
            if at == len(batches) or batches[at][0] > replied:
                continue  # (no batch of the trace applied it)
            begin, end, _ = batches[at]
            stages += (begin - appended, end - begin, replied - end)
        split[found[0]] = (answered - sent, stages)
    labels = ["gateway in", "worker", "answer"]
    if batches:
        labels += ["(worker: fetch", "batch", "reply)"]
    for phase, numbers in phases:
        rows = sorted(split[n] for n in numbers if n in split)
        if not rows:
            print(f"    stages, {phase}: no decision found on the topics", flush=True)
            continue
        tail = rows[int(0.99 * (len(rows) - 1)) :]
        for label, chosen, pick in (
            ("median", rows, statistics.median),
            ("slowest 1 %", tail, statistics.fmean),
        ):
            figures = [(name, pick(row[1][i] * 1000 for row in chosen)) for i, name in enumerate(labels)]
            figures.insert(3, ("total", pick(row[0] * 1000 for row in chosen)))
            print(
                f"    stages (ms), {phase}, {label}, of {len(chosen):,} decisions: "
                + ", ".join(f"{name} {value:.1f}" for name, value in figures),
                flush=True,
            )


#: The Kafka phases: full speed (16 in flight) in rounds of this many decisions, then paced.
FULL_ROUNDS = 3
FULL_DECISIONS = 3_000
#: The paced rates on Kafka: #24 §3's 500/s, issue 43's 2,000/s (target: p99 <= 30 ms) and its
#: 2,500/s per gateway process (the gateway's share of a core at that rate, and its CPU per decision).
KAFKA_RATES = (500, 2_000, 2_500)
#: The warm-up's first call number: beyond every phase's (their numbers must not repeat: the
#: stages pair each call number's reply with its round's stamps).
WARM_UP = 50_000_000
#: Issue 43's figure for one gateway process on Kafka at full speed.
KAFKA_TARGET = 2_500


def _proc_cpu_s(pid: int) -> float:
    """User and system CPU seconds of a process so far, every thread (Linux ``/proc``)."""
    from tests.bench.scale_bench import cpu_s

    try:
        return cpu_s(pid)
    except OSError:
        return 0.0


class CpuMeter:
    """The CPU each process of the Kafka path used over a phase: the gateway, the worker, the
    broker (when it is this machine's JVM) and this process (the load generator)."""

    def __init__(self, pids: dict[str, int | None]) -> None:
        self.pids = {name: pid for name, pid in pids.items() if pid is not None}
        self._from: dict[str, float] = {}
        self._wall = 0.0
        self.load_from = 0.0

    def start(self) -> None:
        self._from = {name: _proc_cpu_s(pid) for name, pid in self.pids.items()}
        self._from["load generator"] = time.process_time()
        self._wall = time.perf_counter()
        self.load_from = os.getloadavg()[0]

    def report(self, decisions: int) -> dict[str, float]:
        """µs of CPU per decision, per process; printed with the load average and per core."""
        wall = time.perf_counter() - self._wall
        used = {name: _proc_cpu_s(pid) - self._from[name] for name, pid in self.pids.items()}
        used["load generator"] = time.process_time() - self._from["load generator"]
        per = {name: seconds / decisions * 1e6 for name, seconds in used.items()}
        total = sum(per.values())
        print(
            "    CPU per decision (µs): "
            + ", ".join(
                f"{name} {value:.0f} ({used[name] / wall:.0%} of a core)" for name, value in per.items()
            )
            + f"; all {total:.0f}; load average {self.load_from:.2f} -> {os.getloadavg()[0]:.2f}",
            flush=True,
        )
        per_core = ", ".join(
            f"{name} {1e6 / per[name]:,.0f}" for name in ("gateway", "worker", "broker") if per.get(name)
        )
        cores = os.cpu_count() or 1
        print(
            f"    decisions/s per core of CPU: {per_core}; these {len(per)} processes on this "
            f"machine's {cores} cores at this CPU per decision: {cores * 1e6 / total:,.0f}",
            flush=True,
        )
        return per


def measure_kafka(
    url: str, label: str, meter: CpuMeter, rates: tuple[int, ...] = KAFKA_RATES
) -> list[tuple[str, range]]:
    """Full speed in rounds, then each paced rate; the call numbers of each phase (for the stages)."""
    phases: list[tuple[str, range]] = []
    TIMED_OUT[0] = 0
    speeds, p50s, p99s = [], [], []
    meter.start()
    for k in range(FULL_ROUNDS):
        rps, latencies = _run(partial(full_speed, url, FULL_DECISIONS, offset=10_000 * k))
        speeds.append(rps)
        p50s.append(_ms(latencies, 50))
        p99s.append(_ms(latencies, 99))
    print(
        f"gateway ({label}), /v1/decide at full speed, 16 in flight, {FULL_ROUNDS} rounds of "
        f"{FULL_DECISIONS:,}: median {statistics.median(speeds):,.0f} decisions/s (rounds "
        f"{', '.join(f'{r:,.0f}' for r in sorted(speeds))}; target >= {KAFKA_TARGET:,}), median p50 "
        f"{statistics.median(p50s):.2f} ms, median p99 {statistics.median(p99s):.2f} ms; timed out: "
        f"{TIMED_OUT[0]} of {FULL_ROUNDS * FULL_DECISIONS:,}",
        flush=True,
    )
    meter.report(FULL_ROUNDS * FULL_DECISIONS)
    phases.append(("full speed", range(0, 10_000 * FULL_ROUNDS)))
    for index, rate in enumerate(rates):
        base = 100_000 + 300_000 * index
        rounds = []
        meter.start()
        for k in range(PACED_ROUNDS):
            TIMED_OUT[0] = 0
            started = time.perf_counter()
            paced = _run(partial(fixed_rate, url, rate, 10, base + 100_000 * k))
            served = len(paced) / (time.perf_counter() - started)  # (the last answer ends the round)
            rounds.append((_ms(paced, 50), _ms(paced, 99), TIMED_OUT[0], served))
        p50 = statistics.median(r[0] for r in rounds)
        ordered = sorted(r[1] for r in rounds)
        print(
            f"gateway ({label}), /v1/decide at {rate:,}/s, {PACED_ROUNDS} rounds of 10 s: median p50 "
            f"{p50:.2f} ms, median p99 {statistics.median(ordered):.2f} ms (rounds "
            f"{', '.join(f'{v:.1f}' for v in ordered)}; target: p99 <= 30 ms); timed out: "
            f"{sum(r[2] for r in rounds)} of {PACED_ROUNDS * rate * 10:,}; answered "
            f"{statistics.median(r[3] for r in rounds):,.0f}/s (median; a round ends at its last answer)",
            flush=True,
        )
        meter.report(PACED_ROUNDS * rate * 10)
        phases.append((f"{rate:,}/s", range(base, base + 300_000)))
    return phases


def _arguments(argv: list[str] | None) -> Any:
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
        "--rates",
        type=int,
        nargs="*",
        default=list(KAFKA_RATES),
        help="the paced phases on Kafka, decisions per second (default: %(default)s; none: full speed only)",
    )
    parser.add_argument(
        "--tree",
        help="run the gateway and the worker from this checkout (a worktree of another commit, "
        "its core compiled in place as tests.bench.before_after does): this bench, that code",
    )
    parser.add_argument(
        "--trace",
        action="store_true",
        help="Kafka: worker and gateway with probes (tests.bench.worker_trace): their GC pauses, "
        "and the worker's stage split at its input batches",
    )
    parser.add_argument(
        "--client",
        choices=("lean", "aiohttp"),
        default="lean",
        help="the load's HTTP client: tests.bench.http_load's (default: the least CPU taken from the "
        "processes measured) or aiohttp's (as the bench sent it before 2026-12-07 16:00 UTC)",
    )
    parser.add_argument(
        "--profile",
        metavar="OUT",
        help="Kafka: the gateway under cProfile on its CPU time, its statistics written to OUT "
        "(read them with python -m pstats OUT); not with --trace",
    )
    parser.add_argument(
        "--profile-worker",
        metavar="OUT",
        help="Kafka: the worker under cProfile on its CPU time, as --profile the gateway",
    )
    args = parser.parse_args(argv)
    if args.profile_worker and (args.trace or args.tree is not None):
        parser.error("--profile-worker profiles this checkout's worker: not with --trace or --tree")
    if args.trace and args.profile:
        parser.error("--profile and --trace: one probe at a time")
    if args.profile and (args.tree is not None or args.only in ("embedded", "bodies")):
        parser.error(
            "--profile profiles this checkout's gateway on Kafka: not with --tree or --only embedded|bodies"
        )
    if args.tree is not None and args.trace:
        parser.error("--trace runs this checkout's worker: not with --tree")
    return args


def _worker(args: Any, env: dict[str, str], log: Path, traces: dict[str, Path]) -> Any:
    """The bench's worker process: traced, profiled or as it is."""
    from tests.bench.stream_bench import ProfiledWorker, TracedWorker
    from tests.integration.harness import WorkerProcess

    if args.trace:
        return TracedWorker(env, log, traces["worker"])
    if args.profile_worker:
        return ProfiledWorker(env, log, Path(args.profile_worker))
    return WorkerProcess(env, log)


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    global TREE, CLIENT
    CLIENT = args.client
    TREE = None if args.tree is None else str(Path(args.tree).resolve())
    if args.only in (None, "embedded"):
        proc, url = _gateway([])
        try:
            measure("embedded", url, 10_000, "5 ms", CpuMeter({"gateway": proc.pid}))
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

    from tests.bench.stream_bench import _gc_summary
    from tests.integration.harness import Names

    bootstrap = BOOTSTRAP
    names = Names()
    asyncio.run(_create_stamped_topics(names))
    with tempfile.TemporaryDirectory() as tmp:
        env = _tree_env(names.env(bootstrap, LOOPWATCH_WEB_PORT="16960", LOOPWATCH_DATA_DIR=f"{tmp}/worker"))
        assert env is not None
        traces = {"worker": Path(tmp) / "worker-trace.json", "gateway": Path(tmp) / "gateway-trace.json"}
        log = Path(tmp) / "worker.log"
        worker = _worker(args, env, log, traces)
        try:
            worker.wait_ready()
            gateway_trace = str(traces["gateway"]) if args.trace else None
            proc, url = _gateway(["--kafka", bootstrap], names.env(bootstrap), gateway_trace, args.profile)
            if TREE is not None:
                print(f"(the gateway and the worker of {TREE})", flush=True)
            try:
                from tests.bench.scale_bench import broker_pid

                _run(lambda: full_speed(url, 500, offset=WARM_UP))  # (warm-up: connections, first runs)
                from tests.bench.profiled import START

                if args.profile:
                    proc.send_signal(START)  # (tests.bench.profiled: from here on)
                if args.profile_worker:
                    worker.proc.send_signal(START)
                pids = {"gateway": proc.pid, "worker": worker.proc.pid, "broker": broker_pid(bootstrap)}
                phases = measure_kafka(url, "Kafka, 1 worker", CpuMeter(pids), tuple(args.rates))
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(20)
        finally:
            worker.stop()
        batches = None
        for name, path in traces.items():
            if args.trace and path.exists():
                trace = json.loads(path.read_text())
                pauses = [(c[0], c[1], c[2]) for c in trace["gc"]]
                print(f"    GC pauses in the {name} process: {_gc_summary(pauses)}", flush=True)
                if name == "worker":
                    batches = [(b[0], b[1], b[2]) for b in trace["batches"]]
                    sizes = [b[2] for b in batches]
                    print(
                        f"    input batches in the worker: {len(sizes):,}, median "
                        f"{statistics.median(sizes):.0f} records, mean {statistics.fmean(sizes):.1f}, "
                        f"the largest {max(sizes):,}",
                        flush=True,
                    )
    try:
        kafka_stages(names, phases, batches)
    finally:  # (the shared broker keeps no topic of a finished bench: every client reads their metadata)
        from tests.integration.harness import delete_topics

        asyncio.run(delete_topics(bootstrap, [names.app_id]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
