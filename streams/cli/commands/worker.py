"""``loopwatch worker``: a Kafka worker (faust-streaming)."""

from __future__ import annotations

import argparse
from typing import Any, BinaryIO, TextIO

from loopwatch.streams.cli.flags import config_flag, setting_flags


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
    setting_flags(worker)
    worker.set_defaults(func=cmd_worker)
