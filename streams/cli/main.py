"""The ``loopwatch`` command line (shell only: parse flags, read files, call the core, print)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO, TextIO

from loopwatch.config.errors import LoopwatchError
from loopwatch.config.settings import DetectorSettings
from loopwatch.detectors.conformance import run_vector
from loopwatch.detectors.stable_json import WIRE_DECODER
from loopwatch.streams.inputs.config_files import load_config

__all__ = ["main"]


def _positive_int(text: str) -> int:
    """argparse type: a whole number of at least 1 (the message names what was given)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def cmd_run(args: argparse.Namespace, out: BinaryIO, err: TextIO) -> int:
    from loopwatch.streams.cli.run_command import run_embedded

    return run_embedded(args, out, err)


def cmd_gateway(args: argparse.Namespace, out: BinaryIO, err: TextIO) -> int:
    from loopwatch.streams.gateway.server import run_gateway

    return run_gateway(args, err)


def _interval(text: str) -> float:
    from loopwatch.streams.history.transcript_follower import interval_seconds

    return interval_seconds(text)


def _hook_runtimes() -> list[str]:
    from loopwatch.streams.gateway.hooks.runtimes import RUNTIMES

    return list(RUNTIMES)


def cmd_hook(args: argparse.Namespace, out: BinaryIO, err: TextIO) -> int:
    from loopwatch.streams.gateway.hooks.command import run_hook
    from loopwatch.streams.gateway.hooks.runtimes import RUNTIMES

    if args.agent_id is None:
        args.agent_id = RUNTIMES[args.runtime].default_agent
    return run_hook(args, sys.stdin.buffer, out, err)


def cmd_conformance(args: argparse.Namespace, out: BinaryIO, err: TextIO) -> int:
    passed = failed = 0
    lines_out: list[str] = []
    for path in args.files:
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            print(f"loopwatch: cannot read {path}: {exc.strerror}", file=err)
            return 2
        in_file = 0
        for number, line in enumerate(data.split(b"\n"), start=1):  # lines as `run` counts them
            if not line.strip():
                continue
            in_file += 1
            try:
                vector = WIRE_DECODER.decode(line)
            except Exception as exc:  # noqa: BLE001 - a malformed line is a failed vector
                failed += 1
                lines_out.append(f"FAIL {path}:{number}: not valid JSON: {exc}")
                continue
            name = vector.get("name") if isinstance(vector, dict) else None
            failure = run_vector(vector)
            if failure is None:
                passed += 1
            else:
                failed += 1
                label = f" {name}" if isinstance(name, str) else ""
                lines_out.append(f"FAIL {path}:{number}{label}: {failure}")
        if not in_file:
            print(f"loopwatch: {path}: no conformance vectors in it (empty file)", file=err)
    text = "\n".join([*lines_out, f"{passed} passed, {failed} failed"]) + "\n"
    out.write(text.encode())
    out.flush()
    return 1 if failed or not passed else 0


def cmd_demo(args: argparse.Namespace, out: BinaryIO, err: TextIO) -> int:
    from loopwatch.streams.embedded.demo import run_demo

    return run_demo(args, out, err)


def cmd_check_config(args: argparse.Namespace, out: BinaryIO, err: TextIO) -> int:
    import json
    import os

    from loopwatch.config import fleet_rules
    from loopwatch.config.explain import explain
    from loopwatch.config.stream_settings import parse_stream_settings

    config = load_config(args.file)
    reports = explain(config)
    fleet = fleet_rules.fleet_rules(config.global_rules)
    settings = parse_stream_settings(os.environ)
    if args.json:
        document = {
            "agents": {r.agent: {"effective": r.effective, "notes": r.notes} for r in reports},
            "loopwatch": config.settings.as_dict(),
            "fleet_rules": {"effective": fleet_rules.as_dict(fleet), "notes": fleet_rules.describe(fleet)},
            "stream": settings.masked(),
        }
        out.write(json.dumps(document, indent=1).encode() + b"\n")
        return 0
    lines = [f"{args.file}: valid", _revision_line(config.settings)]
    for report in reports:
        lines.append(f"\nagent {report.agent}:")
        lines.append("  " + json.dumps(report.effective))
        lines.extend(f"  note: {note}" for note in report.notes)
    lines.append("\nfleet-wide rules (all agents):")
    lines.extend(f"  note: {note}" for note in fleet_rules.describe(fleet))
    lines.append("\nloopwatch: " + json.dumps(config.settings.as_dict()))
    lines.append("stream settings (environment): " + json.dumps(settings.masked()))
    out.write(("\n".join(lines) + "\n").encode())
    return 0


def _revision_line(settings: DetectorSettings) -> str:
    if not settings.newest_rules:
        return (
            f"rules: OpenClaw revision {settings.openclaw_revision} (before argument churn and veto records)"
        )
    stale = settings.churn_stale_after_s
    abort = f"stale churn aborts a run after {stale} s" if stale else "stale churn never aborts"
    return (
        f"rules: OpenClaw revision {settings.openclaw_revision} (argument churn, exec terminal failures, "
        f"blocked retries keep counting; {abort})"
    )


def cmd_replay(args: argparse.Namespace, out: BinaryIO, err: TextIO) -> int:
    from loopwatch.streams.history.replay import run_replay

    return run_replay(args, out, err)


def _follow_transcripts(args: argparse.Namespace, err: TextIO) -> int:
    import asyncio
    import signal

    from loopwatch.streams.history.transcript_follower import Follower, publish_to_gateway, publish_to_kafka

    if bool(args.gateway) == bool(args.kafka):
        print("loopwatch: import --follow needs one of --gateway URL or --kafka BOOTSTRAP", file=err)
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
            from loopwatch.streams.kafka.connect import aiokafka_auth

            settings = parse_stream_settings(os.environ, {"kafka_bootstrap": args.kafka})
            producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, **aiokafka_auth(settings))
            await producer.start()
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
    if not args.paths:
        print("loopwatch: import needs transcript paths, or --follow DIR", file=err)
        return 2
    from loopwatch.detectors.events import encode_event
    from loopwatch.streams.history.transcripts import agent_from_path, is_transcript, read_transcript
    from loopwatch.streams.inputs.sources import source_files

    imported = 0
    for source in args.paths:
        for path in source_files(source):
            with path.open("rb") as stream:
                first = stream.readline()
            if not is_transcript(first):
                print(
                    f"loopwatch: {path}: not an OpenClaw session transcript (no session header); skipped",
                    file=err,
                )
                continue
            agent = args.agent_id or agent_from_path(str(path)) or "main"
            for event in read_transcript(path, agent, err):
                out.write(encode_event(event) + b"\n")
            imported += 1
    out.flush()
    if not imported:
        print("loopwatch: no transcript imported", file=err)
        return 1
    return 0


def cmd_worker(args: argparse.Namespace, out: BinaryIO, err: TextIO) -> int:
    from loopwatch.streams.cli.worker_command import run_worker

    return run_worker(args)


def _serve_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--serve",
        nargs="?",
        const="127.0.0.1:6066",
        metavar="[HOST:]PORT",
        help="serve the live fleet dashboard (default 127.0.0.1:6066, /dashboard) and keep it up "
        "after the input ends, until Ctrl-C",
    )


def _config_flag(parser: argparse.ArgumentParser, text: str = "") -> None:
    """``--config FILE``, defaulting to ``LOOPWATCH_CONFIG``."""
    parser.add_argument(
        "--config",
        metavar="FILE",
        default=os.environ.get("LOOPWATCH_CONFIG"),
        help=text or "OpenClaw-style config file (JSON5) (env LOOPWATCH_CONFIG)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="loopwatch",
        description="Stop AI agents stuck in tool-call loops, fleet-wide.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  loopwatch demo\n  loopwatch run --config openclaw.json events.jsonl\n"
        "  loopwatch conformance vectors.jsonl",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser(
        "run",
        help="run the detector core in-process: events in, verdicts out",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Reads event JSON lines (file or stdin) and writes verdict and abort JSON "
        "lines to stdout, in input order. Invalid lines are reported on stderr and skipped.",
        epilog="examples:\n  loopwatch run --config openclaw.json events.jsonl\n"
        "  cat events.jsonl | loopwatch run -\n"
        "  loopwatch run --follow /var/log/agents/events.jsonl -o verdicts.jsonl\n"
        "  loopwatch run --serve 127.0.0.1:8080 --follow events.jsonl -o verdicts.jsonl",
    )
    _config_flag(
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
        "--workers", type=_positive_int, default=4, help="asyncio workers (partitions by run scope)"
    )
    _serve_flag(run)
    run.set_defaults(func=cmd_run)

    conf = sub.add_parser(
        "conformance",
        help="run conformance vector files (spec §0 step vocabulary)",
        description="Runs every vector of the given JSONL files against the detector core and "
        "prints one line per failing vector (file, line, step and reason) and a total. A vector's "
        "profile picks its rules: loopwatch = OpenClaw 2026-05, loopwatch-newest = 2026-08. "
        "Exits 1 if any vector failed or a file held no vector.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  loopwatch conformance tests/data/openclaw-public.jsonl",
    )
    conf.add_argument("files", nargs="+", metavar="FILE")
    conf.set_defaults(func=cmd_conformance)

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
    demo.add_argument("--runs", type=_positive_int, default=24, help="runs per scenario, all at once")
    _config_flag(demo)
    demo.add_argument("--json", action="store_true", help="the summary as JSON on stdout")
    _serve_flag(demo)
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

    rep = sub.add_parser(
        "replay",
        help="run recorded history through a config (no side effects); compare two configs",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Replays an events file, an OpenClaw session transcript (detected automatically), "
        "a folder of them, or a Kafka topic (kafka:TOPIC, "
        "bootstrap from LOOPWATCH_KAFKA_BOOTSTRAP) and reports per detector, per agent and per run "
        "when each run was first warned, blocked and aborted.",
        epilog="examples:\n  loopwatch replay --config openclaw.json history/\n"
        "  loopwatch replay --config now.json --compare tuned.json history.jsonl\n"
        "  loopwatch replay kafka:loopwatch.tool-events --since 2026-12-01T00:00 --json",
    )
    rep.add_argument("source", metavar="SOURCE")
    _config_flag(
        rep,
        "config to replay through (default: enabled; env LOOPWATCH_CONFIG)",
    )
    rep.add_argument("--compare", metavar="FILE", help="a second config: list the runs it changes")
    rep.add_argument("--since", metavar="ISO_TIME", help="Kafka source: first record time")
    rep.add_argument("--until", metavar="ISO_TIME", help="Kafka source: last record time")
    rep.add_argument("--json", action="store_true", help="machine-readable report")
    rep.add_argument("--agent-id", help="agent id for transcripts outside OpenClaw's directory layout")
    rep.set_defaults(func=cmd_replay)

    imp = sub.add_parser(
        "import",
        help="convert OpenClaw session transcripts to loopwatch events (JSON lines on stdout)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Reads OpenClaw session files (~/.openclaw/agents/<agent>/sessions/*.jsonl) or "
        "folders of them and writes the tool_call / tool_result / compaction_retry / run_end events "
        "they correspond to. The agent id comes from the agents/<id>/sessions path, or --agent-id.",
        epilog="examples:\n  loopwatch import ~/.openclaw/agents/main/sessions/ > events.jsonl\n"
        "  loopwatch import --agent-id coder session.jsonl | loopwatch run -",
    )
    imp.add_argument("paths", nargs="*", metavar="PATH")
    imp.add_argument("--agent-id", help="agent id for files outside OpenClaw's directory layout")
    imp.add_argument(
        "--follow",
        metavar="DIR",
        help="sidecar: follow the transcripts under DIR as they grow and publish their events "
        "(to --gateway or --kafka), resuming from --offsets after a restart",
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
        help="with --follow: where the published count per file is kept",
    )
    imp.add_argument(
        "--interval", type=_interval, default=0.5, help="with --follow: seconds between scans (0.05 to 3600)"
    )
    imp.set_defaults(func=cmd_import)

    check = sub.add_parser(
        "check-config",
        help="validate a config file and print every agent's effective config",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Validates an OpenClaw or loopwatch config file (every problem is listed with "
        "its path) and prints the effective config of every agent after the per-agent merge and "
        "the threshold auto-raise, with a note on every value the runtime changed. Stream settings "
        "come from LOOPWATCH_* variables; secrets are masked.",
        epilog="examples:\n  loopwatch check-config ~/.openclaw/openclaw.json\n"
        "  loopwatch check-config --json openclaw.json",
    )
    check.add_argument("file", metavar="FILE")
    check.add_argument("--json", action="store_true", help="machine-readable output")
    check.set_defaults(func=cmd_check_config)

    from loopwatch.config.stream_settings import env_name
    from loopwatch.streams.cli.worker_command import SETTING_FLAGS

    gateway = sub.add_parser(
        "gateway",
        help="loop detection over HTTP (POST /v1/events, /v1/decide), embedded or on Kafka",
        description="Serves the detector core over HTTP for runtimes that do not speak Kafka: "
        "POST /v1/events (one event, a JSON array or NDJSON) answers with the outputs they "
        "caused; POST /v1/decide (a proposed tool call) answers allow, warn, block or abort; "
        "GET /health, /metrics and the dashboard. With LOOPWATCH_GATEWAY_TOKENS (comma-"
        "separated) every route but /health needs a bearer token.",
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
        type=int,
        default=200,
        metavar="MS",
        help="with --kafka: the longest /v1/decide waits for the workers, then allows (default 200)",
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
    _config_flag(gateway)
    gateway.set_defaults(func=cmd_gateway)

    hook = sub.add_parser(
        "hook",
        help="an agent runtime's hook that asks a loopwatch gateway (claude-code, codex, gemini)",
        description="Run by an agent runtime for each hook call with the hook's JSON on stdin: "
        "records the call or result with a loopwatch gateway and answers in the runtime's own "
        "hook format (a block denies the tool call, an abort ends the turn and every later call "
        "of the run is denied, a warning reaches the model). Fails open when the gateway is "
        "unreachable or slow, unless --fail-closed. Each user prompt is a run; a subagent is a "
        "run of its own. Runtimes with HTTP hooks can call the gateway's /v1/hooks/RUNTIME "
        "instead (no process per tool call).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples (settings files): see the README, section Agent runtimes",
    )
    hook.add_argument("runtime", choices=sorted(_hook_runtimes()), help="the runtime calling the hook")
    hook.add_argument(
        "--gateway",
        default=os.environ.get("LOOPWATCH_GATEWAY_URL", "http://127.0.0.1:6070"),
        help="gateway URL (env LOOPWATCH_GATEWAY_URL; token: env LOOPWATCH_GATEWAY_TOKEN)",
    )
    hook.add_argument("--agent-id", default=None, help="agent id of the runs (default: the runtime's name)")
    hook.add_argument(
        "--timeout-ms", type=_positive_int, default=2000, help="how long to wait for the gateway"
    )
    hook.add_argument(
        "--fail-closed", action="store_true", help="refuse tool calls when the gateway is unreachable"
    )
    hook.add_argument(
        "--show-warnings",
        action="store_true",
        help="also show warnings to the user (Claude Code: systemMessage), not only to the model",
    )
    hook.set_defaults(func=cmd_hook)

    worker = sub.add_parser(
        "worker",
        help="run a Kafka worker (faust-streaming)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Consumes tool events, applies the detectors per run, publishes verdicts. "
        "Every setting also reads LOOPWATCH_<NAME> from the environment; flags win.",
        epilog="examples:\n  loopwatch worker --kafka 127.0.0.1:9092 --config openclaw.json\n"
        "  LOOPWATCH_REDIS_URL=redis://127.0.0.1:6379/0 loopwatch worker",
    )
    _config_flag(worker)
    for flag, (field, text) in SETTING_FLAGS.items():
        worker.add_argument(
            flag, dest=field, metavar=field.split("_")[-1].upper(), help=f"{text} (env {env_name(field)})"
        )
    worker.set_defaults(func=cmd_worker)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args, sys.stdout.buffer, sys.stderr)
    except LoopwatchError as exc:  # invalid config, input or broker: what and where, no traceback
        print(f"loopwatch: {exc}", file=sys.stderr)
        return 2
    except FileNotFoundError as exc:
        print(f"loopwatch: no such file: {exc.filename}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    return code


if __name__ == "__main__":
    raise SystemExit(main())
