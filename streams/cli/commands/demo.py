"""``loopwatch demo``: a simulated fleet and real traces through the embedded runtime."""

from __future__ import annotations

import argparse
from typing import Any, BinaryIO, TextIO

from loopwatch.streams.cli.flags import config_flag, positive_int, serve_flag


def cmd_demo(args: argparse.Namespace, out: BinaryIO, err: TextIO) -> int:
    from loopwatch.streams.embedded.demo import run_demo

    return run_demo(args, out, err)


def register(sub: Any) -> None:
    demo = sub.add_parser(
        "demo",
        help="a simulated fleet and real OpenClaw traces through the embedded runtime (no broker)",
        description="Runs a seeded fleet of scripted agents (healthy ones and every kind of loop) "
        "all at once through the embedded runtime, agents honouring verdicts, then the bundled "
        "real OpenClaw traces, and prints per scenario what was warned, blocked and aborted, "
        "after how many calls, what the loops cost and what stopping them saved. Without --config "
        "it uses OpenClaw's defaults plus loopwatch's own rules (runNoProgress, editUndo, a $1 loop "
        "budget).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  loopwatch demo\n  loopwatch demo --seed 3 --runs 40\n  loopwatch demo --json\n"
        "  loopwatch demo --serve      # then open http://127.0.0.1:6066/dashboard",
    )
    demo.add_argument("--seed", type=int, default=7, help="seed of the simulated fleet (reproducible)")
    demo.add_argument("--runs", type=positive_int, default=24, help="runs per scenario, all at once")
    config_flag(demo)
    demo.add_argument("--json", action="store_true", help="the summary as JSON on stdout")
    serve_flag(demo)
    demo.add_argument(
        "--rate",
        type=float,
        default=None,
        metavar="EVENTS_PER_S",
        help="pace the simulated fleet (default: as fast as possible; 400/s with --serve)",
    )
    demo.add_argument(
        "--rounds",
        type=int,
        default=0,
        metavar="N",
        help="with --serve: rounds of the simulated fleet, new seed each (default 0: until Ctrl-C)",
    )
    demo.set_defaults(func=cmd_demo)
