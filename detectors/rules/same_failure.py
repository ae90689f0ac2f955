"""``same_failure`` (loopwatch's own; on in the agents preset): failing the same way, however
the calls vary.

Per run, at every ``tool_result`` (tools in ``exemptTools`` are skipped): an outcome that is
not unproductive (:func:`detectors.outcome_signature.unproductive`), or has no text (a
digest-only result), ends both streaks below. An unproductive outcome extends two streaks of
the latest outcomes, each the longest run of latest unproductive outcomes that holds at most
two failure signatures (:func:`~detectors.outcome_signature.signature`):

* *same failure*: signatures as the outcomes say them ("DISCUSSION: command not found" and
  "unexpected EOF" of prose sent to a shell, whatever the prose);
* *sweep*: signatures with the arguments' quoted echoes emptied ("No matches found for "X""
  for X after X): the same nothing, argument after argument.

At a proposed call, a same-failure streak at ``warningThreshold`` (3) warns and at
``criticalThreshold`` (5) blocks; a sweep at ``sweepWarningThreshold`` (5) warns and at
``sweepCriticalThreshold`` (8) blocks (a short sweep is how a search starts: four names not
found, the fifth found). A critical wins over a warning, the same failure over the sweep.
Trace (3/5): x → "cmd: command not found", y → same, z → "unexpected EOF", w → "command not
found" (4), v → "unexpected EOF" (5): the next call is blocked; any success resets.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, NamedTuple

import xxhash
from msgspec import UNSET

from loopwatch.config.loop_detection import ResolvedLoopDetection
from loopwatch.config.rule_sections import RuleSection, exempt_words, ordinal
from loopwatch.config.sections import ExemptTools, Positive
from loopwatch.detectors.events import Level, Output
from loopwatch.detectors.outcome_signature import outcome_text, preview, signatures, unproductive
from loopwatch.detectors.rule_state import RuleState
from loopwatch.detectors.rules.base import (
    CRITICAL,
    WARNING,
    CallContext,
    Detection,
    ResultContext,
    Rule,
    stronger,
)
from loopwatch.detectors.stable_json import plain

__all__ = [
    "DETECTOR",
    "RULE",
    "SECTION",
    "FailureStreak",
    "FailureStreaks",
    "Settings",
    "critical_message",
    "sweep_critical_message",
    "sweep_warning_message",
    "warning_key",
    "warning_message",
]

DETECTOR: Final = "same_failure"
CLASSES: Final = 2

#: ``loopwatch.detectors.sameFailure``
Settings = NamedTuple(  # noqa: UP014 (a class body's types are lost to mypyc; these are kept)
    "Settings",
    [
        ("enabled", bool),
        ("warning_threshold", Positive),
        ("critical_threshold", Positive),
        ("sweep_warning_threshold", Positive),
        ("sweep_critical_threshold", Positive),
        ("exempt_tools", ExemptTools),
    ],
)


def explain(settings: Settings) -> tuple[str, str] | None:
    if not settings.enabled:
        return None
    return "on", (
        f"after the {ordinal(settings.warning_threshold)} outcome in a row failing the same way the next "
        f"call is warned, after the {ordinal(settings.critical_threshold)} blocked; after a sweep's "
        f"{ordinal(settings.sweep_warning_threshold)} (nothing found, argument after argument) warned, "
        f"after its {ordinal(settings.sweep_critical_threshold)} blocked; "
        f"{exempt_words(settings.exempt_tools)}"
    )


SECTION: Final = RuleSection(
    DETECTOR,
    "tool calls that keep failing the same way (at most two ways), however the calls vary; a "
    '*sweep* (failures that differ only by the arguments they echo, as "no matches for X" over '
    "many X) has thresholds of its own.",
    Settings(
        enabled=False,
        warning_threshold=3,
        critical_threshold=5,
        sweep_warning_threshold=5,
        sweep_critical_threshold=8,
        exempt_tools=frozenset(),
    ),
    ordered=(
        ("warning_threshold", "critical_threshold"),
        ("sweep_warning_threshold", "sweep_critical_threshold"),
    ),
    explain=explain,
    presets={
        "agents-2026-12": {
            "enabled": True,
            "warningThreshold": 3,
            "criticalThreshold": 5,
            "sweepWarningThreshold": 5,
            "sweepCriticalThreshold": 8,
        }
    },
)


class FailureStreak:
    """One streak: its length, its signatures (at most two, digests), the latest signature and
    how many outcomes in a row had it."""

    __slots__ = ("classes", "count", "last", "last_run")

    def __init__(
        self, count: int = 0, classes: list[str] | None = None, last: str = "", last_run: int = 0
    ) -> None:
        self.count = count
        self.classes: list[str] = classes if classes is not None else []
        self.last = last
        self.last_run = last_run

    def dump(self) -> list[Any]:
        return [self.count, self.classes, self.last, self.last_run]

    def extend(self, digest: str) -> None:
        if digest in self.classes:
            self.count += 1
        elif len(self.classes) < CLASSES:
            self.classes.append(digest)
            self.count += 1
        else:  # a third signature: the streak keeps the latest signature's run and this one
            self.classes = [self.last, digest]
            self.count = self.last_run + 1
        if digest == self.last:
            self.last_run += 1
        else:
            self.last, self.last_run = digest, 1

    def reset(self) -> None:
        self.count, self.classes, self.last, self.last_run = 0, [], "", 0


class FailureStreaks(RuleState):
    """The same-failure streak, the sweep streak, and the latest failure's first line."""

    __slots__ = ("latest", "same", "sweep")

    def __init__(
        self, same: FailureStreak | None = None, sweep: FailureStreak | None = None, latest: str = ""
    ) -> None:
        self.same = same if same is not None else FailureStreak()
        self.sweep = sweep if sweep is not None else FailureStreak()
        self.latest = latest

    def dump(self) -> Any:
        return [self.same.dump(), self.sweep.dump(), self.latest]


def _digest(text: str) -> str:
    return xxhash.xxh3_64_hexdigest(text.encode("utf-8", "surrogatepass"))


def _arguments(params: Any) -> str:
    """A call's arguments as lower-cased text: their string leaves (not their JSON, where a
    backslash is doubled), as :func:`~detectors.outcome_signature.outcome_text` reads them."""
    if params is UNSET or params is None:
        return ""
    return outcome_text(plain(params)).lower()


class SameFailure(Rule):
    """Follows every outcome (when on); speaks at the calls after enough of them failed alike."""

    def __init__(self) -> None:
        super().__init__(DETECTOR, section=SECTION, runtime_loop=runtime_loop)

    def active(self, resolved: ResolvedLoopDetection) -> bool:
        return resolved.rules.get(SECTION).enabled

    def on_call(self, ctx: CallContext, found: Detection | None) -> Detection | None:
        settings = ctx.resolved.rules.get(SECTION)
        if not settings.enabled or ctx.tool in settings.exempt_tools:
            return found
        streaks = ctx.state.rule_states.get(DETECTOR)
        if not isinstance(streaks, FailureStreaks):
            return found
        own = _judge(streaks, settings)
        return found if own is None else stronger(found, own)

    def on_result(self, ctx: ResultContext, outputs: list[Output]) -> None:
        settings = ctx.resolved.rules.get(SECTION)
        if not settings.enabled or ctx.tool in settings.exempt_tools:
            return
        event = ctx.event
        states = ctx.state.rule_states
        streaks = states.get(DETECTOR)
        failed = event.error is not UNSET and event.error is not None
        value = plain(event.error if failed else event.result)
        text = outcome_text(value) if failed or event.result is not UNSET else ""
        if not (text or failed) or not unproductive(text, failed):
            if isinstance(streaks, FailureStreaks):
                streaks.same.reset()
                streaks.sweep.reset()
            return
        if not isinstance(streaks, FailureStreaks):
            streaks = states[DETECTOR] = FailureStreaks()
        same, sweep = signatures(text, _arguments(event.params))
        same_digest = _digest(same)
        streaks.same.extend(same_digest)
        streaks.sweep.extend(same_digest if sweep == same else _digest(sweep))
        streaks.latest = preview(text)

    def load_state(self, raw: Any) -> FailureStreaks:
        same, sweep, latest = raw
        return FailureStreaks(FailureStreak(*same), FailureStreak(*sweep), latest)


def _judge(streaks: FailureStreaks, settings: Settings) -> Detection | None:
    """The strongest verdict the streaks call for: a critical before a warning, the same
    failure before the sweep (each streak's warnings bucketed by its own warning threshold)."""
    same, sweep = streaks.same, streaks.sweep
    warn_same, warn_sweep = settings.warning_threshold, settings.sweep_warning_threshold
    checks: tuple[tuple[Level, FailureStreak, int, int, Callable[[int, str], str]], ...] = (
        (CRITICAL, same, settings.critical_threshold, warn_same, critical_message),
        (CRITICAL, sweep, settings.sweep_critical_threshold, warn_sweep, sweep_critical_message),
        (WARNING, same, warn_same, warn_same, warning_message),
        (WARNING, sweep, warn_sweep, warn_sweep, sweep_warning_message),
    )
    for level, streak, threshold, bucket, message in checks:
        count = streak.count
        if count >= threshold:
            text = message(count, streaks.latest)
            return Detection(level, DETECTOR, count, text, warning_key(streak.last), None, None, bucket)
    return None


def critical_message(count: int, latest: str) -> str:
    return (
        f'CRITICAL: the last {count} tool calls all failed the same way ("{latest}"), however they '
        "varied. Another attempt will fail too; fix the cause or stop and report the task as failed."
    )


def warning_message(count: int, latest: str) -> str:
    return (
        f'WARNING: the last {count} tool calls all failed the same way ("{latest}"). Find the cause '
        "before trying again."
    )


def sweep_critical_message(count: int, latest: str) -> str:
    return (
        f'CRITICAL: the last {count} tool calls each came back with nothing ("{latest}"), argument '
        "after argument. More of the same will find nothing either; change the approach or stop "
        "and report the task as failed."
    )


def sweep_warning_message(count: int, latest: str) -> str:
    return (
        f'WARNING: the last {count} tool calls each came back with nothing ("{latest}"), argument '
        "after argument. Rethink what you are looking for before trying more of the same."
    )


def warning_key(signature_digest: str) -> str:
    return f"same-failure:{signature_digest}"


def runtime_loop(tool: str, count: int) -> str:
    return f"the last {count} tool calls all failed the same way"


RULE: Final[SameFailure] = SameFailure()
