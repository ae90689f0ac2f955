"""Claude Code's hooks (command hooks, and HTTP hooks since 2.1.63) in loopwatch's terms.

* ``UserPromptSubmit``: a new run begins (a run per user prompt, like OpenClaw's runs); the
  previous run of the session gets its ``run_end``. Run id: ``{session_id}#{prompt number}``.
  A background subagent's ``<task-notification>`` (sent as a prompt in ``-p`` mode) is not
  a new prompt, nor a prompt whose ``source`` says the machine injected it (``system``,
  ``poll_event``).
* ``PreToolUse``: the call is decided. ``block`` denies it (``permissionDecision: "deny"``,
  the reason for the model); ``abort`` denies it and ends the turn (``continue: false`` with a
  ``stopReason`` for the user) — and every later call of that run is denied the same way; a
  warning reaches the model as ``additionalContext`` (Claude Code >= 2.1.9) and, with
  ``--show-warnings``, the user as ``systemMessage``.
* ``PostToolUse``: a ``tool_result`` with ``tool_response``. ``PostToolUseFailure`` (a failed
  call: a Bash command that exits non-zero, a Read of a missing file): a ``tool_result`` with
  the ``error``; an interrupted call (``is_interrupt``) has no outcome and records nothing.
* Subagents (the Task tool): hook input with ``agent_id`` belongs to the subagent's own run
  ``{session}#{prompt}/{agent_id}``, whose parent and root are the prompt's run (depth 1);
  ``SubagentStop`` ends it. Parallel subagents reading the same files are separate runs.
* ``SessionStart`` with source ``compact``: a ``compaction_retry``. ``SessionEnd``: the run's
  ``run_end`` (Claude Code kills ``SessionEnd`` hooks after 1.5 s: the hook is quick).
* ``Stop`` records nothing: the model may be prompted again in the same run (a run ends at the
  next prompt or at ``SessionEnd``).
"""

from __future__ import annotations

from loopwatch.detectors.runtime_texts import decision_text
from loopwatch.streams.gateway.hooks.plan import HookPlan, wire_event

TYPE_CHECKING = False  # (typing itself is not imported for it: the command hook starts quickly)
if TYPE_CHECKING:
    from typing import Any, Final

    from loopwatch.streams.gateway.hooks.plan import Answer, PromptCounter

__all__ = ["plan"]

EVENTS = (
    "UserPromptSubmit",
    "PreToolUse",
    "PostToolUse",
    "PostToolUseFailure",
    "SubagentStop",
    "SessionStart",
    "SessionEnd",
)


def _run(hook: dict[str, Any], session: str, prompts: PromptCounter) -> tuple[str, dict[str, Any]]:
    """The run the hook call belongs to, and its chain fields (a subagent's)."""
    prompt_run = f"{session}#{prompts.current(session)}"
    subagent = hook.get("agent_id")
    if isinstance(subagent, str) and subagent:
        chain = {"parent_run_id": prompt_run, "root_run_id": prompt_run, "depth": 1}
        return f"{prompt_run}/{subagent}", chain
    return prompt_run, {}


def _pre_tool_use_output(answer: Answer | None, show_warnings: bool) -> dict[str, Any] | None:
    if answer is None:
        return None
    decision = answer.get("decision")
    if decision not in ("warn", "block", "abort"):
        return None
    text = decision_text(answer)
    specific: dict[str, Any] = {"hookEventName": "PreToolUse"}
    if decision == "warn":
        specific["additionalContext"] = text
        output: dict[str, Any] = {"hookSpecificOutput": specific}
        if show_warnings:
            output["systemMessage"] = text
        return output
    specific.update(permissionDecision="deny", permissionDecisionReason=text)
    output = {"hookSpecificOutput": specific}
    if decision == "abort":
        output.update({"continue": False, "stopReason": text})
    return output


#: ``UserPromptSubmit`` sources that are no prompt of the user's (Claude Code's hook input
#: schema: ``system`` = peer or channel messages, task notifications, auto-continuation;
#: ``poll_event`` = an event submitted by the host, not yet delivered). A new run at each would
#: reset the run's counts and free an aborted run; ``user``, ``sdk`` and the scheduled
#: wakeups start a run, as a prompt without a source does.
SAME_RUN_SOURCES: Final = frozenset({"system", "poll_event"})


def plan(hook: dict[str, Any], prompts: PromptCounter, agent: str, show_warnings: bool = False) -> HookPlan:
    """What one Claude Code hook call asks of loopwatch."""
    name = hook.get("hook_event_name")
    session = str(hook.get("session_id") or "unknown-session")
    if name == "UserPromptSubmit":
        if str(hook.get("prompt") or "").startswith("<task-notification>"):
            return HookPlan()  # a background subagent reporting back: the same run goes on
        source = hook.get("source")
        if isinstance(source, str) and source in SAME_RUN_SOURCES:
            return HookPlan()  # injected by the machine, not the user: the same run goes on
        previous = prompts.current(session)
        number = prompts.advance(session)
        if number > 1:
            return HookPlan([wire_event("run_end", f"{session}#{previous}", session, agent)])
        return HookPlan()
    run_id, chain = _run(hook, session, prompts)
    tool = str(hook.get("tool_name") or "unknown")
    call: dict[str, Any] = {"tool": tool, "params": hook.get("tool_input", {})}
    call_id = hook.get("tool_use_id")
    if name == "PreToolUse":
        decide = {"run_id": run_id, "session_id": session, "agent_id": agent, **call, **chain}
        if isinstance(call_id, str):
            decide["tool_call_id"] = call_id
        return HookPlan(decide=decide, respond=lambda answer: _pre_tool_use_output(answer, show_warnings))
    ids = {"tool_call_id": call_id} if isinstance(call_id, str) else {}
    if name == "PostToolUse":
        result = {"result": hook.get("tool_response")}
        return HookPlan([wire_event("tool_result", run_id, session, agent, **call, **ids, **result, **chain)])
    if name == "PostToolUseFailure":
        if hook.get("is_interrupt"):
            return HookPlan()  # interrupted by the user: no outcome
        failed = {"error": hook.get("error") or "tool call failed"}
        return HookPlan([wire_event("tool_result", run_id, session, agent, **call, **ids, **failed, **chain)])
    if name == "SubagentStop":
        return HookPlan([wire_event("run_end", run_id, session, agent)]) if chain else HookPlan()
    if name == "SessionStart" and hook.get("source") == "compact":
        return HookPlan([wire_event("compaction_retry", run_id, session, agent)])
    if name == "SessionEnd":
        return HookPlan([wire_event("run_end", run_id, session, agent)])
    return HookPlan()
