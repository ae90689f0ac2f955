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

Approvals (``needs_approval``): a run paused for an approval and resumed from its ``RunState``
(``Runner.run(agent, state)``, in this process) is the same run: the resumed ``Runner.run`` is
known by the call it resumes (one asked about before the pause and not run yet) or by the calls
it ran before the pause (the SDK carries them in the state). A ``Runner.run`` that ends paused
is not forgotten then: its run waits for the resume (or the detector's ``state_ttl_s``). With
``pre_approval_tool_input_guardrails`` the SDK runs the input guardrail before the approval and
again after it: the call is asked about twice and counts once (its event ids come from its
``call_id``; see :mod:`loopwatch.integrations`), the second answer is the first. A
``RunState`` resumed in another process is a new run there.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any, Unpack

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
from loopwatch.integrations import Call, GuardOptions, LoopGuard, Ruling, _json_value

__all__ = ["LoopwatchGuardrails"]


def _params(arguments: str) -> Any:
    try:
        return json.loads(arguments) if arguments else {}
    except ValueError:
        return arguments  # the model's text as it was (the tool will fail on it)


#: warnings waiting for their call's output, runs numbered per trace, calls known by their id
#: and runs paused for an approval, kept at most
_NOTES_KEPT = 10_000
_TRACES_KEPT = 10_000
_CALLS_KEPT = 10_000
_PAUSED_KEPT = 10_000


def _invocations(context: Any) -> Mapping[str, Any] | None:
    """The SDK's record of the tool calls of a ``Runner.run`` and of the runs it resumes (call id
    -> record with ``executed``), shared by its tool contexts and carried in its ``RunState``;
    ``None`` where the SDK keeps none (then a resumed run is known by its resumed call alone)."""
    found = getattr(context, "_tool_invocations", None)
    return found if isinstance(found, Mapping) else None


def _executed(record: Any) -> bool:
    return getattr(record, "executed", None) is True


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
        **options: Unpack[GuardOptions],
    ) -> None:
        self.guard = LoopGuard(detector, **options)
        self.input = ToolInputGuardrail[Any](guardrail_function=self._before, name="loopwatch")
        self.output = ToolOutputGuardrail[Any](guardrail_function=self._after, name="loopwatch")
        self._notes: dict[str, str] = {}  # tool_call_id -> warning given with the result
        self._carried: dict[str, str] = {}  # run id -> a warning to give with its next text output
        # a Runner.run is known by id(its usage) -> (its serial number, its run key); the rest
        # by its serial (an id may be another object's once the usage is gone)
        self._runs: dict[int, tuple[int, str]] = {}
        self._serials = itertools.count()
        self._key_of: dict[int, str] = {}  # serial -> run key
        self._per_trace: dict[str, int] = {}  # trace id -> the Runner.run calls seen in it
        self._open: dict[int, set[str]] = {}  # serial -> its runs (one per agent)
        self._records: dict[int, Mapping[str, Any]] = {}  # serial -> the SDK's record of its calls
        self._gone: list[int] = []  # serials of Runner.run calls that are over, to end
        # call id -> (run key, refused): calls asked about; call id -> run key: calls allowed
        # whose output has not come (a run paused for an approval resumes one of them)
        self._calls: OrderedDict[str, tuple[str, bool]] = OrderedDict()
        self._waiting: OrderedDict[str, str] = OrderedDict()
        self._paused: OrderedDict[str, set[str]] = OrderedDict()  # run key -> runs, paused
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

    def _scope(self, data: ToolInputGuardrailData) -> tuple[str, str | None, str]:
        """The run (one ``Runner.run`` of one agent), its session (the trace's group, else the
        trace: several ``Runner.run`` calls in one ``trace()`` are one conversation) and the
        run key of its ``Runner.run``."""
        context = data.context
        trace = get_current_trace()
        trace_id = getattr(trace, "trace_id", None)
        group_id = getattr(trace, "group_id", None)
        run_config = getattr(context, "run_config", None)
        if not trace_id or trace_id == "no-op":
            trace_id = getattr(run_config, "trace_id", None)
            group_id = getattr(run_config, "group_id", None)
        agent = getattr(data.agent, "name", None) or "agent"
        tool_call_id = getattr(context, "tool_call_id", None) or None
        serial, key = self._run_of(
            context.usage, str(trace_id) if trace_id else None, tool_call_id, _invocations(context)
        )
        run_id = f"{key}:{agent}"
        with self._lock:
            self._open.setdefault(serial, set()).add(run_id)
        session = group_id or trace_id
        return run_id, str(session) if session else None, key

    def _run_of(
        self, usage: Any, trace_id: str | None, tool_call_id: str | None, records: Mapping[str, Any] | None
    ) -> tuple[int, str]:
        """The serial and run key of the ``Runner.run`` whose (shared) usage object this is: the
        run it resumes (:meth:`_resumed`), else the trace's id and the run's number in it
        (``trace_x#2``), or a fresh id without a trace. When the usage object goes (the
        ``Runner.run`` is over), its runs are ended (:meth:`_end_finished`): an abort does not
        outlive its run, and the in-process detector forgets them."""
        with self._lock:
            found = self._runs.get(id(usage))
            if found is not None:
                return found
            key = self._resumed(tool_call_id, records)
            if key is None and trace_id is None:
                key = f"openai-agents-{uuid.uuid4().hex}"
            elif key is None:  # (the least recently used trace is forgotten first)
                number = self._per_trace.pop(str(trace_id), 0) + 1
                self._per_trace[str(trace_id)] = number
                while len(self._per_trace) > _TRACES_KEPT:
                    del self._per_trace[next(iter(self._per_trace))]
                key = f"{trace_id}#{number}"
            serial = next(self._serials)
            self._runs[id(usage)] = (serial, key)
            self._key_of[serial] = key
            self._open[serial] = self._paused.pop(key, set())
            if records is not None:
                self._records[serial] = records
            weakref.finalize(usage, self._finished, id(usage), serial)
        return serial, key

    def _resumed(self, tool_call_id: str | None, records: Mapping[str, Any] | None) -> str | None:
        """The run a new ``Runner.run`` resumes from a ``RunState`` (under the lock): the run of
        the call it starts with, when that call was allowed before a pause and has not run, else
        the run of a call it ran before the pause (in the SDK's record, which the state
        carries). ``None``: a run of its own."""
        if tool_call_id is not None and (key := self._waiting.get(tool_call_id)) is not None:
            return key
        for call_id, record in list((records or {}).items()):
            known = self._calls.get(call_id)
            if call_id != tool_call_id and known is not None and _executed(record):
                return known[0]
        return None

    def _asked(self, call: Call, key: str, ruling: Ruling) -> None:
        """Note a call asked about (the run key of its ``Runner.run``), and whether it waits for
        its output."""
        if not call.tool_call_id:
            return
        with self._lock:
            self._calls.pop(call.tool_call_id, None)
            self._calls[call.tool_call_id] = (key, not ruling.proceed)
            while len(self._calls) > _CALLS_KEPT:
                self._calls.popitem(last=False)
            self._waiting.pop(call.tool_call_id, None)
            if ruling.proceed:
                self._waiting[call.tool_call_id] = key
                while len(self._waiting) > _CALLS_KEPT:
                    self._waiting.popitem(last=False)

    def _finished(self, usage_id: int, serial: int) -> None:
        """The usage object of a ``Runner.run`` went (called by the garbage collector, at any
        point of any thread: only noted here, its runs are ended at the next guardrail call)."""
        self._runs.pop(usage_id, None)
        self._gone.append(serial)

    def _waits(self, serial: int, key: str) -> bool:
        """Whether the ``Runner.run`` ended paused (under the lock): a call of it allowed and not
        run (asked before the approval), or a call the SDK holds for an approval (not run, not
        refused here)."""
        if key in self._waiting.values():
            return True
        for call_id, record in list(self._records.get(serial, {}).items()):
            known = self._calls.get(call_id)
            if not _executed(record) and not (known is not None and known[1]):
                return True
        return False

    def _end_finished(self) -> None:
        """End the runs of the ``Runner.run`` calls that are over, but for a run another
        ``Runner.run`` resumed (it ends them) or one paused for an approval (kept for its
        resume)."""
        while True:
            try:
                serial = self._gone.pop()
            except IndexError:  # (another thread took the last one)
                return
            with self._lock:
                key = self._key_of.pop(serial, None)
                runs = self._open.pop(serial, set())
                waits = key is not None and self._waits(serial, key)
                self._records.pop(serial, None)
                holder = next((s for s, k in self._key_of.items() if k == key), None)
                if holder is not None:  # resumed by a Runner.run still going
                    self._open.setdefault(holder, set()).update(runs)
                    continue
                if key is not None and waits:
                    self._paused.pop(key, None)
                    self._paused[key] = runs
                    while len(self._paused) > _PAUSED_KEPT:  # (the detector's TTL forgets them)
                        self._paused.popitem(last=False)
                    continue
            if self.guard.detector is not None:  # a gateway forgets idle runs by itself
                for run_id in runs:
                    self.guard.end(run_id)

    def _call(self, data: ToolInputGuardrailData) -> tuple[Call, str]:
        """The call, and the run key of its ``Runner.run``."""
        run_id, session, key = self._scope(data)
        context = data.context
        call = Call(
            run_id=run_id,
            tool=context.tool_name,
            params=_params(context.tool_arguments),
            tool_call_id=context.tool_call_id or None,
            session_id=session,
        )
        return call, key

    def end_run(self, run_id: str, session_id: str | None = None) -> None:
        """Forget a run (its abort too)."""
        self.guard.end(run_id, session_id)

    # -- the guardrails ------------------------------------------------------------------

    async def _before(self, data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        self._end_finished()
        call, key = self._call(data)
        ruling = await asyncio.to_thread(self.guard.before, call)
        self._asked(call, key, ruling)
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
        call, _key = self._call(data)
        with self._lock:
            note = self._notes.pop(call.tool_call_id, None) if call.tool_call_id else None
            if call.tool_call_id:
                self._waiting.pop(call.tool_call_id, None)
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
