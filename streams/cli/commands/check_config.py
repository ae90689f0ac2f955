"""``loopwatch check-config``: validate a config, print every agent's effective config; with
``--schema``, print the JSON Schema of a config file (for editors)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, BinaryIO, TextIO

if TYPE_CHECKING:
    from loopwatch.config.settings import DetectorSettings


def cmd_check_config(args: argparse.Namespace, out: BinaryIO, err: TextIO) -> int:
    import json
    import os
    import sys

    import loopwatch.detectors.rules.registry  # noqa: F401 (hands the rules' config sections to config)

    if args.schema:
        if args.file is not None:
            args.usage_error("--schema takes no FILE: it prints the schema of every config file")
        from loopwatch.config.schema import config_schema, stream_settings_schema

        schema = stream_settings_schema() if args.stream else config_schema()
        out.write(json.dumps(schema, indent=2).encode() + b"\n")
        return 0
    if args.stream:
        args.usage_error("--stream goes with --schema (the JSON Schema of the stream settings)")
    if args.file is None:
        args.usage_error("the following arguments are required: FILE (or --schema)")

    from loopwatch.config import fleet_rules
    from loopwatch.config.errors import ConfigError, both_or_every_problem
    from loopwatch.config.explain import explain, preset_report
    from loopwatch.config.fleet import FleetConfig, parse_config_text
    from loopwatch.config.stream_settings import parse_stream_settings
    from loopwatch.streams.inputs.config_files import load_config

    def config_file() -> FleetConfig:
        if args.file != "-":
            return load_config(args.file)
        config = parse_config_text(sys.stdin.read(), source="<stdin>")
        for warning in config.warnings:
            print(f"loopwatch: <stdin>: warning: {warning}", file=err)
        return config

    try:
        config, settings = both_or_every_problem(config_file, lambda: parse_stream_settings(os.environ))
    except ConfigError as exc:
        if not args.json:
            raise
        problems = [
            {"source": exc.source, "path": problem.path, "message": problem.message}
            for problem in exc.problems
        ]
        out.write(json.dumps({"valid": False, "problems": problems}, indent=1).encode() + b"\n")
        return 2
    reports = explain(config)
    fleet = fleet_rules.fleet_rules(config.global_rules)
    if args.json:
        document = {
            "preset": preset_report(config.global_preset),
            "agents": {
                r.agent: {"preset": r.preset, "effective": r.effective, "notes": r.notes} for r in reports
            },
            "loopwatch": config.settings.as_dict(),
            "fleet_rules": {"effective": fleet_rules.as_dict(fleet), "notes": fleet_rules.describe(fleet)},
            "stream": settings.masked(),
            "valid": True,
        }
        out.write(json.dumps(document, indent=1).encode() + b"\n")
        return 0
    lines = [f"{'<stdin>' if args.file == '-' else args.file}: valid", _revision_line(config.settings)]
    lines.append(_preset_line("preset", preset_report(config.global_preset)))
    for report in reports:
        lines.append(f"\nagent {report.agent}:")
        if report.preset != preset_report(config.global_preset):
            lines.append(_preset_line("  preset (this agent's own)", report.preset))
        lines.append("  " + json.dumps(report.effective))
        lines.extend(f"  note: {note}" for note in report.notes)
    lines.append("\nfleet-wide rules (all agents):")
    lines.extend(f"  note: {note}" for note in fleet_rules.describe(fleet))
    lines.append("\nloopwatch: " + json.dumps(config.settings.as_dict()))
    lines.append("stream settings (environment): " + json.dumps(settings.masked()))
    out.write(("\n".join(lines) + "\n").encode())
    return 0


def _preset_line(label: str, preset: dict[str, str] | None) -> str:
    if preset is None:
        return (
            f"{label}: none (OpenClaw's rules as they are; "
            '{"loopwatch": {"preset": "agents"}} adds the agents preset, docs/real-loops.md)'
        )
    dated = "" if preset["version"] == preset["name"] else f" (stands for {preset['version']})"
    return f"{label}: {preset['name']}{dated}: {preset['summary']}"


def _revision_line(settings: DetectorSettings) -> str:
    if settings.openclaw_revision != "2026-08":
        return (
            f"rules: OpenClaw revision {settings.openclaw_revision} (before argument churn and veto records)"
        )
    stale = settings.churn_stale_after_s
    abort = f"stale churn aborts a run after {stale} s" if stale else "stale churn never aborts"
    return (
        f"rules: OpenClaw revision {settings.openclaw_revision} (argument churn, exec terminal failures, "
        f"blocked retries keep counting; {abort})"
    )


def register(sub: Any) -> None:
    check = sub.add_parser(
        "check-config",
        help="validate a config file and print every agent's effective config",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Validates an OpenClaw or loopwatch config file (every problem is listed with "
        "its path) and prints the effective config of every agent after the per-agent merge and "
        "the threshold auto-raise, with a note on every value the runtime changed, and each agent's "
        "preset with the rules it turned on (thresholds, exempt tools). Stream settings "
        "come from LOOPWATCH_* variables; secrets are masked. --schema prints the JSON Schema of "
        "a config file instead (draft 2020-12, for an editor: docs/configuration.md); --schema --stream "
        "that of the stream settings.",
        epilog="examples:\n  loopwatch check-config ~/.openclaw/openclaw.json\n"
        "  loopwatch check-config --json openclaw.json\n"
        "  ssh host cat .openclaw/openclaw.json | loopwatch check-config -\n"
        "  loopwatch check-config --schema > loopwatch.schema.json\n"
        "  loopwatch check-config --schema --stream",
    )
    check.add_argument("file", metavar="FILE", nargs="?", help="the config file, or - for stdin")
    check.add_argument("--json", action="store_true", help="machine-readable output")
    check.add_argument(
        "--schema",
        action="store_true",
        help="print the JSON Schema of a config file (for editors) and exit",
    )
    check.add_argument(
        "--stream",
        action="store_true",
        help="with --schema: the JSON Schema of the stream settings (LOOPWATCH_* variables) instead",
    )
    check.set_defaults(func=cmd_check_config, usage_error=check.error)
