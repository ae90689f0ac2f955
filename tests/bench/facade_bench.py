"""``make bench-facade``: the in-process adapters' path, :class:`LoopDetector` fed Python values
(the params and results a framework hands an adapter: dicts, lists, strings, numbers), with
``_stable_bytes`` (stableStringify in C) and without it, side by side.

Each variant runs in a process of its own (the C encoder is bound once, at import: the variant
without it blocks the module before loopwatch is imported, which is what an install without it
does), in alternating rounds; per workload and variant the median over rounds of the time per
call (before + after), and the ratio without / with. The workloads are ``make bench``'s
(healthy, looping, large), their lines decoded to Python values once, untimed.

This is the check the house issue asks of ``_stable_bytes.c``: kept only if it saves at least
10 % on a workload.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.bench.workloads import ensure  # (imports no loopwatch module: the block comes first)

BENCH_DIR = Path(".bench")  # make bench's workload files

WORKLOADS = ("healthy", "looping", "large")
VARIANTS = ("with-c", "without-c")


class _Blocked:
    """A meta path finder that makes ``loopwatch.detectors._stable_bytes`` unimportable."""

    @staticmethod
    def find_spec(name: str, path: Any = None, target: Any = None) -> Any:
        if name == "loopwatch.detectors._stable_bytes":
            raise ImportError("blocked by the bench: the variant without the C encoder")
        return None


def _calls(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in ensure(BENCH_DIR, name).read_bytes().splitlines() if line.strip()]


def time_once(name: str) -> float:
    """Seconds per call of one pass over the workload through a fresh :class:`LoopDetector`."""
    from loopwatch import LoopDetector

    events = _calls(name)
    detector = LoopDetector()
    calls = 0
    started = time.perf_counter()
    for event in events:
        run, tool, call_id = event["run_id"], event["tool"], event["tool_call_id"]
        if event["type"] == "tool_call":
            detector.before_tool_call(run, tool, event["params"], tool_call_id=call_id)
            calls += 1
        else:
            detector.after_tool_call(run, tool, event["params"], result=event["result"], tool_call_id=call_id)
    return (time.perf_counter() - started) / calls


def _child(variant: str, name: str, repeats: int) -> None:
    if variant == "without-c":
        sys.meta_path.insert(0, _Blocked)
    from loopwatch.detectors import stable_json

    native = stable_json._NATIVE is not None
    assert native == (variant == "with-c"), f"{variant}: the C encoder is {'on' if native else 'off'}"
    print(json.dumps(min(time_once(name) for _ in range(repeats))))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=2, help="passes per process (the fastest kept)")
    parser.add_argument("--child", nargs=2, metavar=("VARIANT", "WORKLOAD"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child[0], args.child[1], args.repeats)
        return 0
    times: dict[tuple[str, str], list[float]] = {(w, v): [] for w in WORKLOADS for v in VARIANTS}
    for number in range(args.rounds):
        for name in WORKLOADS:
            order = VARIANTS if number % 2 == 0 else VARIANTS[::-1]
            for variant in order:
                done = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "tests.bench.facade_bench",
                        "--child",
                        variant,
                        name,
                        "--repeats",
                        str(args.repeats),
                    ],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                times[(name, variant)].append(float(done.stdout.strip().splitlines()[-1]))
    print(f"LoopDetector on Python values, µs per call (before + after), median of {args.rounds} rounds")
    print(f"  {'workload':10} {'with C':>9} {'without C':>10} {'without / with':>15}")
    for name in WORKLOADS:
        with_c = statistics.median(times[(name, "with-c")]) * 1e6
        without = statistics.median(times[(name, "without-c")]) * 1e6
        print(f"  {name:10} {with_c:9.1f} {without:10.1f} {without / with_c:14.2f}×")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
