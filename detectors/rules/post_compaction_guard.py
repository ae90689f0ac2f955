"""The post-compaction guard (spec §8, loopwatch E3): a loop that survived a compaction.

Rules:

* ``compaction_retry`` arms the guard for ``windowSize`` outcomes and clears what it saw.
* Each outcome with a result hash, while armed, uses up one attempt and is remembered as a
  ``(tool, argsHash, resultHash)`` triple; when ``windowSize`` remembered triples are equal to
  the newest, the run is aborted (so only a window of identical triples aborts, on its last).
* Disabled only when ``enabled`` is exactly ``false``. Outcomes before arming and after the
  window closes are ignored.

Trace (window 3): compaction_retry; read(a)→E; read(a)→E; read(a)→E → abort, count 3.
"""

from __future__ import annotations

from typing import Any, Final

from loopwatch.config.loop_detection import ResolvedLoopDetection
from loopwatch.detectors.events import Output
from loopwatch.detectors.rule_state import RuleState
from loopwatch.detectors.rules.base import ResultContext, Rule
from loopwatch.detectors.state import RunState
from loopwatch.detectors.verdicts import new_abort

__all__ = ["DETECTOR", "RULE", "GuardVerdict", "PostCompactionGuard", "abort_message", "guard_of"]

DETECTOR: Final = "compaction_loop_persisted"

Triple = tuple[str, str, str]


def abort_message(tool: str, count: int, window: int) -> str:
    return (
        f"CRITICAL: tool {tool} repeated {count} times with identical arguments and identical "
        f"results within {window} attempts after auto-compaction. The compaction did not break "
        "the loop. Aborting to prevent runaway resource use."
    )


class GuardVerdict:
    """What one observation gave: an abort (``should_abort``) or whether still armed."""

    __slots__ = ("armed", "count", "message", "should_abort", "tool")

    def __init__(
        self,
        should_abort: bool,
        armed: bool,
        count: int = 0,
        tool: str | None = None,
        message: str | None = None,
    ) -> None:
        self.should_abort = should_abort
        self.armed = armed
        self.count = count
        self.tool = tool
        self.message = message

    def as_dict(self) -> dict[str, object]:
        if not self.should_abort:
            return {"shouldAbort": False, "armed": self.armed}
        return {
            "shouldAbort": True,
            "armed": self.armed,
            "count": self.count,
            "toolName": self.tool,
            "detector": DETECTOR,
            "message": self.message,
        }


class PostCompactionGuard(RuleState):
    """Guard state of one run: at most ``window`` remembered triples."""

    __slots__ = ("observations", "remaining", "window")

    def __init__(self, remaining: int = 0, window: int = 3, observations: list[Triple] | None = None) -> None:
        self.remaining = remaining
        self.window = window
        self.observations: list[Triple] = observations if observations is not None else []

    def dump(self) -> Any:
        return [self.remaining, self.window, self.observations]

    @property
    def armed(self) -> bool:
        return self.remaining > 0

    def arm(self, window: int) -> None:
        self.window = window
        self.remaining = window
        self.observations.clear()

    def observe(self, enabled: bool, tool: str, args_hash: str, result_hash: str) -> GuardVerdict | None:
        """The verdict of one observation; ``None`` when the guard is not armed (or off)."""
        if not enabled or self.remaining <= 0:
            return None
        self.remaining -= 1
        triple = (tool, args_hash, result_hash)
        self.observations.append(triple)
        count = self.observations.count(triple)
        if count >= self.window:
            return GuardVerdict(
                True, self.remaining > 0, count, tool, abort_message(tool, count, self.window)
            )
        return GuardVerdict(False, self.remaining > 0)


def guard_of(state: RunState) -> PostCompactionGuard:
    """The run's guard (an unarmed one until its first ``compaction_retry``)."""
    guard = state.rule_states.get(DETECTOR)
    if guard is None:
        guard = state.rule_states[DETECTOR] = PostCompactionGuard()
    assert isinstance(guard, PostCompactionGuard)
    return guard


class CompactionGuardRule(Rule):
    """The guard as a rule: armed by ``compaction_retry``, fed every hashed outcome."""

    def __init__(self) -> None:
        super().__init__(DETECTOR)

    def active(self, resolved: ResolvedLoopDetection) -> bool:
        return resolved.guard_enabled

    def on_compaction_retry(self, state: RunState, resolved: ResolvedLoopDetection) -> None:
        if resolved.guard_enabled:
            guard_of(state).arm(resolved.guard_window)

    def on_result(self, ctx: ResultContext, outputs: list[Output]) -> None:
        result_hash = ctx.result_hash
        guard = ctx.state.rule_states.get(DETECTOR)
        if result_hash is None or guard is None:
            return
        assert isinstance(guard, PostCompactionGuard)
        verdict = guard.observe(ctx.resolved.guard_enabled, ctx.tool, ctx.args_hash, result_hash)
        if verdict is not None and verdict.should_abort:
            state = ctx.state
            outputs.append(
                new_abort(
                    state.scope,
                    state.run_id,
                    ctx.event,
                    DETECTOR,
                    verdict.count,
                    verdict.message or "",
                    ctx.settings.observe_only,
                )
            )

    def load_state(self, raw: Any) -> PostCompactionGuard:
        remaining, window, observations = raw
        return PostCompactionGuard(remaining, window, [(t, a, r) for t, a, r in observations])


RULE: Final[CompactionGuardRule] = CompactionGuardRule()
