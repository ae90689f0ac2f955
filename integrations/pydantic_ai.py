"""loopwatch as a PydanticAI capability (tested with pydantic-ai-slim 2.68.0)::

    from pydantic_ai import Agent
    from loopwatch.integrations.pydantic_ai import LoopwatchCapability

    agent = Agent(model, tools=[...], capabilities=[LoopwatchCapability()])
    # or LoopwatchCapability(gateway_url="http://127.0.0.1:6070")

What it does, per function tool call (``wrap_tool_execute``: after the arguments validated,
around the tool's execution and the inner capabilities' tool hooks; output tools are not
tool calls):

* before the tool runs, it asks the in-process :class:`LoopDetector` (default) or a gateway
  (``gateway_url=``; an unreachable gateway lets the call go on);
* ``block``: the tool is not run (``SkipToolExecution``); the model reads loopwatch's text as
  the call's result, which PydanticAI records as denied (``ToolDenied``: a policy's refusal,
  not the tool failing);
* ``warn``: the tool runs; the warning is appended to a text result, and goes with any other
  result (structured data, files) as content sent with it (``ToolReturn.content``), the result
  itself unchanged;
* ``abort``: the tool is not run and the run ends: :class:`LoopAborted` (an
  ``AgentRunError``) is raised out of ``agent.run``, with the reason and loopwatch's text;
* after the tool ran, its result (what the model reads) or its failure (an exception,
  ``ModelRetry``, ``ToolFailed``) is reported. A call deferred (``ApprovalRequired``,
  ``CallDeferred``) is neither: it runs in the run that resumes it, and is decided there.

Runs: a run is one agent run (``RunContext.run_id``: ``agent.run``'s ``run_id=`` or the
fresh one PydanticAI makes), its session the run's ``conversation_id``; when the run is over
(``wrap_run``), it is ended (``run_end``). An agent run from inside a tool (agent delegation)
is a subagent: its calls carry the calling run as ``parent_run_id``, and its abort ends it
alone: the calling tool fails (``ToolFailed``) with loopwatch's text, which the calling
agent's model reads, as PydanticAI does with a sub-agent that cancelled itself.
"""

from __future__ import annotations

import contextvars
import dataclasses
from typing import Any, Unpack

import anyio
import anyio.to_thread
from pydantic_ai import SkipToolExecution, ToolDenied, ToolReturn
from pydantic_ai.capabilities import (
    AbstractCapability,
    ValidatedToolArgs,
    WrapRunHandler,
    WrapToolExecuteHandler,
)
from pydantic_ai.exceptions import AgentRunError, ApprovalRequired, CallDeferred, ToolFailed
from pydantic_ai.messages import ToolCallPart, tool_return_ta
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tools import RunContext, ToolDefinition

from loopwatch.detectors.facade import LoopDetector
from loopwatch.integrations import Call, GuardOptions, LoopGuard, Ruling

__all__ = ["LoopAborted", "LoopwatchCapability"]

#: the run whose tool is executing in this context (an agent run started by it is its child)
_CALLING_RUN: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "loopwatch_pydantic_ai_calling_run", default=None
)


class LoopAborted(AgentRunError):
    """loopwatch stopped the run: ``reason`` is the abort's reason code, ``run_id`` the run's."""

    def __init__(self, message: str, reason: str | None, run_id: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.run_id = run_id

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.message, self.reason, self.run_id)


def _run_of(ctx: RunContext[Any]) -> str:
    if ctx.run_id:
        return ctx.run_id
    return f"pydantic-ai-{ctx.conversation_id}" if ctx.conversation_id else "pydantic-ai"


def _params(call: ToolCallPart, args: ValidatedToolArgs) -> Any:
    """The arguments as the model proposed them (the validated ones when they do not parse)."""
    try:
        return call.args_as_dict(raise_if_invalid=True)
    except (ValueError, AssertionError):
        return args


def _plain(value: Any) -> Any:
    """A result as PydanticAI serializes it for the model (the value as it is when it cannot)."""
    try:
        return tool_return_ta.dump_python(value, mode="json", by_alias=True)
    except Exception:  # noqa: BLE001 - any value a tool returns; LoopGuard takes it as it is
        return value


def _reported(result: Any) -> Any:
    """What the model reads of a tool's result: a ``ToolReturn``'s value, else the result."""
    if isinstance(result, ToolReturn):
        return _plain(result.return_value)
    return result if isinstance(result, str) else _plain(result)


def _with_note(result: Any, note: str) -> Any:
    """``result`` with the warning: appended to text, else sent with it (``ToolReturn.content``);
    a ``ToolReturn`` the tool gave is copied, not changed."""
    if isinstance(result, str):
        return f"{result}\n\n{note}" if result else note
    if not isinstance(result, ToolReturn):
        return ToolReturn(return_value=result, content=note)
    value, content = result.return_value, result.content
    if isinstance(value, str):
        return dataclasses.replace(result, return_value=f"{value}\n\n{note}" if value else note)
    if content is None or isinstance(content, str):
        return dataclasses.replace(result, content=f"{content}\n\n{note}" if content else note)
    return dataclasses.replace(result, content=[*content, note])


class LoopwatchCapability(AbstractCapability[Any]):
    """Loop detection for a PydanticAI agent's tool calls (see the module's docstring)."""

    def __init__(
        self,
        detector: LoopDetector | None = None,
        **options: Unpack[GuardOptions],
    ) -> None:
        self.guard = LoopGuard(detector, **options)

    # one guard per instance: two instances are two capabilities (not equal field by field)
    __eq__ = object.__eq__
    __hash__ = object.__hash__

    def __repr__(self) -> str:
        where = self.guard.gateway_url or "in-process"
        return f"LoopwatchCapability({where}, agent_id={self.guard.agent_id!r})"

    # -- the run -------------------------------------------------------------------------

    async def wrap_run(self, ctx: RunContext[Any], *, handler: WrapRunHandler) -> AgentRunResult[Any]:
        try:
            return await handler()
        finally:  # (an abort, an error or a cancellation ends the run too)
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self.guard.end, _run_of(ctx), ctx.conversation_id)

    # -- the tool calls ------------------------------------------------------------------

    def end_run(self, run_id: str, session_id: str | None = None) -> None:
        """Forget a run (its abort too)."""
        self.guard.end(run_id, session_id)

    def _call(self, ctx: RunContext[Any], call: ToolCallPart, args: ValidatedToolArgs) -> Call:
        run_id = _run_of(ctx)
        parent = _CALLING_RUN.get()
        return Call(
            run_id=run_id,
            tool=call.tool_name,
            params=_params(call, args),
            tool_call_id=call.tool_call_id or None,
            session_id=ctx.conversation_id,
            parent_run_id=parent if parent != run_id else None,
        )

    async def _ask(self, call: Call) -> Ruling:
        return await anyio.to_thread.run_sync(self.guard.before, call)

    async def _report(self, call: Call, result: Any = None, error: BaseException | None = None) -> Ruling:
        if error is not None:
            return await anyio.to_thread.run_sync(lambda: self.guard.after(call, error=error))
        return await anyio.to_thread.run_sync(lambda: self.guard.after(call, result=_reported(result)))

    @staticmethod
    def _abort(call: Call, ruling: Ruling) -> LoopAborted:
        return LoopAborted(ruling.text or "loopwatch stopped this run.", ruling.reason, call.run_id)

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: ValidatedToolArgs,
        handler: WrapToolExecuteHandler,
    ) -> Any:
        asked = self._call(ctx, call, args)
        ruling = await self._ask(asked)
        if ruling.action == "abort":
            raise self._abort(asked, ruling)
        if ruling.action == "block":
            raise SkipToolExecution(ToolDenied(ruling.text or "loopwatch blocked this call."))
        token = _CALLING_RUN.set(asked.run_id)
        try:
            result = await handler(args)
        except SkipToolExecution as skipped:  # an inner capability answered in the tool's place
            await self._report(asked, skipped.result)
            raise
        except (ApprovalRequired, CallDeferred):  # decided again in the run that resumes it
            raise
        except LoopAborted as aborted:
            if aborted.run_id == asked.run_id:
                raise
            # a subagent stopped: it alone ends; this call fails with why
            after = await self._report(asked, error=aborted)
            if after.action == "abort":
                raise self._abort(asked, after) from aborted
            raise ToolFailed(aborted.message) from aborted
        except Exception as exc:
            await self._report(asked, error=exc)
            raise
        finally:
            _CALLING_RUN.reset(token)
        after = await self._report(asked, result)
        if after.action == "abort":  # a loop that went on after a compaction
            raise self._abort(asked, after)
        if ruling.action == "warn" and ruling.text:
            return _with_note(result, ruling.text)
        return result
