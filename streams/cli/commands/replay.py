"""``loopwatch replay``: recorded history through a config, two configs compared."""

from __future__ import annotations

import argparse
from typing import Any, BinaryIO, TextIO

from loopwatch.streams.cli.flags import config_flag


def cmd_replay(args: argparse.Namespace, out: BinaryIO, err: TextIO) -> int:
    from loopwatch.streams.history.replay import run_replay

    return run_replay(args, out, err)


def register(sub: Any) -> None:
    rep = sub.add_parser(
        "replay",
        help="run recorded history through a config (no side effects); compare two configs",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Replays an events file, an agent history (OpenClaw transcripts and stores, Claude "
        "Code sessions, Codex rollouts, Gemini CLI chats, OpenHands event folders, SWE-agent and "
        "mini-swe-agent trajectories: detected automatically), a folder of them, or a Kafka topic "
        "(kafka:TOPIC, bootstrap from LOOPWATCH_KAFKA_BOOTSTRAP) and reports per detector, per agent "
        "and per run when each run was first warned, blocked and aborted; with --compare, the runs a "
        "second config treats differently and how many calls earlier or later it stops each. Without "
        "a source, every "
        "runtime's default place under the home folder is read (see docs/agent-histories.md).",
        epilog="examples:\n  loopwatch replay --config openclaw.json history/\n"
        "  loopwatch replay ~/.claude/projects/\n"
        "  loopwatch replay --config now.json --compare tuned.json history.jsonl\n"
        "  loopwatch replay kafka:loopwatch.tool-events --since 2026-12-01T00:00 --json",
    )
    rep.add_argument("source", metavar="SOURCE", nargs="?", default=None)
    config_flag(
        rep,
        "config to replay through (default: enabled; env LOOPWATCH_CONFIG)",
    )
    rep.add_argument(
        "--compare",
        metavar="FILE",
        help="a second config: list the runs it treats differently, and how many calls earlier or later "
        "it first stops (blocks or aborts) each",
    )
    rep.add_argument("--since", metavar="ISO_TIME", help="Kafka source: first record time")
    rep.add_argument("--until", metavar="ISO_TIME", help="Kafka source: last record time")
    rep.add_argument("--json", action="store_true", help="machine-readable report")
    rep.add_argument(
        "--agent-id",
        help="agent id of the runs read from histories (default: OpenClaw's agents/<id> folder, else "
        "the runtime's name)",
    )
    rep.set_defaults(func=cmd_replay)
