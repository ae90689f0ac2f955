"""The ``loopwatch`` command line (shell only: parse flags, read files, call the core, print).
Each command is a module of :mod:`streams.cli.commands`."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from loopwatch.config.errors import LoopwatchError
from loopwatch.streams.cli.commands import COMMANDS

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="loopwatch",
        description="Stop AI agents stuck in tool-call loops, fleet-wide.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  loopwatch demo\n  loopwatch run --config openclaw.json events.jsonl\n"
        "  loopwatch conformance vectors.jsonl",
    )
    parser.add_argument("--version", action="version", version=f"loopwatch {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.register(sub)
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("loopwatch")
    except PackageNotFoundError:  # run from sources that were never installed
        return "(not installed)"


def _parsed(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """The arguments; one a command does not know is reported with that command's usage."""
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        commands.choices[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def _fatal(message: str, args: argparse.Namespace) -> None:
    """Why the command stops, on stderr: ``loopwatch: <why>``, or under JSON logs
    (``--log-format json``, else ``LOOPWATCH_LOG_FORMAT=json``) a JSON line as the logs are
    (a log pipeline reads it too)."""
    command = args.command
    if (getattr(args, "log_format", None) or os.environ.get("LOOPWATCH_LOG_FORMAT")) == "json":
        import datetime
        import json

        now = datetime.datetime.now(datetime.UTC).isoformat().replace("+00:00", "Z")
        line = {"event": message, "level": "error", "command": command, "exit": 2, "timestamp": now}
        print(json.dumps(line), file=sys.stderr)
    else:
        print(f"loopwatch: {message}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = _parsed(parser, argv)
    try:
        code: int = args.func(args, sys.stdout.buffer, sys.stderr)
    except LoopwatchError as exc:  # invalid config, input or broker: what and where, no traceback
        _fatal(str(exc), args)
        return 2
    except FileNotFoundError as exc:
        _fatal(f"no such file: {exc.filename}", args)
        return 2
    except BrokenPipeError:
        return 0
    return code


if __name__ == "__main__":
    raise SystemExit(main())
