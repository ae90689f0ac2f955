"""``LoopDetector``: the core for single-process runtimes that do not want Kafka.

Usage::

    detector = LoopDetector(FleetConfig.enabled_default())
    decision = detector.before_tool_call("run-1", "read", {"path": "a.txt"})
    if decision.action in ("block", "abort"):
        ...  # do not execute; give decision.message to the model
    result = run_the_tool(...)
    detector.after_tool_call("run-1", "read", {"path": "a.txt"}, result=result)

Python values are accepted as they are (floats, tuples); they are converted to the JSON
values the wire format would carry before hashing, so hashes equal the Kafka path's (NaN and
infinities aside: JSON has none, and the Kafka client sends them as null). Each call of a
method is one event: report each outcome once (a result reported twice counts twice, as a
tool run twice would). A value that is not an event any door would take raises
:class:`~detectors.events.InvalidEvent` naming the field (:mod:`detectors.event_builders`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal

from msgspec import UNSET

from loopwatch.config.fleet import FleetConfig
from loopwatch.detectors.batch_admission import SIBLING_MESSAGE, BatchOutcome
from loopwatch.detectors.engine import Engine
from loopwatch.detectors.event_builders import call_event, checked, result_event
from loopwatch.detectors.events import (
    Abort,
    Action,
    CompactionRetry,
    Event,
    Output,
    RunEnd,
    Usage,
    Verdict,
    run_scope,
)
from loopwatch.detectors.outcomes import MISSING
from loopwatch.detectors.runtime_texts import decision_words

__all__ = [
    "BatchDecision",
    "Decision",
    "LoopDetector",
    "ProposedCall",
    "batch_decision_of",
    "decision_of",
    "in_words",
]


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do with a tool call: ``allow``, ``warn`` (proceed), ``block`` or ``abort``."""

    action: Action
    message: str | None = None
    outputs: tuple[Output, ...] = field(default_factory=tuple)
    #: the abort's reason, or the verdict's detector (None for ``allow``)
    reason: str | None = None
    #: an abort given earlier in the run, repeated for this call (no new verdict was published)
    sticky: bool = False
    #: the event id of the call of its batch whose verdict refused this one with the batch
    refused_by: str | None = None

    @property
    def proceed(self) -> bool:
        """Whether the tool may execute."""
        return self.action in ("allow", "warn")


def in_words(decision: Decision) -> Decision:
    """The decision with its message in loopwatch's words (:mod:`detectors.runtime_texts`),
    for agents that are not OpenClaw; the verdicts keep OpenClaw's sentences (``outputs``)."""
    if decision.action == "allow":
        return decision
    words = decision_words(decision.action, decision.reason, decision.outputs, decision.refused_by)
    return replace(decision, message=words)


def decision_of(outputs: list[Output], aborted: tuple[str, str] | None = None) -> Decision:
    """What to do with a call, given the outputs its tool_call gave and the run's first
    enforced abort (``aborted``: (reason, message); an aborted run stays aborted)."""
    aborts = [out for out in outputs if isinstance(out, Abort) and out.enforced]
    if aborts:
        return Decision("abort", aborts[0].message, tuple(outputs), aborts[0].reason)
    if aborted is not None:
        return Decision("abort", aborted[1], tuple(outputs), aborted[0], sticky=True)
    if not outputs:
        return Decision("allow")
    verdict = next(out for out in outputs if isinstance(out, (Verdict, Abort)))
    if isinstance(verdict, Verdict) and verdict.enforced:
        return Decision(verdict.action, verdict.message, tuple(outputs), verdict.detector)
    return Decision("allow", verdict.message, tuple(outputs))


@dataclass(frozen=True, slots=True)
class BatchDecision:
    """The decisions of one batch of calls, in its order; ``refused_by``: the index of the
    call whose critical refused the whole batch (``None``: the batch was admitted)."""

    decisions: tuple[Decision, ...]
    refused_by: int | None = None

    @property
    def refused(self) -> bool:
        """Whether no call of the batch may run: one of its calls refused it, or the run was
        aborted before it (every call then answers the sticky abort; ``refused_by`` is None)."""
        return self.refused_by is not None or any(not decision.proceed for decision in self.decisions)


def batch_decision_of(outcome: BatchOutcome, aborted: tuple[str, str] | None = None) -> BatchDecision:
    """What to do with each call of a batch, given what admitting it did and the run's first
    enforced abort after it (``aborted``): an admitted call as :func:`decision_of` says; in a
    refused batch the trigger by its own verdict and every other call ``block``, with
    :data:`~detectors.batch_admission.SIBLING_MESSAGE` and the trigger's reason (a call that
    its own outputs block or abort keeps that). Once the run is aborted, every call is."""
    trigger = outcome.refused_by
    decisions = [decision_of(outputs, aborted) for outputs in outcome.outputs]
    if trigger is not None:
        cause = decisions[trigger]
        trigger_id = outcome.calls[trigger].event_id
        for index, decision in enumerate(decisions):
            if index != trigger and decision.proceed:
                decisions[index] = Decision(
                    "block", SIBLING_MESSAGE, decision.outputs, cause.reason, refused_by=trigger_id
                )
    return BatchDecision(tuple(decisions), trigger)


@dataclass(frozen=True, slots=True)
class ProposedCall:
    """One call of a batch, as :meth:`LoopDetector.before_tool_calls` takes it."""

    tool: str
    params: Any
    tool_call_id: str | None = None


#: How long a run may send nothing before :class:`LoopDetector` forgets it, by default (the
#: worker's and the gateway's ``state_ttl_s`` default too)
STATE_TTL_S: Final = 3600.0


def _ttl_seconds(value: float | None) -> float | None:
    """``state_ttl_s`` as a float of seconds above 0 (``inf``: never), or ``None``."""
    if value is None:
        return None
    problem = f"state_ttl_s must be a number of seconds above 0, or None, not {value!r}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(problem)
    try:
        seconds = float(value)
    except OverflowError:  # (an int beyond any float: no clock would reach it)
        raise ValueError(problem) from None
    if not seconds > 0:
        raise ValueError(problem)
    return seconds


class LoopDetector:
    """Synchronous loop detection for many runs of one process.

    ``state_ttl_s``: a run that sends nothing for that long (seconds of ``clock``) is
    forgotten, its abort too, as the worker forgets it: memory stays bounded when a run never
    gets to :meth:`end_run` (an agent that raised, a process that kept serving). ``None``
    keeps every run until :meth:`end_run`. :attr:`expired` counts the runs forgotten so.

    ``texts``: a decision's ``message`` is in loopwatch's words (``"loopwatch"``, for any
    agent) or OpenClaw's own sentences (``"openclaw"``, what OpenClaw shows its model); the
    verdicts in ``outputs`` carry OpenClaw's either way."""

    def __init__(
        self,
        config: FleetConfig | None = None,
        agent_id: str = "default",
        *,
        state_ttl_s: float | None = STATE_TTL_S,
        clock: Callable[[], float] = time.monotonic,
        texts: Literal["loopwatch", "openclaw"] = "loopwatch",
    ) -> None:
        if texts not in ("loopwatch", "openclaw"):
            raise ValueError(f"texts must be 'loopwatch' or 'openclaw', not {texts!r}")
        self._words = texts == "loopwatch"
        self.state_ttl_s = _ttl_seconds(state_ttl_s)
        # a run id may be used again after end_run: no memory of ended runs
        self._clock = clock
        engine_clock = clock if self.state_ttl_s is not None else None
        self._engine = Engine(config or FleetConfig.enabled_default(), ended_limit=0, clock=engine_clock)
        self._agent_id = agent_id
        self._events = 0
        self._batches = 0
        #: runs forgotten for sending nothing for ``state_ttl_s``
        self.expired = 0

    def _told(self, decision: Decision) -> Decision:
        """The decision in the words the detector speaks (``texts``)."""
        return in_words(decision) if self._words else decision

    def _expire(self) -> None:
        """Forget the runs idle past the state TTL, before an event is applied."""
        if self.state_ttl_s is not None:
            self.expired += self._engine.expire(self._clock() - self.state_ttl_s)

    def _apply(self, event: Event) -> list[Output]:
        self._expire()
        return self._engine.process(event)

    @property
    def config(self) -> FleetConfig:
        return self._engine.config

    @config.setter
    def config(self, config: FleetConfig) -> None:
        self._engine.config = config

    def _event_id(self) -> str:
        self._events += 1
        return f"local-{self._events}"

    def before_tool_call(
        self,
        run_id: str,
        tool: str,
        params: Any,
        *,
        tool_call_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        ts: int | None = None,
        usage: Usage | dict[str, Any] | None = None,
        parent_run_id: str | None = None,
    ) -> Decision:
        """Detect before executing ``tool``; once the run was aborted, every later call of the
        run answers that abort (until :meth:`end_run`).

        ``usage``: what the model turn that proposed the call cost (its first call only).
        ``parent_run_id``: the run that started this one (a subagent's first call names it).
        """
        event = call_event(
            self._event_id(),
            run_id,
            tool,
            params,
            agent_id=agent_id or self._agent_id,
            session_id=session_id,
            ts=ts,
            tool_call_id=tool_call_id,
            usage=usage,
            parent_run_id=parent_run_id,
        )
        outputs = self._apply(event)
        return self._told(decision_of(outputs, self._engine.aborted(run_scope(event))))

    def before_tool_calls(
        self,
        run_id: str,
        calls: Sequence[ProposedCall],
        *,
        batch_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        ts: int | None = None,
        usage: Usage | dict[str, Any] | None = None,
    ) -> BatchDecision:
        """Detect before executing the calls of one model turn, admitted or refused together
        (openclaw-rules §7.6): one decision per call, in order. ``usage`` goes with the first
        call; ``batch_id`` names the batch (one is made up when not given)."""
        if not calls:
            return BatchDecision(())
        self._batches += 1
        batch = batch_id or f"local-batch-{self._batches}"
        events = [
            call_event(
                self._event_id(),
                run_id,
                call.tool,
                call.params,
                agent_id=agent_id or self._agent_id,
                session_id=session_id,
                ts=ts,
                tool_call_id=call.tool_call_id,
                usage=usage if index == 0 else None,
                batch_id=batch,
            )
            for index, call in enumerate(calls)
        ]
        self._expire()
        outcome = self._engine.step_batch(events).batch
        assert outcome is not None
        decided = batch_decision_of(outcome, self._engine.aborted(run_scope(events[0])))
        return BatchDecision(tuple(self._told(d) for d in decided.decisions), decided.refused_by)

    def after_tool_call(
        self,
        run_id: str,
        tool: str,
        params: Any,
        *,
        result: Any = MISSING,
        error: BaseException | str | None = None,
        tool_call_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        ts: int | None = None,
    ) -> Decision:
        """Record the outcome; ``abort`` when a loop persisted after a compaction."""
        event = result_event(
            self._event_id(),
            run_id,
            tool,
            params,
            agent_id=agent_id or self._agent_id,
            result=result,
            error=error,
            session_id=session_id,
            ts=ts,
            tool_call_id=tool_call_id,
        )
        if event.result is UNSET and event.error is UNSET:
            return Decision("allow")  # nothing to record
        return self._told(decision_of(self._apply(event)))

    def on_compaction_retry(self, run_id: str, *, agent_id: str | None = None) -> None:
        """A compaction after context overflow succeeded: arm the run's guard."""
        self._apply(
            checked(
                CompactionRetry(event_id=self._event_id(), run_id=run_id, agent_id=agent_id or self._agent_id)
            )
        )

    def end_run(self, run_id: str) -> None:
        """Forget a finished run."""
        self._apply(checked(RunEnd(event_id=self._event_id(), run_id=run_id)))
