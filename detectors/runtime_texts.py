"""What an agent runtime other than OpenClaw is told, in loopwatch's own words.

OpenClaw's exact sentences ("Session execution blocked…", "OpenClaw stopped this run…")
stay in the OpenClaw path (the plugin, conformance, the verdict topic). Claude Code, Codex
and Gemini CLI users read what happened in their own runtime's terms, built from the
verdict's fields; the reason code is given unchanged in brackets.

OpenClaw's detectors' words are below; each of loopwatch's own rules declares its own
(``Rule.runtime_loop``, ``Rule.runtime_stops``) and the registry hands them in
(:func:`use_rule_texts`). A command hook's process loads none of the core, so it knows only
the words below: for a detector or an abort reason it does not know, it takes the gateway's
answer's ``message``, which the gateway wrote with every rule's words.
"""

from __future__ import annotations

TYPE_CHECKING = False  # (typing itself is not imported for it: the command hook starts quickly)
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any, Final

    _Phrase = Callable[[str, int], str]

__all__ = ["abort_text", "block_text", "decision_text", "decision_words", "use_rule_texts", "warning_text"]

#: Per detector of OpenClaw's (and the fleet's tool outage): what the loop looks like (tool, count).
_LOOPS: Final[Mapping[str, _Phrase]] = {
    "generic_repeat": lambda tool, n: f"{tool} was called {n} times with identical arguments",
    "known_poll_no_progress": lambda tool, n: f"{tool} polled {n} times without any progress",
    "ping_pong": lambda tool, n: f"the calls kept alternating ({n} times) without progress",
    "unknown_tool_repeat": lambda tool, n: f"{tool} is not an available tool and was called {n} times",
    "global_circuit_breaker": lambda tool, n: (
        f"{tool} was called {n} times with identical arguments and identical results"
    ),
    "argument_churn": lambda tool, n: f"{tool} was called {n} times with new arguments and the same failure",
    "tool_outage": lambda tool, n: f"{tool} is failing for many agents right now (an outage)",
}

#: Per abort reason of the step and OpenClaw's rules: why the turn was stopped.
_STOPS: Final[Mapping[str, str]] = {
    "tool_loop_recovery_exhausted": "another loop came right after a blocked call",
    "compaction_loop_persisted": "the same loop went on after the context was compacted",
    "argument_churn_stale": "the calls kept changing their arguments without progress for too long",
}

#: loopwatch's own rules' words, as the registry hands them in (:func:`use_rule_texts`)
_RULE_LOOPS: dict[str, _Phrase] = {}
_RULE_STOPS: dict[str, str] = {}


def use_rule_texts(loops: Mapping[str, _Phrase], stops: Mapping[str, str]) -> None:
    """The words of the registered rules (per detector, per abort reason), in place of those
    handed in before."""
    _RULE_LOOPS.clear()
    _RULE_LOOPS.update(loops)
    _RULE_STOPS.clear()
    _RULE_STOPS.update(stops)


#: a verdict that names no tool (an answer loopwatch did not write whole)
_UNNAMED: Final = "this tool"


def _phrase(detector: str) -> _Phrase | None:
    phrase = _LOOPS.get(detector)
    return _RULE_LOOPS.get(detector) if phrase is None else phrase


def _stop(reason: str) -> str | None:
    why = _STOPS.get(reason)
    return _RULE_STOPS.get(reason) if why is None else why


def _loop(detector: str, tool: str, count: int | None) -> str:
    phrase = _phrase(detector)
    if phrase is None:
        return f"a loop was detected ({count or 0} repeated calls)"
    return phrase(tool, count or 0)


def warning_text(detector: str, tool: str, count: int | None) -> str:
    return (
        f"loopwatch warning: {_loop(detector, tool, count)} [{detector}]. "
        "Change your approach or stop if you are not making progress."
    )


def block_text(detector: str, tool: str, count: int | None) -> str:
    loop = _loop(detector, tool, count)
    if detector == "generic_repeat":  # a critical repeat is one with identical outcomes too
        loop += " and identical outcomes"
    call = f"this {tool} call" if tool != _UNNAMED else "this call"
    return (
        f"loopwatch blocked {call}: {loop} [{detector}]. "
        "The call was not run. Do not repeat it: try a different approach, or stop and tell "
        "the user what is blocking you."
    )


def abort_text(reason: str) -> str:
    why = _stop(reason) or "the run kept looping"
    return f"loopwatch stopped this turn: {why} [{reason}]. No blocked tool action was executed."


def decision_text(answer: Mapping[str, Any]) -> str:
    """The text for a ``/v1/decide`` answer (``warn``, ``block`` or ``abort``); for a detector
    or an abort reason this process has no words for, the answer's ``message`` (the gateway's,
    in loopwatch's words), if it has one."""
    action = answer.get("decision")
    given = answer.get("verdicts")
    verdicts = [v for v in given if isinstance(v, dict)] if isinstance(given, list) else []
    told = answer.get("message")
    if action == "abort":
        abort = next((v for v in verdicts if v.get("type") == "abort"), None)
        reason = (abort or {}).get("reason") or answer.get("reason") or "tool_loop_recovery_exhausted"
        if _stop(str(reason)) is None and isinstance(told, str) and told:
            return told
        return abort_text(str(reason))
    verdict = next((v for v in verdicts if v.get("action") == action), None) or {}
    detector = str(verdict.get("detector") or answer.get("reason") or "loop")
    if _phrase(detector) is None and isinstance(told, str) and told:
        return told
    tool = str(verdict.get("tool") or _UNNAMED)
    count = verdict.get("count")
    if action == "block":
        return block_text(detector, tool, count if isinstance(count, int) else None)
    return warning_text(detector, tool, count if isinstance(count, int) else None)


def decision_words(
    action: str, reason: str | None, outputs: Sequence[Any], refused_by: str | None = None
) -> str:
    """The text of a decision (``warn``, ``block`` or ``abort``) made in-process, from its
    outputs (verdict and abort records, as :class:`~detectors.facade.Decision` holds them);
    ``refused_by``: the call whose critical refused this one with its batch (named by the
    decision itself)."""
    if action == "abort":
        return abort_text(reason or "tool_loop_recovery_exhausted")
    verdict = next((out for out in outputs if getattr(out, "action", None) == action), None)
    if verdict is None:  # a call refused with its batch: its own outputs say nothing of it
        return (
            f"loopwatch did not run this call: another call of the same turn was blocked "
            f"[{reason or 'loop'}], and a turn's calls run together or not at all. Try a different "
            "approach, or stop and tell the user what is blocking you."
        )
    detector, tool, count = str(verdict.detector), str(verdict.tool), verdict.count
    count = count if isinstance(count, int) else None
    return block_text(detector, tool, count) if action == "block" else warning_text(detector, tool, count)
