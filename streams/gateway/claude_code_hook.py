"""``loopwatch hook claude-code``: a Claude Code command hook that asks a loopwatch gateway.

Claude Code starts one process per hook call, with the hook's JSON on stdin. Mapping:

* ``UserPromptSubmit``: a new run begins (every user prompt is a run, like OpenClaw's runs).
  The previous run of the session gets its ``run_end``. The run id is
  ``{session_id}#{prompt number}``; the number is kept in a small file per session.
* ``PreToolUse``: ``POST /v1/decide`` with ``tool_name``, ``tool_input`` and ``tool_use_id``.
  A block is answered with ``permissionDecision: "deny"`` and the verdict's message as the
  reason. An abort also stops Claude (``"continue": false`` with a ``stopReason``). A warning
  reaches the model as ``additionalContext``.
* ``PostToolUse``: a ``tool_result`` with ``tool_response``.
* ``SessionStart`` with source ``compact``: a ``compaction_retry``.
* ``SessionEnd``: the run's ``run_end``.

If the gateway is unreachable or slower than ``--timeout-ms``, the hook fails open: it
prints one line on stderr and exits 0, so Claude goes on. With ``--fail-closed`` a tool call
is refused instead (exit 2, the reason on stderr, which Claude Code shows the model).
"""

from __future__ import annotations

import argparse
import json
import os
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any, BinaryIO, TextIO

__all__ = ["run_hook"]

DEFAULT_GATEWAY = "http://127.0.0.1:6070"


class _Unreachable(Exception):
    pass


def _state_dir() -> Path:
    base = os.environ.get("LOOPWATCH_HOOK_STATE_DIR") or os.path.join(
        os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state"), "loopwatch", "claude-code"
    )
    return Path(base)


def _prompt_number(session: str, advance: bool) -> int:
    """The session's current prompt number (1 before any prompt was seen); ``advance`` counts one more."""
    path = _state_dir() / f"{''.join(c if c.isalnum() or c in '-_' else '_' for c in session)}.prompt"
    try:
        number = int(path.read_text().strip() or "0")
    except (OSError, ValueError):
        number = 0
    if advance:
        number += 1
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(str(number))
    return max(number, 1)


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


def _event(kind: str, run_id: str, session: str, agent: str, **fields: Any) -> dict[str, Any]:
    return {
        "type": kind,
        "event_id": f"claude-{uuid.uuid4().hex}",
        "run_id": run_id,
        "session_id": session,
        "agent_id": agent,
        **fields,
    }


def _pre_tool_use(hook: dict[str, Any], gateway: _Gateway, run_id: str, agent: str) -> dict[str, Any] | None:
    answer = gateway.post(
        "/v1/decide",
        {
            "run_id": run_id,
            "session_id": hook.get("session_id"),
            "agent_id": agent,
            "tool": hook.get("tool_name") or "unknown",
            "params": hook.get("tool_input", {}),
            "tool_call_id": hook.get("tool_use_id"),
        },
    )
    decision, message = answer.get("decision"), answer.get("message") or ""
    specific: dict[str, Any] = {"hookEventName": "PreToolUse"}
    if decision in ("block", "abort"):
        specific.update(permissionDecision="deny", permissionDecisionReason=message)
        output: dict[str, Any] = {"hookSpecificOutput": specific}
        if decision == "abort":
            output.update({"continue": False, "stopReason": message})
        return output
    if decision == "warn":
        specific["additionalContext"] = message
        return {"hookSpecificOutput": specific}
    return None


def handle(hook: dict[str, Any], gateway: _Gateway, agent: str) -> dict[str, Any] | None:
    """Send what the hook call means to the gateway; the JSON to answer Claude Code with, if any."""
    name = hook.get("hook_event_name")
    session = str(hook.get("session_id") or "unknown-session")
    if name == "UserPromptSubmit":
        previous = _prompt_number(session, advance=False)
        number = _prompt_number(session, advance=True)
        if number > 1:
            gateway.post("/v1/events", _event("run_end", f"{session}#{previous}", session, agent))
        return None
    run_id = f"{session}#{_prompt_number(session, advance=False)}"
    if name == "PreToolUse":
        return _pre_tool_use(hook, gateway, run_id, agent)
    if name == "PostToolUse":
        result = _event(
            "tool_result",
            run_id,
            session,
            agent,
            tool=hook.get("tool_name") or "unknown",
            params=hook.get("tool_input", {}),
            tool_call_id=hook.get("tool_use_id"),
            result=hook.get("tool_response"),
        )
        gateway.post("/v1/events", result)
    elif name == "SessionStart" and hook.get("source") == "compact":
        gateway.post("/v1/events", _event("compaction_retry", run_id, session, agent))
    elif name == "SessionEnd":
        gateway.post("/v1/events", _event("run_end", run_id, session, agent))
    return None


def run_hook(args: argparse.Namespace, stdin: BinaryIO, out: BinaryIO, err: TextIO) -> int:
    try:
        hook = json.loads(stdin.read() or b"{}")
    except ValueError as exc:
        print(f"loopwatch hook: the hook input is not JSON ({exc}); allowing", file=err)
        return 0
    if not isinstance(hook, dict):
        print("loopwatch hook: the hook input is not a JSON object; allowing", file=err)
        return 0
    token = os.environ.get("LOOPWATCH_GATEWAY_TOKEN")
    gateway = _Gateway(args.gateway, token, args.timeout_ms / 1000)
    try:
        answer = handle(hook, gateway, args.agent_id)
    except _Unreachable as exc:
        if args.fail_closed and hook.get("hook_event_name") == "PreToolUse":
            print(f"loopwatch: {exc}; refusing the tool call (--fail-closed)", file=err)
            return 2
        print(f"loopwatch: {exc}; allowing (fail open)", file=err)
        return 0
    if answer is not None:
        out.write(json.dumps(answer).encode() + b"\n")
        out.flush()
    return 0
