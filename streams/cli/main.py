"""The ``loopwatch`` command line (shell only: parse flags, read files, call the core, print).
Each command is a module of :mod:`streams.cli.commands`.

This module is the console script, and imports nothing but :mod:`sys` itself: ``loopwatch hook
RUNTIME`` runs in a process of its own for every hook call of an agent, so its plain command
lines (:mod:`streams.cli.hook_args`) go straight to the hook, without argparse, the other
commands, the config model or the core. Every other command, and a hook command line argparse
must read (``--help``, a mistake), builds the whole parser; the commands import what they run
when they run it (``loopwatch --help`` loads no broker client and no core).
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # (typing itself is not imported for it)
if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence
    from typing import Any, NoReturn

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    import argparse

    from loopwatch.streams.cli.commands import COMMANDS

    parser = argparse.ArgumentParser(
        prog="loopwatch",
        description="Stop AI agents stuck in tool-call loops, fleet-wide.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  loopwatch demo\n  loopwatch run --config openclaw.json events.jsonl\n"
        "  loopwatch conformance vectors.jsonl",
    )
    parser.add_argument("--version", action=_version_action())
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


def _version_action() -> type[argparse.Action]:
    """argparse's ``version`` action, the installed version looked up only when asked for
    (importlib.metadata scans every installed package)."""
    import argparse

    class Version(argparse._VersionAction):
        def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
            from loopwatch.detectors.core_build import core_build  # compiled, or pure Python

            self.version = f"loopwatch {_version()} ({core_build()})"
            super().__call__(parser, *args, **kwargs)

    return Version


def _parsed(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """The arguments; one a command does not know is reported with that command's usage."""
    import argparse

    args, unknown = parser.parse_known_args(argv)
    if unknown:
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        commands.choices[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def _fatal(message: str, args: argparse.Namespace) -> None:
    """Why the command stops, on stderr: ``loopwatch: <why>``, or under JSON logs
    (``--log-format json``, else ``LOOPWATCH_LOG_FORMAT=json``) a JSON line as the logs are
    (a log pipeline reads it too)."""
    import os

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
    arguments = sys.argv[1:] if argv is None else list(argv)
    if arguments[:1] == ["hook"]:
        hooked = _hook(arguments[1:])
        if hooked is not None:
            if argv is None:  # the console script (or python -m loopwatch): a process per hook call
                _exit_now(hooked)
            return hooked
    parser = build_parser()
    args = _parsed(parser, argv)
    from loopwatch.config.errors import LoopwatchError

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


def _hook(arguments: list[str]) -> int | None:
    """``loopwatch hook ARGUMENTS``, when it is a plain command line (None: argparse's to read)."""
    from loopwatch.streams.cli.hook_args import hook_args

    args = hook_args(arguments)
    if args is None:
        return None
    from loopwatch.streams.gateway.hooks.command import run_hook

    try:
        return run_hook(args, sys.stdin.buffer, sys.stdout.buffer, sys.stderr)
    except BrokenPipeError:  # (as any command)
        return 0


def _exit_now(code: int) -> NoReturn:
    """End the hook's process once its answer is out: the interpreter's teardown (every module
    emptied, the garbage collected) is a tenth of such a process's time, and it holds nothing
    to release (its files are closed, its one thread a daemon)."""
    import os

    for stream in (sys.stdout, sys.stderr):
        try:  # noqa: SIM105 (contextlib is one import more)
            stream.flush()
        except (OSError, ValueError):  # (the runtime stopped reading: nothing more to say)
            pass
    os._exit(code)


if __name__ == "__main__":
    raise SystemExit(main())
