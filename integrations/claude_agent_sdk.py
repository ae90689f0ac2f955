"""loopwatch as Claude Agent SDK hooks (tested with claude-agent-sdk 0.2.184 running Claude Code
2.1.332)::

    from claude_agent_sdk import ClaudeAgentOptions, query
    from loopwatch.integrations.claude_agent_sdk import LoopwatchHooks

    loopwatch = LoopwatchHooks()  # or LoopwatchHooks(gateway_url="http://127.0.0.1:6070")
    options = loopwatch.options(ClaudeAgentOptions(allowed_tools=["Read", "Bash"]))
    async for message in query(prompt="...", options=options): ...

The SDK runs Claude Code as a child process and calls these Python callbacks for its hook
events (``ClaudeAgentOptions.hooks``; :meth:`LoopwatchHooks.hooks` gives the dict,
:meth:`LoopwatchHooks.options` adds it to options that may hold hooks of their own):

* ``PreToolUse``: the call is decided by the in-process :class:`LoopDetector` (default) or a
  gateway (an unreachable gateway lets the call go on). ``block``: ``permissionDecision:
  "deny"`` with loopwatch's reason: the tool does not run and the model reads the reason as
  the call's result. ``warn``: the tool runs; the warning goes as ``additionalContext``, which
  Claude Code gives the model right after the call's result (``show_warnings=True`` also shows
  it to the user as a ``systemMessage``). ``abort``: denied as a block, and ``continue: false``
  ends the turn: the model is not asked again, the result's ``terminal_reason`` is
  ``"hook_stopped"``, the reason is in a ``systemMessage`` (the stream's ``SystemMessage``) and
  in :meth:`LoopwatchHooks.abort_of`; every later call of the run is refused the same way.
  Allowed calls get no permission decision: Claude Code's own permission rules still apply.
* ``PostToolUse`` reports the tool's ``tool_response``, ``PostToolUseFailure`` its ``error``
  (an interrupted call has no outcome). A loop that persists after a compaction aborts here.

Runs: a run is the SDK session (its id is the hook input's ``session_id``): each prompt of the
session (``UserPromptSubmit``, every ``query()`` and every ``ClaudeSDKClient.query()``) starts
it afresh, so an abort ends the turn it happened in, not the next prompt; a background
subagent's ``<task-notification>`` or a prompt the machine injected is not a new prompt. A
subagent (the Agent/Task tool) is a run of its own, ``{session_id}/{agent_id}`` from the
hook input's ``agent_id``, whose ``parent_run_id`` is the session's run; its abort ends the
subagent only (the main agent reads its result and goes on). ``SubagentStop`` ends it. The
event's ``tool_call_id`` is Claude Code's ``tool_use_id``.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, Unpack, cast

import anyio.to_thread
from claude_agent_sdk import ClaudeAgentOptions, HookContext, HookInput, HookJSONOutput, HookMatcher
from claude_agent_sdk.types import HookEvent, SyncHookJSONOutput

from loopwatch.detectors.facade import LoopDetector
from loopwatch.detectors.outcomes import MISSING
from loopwatch.integrations import Call, GuardOptions, LoopGuard, Ruling
from loopwatch.streams.gateway.hooks.claude_code import SAME_RUN_SOURCES

__all__ = ["LoopwatchHooks"]

#: aborted runs remembered at most (the oldest forgotten first)
_ABORTS_KEPT = 10_000
#: a session's run when the hook input has no session id
_NO_SESSION = "claude-agent-sdk"

_T = TypeVar("_T")


def _fields(data: HookInput) -> Mapping[str, Any]:
    return cast(Mapping[str, Any], data)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


class LoopwatchHooks:
    """Hook callbacks sharing one loop detector or gateway (see the module's docstring)."""

    def __init__(
        self,
        detector: LoopDetector | None = None,
        *,
        show_warnings: bool = False,
        **options: Unpack[GuardOptions],
    ) -> None:
        self.guard = LoopGuard(detector, **options)
        #: warnings are also shown to the user (``systemMessage``), not only to the model
        self.show_warnings = show_warnings
        self._aborts: dict[str, Ruling] = {}  # run id -> its abort
        self._lock = threading.Lock()

    # -- the SDK's options ---------------------------------------------------------------

    def hooks(self) -> dict[HookEvent, list[HookMatcher]]:
        """``ClaudeAgentOptions.hooks``: loopwatch's callbacks, one matcher per event."""
        return {
            "UserPromptSubmit": [HookMatcher(hooks=[self.user_prompt_submit])],
            "PreToolUse": [HookMatcher(hooks=[self.pre_tool_use])],
            "PostToolUse": [HookMatcher(hooks=[self.post_tool_use])],
            "PostToolUseFailure": [HookMatcher(hooks=[self.post_tool_use_failure])],
            "SubagentStop": [HookMatcher(hooks=[self.subagent_stop])],
        }

    def options(self, options: ClaudeAgentOptions | None = None) -> ClaudeAgentOptions:
        """A copy of ``options`` (new ones when none) with loopwatch's hooks added after its own."""
        options = options if options is not None else ClaudeAgentOptions()
        merged: dict[HookEvent, list[HookMatcher]] = {
            event: list(matchers) for event, matchers in (options.hooks or {}).items()
        }
        for event, matchers in self.hooks().items():
            merged.setdefault(event, []).extend(matchers)
        return dataclasses.replace(options, hooks=merged)

    # -- runs ----------------------------------------------------------------------------

    def abort_of(self, run_id: str) -> Ruling | None:
        """The abort that ended run ``run_id`` (a session id, or ``{session_id}/{agent_id}``)
        in its current prompt, if one did."""
        with self._lock:
            return self._aborts.get(run_id)

    def end_run(self, run_id: str, session_id: str | None = None) -> None:
        """Forget a run (its abort too)."""
        with self._lock:
            self._aborts.pop(run_id, None)
        self.guard.end(run_id, session_id)

    def _call(self, hook: Mapping[str, Any], tool_use_id: str | None) -> Call:
        session = _text(hook.get("session_id")) or _NO_SESSION
        subagent = _text(hook.get("agent_id"))
        return Call(
            run_id=f"{session}/{subagent}" if subagent else session,
            tool=_text(hook.get("tool_name")) or "unknown",
            params=hook.get("tool_input", {}),
            tool_call_id=_text(hook.get("tool_use_id")) or tool_use_id,
            session_id=session,
            parent_run_id=session if subagent else None,
        )

    def _aborted(self, call: Call, ruling: Ruling) -> None:
        with self._lock:
            self._aborts.setdefault(call.run_id, ruling)
            while len(self._aborts) > _ABORTS_KEPT:
                del self._aborts[next(iter(self._aborts))]

    @staticmethod
    async def _off_loop(work: Callable[[], _T]) -> _T:
        """A guard call, off the event loop (a gateway is asked over HTTP)."""
        return await anyio.to_thread.run_sync(work)

    # -- the callbacks -------------------------------------------------------------------

    async def user_prompt_submit(
        self, data: HookInput, tool_use_id: str | None, context: HookContext
    ) -> HookJSONOutput:
        """A new prompt of the session: its run starts afresh (the previous prompt's ends)."""
        hook = _fields(data)
        prompt = hook.get("prompt")
        if isinstance(prompt, str) and prompt.startswith("<task-notification>"):
            return {}  # a background subagent reporting back: the same run goes on
        source = hook.get("source")
        if isinstance(source, str) and source in SAME_RUN_SOURCES:
            return {}  # injected by the machine, not a prompt: the same run goes on
        session = _text(hook.get("session_id")) or _NO_SESSION
        await self._off_loop(functools.partial(self.end_run, session, session))
        return {}

    async def pre_tool_use(
        self, data: HookInput, tool_use_id: str | None, context: HookContext
    ) -> HookJSONOutput:
        call = self._call(_fields(data), tool_use_id)
        ruling = await self._off_loop(functools.partial(self.guard.before, call))
        if ruling.action == "warn" and ruling.text:
            output: SyncHookJSONOutput = {
                "hookSpecificOutput": {"hookEventName": "PreToolUse", "additionalContext": ruling.text}
            }
            if self.show_warnings:
                output["systemMessage"] = ruling.text
            return output
        if ruling.proceed:
            return {}  # (no permission decision: Claude Code's own rules still apply)
        text = ruling.text or "loopwatch blocked this call."
        output = {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": text,
            }
        }
        if ruling.action == "abort":
            self._aborted(call, ruling)
            output["continue_"] = False
            output["stopReason"] = text
            output["systemMessage"] = text
        return output

    async def post_tool_use(
        self, data: HookInput, tool_use_id: str | None, context: HookContext
    ) -> HookJSONOutput:
        hook = _fields(data)
        call = self._call(hook, tool_use_id)
        result = hook.get("tool_response", MISSING)
        ruling = await self._off_loop(functools.partial(self.guard.after, call, result=result))
        if ruling.action != "abort":
            return {}
        text = self._after_abort(call, ruling)
        return {
            "continue_": False,
            "stopReason": text,
            "systemMessage": text,
            "hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": text},
        }

    async def post_tool_use_failure(
        self, data: HookInput, tool_use_id: str | None, context: HookContext
    ) -> HookJSONOutput:
        hook = _fields(data)
        if hook.get("is_interrupt"):
            return {}  # interrupted by the user: no outcome
        call = self._call(hook, tool_use_id)
        error = _text(hook.get("error")) or "tool call failed"
        ruling = await self._off_loop(functools.partial(self.guard.after, call, error=error))
        if ruling.action != "abort":
            return {}
        text = self._after_abort(call, ruling)
        return {
            "continue_": False,
            "stopReason": text,
            "systemMessage": text,
            "hookSpecificOutput": {"hookEventName": "PostToolUseFailure", "additionalContext": text},
        }

    def _after_abort(self, call: Call, ruling: Ruling) -> str:
        """A loop that persisted after a compaction: the run ends after this result."""
        self._aborted(call, ruling)
        return ruling.text or "loopwatch stopped this run."

    async def subagent_stop(
        self, data: HookInput, tool_use_id: str | None, context: HookContext
    ) -> HookJSONOutput:
        hook = _fields(data)
        session = _text(hook.get("session_id")) or _NO_SESSION
        subagent = _text(hook.get("agent_id"))
        if subagent:
            await self._off_loop(functools.partial(self.end_run, f"{session}/{subagent}", session))
        return {}
