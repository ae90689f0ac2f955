"""``loopwatch import``: agent histories (OpenClaw transcripts, Claude Code, Codex, Gemini CLI,
OpenHands, SWE-agent) to events, and the ``--follow`` sidecar (OpenClaw's JSONL transcripts and
SQLite transcript stores)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from loopwatch.streams.cli.flags import interval_seconds


def _follow_transcripts(args: argparse.Namespace, err: TextIO) -> int:
    import asyncio
    import signal

    from loopwatch.streams.gateway.gateway_post import http_url_problem
    from loopwatch.streams.history.transcript_follower import Follower, publish_to_gateway, publish_to_kafka

    if bool(args.gateway) == bool(args.kafka):
        print("loopwatch: import --follow needs one of --gateway URL or --kafka BOOTSTRAP", file=err)
        return 2
    if args.gateway and (problem := http_url_problem(args.gateway)) is not None:
        print(f"loopwatch: --gateway {args.gateway!r}: {problem}", file=err)
        return 2
    folder = Path(args.follow)
    if not folder.is_dir():
        print(f"loopwatch: {folder}: not a folder", file=err)
        return 2

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        producer = None
        if args.kafka:
            from aiokafka import AIOKafkaProducer

            from loopwatch.config.stream_settings import parse_stream_settings
            from loopwatch.streams.kafka.connect import aiokafka_auth, start_client

            settings = parse_stream_settings(
                os.environ, {"kafka_bootstrap": args.kafka}, {"kafka_bootstrap": "--kafka"}
            )
            producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, **aiokafka_auth(settings))
            await start_client(producer.start, producer.stop, settings.kafka_bootstrap, "--kafka")
            publish = publish_to_kafka(producer, settings.topic_events)
        else:
            publish = publish_to_gateway(args.gateway, os.environ.get("LOOPWATCH_GATEWAY_TOKEN"))
        follower = Follower(folder, publish, Path(args.offsets), args.agent_id, err)
        print(f"loopwatch: following {folder} (offsets in {args.offsets})", file=err, flush=True)
        try:
            await follower.run(args.interval, stop)
        finally:
            if producer is not None:
                await producer.stop()

    asyncio.run(main())
    return 0


def cmd_import(args: argparse.Namespace, out: BinaryIO, err: TextIO) -> int:
    if args.follow:
        return _follow_transcripts(args, err)
    for flag, value in (
        ("--gateway", getattr(args, "gateway", None)),
        ("--kafka", getattr(args, "kafka", None)),
    ):
        if value:
            print(
                f"loopwatch: {flag} publishes with --follow DIR only; import writes events to stdout",
                file=err,
            )
            return 2
    from loopwatch.detectors.events import encode_event
    from loopwatch.streams.history.agent_histories import default_files, history_files, read_histories
    from loopwatch.streams.history.replay import left_out

    if args.paths:
        files = [path for source in args.paths for path in history_files(source)]
    else:
        files = default_files()
        if not files:
            print(
                "loopwatch: import found no agent history in the default places (~/.openclaw/agents, "
                "~/.claude/projects, ~/.codex/sessions, ~/.gemini/tmp, ~/.openhands, "
                "~/.config/mini-swe-agent): give paths, or --follow DIR",
                file=err,
            )
            return 1
    found = read_histories(files, args.agent_id, err)
    folders = [source for source in args.paths or () if Path(source).is_dir()]
    for folder in folders:  # a folder's other files: named once
        inside = [path for path in found.others if path.is_relative_to(folder)]
        left_out(folder, inside, err, "not agent histories loopwatch reads")
    for path in found.others:
        if not any(path.is_relative_to(folder) for folder in folders):
            print(
                f"loopwatch: {path}: not an OpenClaw session transcript nor an agent history loopwatch "
                "reads; skipped",
                file=err,
            )
    for event in found.events:
        out.write(encode_event(event) + b"\n")
    out.flush()
    if not found.read:
        print("loopwatch: no transcript imported (no agent history found)", file=err)
        return 1
    return 0


def register(sub: Any) -> None:
    imp = sub.add_parser(
        "import",
        help="convert agent histories (OpenClaw, Claude Code, Codex, Gemini CLI, OpenHands, SWE-agent) "
        "to loopwatch events (JSON lines on stdout)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Reads agent histories, or folders of them, and writes the tool_call / tool_result / "
        "compaction_retry / run_end events they correspond to: OpenClaw session files and stores "
        "(~/.openclaw/agents/<agent>/), Claude Code sessions (~/.claude/projects/), Codex rollouts "
        "(~/.codex/sessions/), Gemini CLI chats (~/.gemini/tmp/<project>/chats/), OpenHands event "
        "folders, SWE-agent .traj and mini-swe-agent .traj.json files; the format is found from the "
        "content. Without a path, every runtime's default place under the home folder is read. The "
        "agent id comes from OpenClaw's agents/<id> path, else the runtime's name, or --agent-id "
        "(docs/agent-histories.md says what each format maps to).",
        epilog="examples:\n  loopwatch import ~/.openclaw/agents/main/sessions/ > events.jsonl\n"
        "  loopwatch import ~/.claude/projects/ | loopwatch run -\n"
        "  loopwatch import --agent-id coder session.jsonl | loopwatch run -",
    )
    imp.add_argument("paths", nargs="*", metavar="PATH")
    imp.add_argument(
        "--agent-id",
        help="agent id of the runs (default: OpenClaw's agents/<id> folder, else the runtime's name)",
    )
    imp.add_argument(
        "--follow",
        metavar="DIR",
        help="sidecar: follow the OpenClaw transcripts under DIR (JSONL files, and the SQLite stores "
        "agents/<id>/agent/openclaw-agent.sqlite of OpenClaw 2026.8+, read-only) as they grow and "
        "publish their events (to --gateway or --kafka), resuming from --offsets after a restart",
    )
    imp.add_argument(
        "--gateway", metavar="URL", help="with --follow: a loopwatch gateway (token: LOOPWATCH_GATEWAY_TOKEN)"
    )
    imp.add_argument(
        "--kafka", metavar="BOOTSTRAP", help="with --follow: publish to the input topic on Kafka"
    )
    imp.add_argument(
        "--offsets",
        metavar="FILE",
        default=".loopwatch-import-offsets.json",
        help="with --follow: where the published count per file (per store: its last row) is kept",
    )
    imp.add_argument(
        "--interval",
        type=interval_seconds,
        default=0.5,
        help="with --follow: seconds between scans (0.05 to 3600)",
    )
    imp.set_defaults(func=cmd_import)
