"""``detectToolCallLoop``: the eight rules of spec §5, first match wins.

Rules (T = resolved thresholds, D = detector flags), for a proposed call with ``argsHash`` h:

1. unknown-tool streak ≥ unknownToolThreshold          critical  unknown_tool_repeat
2. noProgress ≥ globalCircuitBreakerThreshold          critical  global_circuit_breaker
3. knownPoll, D.knownPollNoProgress, noProgress ≥ critical   critical  known_poll_no_progress
4. knownPoll, D.knownPollNoProgress, noProgress ≥ warning    warning   known_poll_no_progress
5. D.pingPong, pingPong ≥ critical, stable outcomes    critical  ping_pong
6. D.pingPong, pingPong ≥ warning                      warning   ping_pong
7. not knownPoll, D.genericRepeat, noProgress ≥ critical     critical  generic_repeat
8. not knownPoll, D.genericRepeat, recent ≥ warning    warning   generic_repeat

Example trace (defaults): ``read(a)`` answered "missing" 19 times → the 20th proposal sees
recent 19 → rule 8 warning; after the 20th outcome the 21st sees noProgress 20 → rule 7
critical; with 30 identical outcomes in the window rule 2 takes over.

Detection is a pure read of the run's history; the rule modules hold conditions and texts.
"""

from __future__ import annotations

from dataclasses import dataclass

from config.loop_detection import ResolvedLoopDetection
from detectors.history import History
from detectors.rules import (
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
    streak, unknown_name = history.unknown_tool_streak(tool)
    if streak and streak >= config.unknown_tool_threshold:
        return Detection(
            "critical",
            unknown_tool_repeat.DETECTOR,
            streak,
            unknown_tool_repeat.message(unknown_name or tool, streak),
            unknown_tool_repeat.warning_key(tool, unknown_name),
        )
    recent, no_progress, latest = history.counts(args_hash)
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
            )
    if not known_poll and config.generic_repeat:
        if no_progress >= config.critical_threshold:
            return Detection(
                "critical",
                generic_repeat.DETECTOR,
                no_progress,
                generic_repeat.critical_message(tool, no_progress),
                generic_repeat.critical_key(tool, args_hash, latest),
            )
        if recent >= config.warning_threshold:
            return Detection(
                "warning",
                generic_repeat.DETECTOR,
                recent,
                generic_repeat.warning_message(tool, recent),
                generic_repeat.warning_key(tool, args_hash),
            )
    return None
