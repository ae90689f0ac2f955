"""loopwatch as OpenAI Agents SDK tool guardrails (tested with openai-agents 0.24.0)::

    from agents import Agent, function_tool
    from loopwatch.integrations.openai_agents import LoopwatchGuardrails

    loopwatch = LoopwatchGuardrails()  # or LoopwatchGuardrails(gateway_url="http://127.0.0.1:6070")
    agent = Agent(name="coder", tools=loopwatch.attach(read_file, run_shell))

``attach`` adds a tool input guardrail and a tool output guardrail to each function tool
(the SDK runs them around function tools only):

* the input guardrail asks the in-process :class:`LoopDetector` (default) or a gateway
  (an unreachable gateway lets the call go on). ``block``: the call is rejected
  (``reject_content``): the tool does not run and the model reads loopwatch's text.
  ``abort``: the tripwire (``raise_exception``): ``Runner.run`` raises
  ``ToolInputGuardrailTripwireTriggered``, whose ``output.output_info`` holds the
  ``reason`` and the ``message``; every later call of the run is refused too.
* the output guardrail reports the tool's output (what the model reads; a tool that raised
  reaches it as the SDK's error text). A warning decided before the call is given with the
  output: the guardrail answers ``reject_content`` with the output followed by the warning
  (the only way a guardrail can add to what the model reads; the SDK then sends it as
  plain text). An abort after the call (a loop persisting after a compaction) trips the
  output tripwire.

Runs: the run is the SDK's trace (``trace_id``; ``group_id`` is the session) and the agent
that calls the tool, so an agent run as a tool (``as_tool``), which shares its caller's
trace, is a run of its own. With tracing disabled and no ``RunConfig(trace_id=...)``, each
``Runner.run`` is told apart by the run's own context object.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
import weakref
from collections.abc import Iterable
from typing import Any

from agents import (
    FunctionTool,
    Tool,
    ToolGuardrailFunctionOutput,
    ToolInputGuardrail,
    ToolInputGuardrailData,
    ToolOutputGuardrail,
    ToolOutputGuardrailData,
)
from agents.tracing import get_current_trace

from loopwatch.detectors.facade import LoopDetector
from loopwatch.integrations import Call, LoopGuard, Ruling

__all__ = ["LoopwatchGuardrails"]


def _params(arguments: str) -> Any:
    try:
        return json.loads(arguments) if arguments else {}
    except ValueError:
        return arguments  # the model's text as it was (the tool will fail on it)


class LoopwatchGuardrails:
    """A tool input and a tool output guardrail sharing one loop detector or gateway."""

    def __init__(
        self,
        detector: LoopDetector | None = None,
        *,
        gateway_url: str | None = None,
        token: str | None = None,
        agent_id: str = "default",
        timeout_s: float = 2.0,
    ) -> None:
        self.guard = LoopGuard(
            detector, gateway_url=gateway_url, token=token, agent_id=agent_id, timeout_s=timeout_s
        )
        self.input = ToolInputGuardrail[Any](guardrail_function=self._before, name="loopwatch")
        self.output = ToolOutputGuardrail[Any](guardrail_function=self._after, name="loopwatch")
        self._notes: dict[str, str] = {}  # tool_call_id -> warning given with the result
        self._runs: dict[int, str] = {}  # id(the run's usage) -> run id (tracing disabled)
        self._lock = threading.Lock()

    def attach(self, *tools: Tool) -> list[Tool]:
        """The tools, each function tool with loopwatch's guardrails added (once)."""
        for item in tools:
            if isinstance(item, FunctionTool):
                inputs = item.tool_input_guardrails = list(item.tool_input_guardrails or [])
                outputs = item.tool_output_guardrails = list(item.tool_output_guardrails or [])
                if self.input not in inputs:
                    inputs.append(self.input)
                if self.output not in outputs:
                    outputs.append(self.output)
        return list(tools)

    def attach_all(self, tools: Iterable[Tool]) -> list[Tool]:
        return self.attach(*tools)

    # -- the run -------------------------------------------------------------------------

    def _scope(self, data: ToolInputGuardrailData) -> tuple[str, str | None]:
        context = data.context
        trace = get_current_trace()
        trace_id = getattr(trace, "trace_id", None)
        group_id = getattr(trace, "group_id", None)
        run_config = getattr(context, "run_config", None)
        if not trace_id or trace_id == "no-op":
            trace_id = getattr(run_config, "trace_id", None)
            group_id = getattr(run_config, "group_id", None)
        if not trace_id:
            trace_id = self._run_of(context.usage)
        agent = getattr(data.agent, "name", None) or "agent"
        return f"{trace_id}:{agent}", str(group_id) if group_id else None

    def _run_of(self, usage: Any) -> str:
        """A run id for the run whose (shared) usage object this is."""
        key = id(usage)
        with self._lock:
            run = self._runs.get(key)
            if run is None:
                run = self._runs[key] = f"openai-agents-{uuid.uuid4().hex}"
                weakref.finalize(usage, self._runs.pop, key, None)
        return run

    def _call(self, data: ToolInputGuardrailData) -> Call:
        run_id, session = self._scope(data)
        context = data.context
        return Call(
            run_id=run_id,
            tool=context.tool_name,
            params=_params(context.tool_arguments),
            tool_call_id=context.tool_call_id or None,
            session_id=session,
        )

    def end_run(self, run_id: str, session_id: str | None = None) -> None:
        """Forget a run (its abort too)."""
        self.guard.end(run_id, session_id)

    # -- the guardrails ------------------------------------------------------------------

    async def _before(self, data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        call = self._call(data)
        ruling = await asyncio.to_thread(self.guard.before, call)
        info = {
            "loopwatch": ruling.action,
            "reason": ruling.reason,
            "message": ruling.text,
            "run_id": call.run_id,
        }
        if ruling.action == "abort":
            return ToolGuardrailFunctionOutput.raise_exception(output_info=info)
        if ruling.action == "block":
            return ToolGuardrailFunctionOutput.reject_content(
                ruling.text or "loopwatch blocked this call.", info
            )
        if ruling.action == "warn" and ruling.text and call.tool_call_id:
            with self._lock:
                self._notes[call.tool_call_id] = ruling.text
        return ToolGuardrailFunctionOutput.allow(output_info=info)

    async def _after(self, data: ToolOutputGuardrailData) -> ToolGuardrailFunctionOutput:
        call = self._call(data)
        with self._lock:
            note = self._notes.pop(call.tool_call_id, None) if call.tool_call_id else None
        result = json.loads(json.dumps(data.output, default=str))  # as JSON would carry it
        ruling: Ruling = await asyncio.to_thread(self.guard.after, call, result=result)
        info = {
            "loopwatch": ruling.action,
            "reason": ruling.reason,
            "message": ruling.text,
            "run_id": call.run_id,
        }
        if ruling.action == "abort":
            return ToolGuardrailFunctionOutput.raise_exception(output_info=info)
        if note is not None:
            return ToolGuardrailFunctionOutput.reject_content(f"{data.output}\n\n{note}", info)
        return ToolGuardrailFunctionOutput.allow(output_info=info)
