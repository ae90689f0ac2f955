"""Memory and CPU of the worker's run processor against ``LOOPWATCH_PARSED_RUNS_MAX``
(``python -m tests.bench.parsed_runs``).

The real :class:`~streams.kafka.run_processor.RunProcessor`, without Kafka: N runs of C calls
on different files (each call and its result), the runs taking turns one call at a time in
batches of ``--batch`` records, sends confirmed at once. For each limit: the memory the
processor and its table hold at the end (``tracemalloc``, the table's bytes included), and the
process CPU per event — with a limit below N, nearly every event parses its run again from
its stored bytes (the worst case: every run active, in turn). Rounds alternate the limits.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time
import tracemalloc
from typing import Any

from loopwatch.config.fleet import FleetConfig
from loopwatch.detectors.events import ToolCall, ToolResult, encode_event
from loopwatch.streams.fleet_view.metrics import WorkerMetrics
from loopwatch.streams.kafka.run_processor import RunProcessor


class _Record:
    __slots__ = ("key", "offset", "partition", "timestamp", "topic", "value")

    def __init__(self, offset: int, key: bytes, value: bytes) -> None:
        self.topic = "in"
        self.partition = 0
        self.offset = offset
        self.timestamp = 1_700_000_000_000 + offset
        self.key = key
        self.value = value


class _TP:
    topic = "in"
    partition = 0


def _records(runs: int, calls: int) -> list[_Record]:
    out: list[_Record] = []
    for call in range(calls):
        for run in range(runs):
            run_id = f"run-{run:07d}"
            call_id = f"{run_id}-c{call}"
            params = {"path": f"/src/module_{call}.py"}
            events = (
                ToolCall(
                    event_id=f"{call_id}-e", run_id=run_id, tool="read", params=params, tool_call_id=call_id
                ),
                ToolResult(
                    event_id=f"{call_id}-r",
                    run_id=run_id,
                    tool="read",
                    params=params,
                    tool_call_id=call_id,
                    result={"content": f"contents of module {call}"},
                ),
            )
            for event in events:
                out.append(_Record(len(out), run_id.encode(), encode_event(event)))
    return out


async def _measure(records: list[_Record], limit: int, batch: int, traced: bool) -> float:
    """MiB held at the end (``traced``), else µs of process CPU per event."""

    async def send(topic: str, key: bytes | None, value: bytes | None, partition: int | None) -> Any:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        future.set_result(None)
        return future

    async def nothing(*_: Any) -> None:
        return None

    config = FleetConfig()
    topics = {"verdicts": "v", "dead_letter": "dl", "changelog": "cl"}
    gc.collect()
    if traced:
        tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0] if traced else 0
    processor = RunProcessor(
        {}, send, nothing, nothing, lambda: config, WorkerMetrics(), topics, parsed_runs_max=limit
    )
    processor.cursors.start(0, 0)
    tp = _TP()
    started = time.process_time()
    for start in range(0, len(records), batch):
        await processor.process({tp: records[start : start + batch]})
    cpu = time.process_time() - started
    if not traced:
        return cpu / len(records) * 1e6
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    return held / 2**20


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5000)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--limits", default="100000,1000", help="LOOPWATCH_PARSED_RUNS_MAX values")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    limits = [int(value) for value in args.limits.split(",")]
    records = _records(args.runs, args.calls)
    memory: dict[int, list[float]] = {limit: [] for limit in limits}
    cpu: dict[int, list[float]] = {limit: [] for limit in limits}
    for _ in range(args.rounds):
        for limit in limits:
            cpu[limit].append(asyncio.run(_measure(records, limit, args.batch, traced=False)))
            memory[limit].append(asyncio.run(_measure(records, limit, args.batch, traced=True)))
    print(
        f"{args.runs} runs x {args.calls} calls ({len(records)} events), batches of {args.batch}, "
        f"median of {args.rounds} rounds (memory under tracemalloc, CPU without it)"
    )
    print(f"{'parsed runs max':>16} {'MiB held':>9} {'per run':>9} {'µs/event':>9}")
    for limit in limits:
        mib = statistics.median(memory[limit])
        print(
            f"{limit:>16,} {mib:>9.1f} {mib * 2**20 / args.runs:>8,.0f}B "
            f"{statistics.median(cpu[limit]):>9.1f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
