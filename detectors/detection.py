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

Revision 2026-08 (``config.revision``, docs/rules-2026-08.md) also changes the no-progress
streak: veto records of blocked calls count once an identical outcome anchors them, and for
``exec`` the terminal-failure tail across changing commands wins when it is longer. Warnings
of rules 4 and 6 carry ``liveness_signal = "argument_churn"`` while churn is at the warning
threshold; rule 7a always does. Unknown-tool streaks pass over veto records.

Example trace (defaults): ``read(a)`` answered "missing" 19 times → the 20th proposal sees
recent 19 → rule 8 warning; after the 20th outcome the 21st sees noProgress 20 → rule 7
critical; with 30 identical outcomes in the window rule 2 takes over.

Each rule is a module of :mod:`detectors.rules` (condition, texts, keys) and the registry
(:mod:`detectors.rules.registry`) keeps this order; :func:`detect` asks OpenClaw's rules only
(the conformance sessions and the property tests use it); the step asks every rule.
"""

from __future__ import annotations

from loopwatch.config.loop_detection import ResolvedLoopDetection
from loopwatch.config.settings import DetectorSettings
from loopwatch.detectors.events import ToolCall
from loopwatch.detectors.history import History
from loopwatch.detectors.rules.base import CallContext, Detection
from loopwatch.detectors.rules.registry import REGISTRY
from loopwatch.detectors.state import RunState

__all__ = ["Detection", "detect"]

_SETTINGS = DetectorSettings()


def detect(
    history: History,
    tool: str,
    args_hash: str,
    known_poll: bool,
    config: ResolvedLoopDetection,
) -> Detection | None:
    """The first of OpenClaw's rules that matches the proposed call, or ``None`` (not stuck).

    A pure read of ``history``."""
    if not config.enabled or not history.records:
        return None
    state = RunState("")
    state.history = history
    event = ToolCall(event_id="", run_id=None, tool=tool)
    ctx = CallContext(state, event, args_hash, known_poll, config, _SETTINGS)
    for rule in REGISTRY.for_config(config).on_call:
        if rule.openclaw:
            found = rule.on_call(ctx, None)
            if found is not None:
                return found
    return None
