"""``loopwatch run``: events in, verdicts out, in-process."""

from __future__ import annotations

import argparse
from typing import Any, BinaryIO, TextIO

from loopwatch.streams.cli.flags import config_flag, positive_int, serve_flag


def cmd_run(args: argparse.Namespace, out: BinaryIO, err: TextIO) -> int:
    from loopwatch.streams.cli.run_command import run_embedded

    return run_embedded(args, out, err)


def register(sub: Any) -> None:
    run = sub.add_parser(
        "run",
        help="run the detector core in-process: events in, verdicts out",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Reads event JSON lines (file or stdin) and writes verdict and abort JSON "
        "lines to stdout, in input order. Invalid lines are reported on stderr and skipped.",
        epilog="event lines (one JSON object each; docs/wire-contract.md):\n"
        '  {"type": "tool_call", "event_id": "e1", "run_id": "r1", "tool": "read", '
        '"params": {"path": "a.txt"}, "tool_call_id": "c1"}\n'
        '  {"type": "tool_result", "event_id": "e2", "run_id": "r1", "tool": "read", '
        '"params": {"path": "a.txt"}, "tool_call_id": "c1", "result": {"content": []}}\n'
        '  {"type": "compaction_retry", "event_id": "e3", "run_id": "r1"}\n'
        '  {"type": "run_end", "event_id": "e4", "run_id": "r1"}\n'
        "  optional on each: agent_id, session_id (instead of run_id), ts (ms); a tool_result "
        "has result or error\n\n"
        "examples:\n  loopwatch run --config openclaw.json events.jsonl\n"
        "  cat events.jsonl | loopwatch run -\n"
        "  loopwatch run --follow /var/log/agents/events.jsonl -o verdicts.jsonl\n"
        "  loopwatch run --serve 127.0.0.1:8080 --follow events.jsonl -o verdicts.jsonl",
    )
    config_flag(
        run,
        "OpenClaw-style config file (JSON5); default: detection enabled with OpenClaw's defaults "
        "(env LOOPWATCH_CONFIG)",
    )
    run.add_argument(
        "events",
        nargs="?",
        default="-",
        metavar="EVENTS",
        help="events file, folder of .jsonl files, or - for stdin",
    )
    run.add_argument("--output", "-o", metavar="FILE", help="write verdicts here instead of stdout")
    run.add_argument("--follow", "-f", action="store_true", help="keep reading a growing file")
    run.add_argument(
        "--workers", type=positive_int, default=4, help="asyncio workers (partitions by run scope)"
    )
    serve_flag(run)
    run.set_defaults(func=cmd_run)
