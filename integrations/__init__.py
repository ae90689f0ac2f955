"""Code that runs inside other agent runtimes, and what the Python ones share.

The Python adapters, each importing its framework when it is imported (this module imports
none, so ``import loopwatch`` works without the extras): ``langchain`` (a LangChain / LangGraph
agent middleware), ``openai_agents`` (OpenAI Agents SDK tool guardrails), ``pydantic_ai`` (a
PydanticAI capability), ``claude_agent_sdk`` (Claude Agent SDK hook callbacks), ``google_adk``
(a Google ADK runner plugin) and ``crewai`` (CrewAI's tool and model call hooks). ``openclaw/``
(the OpenClaw plugin) and ``vercel-ai/`` (the Vercel AI SDK's) are JavaScript packages.

:class:`LoopGuard` is what every adapter asks, built from the same options everywhere
(:class:`GuardOptions`): the in-process :class:`LoopDetector` (default)
or a gateway (``gateway_url``: ``POST /v1/decide`` before a call, ``POST /v1/events`` after
it). A gateway that fails (unreachable, slow, an error answer) lets the call go on (fail
open), and so does a call the detector cannot take (an id that is no id: the host runtime's
run must not end on loopwatch's account); each such failure is kept in
:attr:`LoopGuard.failures`. Params and results go to either backend as JSON carries them
(:func:`_json_value`). Its answers are texts in loopwatch's words (``runtime_texts``),
whichever backend.

A call with the framework's tool call id is one call however often it is asked about: its
events' ids are derived from the run, the tool call id and the kind (``py-call-…``,
``py-result-…``: the same in every process), and the guard keeps each call's answers. A call
asked about again (a guardrail run again after a human approved the call, a tool resumed after
an ``interrupt()``) gets its first answer back and is not counted again: in-process from the
guard's memory; through a gateway the gateway answers a named event id it already decided with
the same answer and its core ignores an event id it has seen, so a call asked again from
another process (the same gateway) counts once too. An id used again once its call is over
(its result reported, or the call refused) is a new call: a model that numbers its calls
``call_0`` every turn still has every call counted. Without a tool call id every ask is a
call, as before.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, TypedDict

import msgspec

from loopwatch.detectors.events import InvalidEvent
from loopwatch.detectors.facade import Decision, LoopDetector
from loopwatch.detectors.outcomes import MISSING
from loopwatch.detectors.runtime_texts import decision_text
from loopwatch.streams.gateway.gateway_post import (
    NOT_HTTP,
    GatewayRefused,
    GatewayUnavailable,
    http_url_problem,
    post_json,
)

__all__ = ["FAILURES_KEPT", "Call", "GatewayError", "GuardOptions", "LoopGuard", "Ruling", "event_id"]

_log = logging.getLogger("loopwatch.integrations")
#: the failures a guard keeps (the count goes on)
FAILURES_KEPT = 100
#: a kind of failure is logged at most once a minute
_LOG_EVERY_S = 60.0
#: tool calls whose answers a guard keeps per run (the core de-duplicates within the last 256
#: event ids of a run, its ``seenEventIds`` default), and the runs it keeps them for
CALLS_KEPT_PER_RUN = 256
RUNS_KEPT = 10_000


def _check_url(url: str) -> None:
    """A gateway URL: http(s), a host (an empty or scheme-less one is refused here, not at the
    first tool call)."""
    problem = http_url_problem(url)
    if problem == NOT_HTTP:
        raise ValueError(
            f"gateway_url {url!r}: an http:// or https:// URL with a host, e.g. http://127.0.0.1:6070"
        )
    if problem is not None:
        raise ValueError(f"gateway_url {url!r} is {problem}")


@dataclass(frozen=True, slots=True)
class Call:
    """One tool call of a run, as the adapters see it. ``tool_call_id``: the framework's id of
    the call, which names its events (a call asked about twice counts once)."""

    run_id: str
    tool: str
    params: Any
    tool_call_id: str | None = None
    session_id: str | None = None
    parent_run_id: str | None = None


@dataclass(frozen=True, slots=True)
class Ruling:
    """What to do: ``allow``, ``warn`` (run it, give ``text`` with the result), ``block`` (do
    not run it, answer ``text``) or ``abort`` (end the run with ``text``)."""

    action: str
    text: str | None = None
    #: the abort's reason or the verdict's detector
    reason: str | None = None

    @property
    def proceed(self) -> bool:
        return self.action in ("allow", "warn")


ALLOW = Ruling("allow")


class GatewayError(Exception):
    """The gateway could not be asked (the call goes on: fail open)."""


@dataclass(slots=True)
class _Asked:
    """A tool call id of a run: which use of the id this is, and the answers its call got."""

    use: int = 0
    decided: Ruling | None = None  # the answer before the call
    reported: Ruling | None = None  # the answer to its outcome

    @property
    def over(self) -> bool:
        """The call is over (its outcome reported, or refused): the id again is a new call."""
        return self.reported is not None or (self.decided is not None and not self.decided.proceed)


def event_id(kind: str, run_id: str, tool_call_id: str, use: int = 0) -> str:
    """The event id of a tool call's ``kind`` (``call`` or ``result``): the same in every
    process for the same run and tool call id (``use``: the id's n-th call in the run)."""
    key = f"{run_id}\x1f{tool_call_id}\x1f{use}".encode("utf-8", "surrogatepass")
    return f"py-{kind}-{hashlib.blake2b(key, digest_size=16).hexdigest()}"


def _ruling(answer: dict[str, Any]) -> Ruling:
    action = answer.get("decision")
    if action not in ("warn", "block", "abort"):
        return ALLOW
    reason = answer.get("reason")
    return Ruling(str(action), decision_text(answer), str(reason) if reason is not None else None)


def _answer(decision: Decision) -> dict[str, Any]:
    """A ``/v1/decide`` answer for an in-process decision (one text builder for both paths)."""
    return {
        "decision": decision.action,
        "reason": decision.reason,
        "verdicts": [msgspec.to_builtins(output) for output in decision.outputs],
    }


def _after_answer(outputs: list[Any]) -> dict[str, Any]:
    """What a tool result's outputs (``/v1/events``) ask: only an enforced abort matters."""
    for output in outputs:
        if isinstance(output, dict) and output.get("type") == "abort" and output.get("enforced", True):
            return {"decision": "abort", "reason": output.get("reason"), "verdicts": [output]}
    return {"decision": "allow"}


class GuardOptions(TypedDict, total=False):
    """What every adapter takes beside its detector, for its :class:`LoopGuard`: the gateway
    (``gateway_url``, ``token``; none: the in-process detector), the agent id of its runs
    (``"default"``), how long a gateway answer may take (``timeout_s``, 2.0) and whether a call
    goes on when loopwatch cannot check it (``fail_open``, True)."""

    gateway_url: str | None
    token: str | None
    agent_id: str
    timeout_s: float
    fail_open: bool


class LoopGuard:
    """One loop detector for the runs of one process, or a gateway shared by many."""

    def __init__(
        self,
        detector: LoopDetector | None = None,
        *,
        gateway_url: str | None = None,
        token: str | None = None,
        agent_id: str = "default",
        timeout_s: float = 2.0,
        fail_open: bool = True,
    ) -> None:
        if detector is not None and gateway_url is not None:
            raise ValueError("give a detector or a gateway_url, not both")
        if gateway_url is not None:
            _check_url(gateway_url)
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
            raise ValueError(f"timeout_s must be a number of seconds above 0, not {timeout_s!r}")
        if not isinstance(fail_open, bool):
            raise ValueError(f"fail_open must be True or False, not {fail_open!r}")
        self.gateway_url = gateway_url.rstrip("/") if gateway_url else None
        if detector is None and gateway_url is None:
            detector = LoopDetector(agent_id=agent_id)
        self.detector = detector  # None: ask the gateway
        self.token = token
        self.agent_id = agent_id
        self.timeout_s = float(timeout_s)
        #: a gateway that cannot be asked lets the call go on (True) or refuses it (False)
        self.fail_open = fail_open
        #: the latest failures (the newest last): a gateway that could not be asked, an answer
        #: that was not a gateway's, a call the detector could not take
        self.failures: list[str] = []
        #: how many failures there were in all
        self.failure_count = 0
        self._logged: dict[str, float] = {}  # a failure's kind -> when it was last logged
        self._lock = threading.Lock()  # tools of one batch may run on several threads
        #: run -> tool call id -> the call's use and answers (the least recently asked last out)
        self._asked: OrderedDict[str, OrderedDict[str, _Asked]] = OrderedDict()

    def _asked_of(self, call: Call) -> _Asked | None:
        """What the guard knows of the call's tool call id (``None``: the call has none); under
        the lock."""
        if not call.tool_call_id:
            return None
        calls = self._asked.get(call.run_id)
        if calls is None:
            calls = self._asked[call.run_id] = OrderedDict()
            while len(self._asked) > RUNS_KEPT:
                self._asked.popitem(last=False)
        else:
            self._asked.move_to_end(call.run_id)
        asked = calls.get(call.tool_call_id)
        if asked is None:
            asked = calls[call.tool_call_id] = _Asked()
            while len(calls) > CALLS_KEPT_PER_RUN:
                calls.popitem(last=False)
        else:
            calls.move_to_end(call.tool_call_id)
        return asked

    def _post(self, path: str, body: Any) -> dict[str, Any]:
        """The gateway's answer within ``timeout_s`` (the whole request, not each read)."""
        assert self.gateway_url is not None
        deadline = time.monotonic() + self.timeout_s
        try:
            return post_json(self.gateway_url, path, body, self.token, deadline)
        except (GatewayUnavailable, GatewayRefused) as exc:
            raise GatewayError(str(exc)) from exc

    def _fail_open(self, exc: Exception, gateway: bool = False) -> Ruling:
        """A call loopwatch could not decide: kept, logged (a kind once a minute), and let go
        on; refused when it was the gateway's failure and the guard fails closed."""
        text = str(exc)
        now = time.monotonic()
        kind = text.split(":", 1)[0]
        with self._lock:
            self.failures.append(text)
            del self.failures[:-FAILURES_KEPT]
            self.failure_count += 1
            last = self._logged.get(kind)
            log = last is None or now - last >= _LOG_EVERY_S
            if log:
                self._logged[kind] = now
                if len(self._logged) > FAILURES_KEPT:
                    self._logged.pop(next(iter(self._logged)))
        closed = gateway and not self.fail_open
        if log:
            then = "the call is refused (fail_open=False)" if closed else "the call goes on (fail open)"
            _log.warning("loopwatch could not decide a tool call: %s; %s", text, then)
        if closed:
            return Ruling(
                "block", f"loopwatch could not check this call, so it was not run: {text}", "unavailable"
            )
        return ALLOW

    def before(self, call: Call) -> Ruling:
        """Ask before running ``call`` (an aborted run answers ``abort`` to every later call).
        A call asked about again before it is over gets its first answer, uncounted."""
        with self._lock:
            asked = self._asked_of(call)
            if asked is not None:
                if asked.over:  # its id again, for a new call
                    asked.use, asked.decided, asked.reported = asked.use + 1, None, None
                elif asked.decided is not None:
                    return asked.decided
            use = asked.use if asked is not None else 0
        named = None if asked is None else event_id("call", call.run_id, str(call.tool_call_id), use)
        ruling, decided = self._decide(call, named)
        if asked is not None and decided:
            with self._lock:
                if asked.use == use:
                    asked.decided = ruling
        return ruling

    def _decide(self, call: Call, named: str | None) -> tuple[Ruling, bool]:
        """The answer for ``call`` (its event id ``named``, or one made up), and whether it was
        decided (not a failure let go on or refused: asked again, it is asked again)."""
        if self.detector is not None:
            try:
                with self._lock:
                    decision = self.detector.before_tool_call(
                        call.run_id,
                        call.tool,
                        _json_value(call.params),
                        tool_call_id=call.tool_call_id,
                        session_id=call.session_id,
                        parent_run_id=call.parent_run_id,
                    )
            except InvalidEvent as exc:
                return self._fail_open(exc), False
            return _ruling(_answer(decision)), True
        body: dict[str, Any] = {"run_id": call.run_id, "agent_id": self.agent_id, "tool": call.tool}
        body["params"] = _json_value(call.params)
        for key in ("tool_call_id", "session_id", "parent_run_id"):
            if getattr(call, key):
                body[key] = getattr(call, key)
        if named is not None:
            body["event_id"] = named
        try:
            answer = self._post("/v1/decide", body)
        except GatewayError as exc:
            return self._fail_open(exc, gateway=True), False
        if answer.get("decision") not in ("allow", "warn", "block", "abort"):
            failure = GatewayError(f"{self.gateway_url}/v1/decide answered no decision: {str(answer)[:200]}")
            return self._fail_open(failure, gateway=True), False
        return _ruling(answer), answer.get("timed_out") is not True

    def after(self, call: Call, *, result: Any = MISSING, error: BaseException | str | None = None) -> Ruling:
        """Report what ``call`` gave (``result``) or how it failed (``error``); an outcome
        reported again gets the first report's answer, uncounted."""
        if result is MISSING and error is None:
            return ALLOW  # nothing to record
        with self._lock:
            asked = self._asked_of(call)
            if asked is not None and asked.reported is not None:
                return asked.reported
            use = asked.use if asked is not None else 0
        named = None if asked is None else event_id("result", call.run_id, str(call.tool_call_id), use)
        ruling, reported = self._report(call, named, result, error)
        if asked is not None and reported:
            with self._lock:
                if asked.use == use:
                    asked.reported = ruling
        return ruling

    def _report(
        self, call: Call, named: str | None, result: Any, error: BaseException | str | None
    ) -> tuple[Ruling, bool]:
        """The answer to ``call``'s outcome, and whether it was recorded (not a failure)."""
        if self.detector is not None:
            try:
                with self._lock:
                    decision = self.detector.after_tool_call(
                        call.run_id,
                        call.tool,
                        _json_value(call.params),
                        result=result if result is MISSING else _json_value(result),
                        error=error,
                        tool_call_id=call.tool_call_id,
                        session_id=call.session_id,
                    )
            except InvalidEvent as exc:
                return self._fail_open(exc), False
            return _ruling(_answer(decision)), True
        event = self._event("tool_result", call.run_id, call.session_id, named, tool=call.tool)
        event["params"] = _json_value(call.params)
        if call.tool_call_id:
            event["tool_call_id"] = call.tool_call_id
        if error is not None:
            event["error"] = str(error) or (type(error).__name__ if isinstance(error, BaseException) else "")
        else:
            event["result"] = _json_value(result)
        try:
            answer = self._post("/v1/events", event)
        except GatewayError as exc:
            return self._fail_open(exc), False  # (the tool ran: nothing is left to refuse)
        outputs = answer.get("outputs")
        return _ruling(_after_answer(outputs if isinstance(outputs, list) else [])), True

    def end(self, run_id: str, session_id: str | None = None) -> None:
        """The run is over: forget it (its abort too, and its calls' answers)."""
        with self._lock:
            self._asked.pop(run_id, None)
        if self.detector is not None:
            try:
                with self._lock:
                    self.detector.end_run(run_id)
            except InvalidEvent as exc:
                self._fail_open(exc)
            return
        try:
            self._post("/v1/events", self._event("run_end", run_id, session_id))
        except GatewayError as exc:
            self._fail_open(exc)

    def _event(
        self, kind: str, run_id: str, session_id: str | None, named: str | None = None, **fields: Any
    ) -> dict[str, Any]:
        event = {
            "type": kind,
            "event_id": named or f"py-{uuid.uuid4().hex}",
            "run_id": run_id,
            "agent_id": self.agent_id,
        }
        if session_id:
            event["session_id"] = session_id
        return {**event, **fields}


def _json_value(value: Any) -> Any:
    """``value`` as JSON carries it (tuples as lists; what JSON cannot hold, as its text: keys
    that are not strings, objects, a value that contains itself)."""
    try:
        return json.loads(json.dumps(value, default=_text, allow_nan=False))
    except (TypeError, ValueError, RecursionError):
        return _plain(value, set(), 0)


def _plain(value: Any, open_ids: set[int], depth: int) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None  # as JSON.stringify writes NaN
    if id(value) in open_ids:  # a value that contains itself
        return "[Circular]"
    if depth >= 64:  # deeper than the wire takes (a container's text could nest without end)
        return "[Nested]" if isinstance(value, (dict, list, tuple, set, frozenset)) else _text(value)[:1000]
    if isinstance(value, dict):
        open_ids.add(id(value))
        plain = {str(key): _plain(item, open_ids, depth + 1) for key, item in value.items()}
        open_ids.discard(id(value))
        return plain
    if isinstance(value, (list, tuple, set, frozenset)):
        open_ids.add(id(value))
        items = [_plain(item, open_ids, depth + 1) for item in value]
        open_ids.discard(id(value))
        return items
    return _text(value)


def _text(value: Any) -> str:
    """``str(value)``, or what it is when its ``__str__`` fails (the host's call goes on)."""
    try:
        return str(value)
    except Exception as exc:  # noqa: BLE001 - any __str__ of a framework's object
        return f"<{type(value).__name__}: str() failed: {type(exc).__name__}>"
