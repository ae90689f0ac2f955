"""``loopwatch gateway``: loop detection over HTTP, for runtimes that do not speak Kafka.

Backends: the embedded runtime (default: the same core in-process, no broker), or Kafka
(``--kafka BOOTSTRAP``: :mod:`streams.gateway.kafka_backend`, the workers decide). Routes:

* ``POST /v1/events``: one event, a JSON array of events, or NDJSON, in the wire format.
  Every event is validated first. One invalid event answers 400 with its index and reason,
  and nothing is applied. Otherwise the events are applied in order and the answer is the
  outputs they caused, ``{"outputs": [...]}`` (Kafka: 202 ``{"accepted": n}`` once the
  broker has them).
* ``POST /v1/decide``: a proposed tool call (``run_id`` or ``session_id``, ``agent_id``,
  ``tool``, ``params``, ``tool_call_id``, optional ``usage``, ``event_id`` and ``batch_id``).
  It is recorded like a ``tool_call`` and answered with ``{"decision": "allow" | "warn" |
  "block" | "abort", "message", "verdicts"}``. On Kafka the answer waits at most
  ``--decide-timeout-ms`` for the worker; then it is ``allow`` with ``"timed_out": true``.
  A JSON array of such calls is one model turn's batch (one run's, in assistant order; at
  most :data:`MAX_BATCH_CALLS`), admitted or refused as a whole (docs/openclaw-rules.md
  §7.6): ``{"batch_id", "refused", "refused_by", "decisions": [one answer per call]}``. A
  malformed call answers 400 naming its ``index``, and nothing of the batch is applied. On
  Kafka the batch is one record, admitted together by the worker that owns the run.
* ``POST /v1/hooks/RUNTIME`` (``claude-code``, …): a runtime's HTTP hook — its hook input in,
  its hook output out, decided like ``loopwatch hook RUNTIME`` does (no process per call).
  ``?agent_id=`` names the runs' agent, ``?show_warnings=1`` shows warnings to the user too.
* ``GET /health``, ``GET /metrics`` (Prometheus), and the dashboard routes.

With tokens configured (``LOOPWATCH_GATEWAY_TOKENS``, comma-separated), every route but
``/health`` and the dashboard's page needs ``Authorization: Bearer <token>`` (401 without one).
Host, origin and content type are checked first (:mod:`streams.gateway.web_safety`). A body
over ``maxEventBytes`` is refused with 413, one not sent within ``BODY_TIMEOUT_S`` with 408,
bad JSON and invalid events (:mod:`detectors.input_limits`) with 400 and the reason, more than
``MAX_IN_FLIGHT`` requests at once with 503. Bad input never gives a 500, and one request's
failure never holds up another: a body over :data:`OFFLOAD_ABOVE` bytes is read (decoded,
validated, OTLP converted) in the gateway's one reading thread, not on the event loop. A
trailing slash names the same route (``/v1/decide/``). ``/health`` answers 503 once events
wait and none has been processed for ``STALL_S`` seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final, TextIO, TypeVar

import msgspec
import structlog
from aiohttp import web

from loopwatch.config.errors import LoopwatchError
from loopwatch.detectors.decoding import decode_event
from loopwatch.detectors.events import Event, InvalidEvent, Output, ToolCall, encode_output, run_scope
from loopwatch.detectors.facade import BatchDecision, Decision, in_words
from loopwatch.streams.embedded.runtime import EmbeddedRuntime
from loopwatch.streams.fleet_view.dashboard import Dashboard
from loopwatch.streams.fleet_view.view import FleetView
from loopwatch.streams.gateway.backend import (
    ANSWERS_KEPT,
    STALL_S,
    Backend,
    BackendUnavailable,
    RecordTooLarge,
    is_named,
)
from loopwatch.streams.gateway.hooks.plan import MemoryPrompts, session_problem
from loopwatch.streams.gateway.hooks.runtimes import RUNTIMES, event_problem
from loopwatch.streams.gateway.tolerant_json import TOO_DEEP, as_utf8, dumps, loads
from loopwatch.streams.gateway.web_safety import WebSafety, is_loopback
from loopwatch.streams.logs import quiet_malformed_requests

__all__ = [
    "BODY_TIMEOUT_S",
    "MAX_BATCH_CALLS",
    "MAX_IN_FLIGHT",
    "STALL_S",
    "Backend",
    "EmbeddedBackend",
    "InvalidBatchCall",
    "gateway_app",
    "run_gateway",
]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
T = TypeVar("T")

#: The longest a client may take to send a body.
BODY_TIMEOUT_S = 10.0

#: The paths that take POST (any other method on them answers 405).
POST_ROUTES = frozenset({"/v1/events", "/v1/decide", "/v1/traces"})


def _posts_only(path: str) -> bool:
    """Whether ``path`` is one of the routes that take POST only."""
    return path.rstrip("/") in POST_ROUTES or path.startswith("/v1/hooks/")


#: Requests handled at once; more answer 503 at once (hooks fail open, nothing piles up).
MAX_IN_FLIGHT = 1024
#: A connection idle this long (no request, or a request's headers unfinished) is closed.
IDLE_TIMEOUT_S = 30.0
#: The most calls one ``/v1/decide`` batch may hold.
MAX_BATCH_CALLS = 256

_log = structlog.get_logger("loopwatch.gateway")


class EmbeddedBackend:
    """The embedded runtime: outputs at once, nothing ever times out."""

    def __init__(self, runtime: EmbeddedRuntime) -> None:
        self.runtime = runtime

    async def events(self, events: list[Event]) -> list[Output] | None:
        outputs: list[Output] = []
        for event in events:
            outputs.extend(await self.runtime.process(event))
        return outputs

    async def decide(self, call: ToolCall) -> tuple[Decision, bool]:
        return await self.runtime.decide(call), False

    async def decide_batch(self, calls: list[ToolCall]) -> BatchDecision:
        return await self.runtime.decide_batch(calls)

    async def refuse(self, body: bytes, reason: str) -> None:
        """Counted only (the gateway's 400 says what and where)."""

    def stalled(self) -> bool:
        return self.runtime.stalled(STALL_S)


@functools.lru_cache(maxsize=64)
def _accepted(count: int) -> bytes:
    """The body of ``/v1/events``' 202 (as ``web.json_response`` wrote it)."""
    return json.dumps({"accepted": count}).encode()


def _error(status: int, reason: str) -> web.Response:
    return web.json_response({"error": reason}, status=status)


def _outputs_json(outputs: list[Output]) -> bytes:
    """The outputs as a JSON array, each in its wire encoding (no decode and re-encode)."""
    return b"[" + b",".join(encode_output(output) for output in outputs) + b"]"


def _answer_body(fields: dict[str, Any], outputs: list[Output], key: str) -> bytes:
    """``fields`` plus ``key``: the outputs, as one JSON object."""
    head = msgspec.json.encode(fields)[:-1] + (b"," if fields else b"")  # the object, still open
    return head + msgspec.json.encode(key) + b":" + _outputs_json(outputs) + b"}"


def _answer(fields: dict[str, Any], outputs: list[Output], key: str) -> web.Response:
    return web.Response(body=_answer_body(fields, outputs, key), content_type="application/json")


def _batch_answer(calls: list[ToolCall], batch: BatchDecision, words: bool) -> web.Response:
    """A batch's answer: its id, whether it was refused (and by which call), and each call's
    answer in the single call's shape (``refused_by``: the event id of the call that refused
    it with its batch)."""
    head = {"batch_id": calls[0].batch_id, "refused": batch.refused, "refused_by": batch.refused_by}
    items = [
        _answer_body(_decision_fields(decision, call, False, words), list(decision.outputs), "verdicts")
        for call, decision in zip(calls, batch.decisions, strict=True)
    ]
    body = msgspec.json.encode(head)[:-1] + b',"decisions":[' + b",".join(items) + b"]}"
    return web.Response(body=body, content_type="application/json")


def _split_body(body: bytes) -> list[bytes]:
    """The events of a body: a JSON array, one JSON object, or NDJSON lines."""
    stripped = body.strip()
    if stripped.startswith(b"["):
        items, surrogates = loads(stripped)
        if not isinstance(items, list):
            raise InvalidEvent("not valid JSON: expected an array")
        try:
            return [dumps(item, surrogates) for item in items]
        except RecursionError as exc:
            raise InvalidEvent(TOO_DEEP) from exc
    return [line for line in stripped.split(b"\n") if line.strip()]


def _decode_all(body: bytes) -> list[Event]:
    parts = _split_body(body)
    if not parts:
        raise InvalidEvent("the body holds no event")
    events = []
    for index, part in enumerate(parts):
        try:
            events.append(decode_event(part))
        except InvalidEvent as exc:
            raise InvalidEvent(f"event {index}: {exc.reason}") from exc
    return events


def _proposed_call(body: bytes) -> ToolCall:
    value, surrogates = loads(body)
    if not isinstance(value, dict):
        raise InvalidEvent("the body must be a JSON object (a proposed tool call)")
    return _call_of(value, surrogates)


def _generated_id(prefix: str = "gateway-") -> str:
    """``prefix`` and a random uuid4's hex (:func:`uuid.uuid4`'s bytes, without its object)."""
    raw = bytearray(os.urandom(16))
    raw[6] = raw[6] & 0x0F | 0x40  # version 4
    raw[8] = raw[8] & 0x3F | 0x80  # RFC 4122 variant
    return prefix + raw.hex()


def _call_of(value: dict[str, Any], surrogates: bool, batch_id: str | None = None) -> ToolCall:
    # (an id made up only for a call that names none: the client's own replaces it)
    call = {"type": "tool_call", "event_id": value["event_id"] if "event_id" in value else _generated_id()}
    call.update(value)
    if batch_id is not None:
        call.setdefault("batch_id", batch_id)
    try:
        encoded = dumps(call, surrogates)
    except RecursionError as exc:
        raise InvalidEvent(TOO_DEEP) from exc
    event = decode_event(encoded)
    if not isinstance(event, ToolCall):
        raise InvalidEvent("type: a decision is asked for a tool_call")
    return event


class InvalidBatchCall(InvalidEvent):
    """A call of a ``/v1/decide`` batch that cannot be decided; ``index`` says which."""

    def __init__(self, index: int, reason: str) -> None:
        self.index = index
        super().__init__(f"call {index}: {reason}")


def _proposed(body: bytes) -> ToolCall | list[ToolCall]:
    """A ``/v1/decide`` body: one proposed call (a JSON object), or a batch (a JSON array of
    them: one run's, unique event ids, one ``batch_id``: the calls' own, else a fresh one)."""
    value, surrogates = loads(body)
    if isinstance(value, dict):
        return _call_of(value, surrogates)
    if not isinstance(value, list) or not value:
        raise InvalidEvent(
            "the body must be a JSON object (a proposed tool call) or a non-empty JSON array of them"
        )
    if len(value) > MAX_BATCH_CALLS:
        raise InvalidEvent(f"a batch holds at most {MAX_BATCH_CALLS} calls, this one {len(value)}")
    # the batch's id: the first a call gives (every call that gives one must give the same)
    named = (item.get("batch_id") for item in value if isinstance(item, dict))
    batch_id = next(
        (name for name in named if isinstance(name, str) and name), _generated_id("gateway-batch-")
    )
    calls: list[ToolCall] = []
    seen: dict[str, int] = {}
    for index, item in enumerate(value):
        if not isinstance(item, dict):
            raise InvalidBatchCall(index, "must be a JSON object (a proposed tool call)")
        try:
            call = _call_of(item, surrogates, batch_id)
        except InvalidEvent as exc:
            raise InvalidBatchCall(index, exc.reason) from exc
        if call.event_id in seen:
            raise InvalidBatchCall(index, f"event_id {call.event_id!r} is also call {seen[call.event_id]}'s")
        seen[call.event_id] = index
        calls.append(call)
    problem = _batch_problem(calls)
    if problem is not None:
        raise problem
    return calls


def _batch_problem(calls: list[ToolCall]) -> InvalidBatchCall | None:
    """The first call that does not belong with the first: another run, another ``batch_id``."""
    first = calls[0]
    scope = run_scope(first)
    for index, call in enumerate(calls):
        if not call.batch_id:
            return InvalidBatchCall(index, "batch_id: must be a non-empty string")
        if run_scope(call) != scope:
            return InvalidBatchCall(
                index, f"a batch's calls share one run ({scope!r}); this one is {run_scope(call)!r}"
            )
        if call.batch_id != first.batch_id:
            return InvalidBatchCall(
                index, f"batch_id {call.batch_id!r} differs from call 0's {first.batch_id!r}"
            )
    return None


#: the header the OpenClaw plugin sends: its answers carry OpenClaw's own sentences
OPENCLAW_TEXTS: Final = "X-Loopwatch-Texts"


def _openclaw_texts(request: web.Request) -> bool:
    """Whether the client asks for OpenClaw's sentences (the plugin); every other client is
    told in loopwatch's words (:mod:`detectors.runtime_texts`)."""
    return request.headers.get(OPENCLAW_TEXTS, "").strip().lower() == "openclaw"


def _decision_fields(decision: Decision, call: ToolCall, timed_out: bool, words: bool) -> dict[str, Any]:
    """A decision's answer; ``words``: its message in loopwatch's words, else the verdict's own."""
    fields: dict[str, Any] = {
        "decision": decision.action,
        "message": in_words(decision).message if words else decision.message,
        "event_id": call.event_id,
    }
    if decision.reason is not None:
        fields["reason"] = decision.reason
    if decision.sticky:
        fields["sticky"] = True
    if decision.refused_by is not None:
        fields["refused_by"] = decision.refused_by
    if timed_out:
        fields["timed_out"] = True
    return fields


class _BodyTimeout(Exception):
    pass


def _body_late() -> str:
    return f"the body was not sent within {BODY_TIMEOUT_S:g} s"


class _BodyUndecodable(InvalidEvent):
    """A body its Content-Encoding does not decode: answered 400 on a connection then closed
    (the rest of the body would be read as the next request)."""


#: A body larger than this is read (decoded, validated, converted to events) off the event
#: loop; a smaller one costs less read at once than handed to a thread.
OFFLOAD_ABOVE = 16_384


class _Parser:
    """Where bodies are read: a large one in the gateway's one reading thread, so the event
    loop goes on answering other requests meanwhile (one thread: the bodies read at once never
    take more than one core from the loop, whatever the number of clients sending them)."""

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None

    async def run(self, read: Callable[[], T], size: int) -> T:
        if size <= OFFLOAD_ABOVE:
            return read()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="loopwatch-read")
        return await asyncio.get_running_loop().run_in_executor(self._pool, read)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None


class _Guard:
    """Every request: the web-safety checks first, at most :data:`MAX_IN_FLIGHT` at once, and
    every failure answered (4xx for the client's, one logged line and 500 for a bug)."""

    def __init__(self, checks: WebSafety, view: FleetView, max_bytes: int) -> None:
        self.checks = checks
        self.view = view
        self.max_bytes = max_bytes
        self.in_flight = 0

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        headers = request.headers
        refusal = self.checks.check(
            request.method,
            request.path,
            host=headers.get("Host"),
            origin=headers.get("Origin"),
            authorization=headers.get("Authorization"),
            content_type=headers.get("Content-Type"),
        )
        if refusal is not None:
            return _error(refusal.status, refusal.reason)
        if self.in_flight >= MAX_IN_FLIGHT and request.path.rstrip("/") != "/health":
            # (/health answers what it means: stalled or not, never a full house)
            return _error(503, f"more than {MAX_IN_FLIGHT} requests at once: try again")
        self.in_flight += 1
        try:
            return await handler(request)
        except web.HTTPRequestEntityTooLarge:
            return _error(413, f"the body exceeds maxEventBytes ({self.max_bytes} bytes)")
        except web.HTTPException:
            raise
        except Exception as exc:  # noqa: BLE001 - every failure gets its answer
            return self._answer_failure(request, exc)
        finally:
            self.in_flight -= 1

    def _answer_failure(self, request: web.Request, exc: Exception) -> web.Response:
        if isinstance(exc, InvalidBatchCall):
            self.view.metrics.invalid += 1
            return web.json_response({"error": exc.reason, "index": exc.index}, status=400)
        if isinstance(exc, InvalidEvent):
            self.view.metrics.invalid += 1
            answer = _error(400, exc.reason)
            if isinstance(exc, _BodyUndecodable):
                answer.force_close()
            return answer
        if isinstance(exc, BackendUnavailable):
            return _error(503, str(exc))
        if isinstance(exc, RecordTooLarge):
            self.view.metrics.invalid += 1
            return _error(413, str(exc))
        if isinstance(exc, _BodyTimeout):
            return _error(408, _body_late())
        if isinstance(exc, (ConnectionError, asyncio.IncompleteReadError)):
            return _error(400, "the client went away")  # nobody reads it: no traceback either
        _log.error("request failed", path=request.path, error=f"{type(exc).__name__}: {exc}")
        return _error(500, "internal error (logged)")


class _Routes:
    """The gateway's routes over one backend."""

    def __init__(self, backend: Backend, view: FleetView, max_bytes: int) -> None:
        self.backend = backend
        self.max_bytes = max_bytes
        self.parser = _Parser()
        self.dashboard = Dashboard(view, serve_metrics=True)
        self.prompts = MemoryPrompts()  # each session's prompt number (HTTP hooks: a run per prompt)
        #: (run scope, event id) -> the answer given to a call whose client named its event id:
        #: a retry of it (its answer lost on the way) gets the same answer, not the "allow" of
        #: an event the run has already seen
        self.answered: OrderedDict[tuple[str, str, bool], bytes] = OrderedDict()

    async def read(self, request: web.Request, parse: Callable[[bytes], Any]) -> Any:
        from aiohttp.web_protocol import RequestPayloadError

        try:
            if request.content.is_eof():  # the whole body is here already: nothing to time
                body = await request.read()
            else:
                async with asyncio.timeout(BODY_TIMEOUT_S):  # (no task per request, as wait_for made)
                    body = await request.read()
        except TimeoutError as exc:
            raise _BodyTimeout from exc
        except RequestPayloadError as exc:  # a Content-Encoding (gzip, deflate) that does not decode
            request.content.feed_eof()  # nothing more is read of it (aiohttp would, and fail again)
            encoding = request.headers.get("Content-Encoding", "")
            raise _BodyUndecodable(f"the body does not decode as its Content-Encoding ({encoding})") from exc
        try:
            return await self.parser.run(lambda: parse(as_utf8(body)), len(body))
        except InvalidEvent as exc:
            await self.backend.refuse(body, exc.reason)
            raise

    async def events(self, request: web.Request) -> web.Response:
        parsed = await self.read(request, _decode_all)
        outputs = await self.backend.events(parsed)
        if outputs is None:
            return web.Response(
                body=_accepted(len(parsed)), status=202, content_type="application/json", charset="utf-8"
            )
        return _answer({}, outputs, "outputs")

    async def decide(self, request: web.Request) -> web.Response:
        proposed = await self.read(request, _proposed)
        words = not _openclaw_texts(request)
        if isinstance(proposed, list):
            return _batch_answer(proposed, await self.backend.decide_batch(proposed), words)
        named = is_named(proposed.event_id)  # the client's own id: it may retry
        key = (run_scope(proposed), proposed.event_id, words)
        if named and (given := self.answered.get(key)) is not None:
            self.answered.move_to_end(key)
            return web.Response(body=given, content_type="application/json")
        decision, timed_out = await self.backend.decide(proposed)
        fields = _decision_fields(decision, proposed, timed_out, words)
        body = _answer_body(fields, list(decision.outputs), "verdicts")
        if named and not timed_out:  # (a retry after a timeout asks again)
            self.answered[key] = body
            if len(self.answered) > ANSWERS_KEPT:
                self.answered.popitem(last=False)
        return web.Response(body=body, content_type="application/json")

    async def hook(self, request: web.Request) -> web.Response:
        """A runtime's HTTP hook: its hook JSON in, its hook JSON out (an empty object: go on)."""
        name = request.match_info["runtime"]
        runtime = RUNTIMES.get(name)
        if runtime is None:
            return _error(404, f"no hooks for {name!r} (known: {', '.join(RUNTIMES)})")
        value, surrogates = await self.read(request, loads)
        if not isinstance(value, dict):
            raise InvalidEvent("the body must be the runtime's hook input (a JSON object)")
        agent = request.query.get("agent_id") or runtime.default_agent
        problem = session_problem(value, agent)  # before a prompt number is kept for it
        if problem is not None:
            raise InvalidEvent(problem)
        mistake = event_problem(runtime, value)
        if mistake is not None:  # answered "go on"; told where the operator looks
            _log.warning("hook call loopwatch cannot act on", runtime=name, problem=mistake)
            return web.json_response({})
        plan = runtime.plan(value, self.prompts, agent, request.query.get("show_warnings") in ("1", "true"))
        size = request.content_length or 0  # (a large input's events are written and read off the loop)
        if plan.events:
            events = plan.events
            await self.backend.events(
                await self.parser.run(
                    lambda: [decode_event(dumps(event, surrogates)) for event in events], size
                )
            )
        answer = None
        if plan.decide is not None:
            proposed = plan.decide
            call = await self.parser.run(lambda: _proposed_call(dumps(proposed, surrogates)), size)
            decision, timed_out = await self.backend.decide(call)
            answer = _decision_fields(decision, call, timed_out, True)
            answer["verdicts"] = [msgspec.to_builtins(output) for output in decision.outputs]
        return web.json_response(plan.respond(answer) or {})

    async def traces(self, request: web.Request) -> web.Response:
        """``POST /v1/traces``: OTLP/HTTP traces, protobuf or JSON (:mod:`streams.gateway.otlp`).
        Their ``execute_tool`` spans are applied as ``tool_call`` + ``tool_result`` events (the
        tools already ran: observed, never decided); the answer is an ExportTraceServiceResponse
        in the request's encoding, a malformed request 400 with a google.rpc.Status."""
        from aiohttp.web_protocol import RequestPayloadError

        from loopwatch.streams.gateway import otlp

        protobuf = request.content_type.lower() == otlp.PROTOBUF_MEDIA
        if protobuf and not otlp.protobuf_available():
            return _error(415, otlp.PROTOBUF_MISSING)
        media = otlp.PROTOBUF_MEDIA if protobuf else otlp.JSON_MEDIA

        def refusal(status: int, reason: str, code: int = otlp.INVALID_ARGUMENT) -> web.Response:
            """A google.rpc.Status in the client's encoding, as OTLP/HTTP answers every failure."""
            return web.Response(
                body=otlp.status_body(reason, protobuf, code), status=status, content_type=media
            )

        try:
            body = await asyncio.wait_for(request.read(), BODY_TIMEOUT_S)
        except TimeoutError:
            return refusal(408, _body_late(), otlp.DEADLINE_EXCEEDED)
        except web.HTTPRequestEntityTooLarge:
            return refusal(413, f"the body exceeds maxEventBytes ({self.max_bytes} bytes)")
        except RequestPayloadError as exc:  # a Content-Encoding (gzip, deflate) that does not decode
            return refusal(400, f"the body does not decode: {exc}")
        try:
            mapped = await self.parser.run(lambda: otlp.convert(body, protobuf), len(body))
        except otlp.OtlpError as exc:
            self.dashboard.view.metrics.invalid += 1
            await self.backend.refuse(body, exc.reason)
            return refusal(400, exc.reason)
        if mapped.events:
            await self.backend.events(mapped.events)
        return web.Response(body=otlp.export_response(mapped, protobuf), content_type=media)

    async def unrouted(self, request: web.Request) -> web.StreamResponse:
        """A method no route of the path takes: 405 where the path is a POST route, else 404
        (a POST to a path no route has, ``/v1/hooks/`` without a runtime included)."""
        if request.method != "POST" and _posts_only(request.path):
            return web.json_response(
                {"error": f"{request.path} takes POST, not {request.method}"},
                status=405,
                headers={"Allow": "POST"},
            )
        return _error(404, f"no route {request.path}")

    async def other(self, request: web.Request) -> web.StreamResponse:
        if request.path == "/":
            raise web.HTTPFound("/dashboard")
        if _posts_only(request.path):
            return await self.unrouted(request)
        if request.path.rstrip("/") == "/health" and self.backend.stalled():
            return _error(503, f"stalled: events wait and none was processed for {STALL_S:g} s")
        answer = self.dashboard.respond(request.path, request.query)
        headers = {"Content-Type": answer.content_type, "Cache-Control": "no-store"}
        return web.Response(body=answer.body, status=answer.status, headers=headers)


def gateway_app(
    backend: Backend,
    view: FleetView,
    tokens: frozenset[str],
    max_bytes: int,
    safety: WebSafety | None = None,
) -> web.Application:
    """The gateway's routes over a started backend (``safety``: the listen address's checks;
    default: a loopback gateway with ``tokens``)."""
    checks = safety if safety is not None else WebSafety.of("127.0.0.1", 0, tokens)
    guard = _Guard(checks, view, max_bytes)
    routes = _Routes(backend, view, max_bytes)
    app = web.Application(middlewares=[guard.middleware], client_max_size=max_bytes)

    async def close_parser(_: web.Application) -> None:
        routes.parser.close()

    app.on_cleanup.append(close_parser)
    for slash in ("", "/"):  # (a trailing slash names the same route, as it does for /health)
        app.router.add_post("/v1/events" + slash, routes.events)
        app.router.add_post("/v1/decide" + slash, routes.decide)
        app.router.add_post("/v1/hooks/{runtime}" + slash, routes.hook)
        app.router.add_post("/v1/traces" + slash, routes.traces)
    app.router.add_get("/{tail:.*}", routes.other)
    app.router.add_route("*", "/{tail:.*}", routes.unrouted)
    return app


async def _serve(args: argparse.Namespace, tokens: frozenset[str], err: TextIO) -> None:
    from contextlib import AsyncExitStack

    from loopwatch.config.errors import both_or_every_problem
    from loopwatch.config.stream_settings import parse_stream_settings
    from loopwatch.streams.fleet_view.dashboard import parse_address
    from loopwatch.streams.inputs.config_files import load_config

    config, settings = both_or_every_problem(
        lambda: load_config(args.config),
        lambda: parse_stream_settings(
            os.environ, {"kafka_bootstrap": args.kafka}, {"kafka_bootstrap": "--kafka"}
        ),
    )
    host, port = parse_address(args.listen, "--listen", "127.0.0.1:6070")
    if not tokens and not is_loopback(host) and not getattr(args, "insecure_no_auth", False):
        raise LoopwatchError(
            f"--listen {args.listen}: a gateway reachable beyond this machine needs a token "
            "(LOOPWATCH_GATEWAY_TOKENS); --insecure-no-auth serves it without one"
        )
    safety = WebSafety.of(
        host,
        port,
        tokens,
        _listed(getattr(args, "allowed_hosts", None)),
        _listed(getattr(args, "allowed_origins", None)),
    )
    max_bytes = config.settings.max_event_bytes
    timeout_ms = getattr(args, "decide_timeout_ms", None)
    if timeout_ms is not None and not args.kafka:
        raise LoopwatchError(
            "--decide-timeout-ms bounds the wait for the Kafka workers (--kafka): the embedded "
            "gateway decides each call itself, at once"
        )
    async with AsyncExitStack() as stack:
        backend: Backend
        if args.kafka:
            from loopwatch.streams.gateway.kafka_backend import KafkaBackend
            from loopwatch.streams.kafka.connect import ensure_topics, wait_for_broker

            await wait_for_broker(settings)
            await ensure_topics(settings)  # the replies topic is read before any worker may run
            view = FleetView(f"loopwatch gateway (Kafka {args.kafka})")
            from loopwatch.streams.gateway import DEFAULT_DECIDE_TIMEOUT_MS

            kafka = KafkaBackend(settings, (timeout_ms or DEFAULT_DECIDE_TIMEOUT_MS) / 1000, max_bytes, view)
            await kafka.start()
            stack.push_async_callback(kafka.stop)
            backend = kafka
        else:
            view = FleetView("loopwatch gateway (embedded)")
            runtime = await stack.enter_async_context(
                EmbeddedRuntime(config, view=view, state_ttl_s=settings.state_ttl_s)
            )
            backend = EmbeddedBackend(runtime)
            from loopwatch.streams.otlp_verdicts import verdict_exporter_from_env

            exporter = verdict_exporter_from_env("loopwatch-gateway")  # LOOPWATCH_OTLP_ENDPOINT: off unset
            if exporter is not None:
                from loopwatch.streams.gateway.otlp_export import ExportingBackend

                stack.callback(exporter.shutdown)
                backend = ExportingBackend(backend, exporter)
        app = gateway_app(backend, view, tokens, max_bytes, safety)
        if settings.gc_full_interval_s > 0:
            collector = asyncio.create_task(collect_on_a_clock(settings.gc_full_interval_s))
            stack.callback(collector.cancel)
        await _listen(app, host, port, args.listen, tokens, err)


async def collect_on_a_clock(interval_s: float) -> None:
    """The gateway's garbage collector, as the worker's (:mod:`streams.kafka.gc_policy`): no
    full collection on allocations (a large JSON body allocates a hundred thousand objects,
    and each full collection they set off walks every run the gateway holds, the interpreter
    held meanwhile: 50-100 ms during which no request is answered); one after start-up, what
    is alive then frozen; then one every ``interval_s`` (``LOOPWATCH_GC_FULL_INTERVAL_S``)."""
    import gc

    from loopwatch.streams.kafka.gc_policy import OLD_GENERATION_OFF, full_collection

    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, OLD_GENERATION_OFF)
    full_collection()
    gc.freeze()
    while True:
        await asyncio.sleep(interval_s)
        found, spent = full_collection()
        _log.info("full garbage collection", unreachable=found, ms=round(spent * 1000, 1))


def _listed(text: str | None) -> list[str]:
    return [part for part in (text or "").split(",") if part.strip()]


def gateway_runner(app: web.Application) -> web.AppRunner:
    """The gateway's server: a connection idle for :data:`IDLE_TIMEOUT_S` (between requests, or
    in the middle of a request's headers) is closed. aiohttp's default is an hour, so a client
    that opens connections and sends nothing, or half a header, held a file descriptor each
    until the gateway could accept no more."""
    quiet_malformed_requests()
    return web.AppRunner(app, access_log=None, keepalive_timeout=IDLE_TIMEOUT_S)


def _raise_open_files_limit() -> None:
    """As many open connections as the system allows this process (the soft limit up to the
    hard one: often 1,024 of 524,288), not the shell's default."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 65_536)
        if soft != resource.RLIM_INFINITY and soft < wanted:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, 1 << 20), hard))
    except (ImportError, ValueError, OSError):  # not on this platform, or not allowed: keep it
        pass


async def _listen(
    app: web.Application, host: str, port: int, listen: str, tokens: frozenset[str], err: TextIO
) -> None:
    from loopwatch.streams.fleet_view.dashboard import serve_until_interrupted

    _raise_open_files_limit()
    runner = gateway_runner(app)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError as exc:
        await runner.cleanup()
        raise LoopwatchError(f"--listen {listen}: cannot listen there: {exc.strerror or exc}") from exc
    bound = runner.addresses[0][1] if runner.addresses else port
    auth = f"{len(tokens)} bearer token(s)" if tokens else "no token (set LOOPWATCH_GATEWAY_TOKENS)"
    print(f"loopwatch: gateway at http://{host}:{bound} ({auth})", file=err, flush=True)
    page = "" if not tokens else " (it asks for a token)"
    print(f"loopwatch: dashboard at http://{host}:{bound}/dashboard{page}", file=err, flush=True)
    try:
        await serve_until_interrupted(err, "serving")
    finally:
        await runner.cleanup()


#: The interpreter's switch interval in the gateway's process: its reading thread (large
#: bodies) lets the event loop's thread have the interpreter within a millisecond, not five.
SWITCH_INTERVAL_S = 0.001


#: ``LOOPWATCH_EVENT_LOOP=asyncio``: the gateway on asyncio's own event loop even where uvloop is installed.
EVENT_LOOP_ENV = "LOOPWATCH_EVENT_LOOP"


def event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The gateway's event loop: uvloop's where it is installed (a dependency, not on Windows:
    the same gateway at ~11 % less CPU per decision on Kafka, docs/benchmarks.md), else, or
    with ``LOOPWATCH_EVENT_LOOP=asyncio``, asyncio's own (None)."""
    if os.environ.get(EVENT_LOOP_ENV, "").strip().lower() == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run_gateway(args: argparse.Namespace, err: TextIO) -> int:
    import sys

    sys.setswitchinterval(SWITCH_INTERVAL_S)
    raw = os.environ.get("LOOPWATCH_GATEWAY_TOKENS", "")
    tokens = frozenset(token.strip() for token in raw.split(",") if token.strip())
    try:
        with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
            runner.run(_serve(args, tokens, err))
    except KeyboardInterrupt:
        return 130
    return 0
