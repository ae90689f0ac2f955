"""``make soak``: a steady load for 10 minutes, runs starting and ending; the worker's memory.

Offers ``--rate`` events/s of a rolling fleet: at any time ``--active`` runs are open, each
makes 10–60 calls (a quarter of them looping) and then ends with ``run_end``; some runs
never end and must be expired by the state TTL. The worker's resident memory is sampled
every ``--sample`` seconds; at the end the growth over the second half is reported, which
should be close to zero (state bounded by run_end, the TTL and the history size).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from aiokafka import AIOKafkaProducer

from loopwatch.detectors.events import Event, RunEnd, ToolCall, ToolResult, encode_event, run_scope
from tests.integration.harness import Names, WorkerProcess

BOOTSTRAP = "127.0.0.1:19092"


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def fleet(seed: int) -> Iterator[Event]:
    """An endless stream of events from a rolling set of runs."""
    rnd = random.Random(seed)
    serial = 0
    runs: dict[str, list[int]] = {}
    while True:
        while len(runs) < 200:
            serial += 1
            runs[f"soak-{serial}"] = [rnd.randint(10, 60), 0, rnd.random() < 0.25, rnd.random() < 0.05]
        run_id = rnd.choice(list(runs))
        length, done, looping, abandoned = runs[run_id]
        if done >= length:
            del runs[run_id]
            if not abandoned:  # abandoned runs never end: the TTL must expire them
                yield RunEnd(event_id=f"{run_id}-end", run_id=run_id)
            continue
        params = {"path": "/same"} if looping else {"path": f"/file-{done}"}
        result = {"content": [{"type": "text", "text": "same" if looping else f"text {done}"}]}
        call_id = f"{run_id}-{done}"
        yield ToolCall(
            event_id=f"{call_id}-c", run_id=run_id, tool="read", params=params, tool_call_id=call_id
        )
        yield ToolResult(
            event_id=f"{call_id}-r",
            run_id=run_id,
            tool="read",
            params=params,
            result=result,
            tool_call_id=call_id,
        )
        runs[run_id][1] += 1


async def offer(
    names: Names, rate: float, seconds: float, worker: WorkerProcess, sample: float
) -> list[tuple[float, float]]:
    producer = AIOKafkaProducer(bootstrap_servers=BOOTSTRAP, linger_ms=5)
    await producer.start()
    samples: list[tuple[float, float]] = []
    start = time.monotonic()
    next_sample = start
    try:
        for index, event in enumerate(fleet(1)):
            now = time.monotonic()
            if now - start >= seconds:
                break
            if now >= next_sample:
                samples.append((now - start, rss_mib(worker.proc.pid)))
                print(f"  t={now - start:6.0f}s  worker RSS {samples[-1][1]:7.1f} MiB", flush=True)
                next_sample += sample
            due = start + index / rate
            if due > now:
                await asyncio.sleep(due - now)
            await producer.send(names.events, encode_event(event), key=run_scope(event).encode())
    finally:
        await producer.stop()
    return samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--rate", type=float, default=500)
    parser.add_argument("--sample", type=float, default=30)
    args = parser.parse_args(argv)
    names = Names()
    with tempfile.TemporaryDirectory() as tmp:
        env = names.env(
            BOOTSTRAP,
            LOOPWATCH_WEB_PORT="16997",
            LOOPWATCH_DATA_DIR=tmp,
            LOOPWATCH_STATE_TTL_S="60",
            LOOPWATCH_EXPIRY_INTERVAL_S="15",
        )
        worker = WorkerProcess(env, Path(tmp) / "worker.log")
        try:
            worker.wait_ready()
            print(f"soak: {args.rate:.0f} events/s for {args.minutes:g} min, state TTL 60 s", flush=True)
            samples = asyncio.run(offer(names, args.rate, args.minutes * 60, worker, args.sample))
        finally:
            worker.stop()
    half = [rss for t, rss in samples if t >= samples[-1][0] / 2]
    growth = half[-1] - half[0] if len(half) > 1 else 0.0
    print(
        f"RSS: start {samples[0][1]:.1f} MiB, peak {max(r for _, r in samples):.1f} MiB, "
        f"second half {half[0]:.1f} → {half[-1]:.1f} MiB ({growth:+.1f} MiB)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
