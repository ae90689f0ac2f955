"""``loopwatch hook RUNTIME``: a command hook (one process per hook call) that asks a gateway.

The hook's JSON comes on stdin; the runtime's answer goes to stdout. If the gateway is
unreachable or slower than ``--timeout-ms`` (the whole hook call), the hook fails open: one
line on stderr, exit 0, the runtime goes on. With ``--fail-closed`` a proposed call is refused
instead (exit 2, the reason on stderr, which the runtime shows the model). A gateway that
answers but refuses the input (400, 413, 422: invalid, too large) lets the call go on either
way (a wrong token or a URL that is not a gateway's is "unreachable"), and
so do hook input that is not a hook's, input nested too deeply to be sent (a gateway refuses
it) and state files that cannot be written.

A process per hook call: this module and what it imports start in milliseconds (the standard
library's json and socket; no argparse, typing, config or core; ``loopwatch hook`` reads its
flags without argparse, :mod:`streams.cli.hook_args`).
"""

from __future__ import annotations

import json
import os
import time

from loopwatch.streams.gateway.gateway_post import GatewayRefused, GatewayUnavailable, InputNotSent, post_json
from loopwatch.streams.gateway.hooks.plan import FilePrompts, HookPlan, session_problem
from loopwatch.streams.gateway.hooks.runtimes import RUNTIMES, event_problem

TYPE_CHECKING = False  # (typing itself is not imported for it: the command hook starts quickly)
if TYPE_CHECKING:
    import argparse
    from typing import Any, BinaryIO, TextIO

__all__ = ["DEFAULT_GATEWAY", "HookArgs", "run_hook"]

DEFAULT_GATEWAY = "http://127.0.0.1:6070"


class HookArgs:
    """What ``loopwatch hook`` was told (as its ``argparse.Namespace`` would hold it)."""

    __slots__ = ("agent_id", "fail_closed", "gateway", "runtime", "show_warnings", "timeout_ms")

    def __init__(
        self,
        runtime: str,
        gateway: str = DEFAULT_GATEWAY,
        agent_id: str | None = None,
        timeout_ms: int = 2000,
        fail_closed: bool = False,
        show_warnings: bool = False,
    ) -> None:
        self.runtime = runtime
        self.gateway = gateway
        self.agent_id = agent_id if agent_id is not None else RUNTIMES[runtime].default_agent
        self.timeout_ms = timeout_ms
        self.fail_closed = fail_closed
        self.show_warnings = show_warnings


class _Gateway:
    def __init__(self, url: str, token: str | None, timeout_s: float) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s
        self.deadline = time.monotonic() + timeout_s  # for the whole hook call, every request in it

    def post(self, path: str, body: Any) -> dict[str, Any]:
        if self.deadline <= time.monotonic():
            raise GatewayUnavailable(f"gateway {self.url} slower than {self.timeout_s * 1000:g} ms")
        try:
            return post_json(self.url, path, body, self.token, self.deadline)
        except GatewayUnavailable as exc:
            if self.deadline <= time.monotonic():
                raise GatewayUnavailable(
                    f"gateway {self.url} slower than {self.timeout_s * 1000:g} ms"
                ) from exc
            raise

    def run(self, plan: HookPlan) -> dict[str, Any] | None:
        if plan.events:
            self.post("/v1/events", plan.events)
        answer = self.post("/v1/decide", plan.decide) if plan.decide is not None else None
        return plan.respond(answer)


def _answer(answer: dict[str, Any] | None, out: BinaryIO) -> int:
    """The hook's output (nothing for ``None``: go on); its exit code."""
    if answer is not None:
        out.write(json.dumps(answer).encode() + b"\n")
        out.flush()
    return 0


def _answer_unsent(plan: HookPlan, out: BinaryIO) -> int:
    """What a plan that decides nothing answers when its events did not reach the gateway: a
    warning decided before the call, kept for its result (Gemini's AfterTool), still goes to
    the model; it was taken from the hook's state for this call and would be lost."""
    return _answer(plan.respond(None) if plan.decide is None else None, out)


_TOO_DEEP = "the hook input nests too deeply to be checked"
_NOT_CHECKED = "a gateway refuses it, the call is not checked"


def _number(text: str) -> float | str:
    """A JSON number of the hook input: beyond a double (``1e400``), the string OpenClaw's
    stableStringify writes for it (``"Infinity"``, ``"-Infinity"``): hashed as OpenClaw hashes
    the number (docs/wire-numbers.md), and JSON the hook can send on."""
    value = float(text)
    if value - value == 0.0:  # finite
        return value
    return "Infinity" if value > 0 else "-Infinity"


def run_hook(args: HookArgs | argparse.Namespace, stdin: BinaryIO, out: BinaryIO, err: TextIO) -> int:
    """Answer one hook call (its JSON on ``stdin``); the exit code."""
    try:
        return _run_hook(args, stdin, out, err)
    except RecursionError:  # str() or JSON of a value nested ~1,000 deep (a gateway takes 64)
        print(f"loopwatch hook: {_TOO_DEEP}; allowing ({_NOT_CHECKED})", file=err)
        return 0


def _run_hook(args: HookArgs | argparse.Namespace, stdin: BinaryIO, out: BinaryIO, err: TextIO) -> int:
    raw = stdin.read()
    if not raw:
        print("loopwatch hook: no hook input on stdin; allowing", file=err)
        return 0
    try:
        hook = json.loads(raw, parse_float=_number)
    except (ValueError, RecursionError) as exc:
        why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        print(f"loopwatch hook: the hook input is not JSON ({why}); allowing", file=err)
        return 0
    if not isinstance(hook, dict):
        print("loopwatch hook: the hook input is not a JSON object; allowing", file=err)
        return 0
    problem = session_problem(hook, args.agent_id)
    if problem is not None:
        print(f"loopwatch hook: {problem}; allowing", file=err)
        return 0
    runtime = RUNTIMES[args.runtime]
    mistake = event_problem(runtime, hook)
    if mistake is not None:
        print(f"loopwatch hook: {mistake}; allowing", file=err)
        return 0
    if not hook.get("session_id"):
        print("loopwatch hook: no session_id in the hook input: its calls share one run", file=err)
    gateway = _Gateway(args.gateway, os.environ.get("LOOPWATCH_GATEWAY_TOKEN"), args.timeout_ms / 1000)
    try:
        plan = runtime.plan(
            hook, FilePrompts(args.runtime), args.agent_id, getattr(args, "show_warnings", False)
        )
        answer = gateway.run(plan)
    except GatewayUnavailable as exc:
        if args.fail_closed and plan.decide is not None:
            print(f"loopwatch: {exc}; refusing the tool call (--fail-closed)", file=err)
            return 2
        print(f"loopwatch: {exc}; allowing (fail open)", file=err)
        return _answer_unsent(plan, out)
    except InputNotSent as exc:
        print(f"loopwatch hook: {exc}; allowing ({_NOT_CHECKED})", file=err)
        return _answer_unsent(plan, out)
    except GatewayRefused as exc:
        print(
            f"loopwatch: {exc}; allowing (the gateway refused the input, the call is not checked)", file=err
        )
        return _answer_unsent(plan, out)
    except OSError as exc:  # the prompt numbers and notes kept between hook calls (not the gateway's)
        print(f"loopwatch hook: cannot keep the hook's state ({exc}); allowing", file=err)
        return 0
    return _answer(answer, out)
