"""Gemini CLI's hooks (command hooks) in loopwatch's terms.

* ``BeforeAgent``: a new run begins (a run per user prompt): ``{session_id}#{prompt number}``;
  the previous run gets its ``run_end``. ``AfterAgent`` (the agent answered the prompt) ends
  the run, and so does ``SessionEnd`` — which Gemini CLI 0.61 never fires in headless mode
  (``gemini -p``): there ``AfterAgent`` is the run's only end.
* ``BeforeTool``: the call is decided. ``block`` answers ``decision: "deny"`` with the reason
  (the model reads it as the call's error and goes on); ``abort`` adds ``continue: false``
  (Gemini stops the agent) — and every later call of the run is denied the same way.
  ``BeforeTool`` cannot add context for the model, so a warning is kept and given with the
  call's result: ``AfterTool`` answers ``hookSpecificOutput.additionalContext``, which Gemini
  appends to the result the model reads (as OpenClaw 2026.9 appends its warning note).
* ``AfterTool``: a ``tool_result``: ``error`` when ``tool_response.error`` is set, else the
  ``llmContent`` the model reads. ``run_shell_command``'s ``llmContent`` ends with the process
  ids of that one run (``Process Group PGID: 2128``, ``Background PIDs: ...``); those lines are
  left out, or no two runs of the same failing command would have the same outcome. Gemini's
  hooks carry no call id: a call and its result are paired by tool and input.
* ``PreCompress`` is a ``compaction_retry``.
"""

from __future__ import annotations

import re

from loopwatch.detectors.runtime_texts import decision_text
from loopwatch.streams.gateway.hooks.plan import HookPlan, call_key, wire_event

TYPE_CHECKING = False  # (typing itself is not imported for it: the command hook starts quickly)
if TYPE_CHECKING:
    from typing import Any

    from loopwatch.streams.gateway.hooks.plan import Answer, PromptCounter

__all__ = ["EVENTS", "plan"]

EVENTS = ("BeforeAgent", "BeforeTool", "AfterTool", "AfterAgent", "PreCompress", "SessionEnd")

SHELL_TOOL = "run_shell_command"
#: the last lines of a shell result, which name this run's processes (Gemini CLI 0.61's shell
#: tool: ``Output: ...``, ``Exit Code: 1``, ..., ``Background PIDs: ...``, ``Process Group PGID:
#: ...``, inside ``<untrusted_context>``); compiled when first used (``re.compile`` keeps them),
#: not by every hook call that imports this module
_PGID = r"\nProcess Group PGID: [0-9]+\Z"
_PIDS = r"\nBackground PIDs: [0-9, ]+\Z"
_CONTEXT_END = "\n</untrusted_context>"


def without_process_ids(content: str) -> str:
    """``content`` without its closing ``Background PIDs`` and ``Process Group PGID`` lines
    (before an optional ``</untrusted_context>`` and trailing whitespace).

    Linear in the content's size: one regex with a trailing whitespace look-ahead, tried at
    every position, took time quadratic in a run of spaces, and stalled the gateway's event
    loop for seconds on a 60 kB result."""
    body = content.rstrip()
    tail = content[len(body) :]
    tagged = body.endswith(_CONTEXT_END)
    if tagged:
        body, tail = body[: -len(_CONTEXT_END)], _CONTEXT_END + tail
    cut = len(body)
    found = re.compile(_PGID).search(body)
    if found is not None:
        cut = found.start()
    elif not tagged:  # a PIDs line would end the text: the spaces after it are its own
        end = len(content) - len(tail.lstrip(" "))
        found = re.compile(_PIDS).search(content, 0, end)
        return content if found is None else content[: found.start()] + content[end:]
    found = re.compile(_PIDS).search(body, 0, cut)
    if found is not None:
        cut = found.start()
    return body[:cut] + tail if cut < len(body) else content


def _content(tool: str, content: Any) -> Any:
    """What the model read, without the process ids of one shell run."""
    if tool == SHELL_TOOL and isinstance(content, str):
        return without_process_ids(content)
    return content


def _outcome(tool: str, response: Any) -> dict[str, Any]:
    if isinstance(response, dict):
        error = response.get("error")
        if isinstance(error, dict) and error:
            return {"error": error.get("message") or error.get("type") or "tool call failed"}
        if error:
            return {"error": str(error)}
        return {"result": _content(tool, response.get("llmContent"))}
    return {"result": _content(tool, response)}


def plan(hook: dict[str, Any], prompts: PromptCounter, agent: str, show_warnings: bool = False) -> HookPlan:
    """What one Gemini CLI hook call asks of loopwatch."""
    name = hook.get("hook_event_name")
    session = str(hook.get("session_id") or "unknown-session")
    if name == "BeforeAgent":
        previous = prompts.current(session)
        if prompts.advance(session) > 1:
            return HookPlan([wire_event("run_end", f"{session}#{previous}", session, agent)])
        return HookPlan()
    run_id = f"{session}#{prompts.current(session)}"
    tool = str(hook.get("tool_name") or "unknown")
    params = hook.get("tool_input", {})
    key = call_key(tool, params)
    if name == "BeforeTool":

        def respond(answer: Answer | None) -> dict[str, Any] | None:
            if answer is None or answer.get("decision") not in ("warn", "block", "abort"):
                return None
            text = decision_text(answer)
            if answer["decision"] == "warn":
                prompts.leave_note(session, key, text)  # given to the model with the result
                return {"systemMessage": text} if show_warnings else None
            output: dict[str, Any] = {"decision": "deny", "reason": text}
            if answer["decision"] == "abort":
                output.update({"continue": False, "stopReason": text})
            return output

        decide = {"run_id": run_id, "session_id": session, "agent_id": agent, "tool": tool, "params": params}
        return HookPlan(decide=decide, respond=respond)
    if name == "AfterTool":
        note = prompts.take_note(session, key)
        event = wire_event("tool_result", run_id, session, agent, tool=tool, params=params)
        event.update(_outcome(tool, hook.get("tool_response")))

        def after(answer: Answer | None) -> dict[str, Any] | None:
            if note is None:
                return None
            return {"hookSpecificOutput": {"hookEventName": "AfterTool", "additionalContext": note}}

        return HookPlan([event], respond=after)
    if name == "PreCompress":
        return HookPlan([wire_event("compaction_retry", run_id, session, agent)])
    if name in ("AfterAgent", "SessionEnd"):
        return HookPlan([wire_event("run_end", run_id, session, agent)])
    return HookPlan()
