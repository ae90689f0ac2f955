"""loopwatch as a LangChain 1.x agent middleware (``create_agent(..., middleware=[...])``).

Tested with langchain 1.5.2, langchain-core 1.8.3 and langgraph 1.2.24::

    from langchain.agents import create_agent
    from loopwatch.integrations.langchain import LoopwatchMiddleware

    agent = create_agent(model, tools, middleware=[LoopwatchMiddleware()])

What it does, per tool call (``wrap_tool_call`` / ``awrap_tool_call``):

* before the tool runs, it asks the in-process :class:`LoopDetector` (default) or a gateway
  (``gateway_url=``; an unreachable gateway lets the call go on);
* ``block``: the tool is not run; the model reads loopwatch's text as the call's
  ``ToolMessage`` (``status="error"``);
* ``warn``: the tool runs; the warning is appended to the result the model reads (also to
  the call's ``ToolMessage`` inside a ``Command`` the tool answers with);
* ``abort``: the tool is not run, its ``ToolMessage`` says why, and the run ends the way
  LangChain middleware ends one: ``before_model`` answers ``jump_to: "end"`` with an
  ``AIMessage`` carrying the reason (the model is not called again). With
  ``on_abort="error"`` it raises :class:`LoopAborted` instead (like
  ``ToolCallLimitMiddleware(exit_behavior="error")``). Every later call of an aborted run is
  refused as well (the core's abort is sticky);
* after the tool ran, its result (the ``ToolMessage`` content; ``status="error"`` counts as a
  failure) or its exception is reported. An ``interrupt()`` in the tool is neither: the call
  is paused, and when the graph resumes it (the tool runs again from its start) it is the
  same call, decided once.

Runs: each agent invocation is a run (``before_agent`` names it, ``after_agent`` ends it:
``run_end``; with ``on_abort="error"`` the abort ends it); its ``session_id`` is the
LangGraph ``thread_id`` when there is one. A tool that invokes another agent makes that
agent's run a subagent: its calls carry the calling run as ``parent_run_id`` (the tool call
in progress is kept in a context variable, which LangGraph copies into the nodes and threads
of the inner invocation).
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import threading
import uuid
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal, NotRequired, Unpack

from langchain.agents.middleware import AgentMiddleware, AgentState, hook_config
from langchain.agents.middleware.types import PrivateStateAttr
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.errors import GraphBubbleUp
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.runtime import Runtime
from langgraph.types import Command

from loopwatch.detectors.facade import LoopDetector
from loopwatch.detectors.outcomes import MISSING
from loopwatch.integrations import Call, GuardOptions, LoopGuard, Ruling

__all__ = ["LoopAborted", "LoopwatchMiddleware", "LoopwatchState"]

#: the run whose tool is executing in this context (a subagent started by it is its child)
_CALLING_RUN: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "loopwatch_calling_run", default=None
)


#: aborted runs and paused calls remembered at most (the oldest forgotten first)
_ABORTS_KEPT = 10_000


class LoopAborted(RuntimeError):
    """loopwatch stopped the run (``on_abort="error"``): ``reason`` is the abort's reason code."""

    def __init__(self, message: str, reason: str | None, run_id: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.run_id = run_id


class LoopwatchState(AgentState[Any]):
    """The agent state with the run's loopwatch id (private: not in the input or output)."""

    loopwatch_run_id: NotRequired[Annotated[str, PrivateStateAttr]]
    loopwatch_parent_run_id: NotRequired[Annotated[str, PrivateStateAttr]]


def _thread_id(config: Any) -> str | None:
    configurable = config.get("configurable") if isinstance(config, dict) else None
    thread = configurable.get("thread_id") if isinstance(configurable, dict) else None
    return str(thread) if thread is not None else None


def _result_of(message: ToolMessage) -> tuple[Any, str | None]:
    """What the model reads of a tool's answer: (result, error)."""
    if message.status == "error":
        return MISSING, message.text or "tool call failed"
    return message.content, None


def _with_note(message: ToolMessage, note: str) -> ToolMessage:
    content = message.content
    if isinstance(content, str):
        new_content: Any = f"{content}\n\n{note}" if content else note
    else:
        new_content = [*content, {"type": "text", "text": note}]
    return message.model_copy(update={"content": new_content})


class LoopwatchMiddleware(AgentMiddleware[LoopwatchState, Any, Any]):
    """Loop detection for a LangChain agent's tool calls (see the module's docstring)."""

    state_schema = LoopwatchState

    def __init__(
        self,
        detector: LoopDetector | None = None,
        *,
        on_abort: Literal["end", "error"] = "end",
        **options: Unpack[GuardOptions],
    ) -> None:
        super().__init__()
        if on_abort not in ("end", "error"):
            raise ValueError(f"on_abort must be 'end' or 'error', not {on_abort!r}")
        self.guard = LoopGuard(detector, **options)
        self.on_abort = on_abort
        self._aborted: dict[str, Ruling] = {}
        self._paused: dict[tuple[str, str | None], Ruling] = {}  # (run, call id) -> its decision
        self._lock = threading.Lock()

    # -- the run -------------------------------------------------------------------------

    def before_agent(self, state: LoopwatchState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        update: dict[str, Any] = {"loopwatch_run_id": f"langgraph-{uuid.uuid4().hex}"}
        parent = _CALLING_RUN.get()
        if parent is not None:
            update["loopwatch_parent_run_id"] = parent
        return update

    async def abefore_agent(self, state: LoopwatchState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return self.before_agent(state, runtime)

    @hook_config(can_jump_to=["end"])
    def before_model(self, state: LoopwatchState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        run_id = state.get("loopwatch_run_id")
        with self._lock:
            ruling = self._aborted.get(run_id) if run_id else None
        if ruling is None:
            return None
        return {
            "jump_to": "end",
            "messages": [AIMessage(content=ruling.text or "loopwatch stopped this turn.")],
        }

    @hook_config(can_jump_to=["end"])
    async def abefore_model(self, state: LoopwatchState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return self.before_model(state, runtime)

    def after_agent(self, state: LoopwatchState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        run_id = state.get("loopwatch_run_id")
        if run_id:
            with self._lock:
                self._aborted.pop(run_id, None)
            self.guard.end(run_id, _thread_id(_config()))
        return None

    async def aafter_agent(self, state: LoopwatchState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        run_id = state.get("loopwatch_run_id")
        if run_id:
            with self._lock:
                self._aborted.pop(run_id, None)
            await asyncio.to_thread(self.guard.end, run_id, _thread_id(_config()))
        return None

    # -- the tool calls ------------------------------------------------------------------

    def _pause(self, call: Call, ruling: Ruling) -> None:
        """An ``interrupt()`` in the tool: neither an outcome nor a failure. The call runs again
        from its start when the graph resumes; it was decided once, and counts once."""
        with self._lock:
            self._paused[(call.run_id, call.tool_call_id)] = ruling
            while len(self._paused) > _ABORTS_KEPT:
                del self._paused[next(iter(self._paused))]

    def _abort_of(self, call: Call) -> Ruling | None:
        """The abort of the call's run, once it has one (calls decided in parallel, after the
        detector forgot a run ended by ``on_abort="error"``, are refused all the same)."""
        with self._lock:
            return self._aborted.get(call.run_id)

    def _resumed(self, call: Call) -> Ruling | None:
        """The decision of a paused call now resumed (``None``: not one)."""
        if call.tool_call_id is None:
            return None
        with self._lock:
            return self._paused.pop((call.run_id, call.tool_call_id), None)

    def _call(self, request: ToolCallRequest) -> Call:
        config = request.runtime.config if request.runtime is not None else {}
        state = request.state if isinstance(request.state, dict) else {}
        thread = _thread_id(config)
        run_id = state.get("loopwatch_run_id") or (f"langgraph-thread-{thread}" if thread else "langgraph")
        return Call(
            run_id=str(run_id),
            tool=request.tool_call["name"],
            params=request.tool_call.get("args", {}),
            tool_call_id=request.tool_call.get("id"),
            session_id=thread,
            parent_run_id=state.get("loopwatch_parent_run_id"),
        )

    def _refusal(self, call: Call, ruling: Ruling) -> ToolMessage:
        if ruling.action == "abort":
            with self._lock:  # (kept here: the detector forgets the run below, with on_abort="error")
                self._aborted.setdefault(call.run_id, ruling)
                while len(self._aborted) > _ABORTS_KEPT:  # (runs that ended by an exception)
                    del self._aborted[next(iter(self._aborted))]
            if self.on_abort == "error":  # the invocation ends here: after_agent will not run
                self.guard.end(call.run_id, call.session_id)
                raise LoopAborted(ruling.text or "loopwatch stopped this run", ruling.reason, call.run_id)
        return ToolMessage(
            content=ruling.text or "loopwatch blocked this call.",
            tool_call_id=call.tool_call_id or "",
            name=call.tool,
            status="error",
        )

    def _answer(self, call: Call, before: Ruling, after: Ruling, result: Any) -> Any:
        if after.action == "abort":  # a loop went on after a compaction
            self._refusal(call, after)
        note = after.text if after.action == "abort" else before.text if before.action == "warn" else None
        if not note:
            return result
        if isinstance(result, ToolMessage):
            return _with_note(result, note)
        if isinstance(result, Command) and isinstance(result.update, dict):  # the call's message in it
            messages = result.update.get("messages")
            if isinstance(messages, list):
                noted = [
                    _with_note(m, note)
                    if isinstance(m, ToolMessage) and m.tool_call_id == call.tool_call_id
                    else m
                    for m in messages
                ]
                return dataclasses.replace(result, update={**result.update, "messages": noted})
        return result

    def _report(self, call: Call, result: ToolMessage | Command[Any]) -> tuple[Any, str | None]:
        if isinstance(result, ToolMessage):
            return _result_of(result)
        update = result.update if isinstance(result.update, dict) else {}
        for message in update.get("messages") or []:
            if isinstance(message, ToolMessage) and message.tool_call_id == call.tool_call_id:
                return _result_of(message)
        return MISSING, None

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        call = self._call(request)
        resumed = self._resumed(call) or self._abort_of(call)
        ruling = resumed if resumed is not None else self.guard.before(call)
        if not ruling.proceed:
            return self._refusal(call, ruling)
        token = _CALLING_RUN.set(call.run_id)
        try:
            result = handler(request)
        except GraphBubbleUp:  # interrupt(): the call is paused, to run again on resume
            self._pause(call, ruling)
            raise
        except Exception as exc:
            self.guard.after(call, error=exc)
            raise
        finally:
            _CALLING_RUN.reset(token)
        value, error = self._report(call, result)
        after = self.guard.after(call, result=value, error=error)
        answer: ToolMessage | Command[Any] = self._answer(call, ruling, after, result)
        return answer

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        call = self._call(request)
        resumed = self._resumed(call) or self._abort_of(call)
        ruling = resumed if resumed is not None else await asyncio.to_thread(self.guard.before, call)
        if not ruling.proceed:  # (off the event loop: an abort may end the run at the gateway)
            return await asyncio.to_thread(self._refusal, call, ruling)
        token = _CALLING_RUN.set(call.run_id)
        try:
            result = await handler(request)
        except GraphBubbleUp:  # interrupt(): the call is paused, to run again on resume
            self._pause(call, ruling)
            raise
        except Exception as exc:
            await asyncio.to_thread(self.guard.after, call, error=exc)
            raise
        finally:
            _CALLING_RUN.reset(token)
        value, error = self._report(call, result)
        after = await asyncio.to_thread(self.guard.after, call, result=value, error=error)
        answer: ToolMessage | Command[Any] = await asyncio.to_thread(
            self._answer, call, ruling, after, result
        )
        return answer


def _config() -> Any:
    from langgraph.config import get_config

    try:
        return get_config()
    except RuntimeError:  # outside a runnable context
        return {}
