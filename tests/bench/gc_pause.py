"""How long the cyclic garbage collector stops a process that holds many parsed run states.

``python -m tests.bench.gc_pause --runs 10000,20000,40000`` fills one :class:`Engine` with
that many runs of the healthy workload (50 calls each, historySize 30: a full history per run,
as a worker's parsed runs hold; the input itself frozen out of the collector's sight), then
times one collection of each generation. A full (generation 2) collection traverses every
tracked object, so its pause grows with the parsed runs: a worker keeps up to
``LOOPWATCH_PARSED_RUNS_MAX`` of them (docs/capacity.md), and CPython starts a full
collection by itself whenever the objects that survived since the last one reach a quarter
of those that did before.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time

import msgspec

from loopwatch.detectors.decoding import decode_event
from loopwatch.detectors.engine import Engine
from tests.bench.core_bench import BENCH_DIR, config_for
from tests.bench.workloads import ensure, to_wire

RUNS_PER_COPY = 1000  # the healthy workload's runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", default="10000,20000,40000", help="parsed runs to hold, comma-separated")
    parser.add_argument("--rounds", type=int, default=3, help="full collections timed per size (median)")
    args = parser.parse_args(argv)
    events = [decode_event(line) for line in to_wire(ensure(BENCH_DIR, "healthy").read_bytes())]
    gc.collect()
    gc.freeze()  # the workload is the benchmark's, not the detector's
    print("parsed runs   tracked objects   per run   gen 0 ms   gen 1 ms   gen 2 ms (median)")
    for runs in (int(n) for n in args.runs.split(",")):
        engine = Engine(config_for("xxh3", 30))
        for copy in range(runs // RUNS_PER_COPY):
            for event in events:
                scope = f"{event.run_id}-{copy}"
                engine.process(
                    msgspec.structs.replace(event, run_id=scope, event_id=f"{event.event_id}-{copy}")
                )
        gc.collect()
        tracked = len(gc.get_objects())
        pauses = []
        for generation in (0, 1):
            started = time.perf_counter()
            gc.collect(generation)
            pauses.append((time.perf_counter() - started) * 1000)
        full = []
        for _ in range(args.rounds):
            started = time.perf_counter()
            gc.collect()
            full.append((time.perf_counter() - started) * 1000)
        print(
            f"{len(engine.states):>11,} {tracked:>17,} {tracked / runs:>9.1f} {pauses[0]:>10.1f}"
            f" {pauses[1]:>10.1f} {statistics.median(full):>10.1f} ({min(full):.0f}–{max(full):.0f})",
            flush=True,
        )
        del engine
        gc.collect()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
