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
  output: the guardrail answers ``reject_content`` with the output's text followed by the
  warning (the only way a guardrail can add to what the model reads; the SDK then sends it as
  plain text). An image or a file is never replaced so: it goes as it is and the warning
  comes with the run's next text output. An abort after the call (a loop persisting after a
  compaction) trips the output tripwire.

Runs: a run is one ``Runner.run`` of one agent (an agent run as a tool, ``as_tool``, shares
its caller's context, so it is a run of its own by its name): ``{trace_id}#{n}:{agent}`` for
the n-th ``Runner.run`` of a trace, a fresh id without one. Several ``Runner.run`` calls in
one ``trace()`` are one conversation: the session is the trace's ``group_id``, else the trace,
and an abort ends only its own run. When a run's ``Runner.run`` is over (its context is gone),
the in-process detector forgets the run.
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
    ToolOutputFileContent,
    ToolOutputGuardrail,
    ToolOutputGuardrailData,
    ToolOutputImage,
    ToolOutputText,
)
from agents.tracing import get_current_trace

from loopwatch.detectors.facade import LoopDetector
from loopwatch.integrations import Call, LoopGuard, Ruling, _json_value

__all__ = ["LoopwatchGuardrails"]


def _params(arguments: str) -> Any:
    try:
        return json.loads(arguments) if arguments else {}
    except ValueError:
        return arguments  # the model's text as it was (the tool will fail on it)


#: warnings waiting for their call's output, and runs numbered per trace, kept at most
_NOTES_KEPT = 10_000
_TRACES_KEPT = 10_000


def _kind(item: Any) -> str | None:
    """``text``, ``other`` (an image, a file) or ``None``: how the SDK sends one output item
    (a structured item as itself, anything else as its ``str``)."""
    if isinstance(item, ToolOutputText):
        return "text"
    if isinstance(item, (ToolOutputImage, ToolOutputFileContent)):
        return "other"
    if isinstance(item, dict) and "type" in item:
        if item["type"] == "text" and isinstance(item.get("text"), str):
            return "text"
        if item["type"] in ("image", "file"):
            return "other"
    return None


def _text_of(item: Any) -> str:
    return item.text if isinstance(item, ToolOutputText) else str(item["text"])


def _as_text(output: Any) -> str | None:
    """What the model reads of a tool's output, when it is text; ``None`` for images and files,
    which a text answer in their place would destroy."""
    if isinstance(output, (list, tuple)):
        kinds = [_kind(item) for item in output]
        if not output or None in kinds:  # not structured: sent as its str
            return str(output)
        return "\n".join(_text_of(item) for item in output) if set(kinds) == {"text"} else None
    kind = _kind(output)
    if kind is None:
        return str(output)
    return _text_of(output) if kind == "text" else None


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
        fail_open: bool = True,
    ) -> None:
        self.guard = LoopGuard(
            detector,
            gateway_url=gateway_url,
            token=token,
            agent_id=agent_id,
            timeout_s=timeout_s,
            fail_open=fail_open,
        )
        self.input = ToolInputGuardrail[Any](guardrail_function=self._before, name="loopwatch")
        self.output = ToolOutputGuardrail[Any](guardrail_function=self._after, name="loopwatch")
        self._notes: dict[str, str] = {}  # tool_call_id -> warning given with the result
        self._carried: dict[str, str] = {}  # run id -> a warning to give with its next text output
        self._runs: dict[int, str] = {}  # id(a Runner.run's usage) -> its run key
        self._per_trace: dict[str, int] = {}  # trace id -> the Runner.run calls seen in it
        self._open: dict[int, set[str]] = {}  # id(a Runner.run's usage) -> its runs (one per agent)
        self._ended: list[str] = []  # runs whose Runner.run is over, to end
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
        """The run (one ``Runner.run`` of one agent) and its session (the trace's group, else
        the trace: several ``Runner.run`` calls in one ``trace()`` are one conversation)."""
        context = data.context
        trace = get_current_trace()
        trace_id = getattr(trace, "trace_id", None)
        group_id = getattr(trace, "group_id", None)
        run_config = getattr(context, "run_config", None)
        if not trace_id or trace_id == "no-op":
            trace_id = getattr(run_config, "trace_id", None)
            group_id = getattr(run_config, "group_id", None)
        agent = getattr(data.agent, "name", None) or "agent"
        key = self._run_of(context.usage, str(trace_id) if trace_id else None)
        run_id = f"{key}:{agent}"
        with self._lock:
            self._open.setdefault(id(context.usage), set()).add(run_id)
        session = group_id or trace_id
        return run_id, str(session) if session else None

    def _run_of(self, usage: Any, trace_id: str | None) -> str:
        """The run of the ``Runner.run`` whose (shared) usage object this is: the trace's id and
        the run's number in it (``trace_x#2``), or a fresh id without a trace. When the usage
        object goes (the run is over), its runs are ended: an abort does not outlive its run,
        and the in-process detector forgets them."""
        key = id(usage)
        with self._lock:
            run = self._runs.get(key)
            if run is None:
                if trace_id is None:
                    run = f"openai-agents-{uuid.uuid4().hex}"
                else:  # (the least recently used trace is forgotten first)
                    number = self._per_trace.pop(trace_id, 0) + 1
                    self._per_trace[trace_id] = number
                    while len(self._per_trace) > _TRACES_KEPT:
                        del self._per_trace[next(iter(self._per_trace))]
                    run = f"{trace_id}#{number}"
                self._runs[key] = run
                weakref.finalize(usage, self._finished, key)
        return run

    def _finished(self, key: int) -> None:
        """The usage object of a run went (called by the garbage collector, at any point of any
        thread: only noted here, ended at the next guardrail call)."""
        self._runs.pop(key, None)
        runs = self._open.pop(key, None)
        if runs:
            self._ended.extend(runs)

    def _end_finished(self) -> None:
        while True:
            try:
                run_id = self._ended.pop()
            except IndexError:  # (another thread took the last one)
                return
            if self.guard.detector is not None:  # a gateway forgets idle runs by itself
                self.guard.end(run_id)

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
        self._end_finished()
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
                while len(self._notes) > _NOTES_KEPT:  # (a call whose output never came)
                    del self._notes[next(iter(self._notes))]
        return ToolGuardrailFunctionOutput.allow(output_info=info)

    async def _after(self, data: ToolOutputGuardrailData) -> ToolGuardrailFunctionOutput:
        self._end_finished()
        call = self._call(data)
        with self._lock:
            note = self._notes.pop(call.tool_call_id, None) if call.tool_call_id else None
        result = _json_value(data.output)  # as JSON would carry it
        ruling: Ruling = await asyncio.to_thread(self.guard.after, call, result=result)
        info = {
            "loopwatch": ruling.action,
            "reason": ruling.reason,
            "message": ruling.text,
            "run_id": call.run_id,
        }
        if ruling.action == "abort":
            return ToolGuardrailFunctionOutput.raise_exception(output_info=info)
        text = _as_text(data.output)
        with self._lock:
            carried = self._carried.pop(call.run_id, None)
            if text is None and (note or carried):  # an image or a file: kept, the warning waits
                self._carried[call.run_id] = "\n\n".join(n for n in (carried, note) if n)
                while len(self._carried) > _NOTES_KEPT:
                    del self._carried[next(iter(self._carried))]
                return ToolGuardrailFunctionOutput.allow(output_info=info)
        notes = [n for n in (carried, note) if n]
        if notes and text is not None:
            return ToolGuardrailFunctionOutput.reject_content("\n\n".join([text, *notes]), info)
        return ToolGuardrailFunctionOutput.allow(output_info=info)
