"""Codex CLI's hooks (command hooks, on by default since 0.124) in loopwatch's terms.

Codex speaks Claude Code's hook input format, but its output parser is stricter: a
``PreToolUse`` output with ``continue: false`` or ``stopReason`` is rejected as unsupported,
and a rejected output carries no block, so the call would run. So loopwatch answers Codex
only with what it accepts:

* ``PreToolUse``: ``block`` and ``abort`` are a plain deny (``permissionDecision: "deny"`` and
  the reason). No hook can end a Codex turn; after an abort every later call of the run is
  denied, so the model can do nothing but end it. A warning reaches the model as
  ``additionalContext`` (a developer message).
* ``PostToolUse``: a ``tool_result`` with ``tool_response`` (the command's output; a failing
  command reaches it too, Codex has no separate failure event).
* Runs: one per turn, ``{session_id}#{turn_id}``; ``Stop`` ends it. Subagents (``agent_id``) are
  runs of their own under the turn's run (depth 1); ``SubagentStop`` ends them.
  ``PostCompact`` is a ``compaction_retry``.
"""

from __future__ import annotations

from loopwatch.detectors.runtime_texts import decision_text
from loopwatch.streams.gateway.hooks.plan import HookPlan, wire_event

TYPE_CHECKING = False  # (typing itself is not imported for it: the command hook starts quickly)
if TYPE_CHECKING:
    from typing import Any

    from loopwatch.streams.gateway.hooks.plan import Answer, PromptCounter

__all__ = ["EVENTS", "plan"]

EVENTS = ("PreToolUse", "PostToolUse", "SubagentStop", "PostCompact", "Stop")


def _run(hook: dict[str, Any], session: str) -> tuple[str, dict[str, Any]]:
    turn = str(hook.get("turn_id") or "turn")
    turn_run = f"{session}#{turn}"
    subagent = hook.get("agent_id")
    if isinstance(subagent, str) and subagent:
        return f"{turn_run}/{subagent}", {"parent_run_id": turn_run, "root_run_id": turn_run, "depth": 1}
    return turn_run, {}


def _pre_tool_use_output(answer: Answer | None) -> dict[str, Any] | None:
    if answer is None or answer.get("decision") not in ("warn", "block", "abort"):
        return None
    text = decision_text(answer)
    specific: dict[str, Any] = {"hookEventName": "PreToolUse"}
    if answer["decision"] == "warn":
        specific["additionalContext"] = text
    else:
        specific.update(permissionDecision="deny", permissionDecisionReason=text)
    return {"hookSpecificOutput": specific}


def plan(hook: dict[str, Any], prompts: PromptCounter, agent: str, show_warnings: bool = False) -> HookPlan:
    """What one Codex hook call asks of loopwatch (``prompts`` is not needed: turns have ids)."""
    name = hook.get("hook_event_name")
    session = str(hook.get("session_id") or "unknown-session")
    run_id, chain = _run(hook, session)
    call: dict[str, Any] = {
        "tool": str(hook.get("tool_name") or "unknown"),
        "params": hook.get("tool_input", {}),
    }
    call_id = hook.get("tool_use_id")
    ids = {"tool_call_id": call_id} if isinstance(call_id, str) else {}
    if name == "PreToolUse":
        decide = {"run_id": run_id, "session_id": session, "agent_id": agent, **call, **ids, **chain}
        return HookPlan(decide=decide, respond=_pre_tool_use_output)
    if name == "PostToolUse":
        result = {"result": hook.get("tool_response")}
        return HookPlan([wire_event("tool_result", run_id, session, agent, **call, **ids, **result, **chain)])
    if name == "SubagentStop":
        return HookPlan([wire_event("run_end", run_id, session, agent)]) if chain else HookPlan()
    if name == "Stop" and not chain:
        return HookPlan([wire_event("run_end", run_id, session, agent)])
    if name == "PostCompact":
        return HookPlan([wire_event("compaction_retry", run_id, session, agent)])
    return HookPlan()
