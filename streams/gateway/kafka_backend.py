"""The HTTP gateway's Kafka backend: events produced to the input topic, decisions read back.

* ``POST /v1/events``: the events are produced keyed by run scope (idempotent producer,
  acks from all replicas), answered 202 once the broker has them.
* ``POST /v1/decide``: the proposed call is produced with the :data:`REPLY_HEADER` header;
  the worker that applies it answers on the replies topic with the call's outputs (also
  when there are none), so an allowed call is answered as soon as it is applied. Without
  an answer within ``--decide-timeout-ms`` the call is allowed (``"timed_out": true``); a
  verdict that comes later still reaches the run's next decision through the worker.
* An aborted run stays aborted: the worker's answer carries the run's first enforced abort,
  and the gateway also remembers the runs it saw aborted (the latest ``ABORTED_KEPT``), so
  their calls answer that abort even when the workers are slow, until the run's ``run_end``.
* Invalid input is refused with 400 and also sent to the dead-letter topic, with the reason.

The replies topic is read from its end when the gateway starts, on all partitions: every
gateway sees every answer and takes those it waits for (by event id).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import msgspec
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from loopwatch.config.stream_settings import StreamSettings
from loopwatch.detectors.events import (
    Abort,
    Event,
    Output,
    RunEnd,
    ToolCall,
    Verdict,
    encode_event,
    run_scope,
)
from loopwatch.detectors.facade import BatchDecision, Decision, decision_of
from loopwatch.streams.fleet_view.view import FleetView
from loopwatch.streams.kafka.connect import aiokafka_auth
from loopwatch.streams.kafka.dead_letter import dead_letter
from loopwatch.streams.kafka.run_processor import REPLY_HEADER
from loopwatch.streams.logs import limit_repeats

__all__ = ["KafkaBackend"]


class _Reply(msgspec.Struct):
    event_id: str
    outputs: list[Verdict | Abort]
    aborted: tuple[str, str] | None = None  # the run's first enforced abort (reason, message)


#: Aborted runs the gateway remembers (beyond them, the workers' answers still say it).
ABORTED_KEPT = 100_000
#: How long ``/v1/events`` waits for the broker to take its events (then: 503).
EVENTS_TIMEOUT_S = 5.0


def _ignore_outcome(send: asyncio.Future[Any]) -> None:
    """A send left to finish after its answer was given: its failure is nobody's to read."""
    if not send.cancelled():
        send.exception()


_REPLY: Any = msgspec.json.Decoder(_Reply)


class KafkaBackend:
    """Produces events and asks the workers for decisions (see the module's docstring)."""

    def __init__(
        self, settings: StreamSettings, decide_timeout_s: float, max_bytes: int, view: FleetView | None = None
    ) -> None:
        self.settings = settings
        self.view = view  # what passed through this gateway, for its /metrics and dashboard
        self.decide_timeout_s = decide_timeout_s
        self.max_bytes = max_bytes
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._follower: asyncio.Task[None] | None = None
        self._waiting: dict[str, asyncio.Future[tuple[list[Output], tuple[str, str] | None]]] = {}
        self._aborted: dict[str, tuple[str, str]] = {}  # run scope -> its abort, oldest first
        self._timed_out_since: float | None = None  # first timeout since the last answer
        self._refused_since: float | None = None  # first events the broker did not take in time

    async def start(self) -> None:
        limit_repeats("aiokafka")  # a broker outage: the same errors, 200 a second
        auth = aiokafka_auth(self.settings)
        self._producer = AIOKafkaProducer(
            bootstrap_servers=self.settings.kafka_bootstrap, enable_idempotence=True, acks="all", **auth
        )
        await self._producer.start()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.settings.kafka_bootstrap,
            enable_auto_commit=False,
            fetch_max_wait_ms=50,
            **auth,
        )
        await consumer.start()
        partitions = [TopicPartition(self.settings.topic_replies, p) for p in range(self.settings.partitions)]
        consumer.assign(partitions)
        await consumer.seek_to_end(*partitions)
        for tp in partitions:
            await consumer.position(tp)  # fixed before the first question is asked
        self._consumer = consumer
        self._follower = asyncio.create_task(self._follow())

    async def stop(self) -> None:
        if self._follower is not None:
            self._follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._follower
        if self._consumer is not None:
            await self._consumer.stop()
        if self._producer is not None:
            await self._producer.stop()

    async def _follow(self) -> None:
        assert self._consumer is not None
        while True:
            batch = await self._consumer.getmany(timeout_ms=1000)
            for messages in batch.values():
                for message in messages:
                    waiter = self._waiting.get((message.key or b"").decode("utf-8", "replace"))
                    if waiter is None or waiter.done():
                        continue
                    try:
                        reply = _REPLY.decode(message.value or b"")
                    except msgspec.DecodeError:
                        continue
                    waiter.set_result((list(reply.outputs), reply.aborted))

    async def events(self, events: list[Event]) -> list[Output] | None:
        """Produce the events; returns once the broker has all of them."""
        assert self._producer is not None
        producer = self._producer

        async def send_all() -> None:
            topic = self.settings.topic_events
            sent = [await producer.send(topic, encode_event(e), key=run_scope(e).encode()) for e in events]
            await asyncio.gather(*sent)

        sending = asyncio.ensure_future(send_all())
        try:
            await asyncio.wait_for(asyncio.shield(sending), EVENTS_TIMEOUT_S)
        except TimeoutError:
            sending.add_done_callback(_ignore_outcome)
            if self._refused_since is None:
                self._refused_since = time.monotonic()
            from loopwatch.streams.gateway.backend import BackendUnavailable

            raise BackendUnavailable(
                f"the broker did not take the events within {EVENTS_TIMEOUT_S:g} s: try again"
            ) from None
        self._refused_since = None
        for event in events:
            if type(event) is RunEnd:
                self._aborted.pop(run_scope(event), None)
            self._observe(event, [])
        return None

    def _observe(self, event: Event, outputs: list[Output]) -> None:
        view = self.view
        if view is None:
            return
        now = int(time.time() * 1000)
        view.event(event, now)
        view.metrics.event(str(event.__struct_config__.tag), 0.0)
        for output in outputs:
            view.output(output, now)
            view.metrics.output(output)

    async def decide(self, call: ToolCall) -> tuple[Decision, bool]:
        """The call's decision, and whether the answer timed out (then: allowed, unless the
        run is known to be aborted)."""
        assert self._producer is not None
        scope = run_scope(call)
        waiter: asyncio.Future[tuple[list[Output], tuple[str, str] | None]]
        waiter = asyncio.get_running_loop().create_future()
        self._waiting[call.event_id] = waiter
        deadline = time.monotonic() + self.decide_timeout_s
        sending = asyncio.ensure_future(
            self._producer.send_and_wait(
                self.settings.topic_events,
                encode_event(call),
                key=scope.encode(),
                headers=[(REPLY_HEADER, b"1")],
            )
        )
        try:
            try:  # the deadline holds for the send too: a broker that is down answers nothing
                await asyncio.wait_for(asyncio.shield(sending), max(0.0, deadline - time.monotonic()))
                outputs, aborted = await asyncio.wait_for(waiter, max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                if not sending.done():  # delivered later, if ever: the call ran (allowed) meanwhile
                    sending.add_done_callback(_ignore_outcome)
                if self._timed_out_since is None:
                    self._timed_out_since = time.monotonic()
                self._observe(call, [])
                return decision_of([], self._aborted.get(scope)), True
            self._timed_out_since = None
            self._observe(call, outputs)
            decision = decision_of(outputs, aborted)
            if decision.action == "abort" and decision.reason is not None and decision.message is not None:
                self._remember_abort(scope, (decision.reason, decision.message))
            return decision, False
        finally:
            self._waiting.pop(call.event_id, None)

    async def decide_batch(self, calls: list[ToolCall]) -> BatchDecision:
        """Not here: the workers decide one call at a time (docs/openclaw-rules.md §7.6)."""
        from loopwatch.streams.gateway.backend import BatchUnsupported

        raise BatchUnsupported(
            "a batch of calls (a JSON array) is admitted together only by the embedded gateway; "
            "with --kafka the workers decide one call at a time: send the calls one by one"
        )

    def _remember_abort(self, scope: str, aborted: tuple[str, str]) -> None:
        if scope not in self._aborted:
            self._aborted[scope] = aborted
            if len(self._aborted) > ABORTED_KEPT:
                del self._aborted[next(iter(self._aborted))]

    def stalled(self) -> bool:
        """Decisions have been timing out, or the broker refusing events, for ``STALL_S``
        seconds, none answered (taken) since."""
        from loopwatch.streams.gateway.backend import STALL_S

        now = time.monotonic()
        return any(
            since is not None and now - since > STALL_S
            for since in (self._timed_out_since, self._refused_since)
        )

    async def refuse(self, body: bytes, reason: str) -> None:
        """Invalid input: to the dead-letter topic, with the reason."""
        assert self._producer is not None
        letter = dead_letter(reason, "gateway", -1, -1, None, body, int(time.time() * 1000), self.max_bytes)
        await self._producer.send_and_wait(self.settings.topic_dead_letter, letter)
