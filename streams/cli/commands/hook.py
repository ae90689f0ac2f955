"""``loopwatch hook RUNTIME``: an agent runtime's command hook."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, BinaryIO, NoReturn, TextIO

from loopwatch.streams.cli.flags import positive_int


def _hook_runtimes() -> list[str]:
    from loopwatch.streams.gateway.hooks.runtimes import RUNTIMES

    return list(RUNTIMES)


def cmd_hook(args: argparse.Namespace, out: BinaryIO, err: TextIO) -> int:
    from loopwatch.streams.gateway.hooks.command import run_hook
    from loopwatch.streams.gateway.hooks.runtimes import RUNTIMES

    if args.agent_id is None:
        args.agent_id = RUNTIMES[args.runtime].default_agent
    return run_hook(args, sys.stdin.buffer, out, err)


class _HookParser(argparse.ArgumentParser):
    """A mistake in the hook's own command line lets the call through (exit 1: the runtimes'
    non-blocking error), unless ``--fail-closed`` is on it: exit 2, argparse's usual status, is
    what Claude Code, Codex and Gemini CLI take for a refusal, so a typo in a settings file
    would have refused every tool call and every prompt."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        closed = "--fail-closed" in sys.argv[1:]
        then = "refused (--fail-closed)" if closed else "let through"
        self.exit(
            2 if closed else 1, f"{self.prog}: error: {message} (the call is {then}: fix the hook command)\n"
        )


def register(sub: Any) -> None:
    usual = sub._parser_class
    sub._parser_class = _HookParser
    try:
        hook = _hook_parser(sub)
    finally:
        sub._parser_class = usual
    _hook_arguments(hook)


def _hook_parser(sub: Any) -> argparse.ArgumentParser:
    return sub.add_parser(  # type: ignore[no-any-return]
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
        epilog="examples (settings files): docs/claude-code.md, docs/codex.md, docs/gemini-cli.md "
        "and examples/claude-code-settings.json; the hook keeps each session's run in "
        "LOOPWATCH_HOOK_STATE_DIR (default ~/.local/state/loopwatch)",
    )


def _hook_arguments(hook: argparse.ArgumentParser) -> None:
    hook.add_argument("runtime", choices=sorted(_hook_runtimes()), help="the runtime calling the hook")
    hook.add_argument(
        "--gateway",
        default=os.environ.get("LOOPWATCH_GATEWAY_URL", "http://127.0.0.1:6070"),
        help="gateway URL (env LOOPWATCH_GATEWAY_URL; token: env LOOPWATCH_GATEWAY_TOKEN)",
    )
    hook.add_argument("--agent-id", default=None, help="agent id of the runs (default: the runtime's name)")
    hook.add_argument(
        "--timeout-ms",
        type=positive_int,
        default=2000,
        help="how long to wait for the gateway (default 2000)",
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
