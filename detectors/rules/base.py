"""What a rule is: a name, what it keeps per run, and what it does at a call and at a result.

A rule is one module under ``detectors/rules/`` holding a :class:`Rule` subclass, its texts
and keys, and (when it keeps any) its :class:`~detectors.rule_state.RuleState`; the ordered
registry (:mod:`detectors.rules.registry`) lists the rules. The step
(:mod:`detectors.step`) runs them:

* at a ``tool_call``, every rule's :meth:`Rule.on_call` in registry order, each given the
  verdict of the rules before it (``found``) and returning the verdict so far: OpenClaw's
  rules keep the first match (:attr:`Rule.openclaw`), loopwatch's own let a critical win
  over a warning (:func:`stronger`); then the step publishes the verdict (de-duplicated
  warnings, blocks, the escalation abort), calls :meth:`Rule.after_call` (the call not yet
  recorded), records the call and calls :meth:`Rule.after_record`;
* at a ``tool_result``, the step records the outcome, then calls :meth:`Rule.on_result`;
* at a ``compaction_retry``, :meth:`Rule.on_compaction_retry`.

Hooks append the aborts they give to ``outputs``. A rule that keeps state stores it in
``state.rule_states`` under its :attr:`Rule.name` and reads it back with
:meth:`Rule.load_state`; it survives the run's snapshot. A rule that is configured declares
its section of ``loopwatch.detectors`` (:attr:`Rule.section`, a
:class:`~config.rule_sections.RuleSection`) and reads its settings with
``ctx.resolved.rules.get(section)``; what a runtime other than OpenClaw tells its model of the
rule's verdicts and aborts is the rule's too (:attr:`Rule.runtime_loop`,
:attr:`Rule.runtime_stops`). The registry hands both on. A rule module that defines only
:meth:`Rule.on_call` and texts is a complete rule.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from mypy_extensions import mypyc_attr

from loopwatch.config.loop_detection import ResolvedLoopDetection
from loopwatch.config.rule_sections import RuleSection
from loopwatch.config.settings import DetectorSettings
from loopwatch.detectors.events import Level, Output, ToolCall, ToolResult
from loopwatch.detectors.rule_state import RuleState
from loopwatch.detectors.state import RunState

__all__ = ["CRITICAL", "WARNING", "CallContext", "Detection", "ResultContext", "Rule", "stronger"]

WARNING: Final[Level] = "warning"
CRITICAL: Final[Level] = "critical"


class Detection:
    """A stuck result: what fired, at which count, and the key warnings are grouped by."""

    __slots__ = (
        "bucket",
        "count",
        "detector",
        "level",
        "liveness_signal",
        "message",
        "paired_tool",
        "warning_key",
    )

    def __init__(
        self,
        level: Level,
        detector: str,
        count: int,
        message: str,
        warning_key: str,
        paired_tool: str | None = None,
        liveness_signal: str | None = None,
        bucket: int = 0,
    ) -> None:
        self.level: Level = level
        self.detector = detector
        self.count = count
        self.message = message
        self.warning_key = warning_key
        self.paired_tool = paired_tool
        self.liveness_signal = liveness_signal
        self.bucket = bucket  # warnings: the de-duplication bucket size, 0 for the warning threshold

    @property
    def critical(self) -> bool:
        return self.level == CRITICAL

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Detection) and self.as_tuple() == other.as_tuple()

    __hash__ = None  # type: ignore[assignment]

    def as_tuple(self) -> tuple[Level, str, int, str, str, str | None, str | None, int]:
        return (
            self.level,
            self.detector,
            self.count,
            self.message,
            self.warning_key,
            self.paired_tool,
            self.liveness_signal,
            self.bucket,
        )

    def __repr__(self) -> str:
        return f"Detection{self.as_tuple()!r}"


def stronger(found: Detection | None, own: Detection | None) -> Detection | None:
    """Of the verdict so far and a rule's own: a critical wins over a warning; between
    equals, the earlier (the verdict so far)."""
    if own is None:
        return found
    if found is None or (own.critical and not found.critical):
        return own
    return found


class CallContext:
    """A proposed call, its hashes and the run's counts for its arguments (computed once).

    ``openclaw`` is whether OpenClaw's rules look at this call (``enabled`` and a history
    that is not empty); only then are ``recent``, ``no_progress`` and ``latest`` counted:
    records of the call's ``argsHash`` in the window, its no-progress streak (under revision
    2026-08, for ``exec``, the terminal-failure tail when it is longer) and the streak's
    result hash. ``found`` is the call's verdict once every rule has spoken.
    """

    __slots__ = (
        "args_hash",
        "event",
        "found",
        "history",
        "known_poll",
        "latest",
        "no_progress",
        "openclaw",
        "recent",
        "resolved",
        "revision",
        "settings",
        "state",
        "tool",
    )

    def __init__(
        self,
        state: RunState,
        event: ToolCall,
        args_hash: str,
        known_poll: bool,
        resolved: ResolvedLoopDetection,
        settings: DetectorSettings,
        tool: str | None = None,
    ) -> None:
        """``tool``: the event's, when the caller has read it already."""
        self.state = state
        self.event = event
        self.tool = tool = event.tool if tool is None else tool
        self.args_hash = args_hash
        self.known_poll = known_poll
        self.resolved = resolved
        self.settings = settings
        self.revision = revision = resolved.revision
        self.history = history = state.history
        self.found: Detection | None = None
        self.openclaw = openclaw = resolved.enabled and len(history.records) > 0
        if openclaw:
            recent, no_progress, latest = history.counts(args_hash)
            if revision == "2026-08" and tool == "exec":
                tail, tail_latest = history.exec_terminal_tail(args_hash)
                if tail > no_progress:
                    no_progress, latest = tail, tail_latest
            self.recent = recent
            self.no_progress = no_progress
            self.latest = latest
        else:
            self.recent = 0
            self.no_progress = 0
            self.latest = None


class ResultContext:
    """A tool result once its outcome is recorded: its hashes, and the run it belongs to."""

    __slots__ = (
        "args_hash",
        "event",
        "kind",
        "resolved",
        "result_hash",
        "revision",
        "settings",
        "state",
        "tool",
    )

    def __init__(
        self,
        state: RunState,
        event: ToolResult,
        args_hash: str,
        result_hash: str | None,
        kind: str | None,
        resolved: ResolvedLoopDetection,
        settings: DetectorSettings,
        tool: str | None = None,
    ) -> None:
        """``tool``: the event's, when the caller has read it already."""
        self.state = state
        self.event = event
        self.tool = event.tool if tool is None else tool
        self.args_hash = args_hash
        self.result_hash = result_hash
        self.kind = kind
        self.resolved = resolved
        self.settings = settings
        self.revision = resolved.revision


@mypyc_attr(allow_interpreted_subclasses=True)
class Rule:
    """One rule: its name and the hooks it overrides (the others do nothing).

    ``name`` is the detector (or abort reason) the rule publishes under and the key of its
    run state. ``openclaw`` marks one of OpenClaw's ``detectToolCallLoop`` rules: the step
    asks it only while OpenClaw's rules are on and the run has a history, and only until a
    rule has matched (first match wins); any other rule is always asked and decides itself
    how its verdict combines with the earlier ones (usually :func:`stronger`).

    ``section``: the rule's section of ``loopwatch.detectors``, if it is configured there.
    ``runtime_loop``: what the loop its verdicts report looks like, in loopwatch's words (given
    the tool and the count), for runtimes other than OpenClaw (:mod:`detectors.runtime_texts`);
    ``runtime_stops``: why a run was stopped, per abort reason the rule gives.
    """

    __slots__ = ("name", "openclaw", "runtime_loop", "runtime_stops", "section")

    def __init__(
        self,
        name: str,
        openclaw: bool = False,
        section: RuleSection[Any] | None = None,
        runtime_loop: Callable[[str, int], str] | None = None,
        runtime_stops: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.openclaw = openclaw
        self.section = section
        self.runtime_loop = runtime_loop
        self.runtime_stops: Mapping[str, str] = runtime_stops if runtime_stops is not None else {}

    def active(self, resolved: ResolvedLoopDetection) -> bool:
        """Whether the rule can do anything under ``resolved`` (the step skips it otherwise):
        ``False`` only where every hook of the rule would do nothing."""
        return True

    def on_call(self, ctx: CallContext, found: Detection | None) -> Detection | None:
        """The verdict for the proposed call, given the earlier rules' ``found``."""
        return found

    def after_call(self, ctx: CallContext, blocked: bool, outputs: list[Output]) -> None:
        """After the verdict is published, before the call is recorded."""

    def after_record(self, ctx: CallContext, outputs: list[Output]) -> None:
        """After the call is recorded (or its veto record is, or it is not at all)."""

    def on_result(self, ctx: ResultContext, outputs: list[Output]) -> None:
        """After an outcome is recorded."""

    def on_compaction_retry(self, state: RunState, resolved: ResolvedLoopDetection) -> None:
        """At a ``compaction_retry`` of the run."""

    def load_state(self, raw: Any) -> RuleState:
        """The rule's run state from its stored form (:meth:`RuleState.dump`)."""
        raise NotImplementedError(f"rule {self.name!r} keeps no state")
