"""Who decides the calls the proxy sees, and what the client is told.

* :class:`LocalDecider`: the in-process core (:class:`~detectors.facade.LoopDetector` over the
  config file), whose runs are forgotten after ``state_ttl_s`` without an event (the gateway's
  and the worker's ``LOOPWATCH_STATE_TTL_S``): a client that keeps a server for days is not
  refused for ever by one abort. It answers at once.
* :class:`GatewayDecider`: a running gateway, asked as the hooks ask it (:mod:`gateway_post`):
  ``POST /v1/decide`` before a call, ``POST /v1/events`` for its outcome and the run's end. The
  requests of one run are sent one after the other, in the order the proxy saw what they
  report, so an outcome reaches the gateway before the run's next call is decided; outcomes and
  ends are sent without holding up the answer the client waits for. A gateway that cannot be
  asked (down, slow, a wrong token) lets the call go on (fail open) or, with ``fail_closed``,
  refuses it; one that answers and refuses the input (400, 413, 422) lets it go on either way.

Both say what happened in loopwatch's words (:func:`runtime_texts.decision_text`). A call the
core cannot take (:class:`~detectors.events.InvalidEvent`: params nested too deeply, say) goes
on unchecked. Each such failure is reported on ``err``, a kind at most once a minute.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from typing import Any, Final, Protocol, TextIO

import msgspec

from loopwatch.detectors.events import InvalidEvent
from loopwatch.detectors.facade import Decision, LoopDetector
from loopwatch.detectors.outcomes import MISSING
from loopwatch.detectors.runtime_texts import decision_text
from loopwatch.streams.gateway.gateway_post import GatewayRefused, GatewayUnavailable, post_json

__all__ = ["ALLOW", "Decider", "GatewayDecider", "LocalDecider", "McpCall", "Ruling", "ruling_of"]

#: a kind of failure is reported at most once a minute
_REPORT_EVERY_S: Final = 60.0


@dataclass(frozen=True, slots=True)
class McpCall:
    """A ``tools/call`` as loopwatch records it."""

    run_id: str
    agent_id: str
    session_id: str | None
    tool: str
    params: Any
    call_id: str


@dataclass(frozen=True, slots=True)
class Ruling:
    """``allow``, ``warn`` (forward; ``text`` goes with the result), ``block`` or ``abort``
    (answer ``text`` as a tool error, do not forward)."""

    action: str
    text: str | None = None
    reason: str | None = None

    @property
    def proceed(self) -> bool:
        return self.action in ("allow", "warn")


ALLOW: Final = Ruling("allow")


def ruling_of(answer: dict[str, Any]) -> Ruling:
    """The ruling of a ``/v1/decide`` answer (or one made of an in-process decision)."""
    action = answer.get("decision")
    if action not in ("warn", "block", "abort"):
        return ALLOW
    reason = answer.get("reason")
    return Ruling(str(action), decision_text(answer), str(reason) if reason is not None else None)


def _answer_of(decision: Decision) -> dict[str, Any]:
    """An in-process decision as ``/v1/decide`` answers it (one text builder for both paths)."""
    return {
        "decision": decision.action,
        "reason": decision.reason,
        "verdicts": [msgspec.to_builtins(output) for output in decision.outputs],
    }


class Decider(Protocol):
    async def before(self, call: McpCall) -> Ruling:
        """Decide ``call`` before it is forwarded."""
        ...

    async def after(self, call: McpCall, result: Any, error: str | None) -> Ruling:
        """Record what ``call`` gave (``result``, or ``MISSING`` and ``error``); an ``abort``
        it caused, when known at once."""
        ...

    async def end(self, run_id: str, agent_id: str, session_id: str | None) -> None:
        """The run (the MCP session) is over."""
        ...

    async def close(self) -> None:
        """Wait for what is still being sent (a bounded while)."""
        ...


class _Failures:
    """Failures reported on ``err``, each kind at most once a minute."""

    def __init__(self, err: TextIO) -> None:
        self.err = err
        self.count = 0
        self._reported: dict[str, float] = {}

    def report(self, text: str, then: str) -> None:
        self.count += 1
        kind = text.split(":", 1)[0]
        now = time.monotonic()
        last = self._reported.get(kind)
        if last is not None and now - last < _REPORT_EVERY_S:
            return
        self._reported[kind] = now
        if len(self._reported) > 100:
            self._reported.pop(next(iter(self._reported)))
        print(f"loopwatch mcp: {text}; {then}", file=self.err, flush=True)


class LocalDecider:
    """The in-process core (see the module's docstring)."""

    def __init__(self, detector: LoopDetector, err: TextIO) -> None:
        self.detector = detector
        self.failures = _Failures(err)

    async def before(self, call: McpCall) -> Ruling:
        try:
            decision = self.detector.before_tool_call(
                call.run_id,
                call.tool,
                call.params,
                tool_call_id=call.call_id,
                agent_id=call.agent_id,
                session_id=call.session_id,
            )
        except InvalidEvent as exc:
            self.failures.report(f"cannot check a {call.tool} call: {exc}", "allowing it (not checked)")
            return ALLOW
        return ruling_of(_answer_of(decision))

    async def after(self, call: McpCall, result: Any, error: str | None) -> Ruling:
        try:
            decision = self.detector.after_tool_call(
                call.run_id,
                call.tool,
                call.params,
                result=result,
                error=error,
                tool_call_id=call.call_id,
                agent_id=call.agent_id,
                session_id=call.session_id,
            )
        except InvalidEvent as exc:
            self.failures.report(f"cannot record a {call.tool} result: {exc}", "not recorded")
            return ALLOW
        return ruling_of(_answer_of(decision))

    async def end(self, run_id: str, agent_id: str, session_id: str | None) -> None:
        try:
            self.detector.end_run(run_id)
        except InvalidEvent as exc:
            self.failures.report(f"cannot end run {run_id!r}: {exc}", "left to expire")

    async def close(self) -> None:
        return None


class GatewayDecider:
    """A running gateway (see the module's docstring)."""

    def __init__(self, url: str, token: str | None, timeout_s: float, fail_closed: bool, err: TextIO) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s
        self.fail_closed = fail_closed
        self.failures = _Failures(err)
        self._tails: dict[str, asyncio.Task[dict[str, Any]]] = {}  # a run's last request
        self._sending: set[asyncio.Task[dict[str, Any]]] = set()

    def _send(self, run_id: str, path: str, body: Any) -> asyncio.Task[dict[str, Any]]:
        """POST ``body`` after the run's requests sent before it (each within ``timeout_s``)."""
        previous = self._tails.get(run_id)

        async def send() -> dict[str, Any]:
            if previous is not None:
                await asyncio.wait([previous])  # (its failure is its own)
            deadline = time.monotonic() + self.timeout_s
            return await asyncio.to_thread(post_json, self.url, path, body, self.token, deadline)

        task = asyncio.ensure_future(send())
        self._tails[run_id] = task
        self._sending.add(task)

        def done(finished: asyncio.Task[dict[str, Any]]) -> None:
            self._sending.discard(finished)
            if self._tails.get(run_id) is finished:
                del self._tails[run_id]

        task.add_done_callback(done)
        return task

    def _send_in_background(self, run_id: str, path: str, body: Any, what: str) -> None:
        def reported(finished: asyncio.Task[dict[str, Any]]) -> None:
            if finished.cancelled():
                return
            exc = finished.exception()
            if isinstance(exc, (GatewayUnavailable, GatewayRefused)):
                self.failures.report(f"{exc}", f"{what} not recorded")
            elif exc is not None:
                self.failures.report(f"{type(exc).__name__}: {exc}", f"{what} not recorded")

        self._send(run_id, path, body).add_done_callback(reported)

    def _event(self, kind: str, run_id: str, agent_id: str, session_id: str | None) -> dict[str, Any]:
        event: dict[str, Any] = {
            "type": kind,
            "event_id": f"mcp-{uuid.uuid4().hex}",
            "run_id": run_id,
            "agent_id": agent_id,
        }
        if session_id:
            event["session_id"] = session_id
        return event

    def _unavailable(self, text: str) -> Ruling:
        if self.fail_closed:
            self.failures.report(text, "refusing the call (--fail-closed)")
            return Ruling(
                "block", f"loopwatch could not check this call, so it was not run: {text}", "unavailable"
            )
        self.failures.report(text, "allowing (fail open)")
        return ALLOW

    async def before(self, call: McpCall) -> Ruling:
        body: dict[str, Any] = {
            "run_id": call.run_id,
            "agent_id": call.agent_id,
            "tool": call.tool,
            "params": call.params,
            "tool_call_id": call.call_id,
        }
        if call.session_id:
            body["session_id"] = call.session_id
        try:
            answer = await self._send(call.run_id, "/v1/decide", body)
        except GatewayUnavailable as exc:
            return self._unavailable(str(exc))
        except GatewayRefused as exc:
            self.failures.report(
                str(exc), "allowing (the gateway refused the input, the call is not checked)"
            )
            return ALLOW
        if answer.get("decision") not in ("allow", "warn", "block", "abort"):
            return self._unavailable(f"{self.url}/v1/decide answered no decision: {str(answer)[:200]}")
        return ruling_of(answer)

    async def after(self, call: McpCall, result: Any, error: str | None) -> Ruling:
        event = self._event("tool_result", call.run_id, call.agent_id, call.session_id)
        event.update(tool=call.tool, params=call.params, tool_call_id=call.call_id)
        if error is not None:
            event["error"] = error
        elif result is not MISSING:
            event["result"] = result
        else:
            return ALLOW
        self._send_in_background(call.run_id, "/v1/events", event, f"a {call.tool} result")
        return ALLOW

    async def end(self, run_id: str, agent_id: str, session_id: str | None) -> None:
        self._send_in_background(
            run_id, "/v1/events", self._event("run_end", run_id, agent_id, session_id), "the run's end"
        )

    async def close(self) -> None:
        if self._sending:
            await asyncio.wait(set(self._sending), timeout=self.timeout_s * 2)
