"""``loopwatch hook RUNTIME``: a command hook (one process per hook call) that asks a gateway.

The hook's JSON comes on stdin; the runtime's answer goes to stdout. If the gateway is
unreachable or slower than ``--timeout-ms``, the hook fails open: one line on stderr, exit 0,
the runtime goes on. With ``--fail-closed`` a proposed call is refused instead (exit 2, the
reason on stderr, which the runtime shows the model).
"""

from __future__ import annotations

import argparse
import json
import os
import urllib.error
import urllib.request
from typing import Any, BinaryIO, TextIO

from loopwatch.streams.gateway.hooks.plan import FilePrompts, HookPlan
from loopwatch.streams.gateway.hooks.runtimes import RUNTIMES

__all__ = ["DEFAULT_GATEWAY", "run_hook"]

DEFAULT_GATEWAY = "http://127.0.0.1:6070"


class _Unreachable(Exception):
    pass


class _Gateway:
    def __init__(self, url: str, token: str | None, timeout_s: float) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s

    def post(self, path: str, body: Any) -> Any:
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(self.url + path, data=json.dumps(body).encode(), headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as answer:
                return json.loads(answer.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:300]
            raise _Unreachable(f"gateway answered {exc.code}: {detail}") from exc
        except (OSError, ValueError) as exc:  # refused, timed out, not JSON
            raise _Unreachable(f"gateway {self.url} unreachable: {exc}") from exc

    def run(self, plan: HookPlan) -> dict[str, Any] | None:
        if plan.events:
            self.post("/v1/events", plan.events)
        answer = self.post("/v1/decide", plan.decide) if plan.decide is not None else None
        return plan.respond(answer)


def run_hook(args: argparse.Namespace, stdin: BinaryIO, out: BinaryIO, err: TextIO) -> int:
    try:
        hook = json.loads(stdin.read() or b"{}")
    except ValueError as exc:
        print(f"loopwatch hook: the hook input is not JSON ({exc}); allowing", file=err)
        return 0
    if not isinstance(hook, dict):
        print("loopwatch hook: the hook input is not a JSON object; allowing", file=err)
        return 0
    runtime = RUNTIMES[args.runtime]
    plan = runtime.plan(hook, FilePrompts(args.runtime), args.agent_id, getattr(args, "show_warnings", False))
    gateway = _Gateway(args.gateway, os.environ.get("LOOPWATCH_GATEWAY_TOKEN"), args.timeout_ms / 1000)
    try:
        answer = gateway.run(plan)
    except _Unreachable as exc:
        if args.fail_closed and plan.decide is not None:
            print(f"loopwatch: {exc}; refusing the tool call (--fail-closed)", file=err)
            return 2
        print(f"loopwatch: {exc}; allowing (fail open)", file=err)
        return 0
    if answer is not None:
        out.write(json.dumps(answer).encode() + b"\n")
        out.flush()
    return 0
