"""``loopwatch gateway``: loop detection over HTTP, embedded or on Kafka."""

from __future__ import annotations

import argparse
from typing import Any, BinaryIO, TextIO

from loopwatch.streams.cli.flags import config_flag, positive_int
from loopwatch.streams.gateway import DEFAULT_DECIDE_TIMEOUT_MS, MAX_DECIDE_TIMEOUT_MS


def decide_timeout_ms(text: str) -> int:
    """argparse type of ``--decide-timeout-ms``: 0 or less would answer every call "allow"
    (timed out) without asking the workers, an aborted run's too."""
    value = positive_int(text)
    if value > MAX_DECIDE_TIMEOUT_MS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_DECIDE_TIMEOUT_MS} (a minute), got {value}")
    return value


def cmd_gateway(args: argparse.Namespace, out: BinaryIO, err: TextIO) -> int:
    from loopwatch.streams.gateway.server import run_gateway

    return run_gateway(args, err)


def register(sub: Any) -> None:
    gateway = sub.add_parser(
        "gateway",
        help="loop detection over HTTP (POST /v1/events, /v1/decide), embedded or on Kafka",
        description="Serves the detector core over HTTP for runtimes that do not speak Kafka: "
        "POST /v1/events (one event, a JSON array or NDJSON) answers with the outputs they "
        "caused; POST /v1/decide (a proposed tool call) answers allow, warn, block or abort; "
        "GET /health, /metrics and the dashboard (/dashboard). With LOOPWATCH_GATEWAY_TOKENS "
        "(comma-separated) every route needs a bearer token but /health and the dashboard's page, "
        "which asks for the token in a form.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  loopwatch gateway\n  LOOPWATCH_GATEWAY_TOKENS=s3cret loopwatch gateway "
        "--listen 0.0.0.0:6070 --config openclaw.json\n  loopwatch gateway --kafka 127.0.0.1:9092 "
        "--decide-timeout-ms 200\n  curl -s localhost:6070/v1/decide -H 'Content-Type: application/json' -d "
        '\'{"run_id": "r1", "tool": "read", "params": {"path": "a"}}\'',
    )
    gateway.add_argument(
        "--listen", default="127.0.0.1:6070", metavar="HOST:PORT", help="default 127.0.0.1:6070"
    )
    gateway.add_argument(
        "--kafka",
        metavar="BOOTSTRAP",
        help="the Kafka backend: events go to the input topic, workers decide (LOOPWATCH_TOPIC_*)",
    )
    gateway.add_argument(
        "--decide-timeout-ms",
        type=decide_timeout_ms,
        metavar="MS",
        help=f"with --kafka: the longest /v1/decide waits for the workers, then allows "
        f"(1 to {MAX_DECIDE_TIMEOUT_MS}; default {DEFAULT_DECIDE_TIMEOUT_MS})",
    )
    gateway.add_argument(
        "--allowed-hosts",
        metavar="NAMES",
        help="comma-separated host names the gateway answers to besides its listen address and "
        "loopback (a foreign Host header answers 421: DNS rebinding)",
    )
    gateway.add_argument(
        "--allowed-origins",
        metavar="ORIGINS",
        help="comma-separated web origins (https://ops.example.com) whose pages may call the "
        "gateway; any other Origin answers 403",
    )
    gateway.add_argument(
        "--insecure-no-auth",
        action="store_true",
        help="listen beyond loopback without LOOPWATCH_GATEWAY_TOKENS (refused otherwise)",
    )
    config_flag(gateway)
    gateway.set_defaults(func=cmd_gateway)
