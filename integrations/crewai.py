"""loopwatch as CrewAI hooks (tested with crewai 1.15.30)::

    from loopwatch.integrations.crewai import LoopAborted, LoopwatchHooks

    loopwatch = LoopwatchHooks()  # or LoopwatchHooks(gateway_url="http://127.0.0.1:6070")
    loopwatch.install()  # before the crew runs: CrewAI's hooks are global
    crew.kickoff()  # raises LoopAborted when loopwatch stops it

``install`` registers CrewAI's global hooks (``uninstall`` removes them; ``with
LoopwatchHooks() as loopwatch:`` does both). An agent takes a copy of the model-call hooks when
it first runs, so install them before the crew's first kickoff.

* ``before_tool_call`` asks the in-process :class:`LoopDetector` (default) or a gateway (an
  unreachable gateway lets the call go on). ``block``: the hook answers ``False``, so CrewAI
  does not run the tool; ``after_tool_call`` (which CrewAI runs for a blocked call too) then
  replaces CrewAI's "Tool execution blocked by hook" with loopwatch's reason, which is what
  the model reads as the tool's result.
* ``warn``: the tool runs and ``after_tool_call`` appends the warning to the result.
* ``abort``: the tool is not run either (its result says why), and the run ends at its next
  model call: the ``before_llm_call`` hook raises :class:`LoopAborted`, a ``HookAborted``,
  which CrewAI lets through as a deliberate stop (no retry under ``max_retry_limit``), so
  ``crew.kickoff()`` raises it. A CrewAI tool hook cannot end the run itself: a hook's
  exception is swallowed (or, a ``HookAborted``, taken as a block). Every later call of an
  aborted run is refused.
* ``after_tool_call`` reports every result: the text the model reads, or the failure (a
  tool that raised, whose text CrewAI gives the model as ``"Error executing tool: ..."``, or
  a ``ToolFailure`` it returned).

Runs: a run is one agent's work on one task in one kickoff (a crew's kickoff is the session:
``EXECUTION_START``/``EXECUTION_END`` hooks open and end it, and its runs end with it). An
agent that delegates to a coworker (CrewAI's delegation tools run the coworker's task inside
the tool call) makes the coworker's run a subagent of its own: its calls carry the
delegating run as ``parent_run_id``. A coworker's abort ends only its own run: CrewAI's
delegation tool answers the delegator with the error, loopwatch's reason in it. CrewAI's hook
context has no tool call id, so the calls carry none.
"""

from __future__ import annotations

import contextvars
import threading
import uuid
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Unpack

from crewai.agents.agent_executor import AgentExecutor
from crewai.hooks import (
    HookAborted,
    InterceptionPoint,
    register_after_tool_call_hook,
    register_before_llm_call_hook,
    register_before_tool_call_hook,
    register_hook,
    unregister_after_tool_call_hook,
    unregister_before_llm_call_hook,
    unregister_before_tool_call_hook,
    unregister_hook,
)
from crewai.tools.tool_failure import ToolFailure

from loopwatch.detectors.facade import LoopDetector
from loopwatch.detectors.outcomes import MISSING
from loopwatch.integrations import Call, GuardOptions, LoopGuard, Ruling

__all__ = ["LoopAborted", "LoopwatchHooks"]

#: what CrewAI answers for a blocked call, and for a tool that raised
_BLOCKED = "Tool execution blocked by hook."
_TOOL_ERROR = "Error executing tool: "
#: kickoffs seen without their start (hooks installed mid-run), calls waiting for their
#: result: kept at most (the oldest forgotten first)
_KEPT = 10_000


class LoopAborted(HookAborted):  # type: ignore[misc]  # (crewai is not in the dev environment)
    """loopwatch stopped the run: ``reason`` (``HookAborted``'s) is the text, ``code`` the abort's
    reason code (``tool_loop_recovery_exhausted``...), ``run_id`` the run it ended."""

    def __init__(self, message: str, code: str | None, run_id: str) -> None:
        super().__init__(message, source="loopwatch")
        self.code = code
        self.run_id = run_id


@dataclass(eq=False)
class _Run:
    run_id: str
    session_id: str
    parent: _Run | None
    hooks: int  # id() of the LoopwatchHooks it belongs to
    aborted: Ruling | None = None


@dataclass(eq=False)
class _Kickoff:
    session_id: str
    runs: dict[tuple[str, str], _Run] = field(default_factory=dict)  # (agent, task) -> run


@dataclass(eq=False)
class _Pending:
    """A call between its two hooks (found again by its ``tool_input`` dict, which CrewAI
    passes to both)."""

    tool_input: Any
    call: Call
    run: _Run
    ruling: Ruling
    calling: contextvars.Token[_Run | None] | None


#: the run whose tool is executing in this context (an agent run by that tool is its child)
_CALLING_RUN: contextvars.ContextVar[_Run | None] = contextvars.ContextVar(
    "loopwatch_crewai_calling_run", default=None
)


def _key(item: Any) -> str:
    """A crew's, agent's or task's identity: its ``id`` (a UUID), else the object's."""
    ident = getattr(item, "id", None)
    return str(ident) if ident is not None else f"object-{id(item)}"


def _owner(crew: Any, agent: Any) -> str:
    """What a kickoff belongs to: its crew, or the agent of a standalone ``Agent.kickoff()``."""
    if crew is not None:
        return f"crew:{_key(crew)}"
    if agent is not None:
        return f"agent:{_key(agent)}"
    return "crewai"


def _params(tool_input: Any) -> Any:
    return dict(tool_input) if isinstance(tool_input, dict) else tool_input


def _outcome(context: Any) -> tuple[Any, str | None]:
    """What the tool gave: (result, error). The result is the text the model reads."""
    raw, text = context.raw_tool_result, context.tool_result
    if isinstance(raw, ToolFailure):
        return MISSING, str(text or raw.message)
    if isinstance(text, str) and raw == text and text.startswith(_TOOL_ERROR):  # the tool raised
        return MISSING, text[len(_TOOL_ERROR) :] or "tool call failed"
    return (text if text is not None else raw), None


def _with_note(result: Any, note: str) -> str:
    text = "" if result is None else str(result)
    return f"{text}\n\n{note}" if text else note


class LoopwatchHooks:
    """Loop detection for CrewAI's tool calls through its global hooks (see the module's
    docstring)."""

    def __init__(
        self,
        detector: LoopDetector | None = None,
        **options: Unpack[GuardOptions],
    ) -> None:
        self.guard = LoopGuard(detector, **options)
        self._kickoffs: dict[str, _Kickoff] = {}  # owner -> its kickoff in progress
        self._pending: dict[int, _Pending] = {}  # id(tool_input) -> the call
        self._lock = threading.Lock()
        self._installed = False

    # -- installing ----------------------------------------------------------------------

    def install(self) -> LoopwatchHooks:
        """Register the hooks (once) with CrewAI, for every crew and agent of the process."""
        with self._lock:
            if self._installed:
                return self
            self._installed = True
        register_hook(InterceptionPoint.EXECUTION_START, self.execution_start)
        register_hook(InterceptionPoint.EXECUTION_END, self.execution_end)
        register_before_tool_call_hook(self.before_tool_call)
        register_after_tool_call_hook(self.after_tool_call)
        register_before_llm_call_hook(self.before_llm_call)
        return self

    def uninstall(self) -> None:
        """Remove the hooks (agents that already ran keep their copy of the model-call hook)."""
        with self._lock:
            if not self._installed:
                return
            self._installed = False
        unregister_hook(InterceptionPoint.EXECUTION_START, self.execution_start)
        unregister_hook(InterceptionPoint.EXECUTION_END, self.execution_end)
        unregister_before_tool_call_hook(self.before_tool_call)
        unregister_after_tool_call_hook(self.after_tool_call)
        unregister_before_llm_call_hook(self.before_llm_call)

    def __enter__(self) -> LoopwatchHooks:
        return self.install()

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.uninstall()

    # -- the kickoffs and their runs -----------------------------------------------------

    @staticmethod
    def _boundary_owner(context: Any) -> str | None:
        """The owner of a kickoff's start or end: a crew, or a standalone agent's executor."""
        crew = getattr(context, "crew", None)
        if crew is not None:
            return _owner(crew, None)
        flow = getattr(context, "flow", None)
        if isinstance(flow, AgentExecutor) and flow.crew is None:
            return _owner(None, flow.agent)
        return None  # a flow of the user's: its crews and agents have boundaries of their own

    def execution_start(self, context: Any) -> None:
        """A kickoff begins: a session of its own (the hook changes nothing: ``None``)."""
        owner = self._boundary_owner(context)
        if owner is None:
            return
        with self._lock:
            previous = self._kickoffs.pop(owner, None)
            self._kickoffs[owner] = _Kickoff(f"crewai-kickoff-{uuid.uuid4().hex}")
        if previous is not None:  # (its end was never seen)
            self._end(previous)

    def execution_end(self, context: Any) -> None:
        """A kickoff is over (done or failed): its runs end."""
        owner = self._boundary_owner(context)
        if owner is None:
            return
        with self._lock:
            kickoff = self._kickoffs.pop(owner, None)
        if kickoff is not None:
            self._end(kickoff)

    def _end(self, kickoff: _Kickoff) -> None:
        for run in list(kickoff.runs.values()):
            self.guard.end(run.run_id, run.session_id)

    def _kickoff(self, owner: str, create: bool) -> _Kickoff | None:
        """(Under the lock.) The owner's kickoff; one is made when its start was not seen."""
        kickoff = self._kickoffs.get(owner)
        if kickoff is None and create:
            kickoff = self._kickoffs[owner] = _Kickoff(f"crewai-kickoff-{uuid.uuid4().hex}")
            while len(self._kickoffs) > _KEPT:
                del self._kickoffs[next(iter(self._kickoffs))]
        return kickoff

    def _run(self, crew: Any, agent: Any, task: Any, create: bool = True) -> _Run | None:
        """The run of ``agent`` on ``task`` in the current kickoff; a new run (a child of the
        run whose tool is executing, if any) when ``create``."""
        key = (_key(agent) if agent is not None else "", _key(task) if task is not None else "")
        with self._lock:
            kickoff = self._kickoff(_owner(crew, agent), create)
            if kickoff is None:
                return None
            run = kickoff.runs.get(key)
            if run is None and create:
                parent = _CALLING_RUN.get()
                if parent is not None and parent.hooks != id(self):
                    parent = None
                run = _Run(f"crewai-{uuid.uuid4().hex}", kickoff.session_id, parent, id(self))
                kickoff.runs[key] = run
            return run

    def _abort(self, run: _Run, ruling: Ruling) -> None:
        """The run ends at its next model call; its later calls are refused."""
        with self._lock:
            if run.aborted is None:
                run.aborted = ruling

    # -- the hooks -----------------------------------------------------------------------

    def before_tool_call(self, context: Any) -> bool | None:
        """Decide the call: ``False`` (CrewAI does not run it) or ``None`` (it runs)."""
        run = self._run(context.crew, context.agent, context.task)
        assert run is not None
        parent = run.parent.run_id if run.parent is not None else None
        call = Call(
            run.run_id,
            str(context.tool_name),
            _params(context.tool_input),
            session_id=run.session_id,
            parent_run_id=parent,
        )
        ruling = run.aborted or self.guard.before(call)
        if ruling.action == "abort":
            self._abort(run, ruling)
        calling = _CALLING_RUN.set(run) if ruling.proceed else None
        with self._lock:
            self._pending[id(context.tool_input)] = _Pending(context.tool_input, call, run, ruling, calling)
            while len(self._pending) > _KEPT:  # (a call whose result never came)
                del self._pending[next(iter(self._pending))]
        return None if ruling.proceed else False

    def after_tool_call(self, context: Any) -> str | None:
        """Report the result; answer the text the model reads instead (a block's reason, the
        result with a warning), or ``None`` to leave it."""
        with self._lock:
            pending = self._pending.get(id(context.tool_input))
            if pending is None or pending.tool_input is not context.tool_input:
                return None  # a call loopwatch did not see (another hook blocked it first)
            del self._pending[id(context.tool_input)]
        if pending.calling is not None:
            try:
                _CALLING_RUN.reset(pending.calling)
            except ValueError:  # (set in another context)
                _CALLING_RUN.set(pending.run.parent)
        ruling = pending.ruling
        if not ruling.proceed:
            return ruling.text or "loopwatch blocked this call."
        result = context.tool_result
        if isinstance(result, str) and result.startswith(_BLOCKED) and context.raw_tool_result == result:
            return None  # a later hook blocked it: nothing ran
        value, error = _outcome(context)
        after = self.guard.after(pending.call, result=value, error=error)
        if after.action == "abort":  # a loop went on after a compaction
            self._abort(pending.run, after)
        note = after.text if after.action == "abort" else ruling.text if ruling.action == "warn" else None
        return _with_note(result, note) if note else None

    def before_llm_call(self, context: Any) -> None:
        """End an aborted run before its model is asked again."""
        run = self._run(context.crew, context.agent, context.task, create=False)
        if run is not None and run.aborted is not None:
            ruling = run.aborted
            raise LoopAborted(ruling.text or "loopwatch stopped this run", ruling.reason, run.run_id)
