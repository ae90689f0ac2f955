"""The bytes a run's state takes, as the worker stores it (``python -m tests.bench.state_size``).

Replays a benchmark workload (``make bench``'s, default ``healthy``) through the core at
default settings and prints the median, 90th percentile and largest state of the runs still
live at the end, and how long writing and reading one back takes (µs, median of 3 passes).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from loopwatch.config.fleet import FleetConfig
from loopwatch.detectors.decoding import decode_event
from loopwatch.detectors.engine import Engine
from loopwatch.detectors.state import RunState
from tests.bench.workloads import ensure, to_wire

BENCH_DIR = Path(__file__).resolve().parents[2] / ".bench"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="healthy")
    args = parser.parse_args(argv)
    engine = Engine(FleetConfig())
    for line in to_wire(ensure(BENCH_DIR, args.workload).read_bytes()):
        engine.process(decode_event(line))
    states = list(engine.states.values())
    blobs = [state.to_bytes() for state in states]
    sizes = sorted(len(blob) for blob in blobs)
    writes, reads = [], []
    for _ in range(3):
        started = time.process_time()
        for state in states:
            state.to_bytes()
        writes.append((time.process_time() - started) / len(states) * 1e6)
        started = time.process_time()
        for blob in blobs:
            RunState.from_bytes(blob)
        reads.append((time.process_time() - started) / len(states) * 1e6)
    print(
        f"{args.workload}: {len(states)} live runs, state bytes median {statistics.median(sizes):,.0f}, "
        f"p90 {sizes[int(0.9 * (len(sizes) - 1))]:,}, max {sizes[-1]:,}; "
        f"write {statistics.median(writes):.1f} µs, read {statistics.median(reads):.1f} µs per state"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
