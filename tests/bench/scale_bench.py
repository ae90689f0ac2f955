"""``make bench-scale``: memory, failover and CPU per event at 10k, 100k and 1M active runs.

Every part runs real ``loopwatch worker`` processes (8 partitions) on fresh topics of the
broker at ``--kafka``; its topics are deleted afterwards.

memory    one worker holds every run. Its resident memory (``VmRSS``) once ready, and again
          after N synthesised runs were applied and committed and the worker went quiet:
          per run = (RSS at N − RSS idle) / N. Its ``/metrics`` (active runs, state bytes)
          and how long one scrape takes; the longest ``/health`` answer while the expiry
          timer (every 15 s here) scans the table; how long the load took.
failover  two workers of one group hold N runs; ``kill -9`` of one, then at once one new
          event of a run it owned, whose history makes that event a verdict
          (``generic_repeat``: its 11th identical call). Measured: kill → that verdict on
          the verdict topic from the survivor, per store (``memory``, ``rocksdb``,
          ``rocksdb+standby``: one standby replica), with the survivor's changelog records
          read to recover. The group's session timeout (``--session-timeout``) is part of it.
cpu       a fixed load (the stream bench's fleet: 50 calls per run, 30 % of runs looping)
          through 1, 2 and 4 workers on 8 partitions: process CPU time (utime + stime of
          ``/proc/<pid>/stat``, every thread) per event, net of each worker's idle CPU,
          with the fleet view on (the default: every worker also reads every event and
          verdict), off, and kept by one ``loopwatch view`` process beside workers without it
          (its CPU counted with theirs); the broker's CPU per event beside it when its process
          is found.

Synthesised runs cost little to make: one ``tool_call`` and its ``tool_result`` each (so
every run has a state), keyed by run id, spread over ``--agents`` agent ids, produced in
large batches per partition (murmur2, the partitioner of aiokafka and of the worker).
Results go to ``.bench/scale-results.json`` (updated after every measurement).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from loopwatch.config.fleet import FleetConfig
from loopwatch.detectors.decoding import decode_event
from loopwatch.detectors.engine import Engine
from loopwatch.detectors.events import run_scope
from loopwatch.streams.partitions import key_partition
from tests.bench.workloads import Workload, generate, to_wire
from tests.integration.harness import LOOPWATCH, Names, WorkerProcess, delete_topics

BOOTSTRAP = "127.0.0.1:19092"
PARTITIONS = 8
STORES = ("memory", "rocksdb", "rocksdb+standby")
PARTS = ("memory", "failover", "cpu")
RESULTS = Path(".bench/scale-results.json")
TICKS = os.sysconf("SC_CLK_TCK")
#: a run's events, keyed by its run id (the worker's run scope)
CALL = (
    b'{"type":"tool_call","event_id":"%s-c%d","run_id":"%s","agent_id":"agent-%d","tool":"read",'
    b'"params":{"path":"/src/%s"},"tool_call_id":"%s-t%d"}'
)
RESULT = (
    b'{"type":"tool_result","event_id":"%s-r%d","run_id":"%s","agent_id":"agent-%d","tool":"read",'
    b'"params":{"path":"/src/%s"},"tool_call_id":"%s-t%d",'
    b'"result":{"content":[{"type":"text","text":"%s"}]}}'
)


def partition_for(key: bytes, partitions: int = PARTITIONS) -> int:
    """The key's partition: aiokafka's default partitioner, and the worker's own (expiry)."""
    return key_partition(key, partitions)


# -- processes --------------------------------------------------------------------------------


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_s(pid: int) -> float:
    """Process CPU time (user + system, every thread), seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def broker_pid(bootstrap: str) -> int | None:
    """The local broker's JVM for ``bootstrap``'s port (``docker/kafka/broker.sh``), if any."""
    port = bootstrap.split(",")[0].rsplit(":", 1)[1]
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if b"kafka.Kafka" in cmdline and f"run-{port}/conf".encode() in cmdline:
            return int(proc.name)
    return None


def broker_data_dir(pid: int | None) -> Path | None:
    """The local broker's ``log.dirs`` (its server.properties, from its command line)."""
    if pid is None:
        return None
    for arg in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"):
        if arg.endswith(b"server.properties"):
            for line in Path(arg.decode()).read_text().splitlines():
                if line.startswith("log.dirs="):
                    return Path(line.split("=", 1)[1].split(",")[0])
    return None


def topic_bytes(data_dir: Path | None, prefix: str) -> dict[str, int]:
    """Bytes on the broker's disk per topic named ``prefix``… (the prefix cut off)."""
    if data_dir is None:
        return {}
    sizes: dict[str, int] = {}
    for part in data_dir.glob(f"{prefix}*"):
        if part.name.endswith("-delete"):
            continue
        topic = part.name.rsplit("-", 1)[0].removeprefix(prefix).lstrip(".-")
        sizes[topic] = sizes.get(topic, 0) + sum(
            f.stat().st_size for f in part.iterdir() if f.suffix == ".log"
        )
    return sizes


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


@dataclass
class Fleet:
    """Worker processes of one group on fresh topics."""

    bootstrap: str
    tmp: str
    port: int
    extra: dict[str, str]
    names: Names = field(default_factory=Names)
    workers: list[WorkerProcess] = field(default_factory=list)

    def start(self, count: int, store: str = "memory", **env: str) -> None:
        standby = store == "rocksdb+standby"
        for _ in range(count):
            settings = {
                "LOOPWATCH_PARTITIONS": str(PARTITIONS),
                "LOOPWATCH_WEB_PORT": str(self.port + len(self.workers)),
                "LOOPWATCH_DATA_DIR": f"{self.tmp}/{self.names.app_id}-{len(self.workers)}",
                "LOOPWATCH_STORE": "rocksdb" if store.startswith("rocksdb") else "memory",
                "LOOPWATCH_STANDBY_REPLICAS": "1" if standby else "0",
                **self.extra,
                **env,
            }
            log = Path(self.tmp) / f"{self.names.app_id}-{len(self.workers)}.log"
            self.workers.append(WorkerProcess(self.names.env(self.bootstrap, **settings), log))
        for worker in self.workers:
            worker.wait_ready()
        self.settle()

    def settle(self, timeout: float = 120.0) -> None:
        """Until the live workers' last assignments cover every input partition once."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            live = [w for w in self.workers if w.proc.poll() is None]
            owned = [assignment(w, self.names.events) for w in live]
            if all(o is not None for o in owned):
                sets = [o for o in owned if o is not None]
                if sum(len(s) for s in sets) == PARTITIONS and len(set().union(*sets)) == PARTITIONS:
                    time.sleep(1)
                    if [assignment(w, self.names.events) for w in live] == owned:
                        return
            time.sleep(0.2)
        raise SystemExit(f"the group did not settle in {timeout:.0f} s:\n{self.workers[-1].tail()}")

    def url(self, worker: WorkerProcess, path: str) -> str:
        return f"http://127.0.0.1:{worker.env['LOOPWATCH_WEB_PORT']}{path}"

    def stop(self) -> None:
        for worker in self.workers:
            worker.stop()


def log_records(worker: WorkerProcess, event: str) -> list[dict[str, Any]]:
    """The worker's JSON log records named ``event``."""
    out = []
    for line in worker.log.read_bytes().splitlines():
        if line.startswith(b"{") and event.encode() in line:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if record.get("event") == event:
                out.append(record)
    return out


def assignment(worker: WorkerProcess, topic: str) -> set[int] | None:
    """The input partitions of the worker's last ``partitions ready`` (None: not yet)."""
    ready = log_records(worker, "partitions ready")
    if not ready:
        return None
    pattern = re.compile(re.escape(topic) + r"\[(\d+)\]$")
    return {int(m.group(1)) for name in ready[-1]["positions"] if (m := pattern.match(name))}


def metrics(fleet: Fleet, worker: WorkerProcess) -> tuple[dict[str, float], float]:
    """The worker's unlabelled /metrics series, and how long the scrape took (s)."""
    started = time.perf_counter()
    with urllib.request.urlopen(fleet.url(worker, "/metrics"), timeout=600) as response:
        text = response.read().decode()
    took = time.perf_counter() - started
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            values[name] = values.get(name, 0.0) + float(value)
            base = name.split("{", 1)[0]
            if base != name:
                values[base] = values.get(base, 0.0) + float(value)
    return values, took


def quiet(pids: list[int], below: float = 0.10, timeout: float = 900.0) -> float:
    """Until every process used less than ``below`` of a core over each of 3 seconds in a row;
    how long that took."""
    started = time.monotonic()
    calm = 0
    last = {pid: cpu_s(pid) for pid in pids}
    while calm < 3 and time.monotonic() - started < timeout:
        time.sleep(1.0)
        now = {pid: cpu_s(pid) for pid in pids}
        calm = calm + 1 if all(now[p] - last[p] < below for p in pids) else 0
        last = now
    return time.monotonic() - started


# -- the broker -------------------------------------------------------------------------------


async def committed_up_to_end(bootstrap: str, group: str, topics: list[str], timeout: float) -> None:
    """Until ``group`` committed the end offset of every partition of ``topics``."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    ends = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await admin.start()
    await ends.start()
    try:
        deadline = time.monotonic() + timeout
        tps = [TopicPartition(t, p) for t in topics for p in range(PARTITIONS)]
        while time.monotonic() < deadline:
            end = await ends.end_offsets(tps)
            committed = await admin.list_consumer_group_offsets(group)
            if all(tp in committed and committed[tp].offset >= end[tp] for tp in tps if end[tp]):
                return
            await asyncio.sleep(0.5)
        raise SystemExit(f"group {group} did not commit {topics} in {timeout:.0f} s")
    finally:
        await ends.stop()
        await admin.close()


async def produce(bootstrap: str, topic: str, records: Iterable[tuple[int, bytes, bytes]]) -> int:
    """``(partition, key, value)`` records, in batches of up to 512 KiB per partition, in order
    within each partition; how many."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", linger_ms=20, max_batch_size=512 * 1024
    )
    await producer.start()
    count = 0
    batches: dict[int, Any] = {}
    inflight: list[asyncio.Future[Any]] = []
    try:
        for partition, key, value in records:
            batch = batches.get(partition)
            if batch is None:
                batch = batches[partition] = producer.create_batch()
            if batch.append(key=key, value=value, timestamp=None) is None:
                inflight.append(await producer.send_batch(batch, topic, partition=partition))
                batch = batches[partition] = producer.create_batch()
                batch.append(key=key, value=value, timestamp=None)
                if len(inflight) >= 32:
                    await asyncio.gather(*inflight)
                    inflight.clear()
            count += 1
        for partition, batch in batches.items():
            if batch.record_count():
                inflight.append(await producer.send_batch(batch, topic, partition=partition))
        await asyncio.gather(*inflight)
    finally:
        await producer.stop()
    return count


# -- loads ------------------------------------------------------------------------------------


def synthesised(tag: str, runs: int, agents: int, calls: int = 1) -> Iterator[tuple[int, bytes, bytes]]:
    """``runs`` runs of ``calls`` calls (different files) and their results each, run after run
    (keys: run ids), made as they are sent."""
    prefix = tag.encode()
    for n in range(runs):
        run = b"%s-%07d" % (prefix, n)
        agent = n % agents
        partition = partition_for(run)
        for i in range(calls):
            path = b"file_%d.py" % n if calls == 1 else b"file_%d_%d.py" % (n, i)
            yield partition, run, CALL % (run, i, run, agent, path, run, i)
            yield partition, run, RESULT % (run, i, run, agent, path, run, i, b"%d lines" % ((n + i) % 977))


@dataclass(frozen=True)
class Probe:
    """A run per partition whose history makes its next call a verdict."""

    history: list[tuple[int, bytes, bytes]]
    next_call: dict[int, tuple[bytes, bytes, str]]  # partition -> (key, value, event id)


def probes(tag: str) -> Probe:
    """One looping run per partition: ``k`` identical calls (and results), where the in-process
    core gives a verdict for call ``k + 1`` (checked here, never assumed)."""
    runs: dict[int, bytes] = {}
    n = 0
    while len(runs) < PARTITIONS:
        run = b"%s-probe-%d" % (tag.encode(), n)
        runs.setdefault(partition_for(run), run)
        n += 1
    history: list[tuple[int, bytes, bytes]] = []
    next_call: dict[int, tuple[bytes, bytes, str]] = {}
    for partition, run in sorted(runs.items()):
        engine = Engine(FleetConfig.enabled_default())
        for i in range(50):
            call = CALL % (run, i, run, 0, b"loop", run, i)
            outputs = engine.process(decode_event(call))
            if outputs:
                next_call[partition] = (run, call, f"{run.decode()}-c{i}")
                break
            history.append((partition, run, call))
            result = RESULT % (run, i, run, 0, b"loop", run, i, b"same")
            engine.process(decode_event(result))
            history.append((partition, run, result))
        else:
            raise SystemExit("the in-process core gives no verdict for 50 identical calls")
    return Probe(history, next_call)


def stream_fleet(runs: int) -> list[tuple[int, bytes, bytes]]:
    """The stream bench's fleet (50 calls per run, 30 % looping) as partitioned records."""
    out = []
    for line in to_wire(generate(Workload("scale-cpu", 99, runs, 50, loop_pct=30))):
        key = run_scope(decode_event(line)).encode()
        out.append((partition_for(key), key, line))
    return out


# -- the parts --------------------------------------------------------------------------------


class Results:
    def __init__(self, path: Path, args: argparse.Namespace) -> None:
        self.path = path
        self.data: dict[str, Any] = {
            "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            "argv": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "machine": {"cpus": os.cpu_count(), "mem_gib": round(_mem_gib(), 1)},
            "memory": [],
            "failover": [],
            "cpu": [],
        }

    def add(self, part: str, row: dict[str, Any]) -> None:
        row["load_average"] = load_average()
        row["at"] = time.strftime("%H:%M:%S UTC", time.gmtime())
        self.data[part].append(row)
        self.path.parent.mkdir(exist_ok=True)
        self.path.write_text(json.dumps(self.data, indent=1))


def _mem_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) / 1024 / 1024
    return 0.0


def load_runs(
    fleet: Fleet, runs: int, agents: int, calls: int = 1, extra: Iterable[tuple[int, bytes, bytes]] = ()
) -> float:
    """Produce ``runs`` synthesised runs (and ``extra``) and wait until the group committed
    them all; seconds from the first record sent."""
    started = time.perf_counter()

    def records() -> Iterator[tuple[int, bytes, bytes]]:
        yield from extra
        yield from synthesised(fleet.names.app_id, runs, agents, calls)

    asyncio.run(produce(fleet.bootstrap, fleet.names.events, records()))
    asyncio.run(
        committed_up_to_end(
            fleet.bootstrap,
            fleet.names.app_id,
            [fleet.names.events, fleet.names.facts],
            timeout=max(600.0, runs * calls / 100),
        )
    )
    return time.perf_counter() - started


def longest_health(fleet: Fleet, worker: WorkerProcess, seconds: float) -> float:
    """The longest ``/health`` round trip (s) over ``seconds`` of polling every 50 ms."""
    longest = 0.0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.perf_counter()
        with urllib.request.urlopen(fleet.url(worker, "/health"), timeout=600) as response:
            response.read()
        longest = max(longest, time.perf_counter() - started)
        time.sleep(0.05)
    return longest


def measure_memory(args: argparse.Namespace, results: Results, tmp: str, runs: int, store: str) -> None:
    fleet = Fleet(args.kafka, tmp, args.web_port, args.extra)
    try:
        fleet.start(1, store, LOOPWATCH_EXPIRY_INTERVAL_S="15")
        worker = fleet.workers[0]
        pid = worker.proc.pid
        quiet([pid])
        idle = rss_mib(pid)
        took = load_runs(fleet, runs, args.agents, args.calls)
        settled = quiet([pid])
        loaded = rss_mib(pid)
        scrapes = [metrics(fleet, worker) for _ in range(3)]
        values = scrapes[-1][0]
        stall = longest_health(fleet, worker, 20.0)
        disk = topic_bytes(broker_data_dir(broker_pid(args.kafka)), fleet.names.app_id)
        active = int(values.get("loopwatch_active_runs", 0))
        state_bytes = int(values.get("loopwatch_state_bytes", 0))
        per_run = round((loaded - idle) * 1024 * 1024 / runs)
        scrape = statistics.median(s for _, s in scrapes)
        row = {
            "store": store,
            "runs": runs,
            "calls_per_run": args.calls,
            "agents": args.agents,
            "load_s": round(took, 1),
            "quiet_after_s": round(settled, 1),
            "rss_idle_mib": round(idle, 1),
            "rss_mib": round(loaded, 1),
            "bytes_per_run": per_run,
            "active_runs": active,
            "state_bytes": state_bytes,
            "scrape_s": round(scrape, 3),
            "longest_health_s": round(stall, 3),
            "fleet_states_unstorable": int(values.get("loopwatch_fleet_states_unstorable_total", 0)),
            "topic_bytes": disk,
        }
        results.add("memory", row)
        print(
            f"memory  {store:16} {runs:>9,} runs: load {took:7.1f} s, RSS {idle:7.1f} → {loaded:8.1f} MiB "
            f"= {per_run:,} B/run (state {state_bytes / max(active, 1):,.0f} B/run, "
            f"{active:,} active); /metrics {scrape:.3f} s; longest /health {stall:.3f} s; "
            f"on the broker: {', '.join(f'{t} {b / 1e6:,.1f} MB' for t, b in sorted(disk.items()) if b)}",
            flush=True,
        )
    finally:
        fleet.stop()
        asyncio.run(delete_topics(args.kafka, [fleet.names.app_id]))


async def _failover(
    fleet: Fleet, victim: WorkerProcess, survivor: WorkerProcess, probe: Probe, timeout: float
) -> dict[str, Any]:
    """kill -9 ``victim``, send the next call of a probe run it owned; time its verdict."""
    owned = assignment(victim, fleet.names.events) or set()
    partition = min(owned)
    key, value, event_id = probe.next_call[partition]
    verdicts = AIOKafkaConsumer(bootstrap_servers=fleet.bootstrap, group_id=None)
    producer = AIOKafkaProducer(bootstrap_servers=fleet.bootstrap, acks="all", linger_ms=0)
    await asyncio.gather(verdicts.start(), producer.start())
    tps = [TopicPartition(fleet.names.verdicts, p) for p in range(PARTITIONS)]
    verdicts.assign(tps)
    await verdicts.seek_to_end(*tps)
    for tp in tps:
        await verdicts.position(tp)
    before = len(log_records(survivor, "partitions ready"))
    try:
        killed = time.perf_counter()
        victim.kill()
        await producer.send_and_wait(fleet.names.events, value, key=key, partition=partition)
        sent = time.perf_counter()
        ready_at: float | None = None
        arrived: float | None = None
        while arrived is None and time.perf_counter() - killed < timeout:
            batch = await verdicts.getmany(timeout_ms=20)
            now = time.perf_counter()
            for messages in batch.values():
                for message in messages:
                    if json.loads(message.value)["trigger_event_id"] == event_id:
                        arrived = now
            if ready_at is None and len(log_records(survivor, "partitions ready")) > before:
                ready_at = now
        if arrived is None:
            raise SystemExit(f"no verdict for {event_id} within {timeout:.0f} s:\n{survivor.tail()}")
    finally:
        await asyncio.gather(verdicts.stop(), producer.stop())
    ready = log_records(survivor, "partitions ready")[before:]
    replayed = sum(sum(r.get("changelog_replayed", {}).values()) for r in ready)
    runs_replayed = sum(
        n
        for r in ready
        for name, n in r.get("changelog_replayed", {}).items()
        if name.startswith(f"{fleet.names.app_id}-runs-changelog")
    )
    runs_partitions = {
        name
        for r in ready
        for name in r.get("changelog_replayed", {})
        if name.startswith(f"{fleet.names.app_id}-runs-changelog")
    }
    return {
        "failover_s": round(arrived - killed, 2),
        "runs_changelog_partitions_replayed": len(runs_partitions),
        "send_s": round(sent - killed, 3),
        "survivor_ready_s": None if ready_at is None else round(ready_at - killed, 2),
        "rebalances": len(ready),
        "changelog_replayed": replayed,
        "runs_changelog_replayed": runs_replayed,
    }


def measure_failover(args: argparse.Namespace, results: Results, tmp: str, runs: int, store: str) -> None:
    fleet = Fleet(args.kafka, tmp, args.web_port, args.extra)
    try:
        fleet.start(2, store, LOOPWATCH_KAFKA_SESSION_TIMEOUT_S=str(args.session_timeout))
        pids = [w.proc.pid for w in fleet.workers]
        quiet(pids)
        idle = [rss_mib(pid) for pid in pids]
        probe = probes(fleet.names.app_id)
        took = load_runs(fleet, runs, args.agents, args.calls, probe.history)
        settled = quiet(pids)
        loaded = [rss_mib(pid) for pid in pids]
        active = [int(metrics(fleet, w)[0].get("loopwatch_active_runs", 0)) for w in fleet.workers]
        victim, survivor = fleet.workers
        timing = asyncio.run(_failover(fleet, victim, survivor, probe, timeout=max(300.0, runs / 500)))
        quiet([survivor.proc.pid])
        after = rss_mib(survivor.proc.pid)
        row = {
            "store": store,
            "runs": runs,
            "calls_per_run": args.calls,
            "agents": args.agents,
            "session_timeout_s": args.session_timeout,
            "load_s": round(took, 1),
            "quiet_after_s": round(settled, 1),
            "rss_idle_mib": [round(x, 1) for x in idle],
            "rss_mib": [round(x, 1) for x in loaded],
            "active_runs": active,
            "survivor_rss_after_mib": round(after, 1),
            **timing,
        }
        results.add("failover", row)
        print(
            f"failover {store:16} {runs:>9,} runs: kill -9 → verdict {timing['failover_s']:6.2f} s "
            f"(session timeout {args.session_timeout} s; survivor ready after "
            f"{timing['survivor_ready_s']} s, {timing['runs_changelog_replayed']:,} run changelog "
            "records read); "
            f"load {took:.1f} s; RSS {loaded[0]:.0f} + {loaded[1]:.0f} MiB, survivor after {after:.0f} MiB",
            flush=True,
        )
    finally:
        fleet.stop()
        keep = args.out.parent / "scale-logs"  # the survivor's view of the failover, for reading
        keep.mkdir(parents=True, exist_ok=True)
        for worker in fleet.workers:
            shutil.copy(worker.log, keep / worker.log.name)
        asyncio.run(delete_topics(args.kafka, [fleet.names.app_id]))


def measure_cpu(
    args: argparse.Namespace,
    results: Results,
    tmp: str,
    load: list[tuple[int, bytes, bytes]],
    count: int,
    view: str,
) -> None:
    env = {} if view == "on" else {"LOOPWATCH_FLEET_VIEW": "false"}
    fleet = Fleet(args.kafka, tmp, args.web_port, {**args.extra, **env})
    broker = broker_pid(args.kafka)
    viewer: subprocess.Popen[bytes] | None = None
    try:
        fleet.start(count)
        pids = [w.proc.pid for w in fleet.workers]
        if view == "process":  # the workers keep no view; one `loopwatch view` keeps the fleet's
            viewer = start_view(fleet, Path(tmp) / f"{fleet.names.app_id}-view.log")
            pids.append(viewer.pid)
        quiet(pids)
        idle_from = [cpu_s(pid) for pid in pids]
        broker_idle_from = cpu_s(broker) if broker else 0.0
        idle_started = time.perf_counter()
        time.sleep(10)
        idle_took = time.perf_counter() - idle_started
        idle_rate = (sum(cpu_s(pid) for pid in pids) - sum(idle_from)) / idle_took
        broker_idle = ((cpu_s(broker) - broker_idle_from) / idle_took) if broker else 0.0
        before = [cpu_s(pid) for pid in pids]
        broker_before = cpu_s(broker) if broker else 0.0
        started = time.perf_counter()
        asyncio.run(produce(args.kafka, fleet.names.events, load))
        asyncio.run(
            committed_up_to_end(args.kafka, fleet.names.app_id, [fleet.names.events, fleet.names.facts], 900)
        )
        processed = time.perf_counter() - started
        quiet(pids)  # the fleet view's followers done too
        elapsed = time.perf_counter() - started
        used = [cpu_s(pid) - b for pid, b in zip(pids, before, strict=True)]
        disk = topic_bytes(broker_data_dir(broker), fleet.names.app_id)
        broker_used = (cpu_s(broker) - broker_before - broker_idle * elapsed) if broker else None
        net = sum(used) - idle_rate * elapsed
        events = len(load)
        row = {
            "workers": count,
            "fleet_view": view,
            "events": events,
            "processed_s": round(processed, 2),
            "events_per_s": round(events / processed),
            "cpu_s": [round(u, 2) for u in used],
            "idle_cpu_per_s": round(idle_rate, 4),
            "us_per_event": round(sum(used) / events * 1e6, 1),
            "net_us_per_event": round(net / events * 1e6, 1),
            "broker_net_us_per_event": None if broker_used is None else round(broker_used / events * 1e6, 1),
            "topic_bytes": disk,
        }
        results.add("cpu", row)
        print(
            f"cpu     {count} worker{'s' if count > 1 else ' '} fleet view {view:7}: "
            f"{row['net_us_per_event']:6.1f} µs CPU per event net of idle ({row['us_per_event']:.1f} gross; "
            f"per worker {', '.join(f'{u:.1f}' for u in used)} s), {row['events_per_s']:,} events/s here; "
            f"broker {row['broker_net_us_per_event']} µs/event net of idle",
            flush=True,
        )
    finally:
        if viewer is not None:
            viewer.terminate()
            viewer.wait(20)
        fleet.stop()
        asyncio.run(delete_topics(args.kafka, [fleet.names.app_id]))


def start_view(fleet: Fleet, log: Path) -> subprocess.Popen[bytes]:
    """``loopwatch view`` on the fleet's topics, once its dashboard is up."""
    env = fleet.names.env(fleet.bootstrap, LOOPWATCH_PARTITIONS=str(PARTITIONS), **fleet.extra)
    with log.open("wb") as err:
        viewer = subprocess.Popen(
            [LOOPWATCH, "view", "--listen", "127.0.0.1:0"], env=env, stdout=subprocess.DEVNULL, stderr=err
        )
    deadline = time.monotonic() + 60
    while "dashboard at" not in log.read_text(errors="replace"):
        if viewer.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"loopwatch view did not start:\n{log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.1)
    return viewer


def _list(text: str, allowed: tuple[str, ...] | None = None) -> list[str]:
    items = [item.strip() for item in text.split(",") if item.strip()]
    if allowed is not None:
        for item in items:
            if item not in allowed:
                raise argparse.ArgumentTypeError(f"{item!r} is not one of {', '.join(allowed)}")
    return items


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kafka", default=BOOTSTRAP, help=f"bootstrap servers (default {BOOTSTRAP})")
    parser.add_argument("--runs", default="10000,100000,1000000", help="active runs, comma-separated")
    parser.add_argument("--stores", default=",".join(STORES), help="memory, rocksdb, rocksdb+standby")
    parser.add_argument("--parts", default=",".join(PARTS), help="memory, failover, cpu")
    parser.add_argument(
        "--agents", type=int, default=1000, help="agent ids the synthesised runs are spread over"
    )
    parser.add_argument(
        "--session-timeout",
        type=float,
        default=6.0,
        help="LOOPWATCH_KAFKA_SESSION_TIMEOUT_S of the failover part (default 6: a stock broker's "
        "group.min.session.timeout.ms refuses less)",
    )
    parser.add_argument(
        "--calls", type=int, default=1, help="calls (each with its result) per synthesised run"
    )
    parser.add_argument("--repeat", type=int, default=1, help="rounds of the memory and failover parts")
    parser.add_argument("--cpu-runs", type=int, default=1000, help="runs of 50 calls in the CPU load")
    parser.add_argument("--cpu-workers", default="1,2,4")
    parser.add_argument(
        "--cpu-fleet-view",
        default="on,off,process",
        help="on (each worker keeps the view), off, process (one `loopwatch view` beside workers without it)",
    )
    parser.add_argument("--web-port", type=int, default=16900, help="first worker web port")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="worker setting")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    sizes = [int(n) for n in _list(args.runs)]
    stores = _list(args.stores, STORES)
    parts = _list(args.parts, PARTS)
    views = _list(args.cpu_fleet_view, ("on", "off", "process"))
    args.extra = dict(item.split("=", 1) for item in args.env)
    results = Results(args.out, args)
    print(
        f"loopwatch scale benchmark: broker {args.kafka}, {PARTITIONS} partitions, {os.cpu_count()} cores, "
        f"{_mem_gib():.1f} GiB, load average {load_average()}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="loopwatch-scale-") as tmp:
        if "cpu" in parts:
            load = stream_fleet(args.cpu_runs)
            for view in views:
                for count in (int(n) for n in _list(args.cpu_workers)):
                    measure_cpu(args, results, tmp, load, count, view)
        for runs in sorted(sizes):
            for _ in range(args.repeat):
                if "memory" in parts:
                    for store in (s for s in stores if s != "rocksdb+standby"):
                        measure_memory(args, results, tmp, runs, store)
                if "failover" in parts:
                    for store in stores:
                        measure_failover(args, results, tmp, runs, store)
    print(f"results: {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
