"""loopwatch as a Google ADK plugin (tested with google-adk 2.13.0)::

    from google.adk.runners import InMemoryRunner
    from loopwatch.integrations.google_adk import LoopwatchPlugin

    runner = InMemoryRunner(agent=agent, plugins=[LoopwatchPlugin()])
    # or LoopwatchPlugin(gateway_url="http://127.0.0.1:6070")

A plugin applies to every tool call of every agent the runner runs (sub-agents, and agents run
as tools by ``AgentTool``, which hands its caller's plugins to the runner it starts):

* ``before_tool_callback`` asks the in-process :class:`LoopDetector` (default) or a gateway
  (an unreachable gateway lets the call go on). ``block``: the callback answers
  ``{"error": text}``, so the tool is not run and the model reads loopwatch's text as the
  call's function response. ``abort``: the call is answered the same way and the invocation
  ends (``end_invocation`` on the invocation context, ``skip_summarization`` on the call's
  actions: the model is not called again, the response event is the run's final response, and
  the reason is added to it as a text part, which an ``AgentTool`` hands to its caller as the
  sub-agent's answer). Every later call of an aborted run is refused as well.
* ``after_tool_callback`` reports the tool's result (a dict with an ``"error"`` string, ADK's
  way of saying the call failed, as a failure); ``on_tool_error_callback`` reports an
  exception (it goes on as ADK would raise it). A warning decided before the call is added to
  the result the model reads under the key ``"loopwatch"`` (a result that is not a dict goes
  as ``{"result": value, "loopwatch": warning}``, the shape ADK gives it anyway). An abort
  after the call (a loop persisting after a compaction) is added the same way and ends the
  invocation.
* A call paused for a confirmation or a credential is neither an outcome nor a failure: it is
  not reported, and its invocation's runs are not ended when the invocation pauses. Resumed
  (the same invocation, the same function call), it gets its first answer, counted once.

Runs: a run is one invocation (``runner.run_async``) of one agent: the invocation id for the
runner's root agent, ``{invocation_id}/{agent}`` for an agent reached by transfer (one with a
``parent_agent``), whose parent run is its parent agent's. An agent run by a tool (an
``AgentTool``) is a run of its own (its own invocation) whose parent is the run whose tool
started it. The session is the ADK session. When an invocation is over (``after_run_callback``
with no call waiting for a confirmation, or ``on_run_error_callback``), its runs are ended (the
in-process detector forgets them, a gateway receives their ``run_end``).
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from dataclasses import dataclass
from typing import Any, Unpack

from google.adk.plugins.base_plugin import BasePlugin
from google.genai import types

from loopwatch.detectors.facade import LoopDetector
from loopwatch.detectors.outcomes import MISSING
from loopwatch.integrations import Call, GuardOptions, LoopGuard, Ruling

__all__ = ["LoopwatchPlugin"]

#: the run whose tool is executing in this context (an agent run by that tool is its child)
_CALLING_RUN: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "loopwatch_adk_calling_run", default=None
)

#: calls in flight, aborted calls, open invocations and paused ones remembered at most
_KEPT = 10_000

#: the key of loopwatch's note in a tool's result
NOTE_KEY = "loopwatch"


@dataclass(slots=True)
class _Pending:
    """A call decided by ``before_tool_callback``, waiting for its outcome."""

    call: Call
    ruling: Ruling
    context: Any  # the tool context (held: its id is the key while the call is in flight)
    calling: str | None = None  # the calling run before this call's tool ran


def _invocation_of(tool_context: Any) -> Any:
    return getattr(tool_context, "_invocation_context", None)


def _run_of(invocation_id: str, agent: Any) -> str:
    """The run of ``agent`` in an invocation: the invocation's for its root agent."""
    if agent is None or getattr(agent, "parent_agent", None) is None:
        return invocation_id
    return f"{invocation_id}/{agent.name}"


def _failure(result: Any) -> str | None:
    """The failure a tool's result reports (ADK's ``{"error": "..."}``), or ``None``."""
    if isinstance(result, dict):
        error = result.get("error")
        if isinstance(error, str):
            return error or "tool call failed"
    return None


def _with_note(result: Any, note: str) -> dict[str, Any]:
    """The result the model reads, with loopwatch's note added."""
    answer = dict(result) if isinstance(result, dict) else {"result": result}
    earlier = answer.get(NOTE_KEY)
    answer[NOTE_KEY] = f"{earlier}\n\n{note}" if isinstance(earlier, str) and earlier else note
    return answer


def _end_invocation(tool_context: Any) -> None:
    """End the invocation after this call: no further model call, no further step."""
    invocation = _invocation_of(tool_context)
    if invocation is not None:
        invocation.end_invocation = True
    actions = getattr(tool_context, "actions", None)
    if actions is not None:
        actions.skip_summarization = True


def _paused(tool_context: Any) -> bool:
    """The call waits for a confirmation or a credential (not an outcome)."""
    actions = getattr(tool_context, "actions", None)
    return bool(
        getattr(actions, "requested_tool_confirmations", None)
        or getattr(actions, "requested_auth_configs", None)
    )


def _keep(table: dict[Any, Any]) -> None:
    while len(table) > _KEPT:  # (the oldest first: entries of calls that never ended)
        del table[next(iter(table))]


class LoopwatchPlugin(BasePlugin):  # type: ignore[misc, unused-ignore]  # (ADK untyped where absent)
    """Loop detection for the tool calls of a Google ADK runner (see the module's docstring)."""

    def __init__(
        self,
        detector: LoopDetector | None = None,
        *,
        name: str = "loopwatch",
        **options: Unpack[GuardOptions],
    ) -> None:
        super().__init__(name=name)
        self.guard = LoopGuard(detector, **options)
        self._pending: dict[int, _Pending] = {}  # id(tool context) -> its call
        self._aborted: dict[tuple[str, str], str] = {}  # (invocation, call id) -> the abort's text
        self._runs: dict[str, tuple[set[str], str | None]] = {}  # invocation -> (its runs, session)
        self._waiting: dict[str, set[str]] = {}  # invocation -> its paused calls' ids
        self._lock = threading.Lock()

    # -- the run -------------------------------------------------------------------------

    def _call(self, tool: Any, tool_args: Any, tool_context: Any) -> Call:
        invocation_id = str(tool_context.invocation_id)
        agent = getattr(_invocation_of(tool_context), "agent", None)
        run_id = _run_of(invocation_id, agent)
        parent = getattr(agent, "parent_agent", None)
        parent_run = _run_of(invocation_id, parent) if parent is not None else _CALLING_RUN.get()
        session = getattr(getattr(tool_context, "session", None), "id", None)
        session_id = str(session) if session else None
        with self._lock:
            runs, _ = self._runs.setdefault(invocation_id, (set(), session_id))
            runs.add(run_id)
            _keep(self._runs)
        call_id = getattr(tool_context, "function_call_id", None)
        return Call(
            run_id=run_id,
            tool=str(getattr(tool, "name", tool)),
            params=tool_args if tool_args is not None else {},
            tool_call_id=str(call_id) if call_id else None,
            session_id=session_id,
            parent_run_id=parent_run if parent_run != run_id else None,
        )

    async def _end(self, invocation_id: str, paused: bool = False) -> None:
        """End the invocation's runs (``paused``: unless a call waits to be resumed)."""
        with self._lock:
            if paused and self._waiting.get(invocation_id):
                return
            self._waiting.pop(invocation_id, None)
            runs, session = self._runs.pop(invocation_id, (set(), None))
        for run_id in sorted(runs, key=len, reverse=True):  # (sub-agents' runs first)
            await asyncio.to_thread(self.guard.end, run_id, session)

    async def after_run_callback(self, *, invocation_context: Any) -> None:
        await self._end(str(invocation_context.invocation_id), paused=True)

    async def on_run_error_callback(self, *, invocation_context: Any, error: Exception) -> None:
        await self._end(str(invocation_context.invocation_id))

    # -- the tool calls ------------------------------------------------------------------

    def _abort(self, call: Call, tool_context: Any, text: str) -> None:
        _end_invocation(tool_context)
        if call.tool_call_id:
            with self._lock:
                self._aborted[(str(tool_context.invocation_id), call.tool_call_id)] = text
                _keep(self._aborted)

    async def before_tool_callback(
        self, *, tool: Any, tool_args: dict[str, Any], tool_context: Any
    ) -> dict[str, Any] | None:
        call = self._call(tool, tool_args, tool_context)
        if call.tool_call_id:  # (a paused call resumed: the guard gives its first answer)
            with self._lock:
                self._waiting.get(str(tool_context.invocation_id), set()).discard(call.tool_call_id)
        ruling = await asyncio.to_thread(self.guard.before, call)
        pending = _Pending(call, ruling, tool_context, _CALLING_RUN.get())
        if ruling.proceed:  # (the tool runs in this context: an agent it runs is a child run)
            _CALLING_RUN.set(call.run_id)
        with self._lock:
            self._pending[id(tool_context)] = pending
            _keep(self._pending)
        if ruling.proceed:
            return None
        text = ruling.text or "loopwatch blocked this call."
        if ruling.action == "abort":
            self._abort(call, tool_context, text)
        return {"error": text}

    def _settle(self, tool_context: Any) -> _Pending | None:
        """The call's decision, no longer in flight (the calling run restored)."""
        with self._lock:
            pending = self._pending.pop(id(tool_context), None)
        if pending is not None and pending.ruling.proceed:
            _CALLING_RUN.set(pending.calling)
        return pending

    async def after_tool_callback(
        self, *, tool: Any, tool_args: dict[str, Any], tool_context: Any, result: Any
    ) -> dict[str, Any] | None:
        pending = self._settle(tool_context)
        if pending is None or not pending.ruling.proceed:  # not decided here, or refused here
            return None
        call = pending.call
        if _paused(tool_context):  # not run yet: no outcome, and its runs go on when resumed
            if call.tool_call_id:
                with self._lock:
                    self._waiting.setdefault(str(tool_context.invocation_id), set()).add(call.tool_call_id)
                    _keep(self._waiting)
            return None
        error = _failure(result)
        after = await asyncio.to_thread(
            self.guard.after, call, result=MISSING if error is not None else result, error=error
        )
        if after.action == "abort":  # a loop went on after a compaction
            text = after.text or "loopwatch stopped this turn."
            self._abort(call, tool_context, text)
            return _with_note(result, text)
        if pending.ruling.action == "warn" and pending.ruling.text:
            return _with_note(result, pending.ruling.text)
        return None

    async def on_tool_error_callback(
        self, *, tool: Any, tool_args: dict[str, Any], tool_context: Any, error: BaseException
    ) -> dict[str, Any] | None:
        pending = self._settle(tool_context)
        if pending is None or not pending.ruling.proceed or isinstance(error, asyncio.CancelledError):
            return None  # (a cancelled call has no outcome)
        await asyncio.to_thread(self.guard.after, pending.call, error=error)
        return None  # ADK goes on as it would (raises, or the agent's own error callback answers)

    async def on_event_callback(self, *, invocation_context: Any, event: Any) -> None:
        """The response event of an aborted call carries the abort's text as a text part too
        (added in place: a plugin answering here would hide the event from the plugins after it)."""
        content = getattr(event, "content", None)
        if not self._aborted or getattr(event, "partial", False) or content is None:
            return
        invocation_id = str(invocation_context.invocation_id)
        parts = list(content.parts or [])
        texts = []
        with self._lock:
            for part in parts:
                response = getattr(part, "function_response", None)
                key = (invocation_id, str(getattr(response, "id", None)))
                text = self._aborted.pop(key, None) if response is not None else None
                if text and text not in texts:
                    texts.append(text)
        if texts:
            content.parts = [*parts, *(types.Part.from_text(text=text) for text in texts)]
