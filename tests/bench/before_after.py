"""The core's per-call cost at another commit beside this tree's, side by side in one run.

``python -m tests.bench.before_after --ref <commit>`` checks the commit out into a worktree
under ``.bench/`` (once), compiles its core in place with mypyc, and then times the two cores
in turns (before, after, before, after, ...: ``--rounds`` rounds after one warm-up each), each
pass in a fresh process that imports only its own tree: the workloads of ``make bench``,
events decoded before timing and with decoding, rules 2026-08, XXH3, ``{enabled: true}``.
Prints the medians in µs per call and the ratio after ÷ before (below 1: the tree is faster).
A refactoring of the core must not make it slower: this is how that is measured.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

from tests.bench.workloads import ensure, to_wire
from tests.release_tree import release_env, release_tree

ROOT = Path(__file__).resolve().parents[2]
BENCH_DIR = ROOT / ".bench"

#: run in the child: time one pass over a workload with the core of the tree on sys.path[0]
_CHILD = r"""
import gc, sys, time
from loopwatch.config.fleet import FleetConfig
from loopwatch.config.settings import DetectorSettings
from loopwatch.detectors.decoding import decode_event as decode_plain
from loopwatch.detectors.engine import Engine
try:  # the text of params and results kept, as the worker keeps it (where the tree can)
    decode_plain(b'{"type":"run_end","event_id":"e","run_id":"r"}', texts=True)
    decode_event = lambda line: decode_plain(line, texts=True)
except TypeError:
    decode_event = decode_plain

path, decoded, passes = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3])
lines = [line for line in open(path, "rb").read().splitlines() if line.strip()]
settings = DetectorSettings(digest="xxh3", openclaw_revision="2026-08", observe_only=True)
config = FleetConfig(global_block={"enabled": True, "historySize": 30}, settings=settings)
events = [decode_event(line) for line in lines]
calls = sum(1 for e in events if type(e).__name__ == "ToolCall")
gc.collect(); gc.freeze()
best = []
for _ in range(passes):
    engine = Engine(config)
    process = engine.process
    start = time.perf_counter()
    if decoded:
        for event in events:
            process(event)
    else:
        for line in lines:
            process(decode_event(line))
    best.append(time.perf_counter() - start)
print(min(best) / calls * 1e6)
"""


def one_pass(tree: Path, workload: Path, decoded: bool, passes: int) -> float:
    env = release_env(tree)
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(workload), "1" if decoded else "0", str(passes)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(done.stdout.strip())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ref", required=True, help="the commit to compare with (e.g. HEAD~1)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--passes", type=int, default=3, help="passes per process; the fastest counts")
    parser.add_argument("--workloads", default="healthy,looping,long")
    args = parser.parse_args(argv)
    before = release_tree(args.ref)
    print(f"before: {args.ref} ({before}); after: this tree ({ROOT}); µs per call, medians of {args.rounds}")
    for name in args.workloads.split(","):
        workload = BENCH_DIR / f"wire-{name}.jsonl"
        workload.write_bytes(b"\n".join(to_wire(ensure(BENCH_DIR, name).read_bytes())) + b"\n")
        for decoded in (True, False):
            times: dict[str, list[float]] = {"before": [], "after": []}
            one_pass(before, workload, decoded, 1)  # warm-ups: file cache, imports
            one_pass(ROOT, workload, decoded, 1)
            for _ in range(args.rounds):
                times["before"].append(one_pass(before, workload, decoded, args.passes))
                times["after"].append(one_pass(ROOT, workload, decoded, args.passes))
            b, a = statistics.median(times["before"]), statistics.median(times["after"])
            label = "pre-decoded" if decoded else "with decoding"
            spread = max(times["after"]) - min(times["after"])
            print(
                f"{name:8s} {label:14s} before {b:7.2f}  after {a:7.2f}  after/before {a / b:.3f}"
                f"  (after's spread {spread:.2f})",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
