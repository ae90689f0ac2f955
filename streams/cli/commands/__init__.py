"""One module per command, each with ``register(sub)`` (its parser) and its ``cmd_*``; the
order here is the order of ``loopwatch --help``."""

from __future__ import annotations

from loopwatch.streams.cli.commands import (
    check_config,
    conformance,
    demo,
    gateway,
    hook,
    mcp,
    replay,
    run,
    transcripts,
    view,
    worker,
)

__all__ = ["COMMANDS"]

COMMANDS = (run, conformance, demo, replay, transcripts, check_config, gateway, hook, mcp, worker, view)
