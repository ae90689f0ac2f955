"""``loopwatch worker``: a Kafka worker (faust-streaming)."""

from __future__ import annotations

import argparse
from typing import Any, BinaryIO, TextIO

from loopwatch.streams.cli.flags import WORKER_SETTING_FLAGS, config_flag


def cmd_worker(args: argparse.Namespace, out: BinaryIO, err: TextIO) -> int:
    from loopwatch.streams.cli.worker_command import run_worker

    return run_worker(args)


def register(sub: Any) -> None:
    worker = sub.add_parser(
        "worker",
        help="run a Kafka worker (faust-streaming)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Consumes tool events, applies the detectors per run, publishes verdicts. "
        "Every setting also reads LOOPWATCH_<NAME> from the environment; flags win.",
        epilog="examples:\n  loopwatch worker --kafka 127.0.0.1:9092 --config openclaw.json\n"
        "  LOOPWATCH_REDIS_URL=redis://127.0.0.1:6379/0 loopwatch worker",
    )
    config_flag(worker)
    for flag, (field, text) in WORKER_SETTING_FLAGS.items():
        worker.add_argument(
            flag,
            dest=field,
            metavar=field.split("_")[-1].upper(),
            help=f"{text} (env LOOPWATCH_{field.upper()})",
        )
    worker.set_defaults(func=cmd_worker)
