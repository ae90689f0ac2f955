"""``loopwatch hook``'s command line read without argparse: a runtime starts a process per
hook call, and argparse with every other command's parser is most of such a process's start.

Only the plain forms are read here, each as argparse reads it (the runtime, ``--gateway URL``,
``--agent-id ID``, ``--timeout-ms N``, each also as ``--flag=VALUE``, ``--fail-closed``,
``--show-warnings``, in any order, the last of a repeated flag winning); anything else
(``--help``, an abbreviation, a mistake) is left to argparse (:func:`hook_args` gives None),
which answers it as ``commands/hook.py`` says.
"""

from __future__ import annotations

import os

from loopwatch.streams.gateway.hooks.command import DEFAULT_GATEWAY, HookArgs
from loopwatch.streams.gateway.hooks.runtimes import RUNTIMES

__all__ = ["hook_args"]

#: the flags that take a value → HookArgs's field
_VALUED = {"--gateway": "gateway", "--agent-id": "agent_id", "--timeout-ms": "timeout_ms"}
#: the switches → HookArgs's field
_SWITCHES = {"--fail-closed": "fail_closed", "--show-warnings": "show_warnings"}


def hook_args(argv: list[str]) -> HookArgs | None:
    """What ``loopwatch hook ARGV...`` asks (None: let argparse read it)."""
    runtime: str | None = None
    given: dict[str, str] = {}
    switches = {"fail_closed": False, "show_warnings": False}
    at = 0
    while at < len(argv):
        arg = argv[at]
        at += 1
        if arg in _SWITCHES:
            switches[_SWITCHES[arg]] = True
            continue
        flag, equals, value = arg.partition("=")
        if flag in _VALUED:
            if not equals:
                if at == len(argv) or argv[at].startswith("-"):
                    return None  # (argparse: "expected one argument", or a negative number)
                value = argv[at]
                at += 1
            if flag == "--timeout-ms" and _positive_int(value) is None:
                return None  # (argparse checks every one given, not only the last)
            given[_VALUED[flag]] = value
            continue
        if arg.startswith("-") or runtime is not None or arg not in RUNTIMES:
            return None
        runtime = arg
    if runtime is None:
        return None
    return HookArgs(
        runtime,
        gateway=given.get("gateway", os.environ.get("LOOPWATCH_GATEWAY_URL", DEFAULT_GATEWAY)),
        agent_id=given.get("agent_id"),
        timeout_ms=_positive_int(given.get("timeout_ms", "2000")) or 2000,
        fail_closed=switches["fail_closed"],
        show_warnings=switches["show_warnings"],
    )


def _positive_int(text: str) -> int | None:
    """What ``flags.positive_int`` takes (None: what it refuses)."""
    try:
        value = int(text)
    except ValueError:
        return None
    return value if value >= 1 else None
