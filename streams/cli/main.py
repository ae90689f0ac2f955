"""The ``loopwatch`` command line (shell only: parse flags, read files, call the core, print).
Each command is a module of :mod:`streams.cli.commands`."""

from __future__ import annotations

import argparse
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
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.register(sub)
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
