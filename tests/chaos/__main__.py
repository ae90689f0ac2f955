"""``make chaos``: every fault scenario, repeated with fresh fleets, on the local broker.

    python -m tests.chaos [--repeat N] [--scenario NAME ...] [--runs RUNS] [--seed SEED] [--store STORE]

Prints one line per try, ``N runs matched, M differed`` per scenario, and a final
``N passed, M failed`` line (a try passes when no run differs); exits 1 if any try failed.
The broker-restart scenario starts a broker of its own on ``--own-broker-port``; the cluster
scenarios a three-node cluster of their own, clients on ``--own-cluster-port`` and the next
two ports, controllers 100 ports higher. ``--store rocksdb`` (or ``LOOPWATCH_STORE=rocksdb
make chaos``) runs the workers on the RocksDB store, each on a data directory of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path

from loopwatch.config.stream_settings import STORES
from tests.chaos.broker import own_broker, own_cluster
from tests.chaos.scenarios import (
    CLUSTER_SCENARIOS,
    OWN_BROKER,
    SCENARIOS,
    UPGRADE_SCENARIOS,
    ScenarioResult,
    run_scenario,
)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=10, help="tries per scenario (default 10)")
    every = [*SCENARIOS, *UPGRADE_SCENARIOS, *CLUSTER_SCENARIOS]
    parser.add_argument("--scenario", action="append", choices=sorted(every), help="only these")
    parser.add_argument("--runs", type=int, default=150, help="runs per fleet (default 150)")
    parser.add_argument("--seed", type=int, default=1000, help="seed of the first fleet")
    parser.add_argument("--kafka", default=os.environ.get("LOOPWATCH_TEST_KAFKA", "127.0.0.1:19092"))
    parser.add_argument("--own-broker-port", type=int, default=19292)
    parser.add_argument("--own-cluster-port", type=int, default=19392)
    parser.add_argument(
        "--store",
        choices=STORES,
        default=os.environ.get("LOOPWATCH_STORE", "memory"),
        help="the workers' LOOPWATCH_STORE (default: the environment's, else memory)",
    )
    args = parser.parse_args()
    if args.repeat < 1 or args.runs < 1:
        parser.error("--repeat and --runs must be at least 1")
    if args.store not in STORES:
        parser.error(f"LOOPWATCH_STORE must be one of {', '.join(STORES)}")
    print(f"store: {args.store}", flush=True)
    names = args.scenario or every
    results: list[ScenarioResult] = []
    with tempfile.TemporaryDirectory(prefix="loopwatch-chaos-") as tmp:
        for name in names:
            per_scenario: list[ScenarioResult] = []
            for attempt in range(args.repeat):
                seed = args.seed + attempt
                workdir = Path(tmp) / f"{name}-{attempt}"
                if name in OWN_BROKER:
                    with own_broker(args.own_broker_port) as bootstrap:
                        result = asyncio.run(
                            run_scenario(name, seed, bootstrap, workdir, args.runs, store=args.store)
                        )
                elif name in CLUSTER_SCENARIOS:
                    port = args.own_cluster_port
                    with own_cluster(port, port + 100, Path(tmp) / f"{name}-{attempt}-kafka") as cluster:
                        result = asyncio.run(
                            run_scenario(
                                name, seed, cluster.bootstrap, workdir, args.runs, cluster, args.store
                            )
                        )
                else:
                    result = asyncio.run(
                        run_scenario(name, seed, args.kafka, workdir, args.runs, store=args.store)
                    )
                print(f"  {result.line()}", flush=True)
                for detail in result.details:
                    print(f"    {detail}", flush=True)
                per_scenario.append(result)
            matched = sum(r.matched for r in per_scenario)
            differed = sum(r.differed for r in per_scenario)
            print(f"{name}: {matched} runs matched, {differed} differed", flush=True)
            results.extend(per_scenario)
    passed = sum(r.passed for r in results)
    print(f"{passed} passed, {len(results) - passed} failed")
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
