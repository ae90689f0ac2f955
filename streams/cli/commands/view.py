"""``loopwatch view``: the fleet view (dashboard) of a Kafka worker group, in its own process."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any, BinaryIO, TextIO

from loopwatch.streams.cli.flags import config_flag, setting_flags


def cmd_view(args: argparse.Namespace, out: BinaryIO, err: TextIO) -> int:
    from loopwatch.streams.cli.worker_command import stream_settings_from
    from loopwatch.streams.fleet_view.dashboard import parse_address
    from loopwatch.streams.inputs.config_files import load_config
    from loopwatch.streams.kafka.view_process import run_view

    host, port = parse_address(args.listen, "--listen", "127.0.0.1:6067")
    settings = stream_settings_from(args)
    config = load_config(args.config)
    asyncio.run(run_view(settings, config, host, port, err))
    return 0


def register(sub: Any) -> None:
    view = sub.add_parser(
        "view",
        help="serve the fleet view (dashboard) of a Kafka worker group, in a process of its own",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Follows every event, verdict and fleet alert of the group's topics and serves "
        "the dashboard (/dashboard, /fleet, /fleet/overview, /fleet/run, /fleet/chain). Run the "
        "workers with LOOPWATCH_FLEET_VIEW=false beside it: each then reads only its own "
        "partitions (docs/capacity.md). Every setting also reads LOOPWATCH_<NAME>; flags win.",
        epilog="example:\n  LOOPWATCH_FLEET_VIEW=false loopwatch worker --kafka 127.0.0.1:9092 &\n"
        "  loopwatch view --kafka 127.0.0.1:9092 --listen 0.0.0.0:6067",
    )
    config_flag(view)
    view.add_argument(
        "--listen",
        default="127.0.0.1:6067",
        metavar="HOST:PORT",
        help="where the dashboard listens (default 127.0.0.1:6067; port 0: a free one)",
    )
    setting_flags(view, skip=("web_port", "redis_url"))  # (its address is --listen; it keeps no decisions)
    view.set_defaults(func=cmd_view)
