"""``detectToolCallLoop``: the eight rules of spec §5, first match wins.

Rules (T = resolved thresholds, D = detector flags), for a proposed call with ``argsHash`` h:

1. unknown-tool streak ≥ unknownToolThreshold          critical  unknown_tool_repeat
2. noProgress ≥ globalCircuitBreakerThreshold          critical  global_circuit_breaker
3. knownPoll, D.knownPollNoProgress, noProgress ≥ critical   critical  known_poll_no_progress
4. knownPoll, D.knownPollNoProgress, noProgress ≥ warning    warning   known_poll_no_progress
5. D.pingPong, pingPong ≥ critical, stable outcomes    critical  ping_pong
6. D.pingPong, pingPong ≥ warning                      warning   ping_pong
7. not knownPoll, D.genericRepeat, noProgress ≥ critical     critical  generic_repeat
7a. (2026-08) argument churn ≥ warning                 warning   argument_churn
8. not knownPoll, D.genericRepeat, recent ≥ warning    warning   generic_repeat

Revision 2026-08 (``config.newest``, docs/rules-2026-08.md) also changes the no-progress
streak: veto records of blocked calls count once an identical outcome anchors them, and for
``exec`` the terminal-failure tail across changing commands wins when it is longer. Warnings
of rules 4 and 6 carry ``liveness_signal = "argument_churn"`` while churn is at the warning
threshold; rule 7a always does. Unknown-tool streaks pass over veto records.

Example trace (defaults): ``read(a)`` answered "missing" 19 times → the 20th proposal sees
recent 19 → rule 8 warning; after the 20th outcome the 21st sees noProgress 20 → rule 7
critical; with 30 identical outcomes in the window rule 2 takes over.

Detection is a pure read of the run's history; the rule modules hold conditions and texts.
"""

from __future__ import annotations

from dataclasses import dataclass

from loopwatch.config.loop_detection import ResolvedLoopDetection
from loopwatch.detectors.history import History
from loopwatch.detectors.rules import (
    argument_churn,
    generic_repeat,
    global_circuit_breaker,
    known_poll_no_progress,
    ping_pong,
    unknown_tool_repeat,
)

__all__ = ["Detection", "detect"]


@dataclass(frozen=True, slots=True)
class Detection:
    """A stuck result: what fired, at which count, and the key warnings are grouped by."""

    level: str  # "warning" | "critical"
    detector: str
    count: int
    message: str
    warning_key: str
    paired_tool: str | None = None
    liveness_signal: str | None = None
    bucket: int = 0  # warnings: the de-duplication bucket size, 0 for the warning threshold

    @classmethod
    def own(
        cls, level: str, detector: str, count: int, message: str, warning_key: str, bucket: int
    ) -> Detection:
        """A verdict of one of loopwatch's own rules (no paired tool, no liveness signal)."""
        return cls(level, detector, count, message, warning_key, None, None, bucket)

    @property
    def critical(self) -> bool:
        return self.level == "critical"


def detect(
    history: History,
    tool: str,
    args_hash: str,
    known_poll: bool,
    config: ResolvedLoopDetection,
) -> Detection | None:
    """The first matching rule for the proposed call, or ``None`` (not stuck)."""
    if not config.enabled or not history.records:
        return None
    newest = config.newest
    streak, unknown_name = history.unknown_tool_streak(tool, newest)
    if streak and streak >= config.unknown_tool_threshold:
        return Detection(
            "critical",
            unknown_tool_repeat.DETECTOR,
            streak,
            unknown_tool_repeat.message(unknown_name or tool, streak),
            unknown_tool_repeat.warning_key(tool, unknown_name),
        )
    recent, no_progress, latest = history.counts(args_hash)
    if newest and tool == "exec":
        tail, tail_latest = history.exec_terminal_tail(args_hash)
        if tail > no_progress:
            no_progress, latest = tail, tail_latest
    if no_progress >= config.global_circuit_breaker_threshold:
        return Detection(
            "critical",
            global_circuit_breaker.DETECTOR,
            no_progress,
            global_circuit_breaker.message(tool, no_progress),
            global_circuit_breaker.warning_key(tool, args_hash, latest),
        )
    if known_poll and config.known_poll_no_progress:
        level = known_poll_no_progress.level(no_progress, config)
        if level is not None:
            return Detection(
                level,
                known_poll_no_progress.DETECTOR,
                no_progress,
                known_poll_no_progress.message(level, tool, no_progress),
                known_poll_no_progress.warning_key(tool, args_hash, latest),
                None,
                _liveness(history, tool, args_hash, config) if level == "warning" else None,
            )
    records = history.records
    if config.ping_pong and len(records) >= 2 and records[-2].args_hash == args_hash:
        found = ping_pong.evaluate(history, args_hash, config)
        if found is not None:
            level, count, paired = found
            return Detection(
                level,
                ping_pong.DETECTOR,
                count,
                ping_pong.message(level, count),
                ping_pong.warning_key(tool, args_hash, paired.args_hash),
                paired.tool,
                _liveness(history, tool, args_hash, config) if level == "warning" else None,
            )
    generic = not known_poll and config.generic_repeat
    if generic and no_progress >= config.critical_threshold:
        return Detection(
            "critical",
            generic_repeat.DETECTOR,
            no_progress,
            generic_repeat.critical_message(tool, no_progress),
            generic_repeat.critical_key(tool, args_hash, latest),
        )
    if newest:
        churn, variants = argument_churn.evaluate(history, tool, args_hash)
        if churn >= config.warning_threshold:
            return Detection(
                "warning",
                argument_churn.DETECTOR,
                churn,
                argument_churn.message(tool, variants, churn),
                argument_churn.warning_key(tool),
                None,
                argument_churn.LIVENESS_SIGNAL,
            )
    if generic and recent >= config.warning_threshold:
        return Detection(
            "warning",
            generic_repeat.DETECTOR,
            recent,
            generic_repeat.warning_message(tool, recent),
            generic_repeat.warning_key(tool, args_hash),
        )
    return None


def _liveness(history: History, tool: str, args_hash: str, config: ResolvedLoopDetection) -> str | None:
    """The liveness signal a poll or ping-pong warning carries while churn is at threshold."""
    if not config.newest:
        return None
    churn, _ = argument_churn.evaluate(history, tool, args_hash)
    return argument_churn.LIVENESS_SIGNAL if churn >= config.warning_threshold else None
