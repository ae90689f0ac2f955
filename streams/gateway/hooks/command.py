"""``loopwatch hook RUNTIME``: a command hook (one process per hook call) that asks a gateway.

The hook's JSON comes on stdin; the runtime's answer goes to stdout. If the gateway is
unreachable or slower than ``--timeout-ms`` (the whole hook call), the hook fails open: one
line on stderr, exit 0, the runtime goes on. With ``--fail-closed`` a proposed call is refused
instead (exit 2, the reason on stderr, which the runtime shows the model). A gateway that
answers but refuses the input (a 4xx: too large, invalid) lets the call go on either way, and
so do hook input that is not a hook's and state files that cannot be written.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
import urllib.error
import urllib.request
from typing import Any, BinaryIO, TextIO

from loopwatch.streams.gateway.hooks.plan import FilePrompts, HookPlan, session_problem
from loopwatch.streams.gateway.hooks.runtimes import RUNTIMES

__all__ = ["DEFAULT_GATEWAY", "run_hook"]

DEFAULT_GATEWAY = "http://127.0.0.1:6070"


class _Unreachable(Exception):
    pass


class _Refused(Exception):
    """The gateway answered, and refused the hook's input (a 4xx): it is up, the call cannot be
    checked. Allowed even with ``--fail-closed``, which is for a gateway down or slow."""


#: The most of an answer read (a decision is a few hundred bytes; another service's page is not).
MAX_ANSWER_BYTES = 1 << 20
#: Answers that mean "down or slow", not "refused": timed out, too many requests.
_BUSY = frozenset({408, 429})


class _Gateway:
    def __init__(self, url: str, token: str | None, timeout_s: float) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s
        self.deadline = time.monotonic() + timeout_s  # for the whole hook call, every request in it

    def post(self, path: str, body: Any) -> dict[str, Any]:
        """The gateway's JSON answer; within what is left of ``--timeout-ms`` (a socket timeout
        alone bounds each read, not the request: a gateway that drips bytes would hold the
        runtime for as long as it likes)."""
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(self.url + path, data=json.dumps(body).encode(), headers=headers)
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise _Unreachable(f"gateway {self.url} slower than {self.timeout_s * 1000:g} ms")
        outcome: list[Any] = []
        worker = threading.Thread(target=self._exchange, args=(request, left, outcome), daemon=True)
        worker.start()
        worker.join(left)
        if not outcome:  # still waiting: the thread dies with the process
            raise _Unreachable(f"gateway {self.url} slower than {self.timeout_s * 1000:g} ms")
        answer = outcome[0]
        if isinstance(answer, Exception):
            raise answer
        return answer  # type: ignore[no-any-return]

    def _exchange(self, request: urllib.request.Request, timeout_s: float, outcome: list[Any]) -> None:
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as answer:
                value = json.loads(answer.read(MAX_ANSWER_BYTES))  # cut: not JSON
        except urllib.error.HTTPError as exc:
            detail = exc.read(300).decode(errors="replace")
            kind = _Unreachable if exc.code >= 500 or exc.code in _BUSY else _Refused
            outcome.append(kind(f"gateway answered {exc.code}: {detail}"))
            return
        except (OSError, ValueError, RecursionError) as exc:  # refused, timed out, not JSON
            outcome.append(_Unreachable(f"gateway {self.url} unreachable: {exc}"))
            return
        if not isinstance(value, dict):
            outcome.append(_Unreachable(f"{self.url} answered JSON that is not a gateway's (not an object)"))
            return
        outcome.append(value)

    def run(self, plan: HookPlan) -> dict[str, Any] | None:
        if plan.events:
            self.post("/v1/events", plan.events)
        answer = self.post("/v1/decide", plan.decide) if plan.decide is not None else None
        return plan.respond(answer)


def run_hook(args: argparse.Namespace, stdin: BinaryIO, out: BinaryIO, err: TextIO) -> int:
    try:
        hook = json.loads(stdin.read() or b"{}")
    except (ValueError, RecursionError) as exc:
        why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        print(f"loopwatch hook: the hook input is not JSON ({why}); allowing", file=err)
        return 0
    if not isinstance(hook, dict):
        print("loopwatch hook: the hook input is not a JSON object; allowing", file=err)
        return 0
    problem = session_problem(hook)
    if problem is not None:
        print(f"loopwatch hook: {problem}; allowing", file=err)
        return 0
    runtime = RUNTIMES[args.runtime]
    gateway = _Gateway(args.gateway, os.environ.get("LOOPWATCH_GATEWAY_TOKEN"), args.timeout_ms / 1000)
    try:
        plan = runtime.plan(
            hook, FilePrompts(args.runtime), args.agent_id, getattr(args, "show_warnings", False)
        )
        answer = gateway.run(plan)
    except _Unreachable as exc:
        if args.fail_closed and plan.decide is not None:
            print(f"loopwatch: {exc}; refusing the tool call (--fail-closed)", file=err)
            return 2
        print(f"loopwatch: {exc}; allowing (fail open)", file=err)
        return 0
    except _Refused as exc:
        print(
            f"loopwatch: {exc}; allowing (the gateway refused the input, the call is not checked)", file=err
        )
        return 0
    except OSError as exc:  # the prompt numbers and notes kept between hook calls (not the gateway's)
        print(f"loopwatch hook: cannot keep the hook's state ({exc}); allowing", file=err)
        return 0
    if answer is not None:
        out.write(json.dumps(answer).encode() + b"\n")
        out.flush()
    return 0
