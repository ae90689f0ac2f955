"""SWE-agent trajectories (``.traj``) and mini-swe-agent trajectories (``.traj.json``) → events.

Rules (besides :mod:`history_runs`'s; one run per file, named by the file's stem):

* SWE-agent: every step of ``trajectory`` with an ``action`` is a call: ``tool`` the first word
  of the command line, ``params`` ``{"command": <the action, stripped>}``, ``tool_call_id``
  ``s<step>`` (from 0); its ``observation`` is the ``result`` (SWE-agent marks no failure). A
  step without an action (a reply the agent could not parse) and the step SWE-agent adds when
  it stops the agent (``exit_cost``, ``exit_context``, ``exit_api``, ``exit_format``,
  ``exit_error``) are no calls. The format has no times: the n-th call is at n × 20 s, its
  result 5 s later, the ``run_end`` 5 s after the last.
* mini-swe-agent: a call is ``bash`` with ``{"command": ...}``: each of an assistant message's
  ``extra.actions`` (1.1), or the one bash block of its text (1.0: a reply with none or several
  is a format error, no call). ``tool_call_id``: the action's, else ``m<message index>``
  (``.k`` after the first of several). Its result is the next ``tool`` message with its id, or
  the next ``user`` (or ``exit``: the submission) message: an ``error`` when mini-swe-agent
  marks the command as not run to its end (1.1: ``extra.exception_info``; 1.0: its "timed out"
  message), else the ``result``. Times: the call's from ``extra.timestamp`` or the model
  response's ``created`` (seconds), the result's from its ``extra.timestamp``, else 1 s after
  the call (never after the next call); the ``run_end`` 1 s after the latest event.
* Event ids: ``<stem>-<tool_call_id>`` for a call, ``<stem>-<tool_call_id>.out`` for its result.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, TextIO

from loopwatch.detectors.events import Event
from loopwatch.streams.history.history_runs import RunLog, Skips, checked, finish_runs, report, stem_of

__all__ = [
    "MINI_AGENT",
    "SWE_AGENT",
    "is_mini_swe_agent_trajectory",
    "is_swe_agent_trajectory",
    "mini_swe_agent_events",
    "read_mini_swe_agent_trajectory",
    "read_swe_agent_trajectory",
    "swe_agent_events",
]

SWE_AGENT = "swe-agent"
MINI_AGENT = "mini-swe-agent"
_STEP_MS = 20_000
_RESULT_MS = 5_000
_MINI_RESULT_MS = 1_000
#: mini-swe-agent 1.0's action: the one ```bash block of the reply (its default action_regex)
_BASH_BLOCK = re.compile(r"```bash\s*\n(.*?)\n```", re.DOTALL)
#: the steps SWE-agent writes when it stops the agent itself (cost or context limit, an API or
#: format error): no action of the model's
_FORCED_EXITS = frozenset({"exit_cost", "exit_context", "exit_api", "exit_format", "exit_error"})
_TIMED_OUT = re.compile(r"\AThe last command <command>.*</command> timed out", re.DOTALL)


def is_swe_agent_trajectory(document: Any) -> bool:
    """Whether a JSON document is a SWE-agent trajectory (``trajectory``: steps with actions)."""
    if not isinstance(document, dict) or not isinstance(document.get("trajectory"), list):
        return False
    steps = document["trajectory"]
    return not steps or (isinstance(steps[0], dict) and "action" in steps[0])


def is_mini_swe_agent_trajectory(document: Any) -> bool:
    """Whether a JSON document is a mini-swe-agent trajectory: ``messages`` with a
    ``trajectory_format`` of mini-swe-agent, or (its first releases) a bare list of messages
    starting with the system prompt."""
    if isinstance(document, dict):
        fmt = document.get("trajectory_format")
        return (
            isinstance(fmt, str)
            and fmt.startswith("mini-swe-agent")
            and isinstance(document.get("messages"), list)
        )
    return (
        isinstance(document, list)
        and bool(document)
        and isinstance(document[0], dict)
        and document[0].get("role") == "system"
        and all(isinstance(m, dict) and "role" in m for m in document)
    )


def swe_agent_events(
    document: dict[str, Any], path: str, stem: str, agent_id: str, skips: Skips
) -> list[Any]:
    """``(where, event)`` of a SWE-agent trajectory (see the module rules)."""
    run = RunLog(stem, session_id=stem, end_key="end")
    calls = 0
    for step, entry in enumerate(document["trajectory"]):
        where = f"{path}:trajectory[{step}]"
        if not isinstance(entry, dict):
            skips.add(where, f"a step that is {type(entry).__name__}, not an object")
            continue
        action = entry.get("action")
        if not isinstance(action, str) or not action.strip() or action.strip() in _FORCED_EXITS:
            continue
        line = action.strip()
        calls += 1
        at = calls * _STEP_MS
        call_id = f"s{step}"
        run.call(where, call_id, at, line.split()[0], {"command": line}, call_id)
        observation = entry.get("observation")
        if observation is not None:
            run.outcome(where, f"{call_id}.out", at + _RESULT_MS, call_id, skips, result=observation)
    if run.events:
        run.last_at = (run.events[-1][0] or 0) + _RESULT_MS
    return finish_runs([run], stem, agent_id)


def _mapping(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _seconds_ms(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return int(value * 1000)


def _call_ms(message: dict[str, Any]) -> int | None:
    extra = _mapping(message.get("extra"))
    response = _mapping(extra.get("response"))
    return _seconds_ms(extra.get("timestamp")) or _seconds_ms(response.get("created"))


def _actions(message: dict[str, Any], index: int) -> list[tuple[str, str]] | None:
    """``(tool_call_id, command)`` of an assistant message; ``None`` for a format error."""
    extra = _mapping(message.get("extra"))
    if isinstance(extra.get("actions"), list):
        found = []
        for k, action in enumerate(extra["actions"], start=1):
            if isinstance(action, dict) and isinstance(action.get("command"), str):
                given = action.get("tool_call_id")
                call_id = (
                    given if isinstance(given, str) and given else f"m{index}" + (f".{k}" if k > 1 else "")
                )
                found.append((call_id, action["command"]))
        return found
    content = message.get("content")
    blocks = _BASH_BLOCK.findall(content) if isinstance(content, str) else []
    return [(f"m{index}", blocks[0].strip())] if len(blocks) == 1 else None


def _failed(message: dict[str, Any]) -> bool:
    extra = _mapping(message.get("extra"))
    if extra.get("exception_info"):
        return True
    content = message.get("content")
    return isinstance(content, str) and _TIMED_OUT.match(content) is not None


def mini_swe_agent_events(document: Any, path: str, stem: str, agent_id: str, skips: Skips) -> list[Any]:
    """``(where, event)`` of a mini-swe-agent trajectory (see the module rules)."""
    messages = document["messages"] if isinstance(document, dict) else document
    run = RunLog(stem, session_id=stem, end_key="end")
    pending: list[tuple[str, int | None]] = []  # calls without a result yet, and their times
    upcoming = [_call_ms(m) for m in messages if isinstance(m, dict) and m.get("role") == "assistant"]
    turn = 0
    for index, message in enumerate(messages):
        where = f"{path}:messages[{index}]"
        if not isinstance(message, dict):
            skips.add(where, f"a message that is {type(message).__name__}, not an object")
            continue
        role = message.get("role")
        if role == "assistant":
            turn += 1
            pending = []
            at = _call_ms(message)
            for call_id, command in _actions(message, index) or []:
                run.call(where, call_id, at, "bash", {"command": command}, call_id)
                pending.append((call_id, at))
            continue
        if role not in ("tool", "user", "exit") or not pending:
            continue
        given = message.get("tool_call_id")
        match = next((p for p in pending if p[0] == given), None) if role == "tool" else pending[0]
        if match is None:
            skips.add(where, f"result of call {given!r}, which the history does not hold")
            continue
        pending.remove(match)
        call_id, called = match
        at = _result_ms(message, called, upcoming[turn] if turn < len(upcoming) else None)
        body = message.get("content", "")
        if _failed(message):
            run.outcome(where, f"{call_id}.out", at, call_id, skips, error=body)
        else:
            run.outcome(where, f"{call_id}.out", at, call_id, skips, result=body)
    times = [at for at, *_ in run.events if at is not None]
    if times:
        run.last_at = max(times) + _MINI_RESULT_MS
    return finish_runs([run], stem, agent_id)


def _result_ms(message: dict[str, Any], called: int | None, next_call: int | None) -> int | None:
    extra = _mapping(message.get("extra"))
    stamped = _seconds_ms(extra.get("timestamp"))
    if stamped is not None or called is None:
        return stamped
    at = called + _MINI_RESULT_MS
    return min(at, next_call) if next_call is not None and next_call >= called else at


def read_swe_agent_trajectory(path: Path, document: Any, agent_id: str | None, err: TextIO) -> list[Event]:
    skips = Skips()
    found = swe_agent_events(document, str(path), stem_of(path), agent_id or SWE_AGENT, skips)
    events = checked(found, skips)
    report(skips, err)
    return events


def read_mini_swe_agent_trajectory(
    path: Path, document: Any, agent_id: str | None, err: TextIO
) -> list[Event]:
    skips = Skips()
    found = mini_swe_agent_events(document, str(path), stem_of(path), agent_id or MINI_AGENT, skips)
    events = checked(found, skips)
    report(skips, err)
    return events
