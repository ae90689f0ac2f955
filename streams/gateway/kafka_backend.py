"""The HTTP gateway's Kafka backend: events produced to the input topic, decisions read back.

* ``POST /v1/events``: the events are produced keyed by run scope (idempotent producer,
  acks from all replicas), answered 202 once the broker has them.
* ``POST /v1/decide``: the proposed call is produced with the :data:`REPLY_HEADER` header;
  the worker that applies it answers on the replies topic with the call's outputs (also
  when there are none), so an allowed call is answered as soon as it is applied. Without
  an answer within ``--decide-timeout-ms`` the call is allowed (``"timed_out": true``); a
  verdict that comes later still reaches the run's next decision through the worker.
* An aborted run stays aborted: the worker's answer carries the run's first enforced abort.
  The gateway also keeps the aborts the workers' answers carry (the latest ``ABORTED_KEPT``
  runs), so a run's calls answer that abort even when the workers are slow, until the run's
  ``run_end``.
* Invalid input is refused with 400 and also sent to the dead-letter topic, with the reason.

**Several gateways, one worker group.** The replies topic is read from its end when the
gateway starts, on all partitions: every gateway reads every answer, takes those it waits
for (by event id and run scope), and learns from all of them. The workers send a run's
answers to one partition, in the order they applied its records, each with its run's scope
and its abort while it lasts; the ``run_end`` of an aborted run is answered too, whoever
sent it. So every gateway knows every run's abort and when it ended, as the workers do, not
only what went through it; and the first answer to a call whose client named its event id
(the latest ``ANSWERS_KEPT``), so that the call asked again, through any gateway, gets that
answer without being asked again (the workers would ignore the seen id: "allow"). Which
gateway a call goes through changes nothing. The decisions themselves are the workers'.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Generator, Iterator
from functools import partial
from typing import Any, Generic, TypeVar

import msgspec
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import MessageSizeTooLargeError

from loopwatch.config.stream_settings import StreamSettings
from loopwatch.detectors.batch_admission import BatchOutcome, batch_problem
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
from loopwatch.detectors.facade import BatchDecision, Decision, batch_decision_of, decision_of
from loopwatch.streams.fleet_view.view import FleetView
from loopwatch.streams.gateway.backend import ANSWERS_KEPT, RecordTooLarge, is_named
from loopwatch.streams.kafka.batch_records import BATCH_HEADER, encode_batch
from loopwatch.streams.kafka.connect import aiokafka_auth
from loopwatch.streams.kafka.dead_letter import dead_letter
from loopwatch.streams.kafka.key_partitioner import KeyPartitioner
from loopwatch.streams.kafka.run_processor import REPLY_HEADER
from loopwatch.streams.logs import limit_repeats

__all__ = ["KafkaBackend"]


class _Reply(msgspec.Struct):
    event_id: str
    outputs: list[Verdict | Abort]
    aborted: tuple[str, str] | None = None  # the run's first enforced abort (reason, message)
    scope: str | None = None  # the run's scope (None: a worker of an earlier release)
    batch: list[list[Verdict | Abort]] | None = None  # a batch's answer: each call's outputs
    refused_by: int | None = None  # ... and the index of the call that refused it


#: Aborted runs the gateway remembers (beyond them, the workers' answers still say it).
ABORTED_KEPT = 100_000
#: How long ``/v1/events`` waits for the broker to take its events (then: 503).
EVENTS_TIMEOUT_S = 5.0


_REPLY: Any = msgspec.json.Decoder(_Reply)


@contextlib.contextmanager
def _within_the_broker_s_size() -> Iterator[None]:
    """A record the producer refuses for its size is the caller's to make smaller (413)."""
    try:
        yield
    except MessageSizeTooLargeError as exc:
        raise RecordTooLarge(
            f"too large for the broker: {exc.args[0] if exc.args else exc} (send fewer or smaller calls)"
        ) from None


def _resolve(waiter: asyncio.Future[Any], value: Any) -> None:
    if not waiter.done():
        waiter.set_result(value)


T = TypeVar("T")


class _Waits(Generic[T]):
    """A coroutine stopped at its first wait by :func:`_step`: awaited (in a task), the rest
    of it runs as the task would have run it from the start (each future it waits on waited
    on by the task, each value and exception handed back to it)."""

    __slots__ = ("_coro", "_first")

    def __init__(self, coro: Coroutine[Any, Any, T], first: Any) -> None:
        self._coro = coro
        self._first = first

    def __await__(self) -> Generator[Any, Any, T]:
        coro, waits_on = self._coro, self._first
        while True:
            try:
                sent = yield waits_on
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # noqa: BLE001 - the task's cancellation: the coroutine's
                step = partial(coro.throw, exc)
            else:
                step = partial(coro.send, sent)
            try:
                waits_on = step()
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]


def _step(coro: Coroutine[Any, Any, T]) -> T | _Waits[T]:
    """``coro`` run at once up to its first wait: its value when it did not wait (no task,
    no turn of the event loop: the producer's ``send`` when it knows the topic and its batch
    has room, the usual case), else the rest of it, for a task to await. (The first step runs
    in the caller's task: nothing in it may hold on to the current task; aiokafka's ``send``
    waits on futures only.)"""
    try:
        first = coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    return _Waits(coro, first)


def _refusal(waiter: asyncio.Future[Any], delivery: asyncio.Future[Any]) -> None:
    """A call's delivery, done: the broker's refusal ends its wait (after its deadline or its
    answer: nobody's to read)."""
    if delivery.cancelled():
        return
    exc = delivery.exception()
    if exc is not None and not waiter.done():
        waiter.set_exception(exc)


class _Delivered:
    """Events' deliveries, read in the events' order as each is done, as awaiting each in
    turn would: ``taken`` is True once the broker has all of them, or raises the first refusal
    (cancelled: cancelled). A refusal after that one, or after the deadline, is nobody's."""

    __slots__ = ("_deliveries", "_next", "_taken")

    def __init__(self, taken: asyncio.Future[bool], deliveries: list[asyncio.Future[Any]]) -> None:
        self._taken = taken
        self._deliveries = deliveries
        self._next = 0  # the first delivery not read yet
        for delivery in deliveries:
            delivery.add_done_callback(self._done)
        if not deliveries:
            _resolve(taken, True)

    def _done(self, delivery: asyncio.Future[Any]) -> None:
        if not delivery.cancelled():
            delivery.exception()  # (read, whoever reads its refusal)
        deliveries, taken = self._deliveries, self._taken
        while self._next < len(deliveries):
            first = deliveries[self._next]
            if not first.done():
                return
            if first.cancelled() or first.exception() is not None:
                self._next = len(deliveries)
                if taken.done():
                    return
                if first.cancelled():
                    taken.cancel()
                else:
                    taken.set_exception(first.exception())  # type: ignore[arg-type]
                return
            self._next += 1
        _resolve(taken, True)


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
        #: event id -> the calls waiting for its answer (their run's scope, their future)
        self._waiting: dict[str, list[tuple[str, asyncio.Future[_Reply | None]]]] = {}
        self._sending: set[asyncio.Task[None]] = set()  # sends that had to wait for the producer
        self._aborted: dict[str, tuple[str, str]] = {}  # run scope -> its abort, oldest first
        #: (run scope, event id) of calls whose clients named their ids -> their first answer
        self._answers: OrderedDict[tuple[str, str], tuple[list[Output], tuple[str, str] | None]]
        self._answers = OrderedDict()
        self._timed_out_since: float | None = None  # first timeout since the last answer
        self._refused_since: float | None = None  # first events the broker did not take in time

    async def start(self) -> None:
        limit_repeats("aiokafka")  # a broker outage: the same errors, 200 a second
        auth = aiokafka_auth(self.settings)
        self._producer = AIOKafkaProducer(
            bootstrap_servers=self.settings.kafka_bootstrap,
            enable_idempotence=True,
            acks="all",
            partitioner=KeyPartitioner(),
            **auth,
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
                    self._take(message.value)

    def _take(self, value: bytes | None) -> None:
        """One answer of the replies topic, whoever asked: to the calls waiting for it, and
        what it says of its run (from workers that name the run: every gateway learns it)."""
        try:
            reply = _REPLY.decode(value or b"")
        except msgspec.DecodeError:
            return
        scope = reply.scope
        if scope is not None:
            self._learn(scope, reply)
        for asked, waiter in self._waiting.get(reply.event_id, ()):
            if (scope is None or scope == asked) and not waiter.done():
                waiter.set_result(reply)

    def _learn(self, scope: str, reply: _Reply) -> None:
        """The run's abort as the workers answered it (None: not aborted, or no longer), and
        the first answer to a call whose client named its event id."""
        if reply.aborted is None:
            self._aborted.pop(scope, None)
        else:
            self._remember_abort(scope, reply.aborted)
        if is_named(reply.event_id):
            key = (scope, reply.event_id)
            if key not in self._answers:  # the first: a call asked again is answered nothing new
                self._answers[key] = (list(reply.outputs), reply.aborted)
                if len(self._answers) > ANSWERS_KEPT:
                    self._answers.popitem(last=False)

    async def events(self, events: list[Event]) -> list[Output] | None:
        """Produce the events; returns once the broker has all of them."""
        with _within_the_broker_s_size():
            return await self._produce(events)

    async def _produce(self, events: list[Event]) -> list[Output] | None:
        """:meth:`events`.

        The events are appended at once (:func:`_step`: no task unless the producer has to
        wait), then ``taken`` waits for their deliveries or the deadline, whichever comes first;
        a send still under way at the deadline goes on (its outcome nobody's to read)."""
        assert self._producer is not None
        loop = asyncio.get_running_loop()
        taken: asyncio.Future[bool] = loop.create_future()
        appended = _step(self._append_all(self._producer, events))  # (its refusal: the caller's error)
        if isinstance(appended, _Waits):
            sending = loop.create_task(self._append_rest(appended, taken))
            self._sending.add(sending)  # (held until done: the loop keeps only weak references)
            sending.add_done_callback(self._sending.discard)
        else:
            _Delivered(taken, appended)
        deadline = loop.call_later(EVENTS_TIMEOUT_S, _resolve, taken, False)
        try:
            took = await taken  # (the broker's refusal, if any, as the caller's error)
        finally:
            deadline.cancel()
        if not took:
            if self._refused_since is None:
                self._refused_since = time.monotonic()
            from loopwatch.streams.gateway.backend import BackendUnavailable

            raise BackendUnavailable(
                f"the broker did not take the events within {EVENTS_TIMEOUT_S:g} s: try again"
            )
        self._refused_since = None
        for event in events:
            if type(event) is RunEnd:
                self._aborted.pop(run_scope(event), None)
            self._observe(event, [])
        return None

    async def _append_all(self, producer: AIOKafkaProducer, events: list[Event]) -> list[asyncio.Future[Any]]:
        """The events appended to the producer's batches, in order: their deliveries."""
        topic = self.settings.topic_events
        return [await producer.send(topic, encode_event(e), key=run_scope(e).encode()) for e in events]

    @staticmethod
    async def _append_rest(appending: _Waits[list[asyncio.Future[Any]]], taken: asyncio.Future[bool]) -> None:
        """Events whose appending had to wait: the rest of it, then their deliveries read."""
        try:
            deliveries = await appending
        except Exception as exc:  # noqa: BLE001 - the caller's error (after the deadline: nobody's)
            if not taken.done():
                taken.set_exception(exc)
            return
        _Delivered(taken, deliveries)

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
        run is known to be aborted).

        One future per call, resolved by whichever comes first: the workers' answer (read by
        :meth:`_take`), the deadline (None), or the broker's refusal of the call (its error).
        The answer is taken as soon as it comes, without waiting for the broker's ack of the
        call (a worker answered it: the broker had it). A call not yet sent at the deadline is
        still sent: the run's next decision sees it (the call ran, allowed, meanwhile). The call
        is appended to the producer's batch at once (:func:`_step`), its delivery's refusal
        read by a callback: a task only when the producer has to wait."""
        assert self._producer is not None
        scope = run_scope(call)
        answered = self._answers.get((scope, call.event_id))
        if answered is not None:  # asked before, through this gateway or another: its answer
            self._answers.move_to_end((scope, call.event_id))
            return decision_of(*answered), False
        with _within_the_broker_s_size():
            reply = await self._ask(call.event_id, scope, lambda waiter: self._send_call(call, scope, waiter))
        if reply is None:
            if self._timed_out_since is None:
                self._timed_out_since = time.monotonic()
            self._observe(call, [])
            return decision_of([], self._aborted.get(scope)), True
        self._timed_out_since = None
        if reply.scope is None:  # a worker of an earlier release: only the answers asked here
            self._learn(scope, reply)
        outputs = list(reply.outputs)
        self._observe(call, outputs)
        return decision_of(outputs, reply.aborted), False

    async def _ask(
        self, event_id: str, scope: str, send: Callable[[asyncio.Future[_Reply | None]], None]
    ) -> _Reply | None:
        """The workers' answer to the record ``send`` produces (asking for it by ``event_id``,
        of the run ``scope``), ``None`` at the deadline, or the broker's refusal raised."""
        waiter: asyncio.Future[_Reply | None] = asyncio.get_running_loop().create_future()
        waiting = (scope, waiter)
        self._waiting.setdefault(event_id, []).append(waiting)
        # the deadline holds for the send too: a broker that is down answers nothing
        deadline = asyncio.get_running_loop().call_later(self.decide_timeout_s, _resolve, waiter, None)
        send(waiter)
        try:
            return await waiter
        finally:
            deadline.cancel()
            waiters = self._waiting[event_id]
            waiters.remove(waiting)
            if not waiters:
                del self._waiting[event_id]

    def _send_call(self, call: ToolCall, scope: str, waiter: asyncio.Future[_Reply | None]) -> None:
        """Produce a proposed call (asking for its answer); the broker's refusal ends the wait."""
        assert self._producer is not None
        appending = self._producer.send(
            self.settings.topic_events, encode_event(call), key=scope.encode(), headers=[(REPLY_HEADER, b"1")]
        )
        try:
            appended = _step(appending)
        except Exception as exc:  # noqa: BLE001 - the asker's error
            waiter.set_exception(exc)
            return
        if isinstance(appended, _Waits):
            sending = asyncio.get_running_loop().create_task(self._send_call_rest(appended, waiter))
            self._sending.add(sending)  # (held until done: the loop keeps only weak references)
            sending.add_done_callback(self._sending.discard)
        else:
            appended.add_done_callback(partial(_refusal, waiter))

    @staticmethod
    async def _send_call_rest(
        appending: _Waits[asyncio.Future[Any]], waiter: asyncio.Future[_Reply | None]
    ) -> None:
        """A call whose appending had to wait: the rest of it, then its delivery."""
        try:
            await (await appending)
        except Exception as exc:  # noqa: BLE001 - the asker's error (after its deadline: nobody's)
            if not waiter.done():
                waiter.set_exception(exc)

    async def decide_batch(self, calls: list[ToolCall]) -> BatchDecision:
        """One model turn's calls (one run's, in assistant order) decided together: produced as
        one record (:mod:`streams.kafka.batch_records`) that the worker admits or refuses as
        a whole, as the embedded gateway does (openclaw-rules §7.6); answered with each call's
        outputs. Without an answer in time every call is allowed (unless the run is known to
        be aborted)."""
        problem = batch_problem(calls)
        if problem is not None:
            raise ValueError(problem)
        assert self._producer is not None
        scope = run_scope(calls[0])

        def send(waiter: asyncio.Future[_Reply | None]) -> None:
            sending = asyncio.get_running_loop().create_task(self._send_batch(calls, scope, waiter))
            self._sending.add(sending)  # (held until done: the loop keeps only weak references)
            sending.add_done_callback(self._sending.discard)

        with _within_the_broker_s_size():
            reply = await self._ask(calls[0].event_id, scope, send)
        outcome = BatchOutcome(calls)
        if reply is None:
            if self._timed_out_since is None:
                self._timed_out_since = time.monotonic()
            aborted = self._aborted.get(scope)
        else:
            self._timed_out_since = None
            aborted = reply.aborted
            answers = reply.batch or []
            for index in range(min(len(calls), len(answers))):
                outcome.outputs[index] = list(answers[index])
            if reply.refused_by is not None and 0 <= reply.refused_by < len(calls):
                outcome.refused_by = reply.refused_by
        for call, outputs in zip(calls, outcome.outputs, strict=True):
            self._observe(call, outputs)
        return batch_decision_of(outcome, aborted)

    async def _send_batch(
        self, calls: list[ToolCall], scope: str, waiter: asyncio.Future[_Reply | None]
    ) -> None:
        """Produce a batch as one record (asking for its answer); the broker's refusal ends the wait."""
        assert self._producer is not None
        try:
            delivery = await self._producer.send(
                self.settings.topic_events,
                encode_batch(calls),
                key=scope.encode(),
                headers=[(REPLY_HEADER, b"1"), (BATCH_HEADER, b"1")],
            )
            await delivery
        except Exception as exc:  # noqa: BLE001 - the asker's error (after its deadline: nobody's)
            if not waiter.done():
                waiter.set_exception(exc)

    def _remember_abort(self, scope: str, aborted: tuple[str, str]) -> None:
        new = scope not in self._aborted
        self._aborted[scope] = aborted
        if new and len(self._aborted) > ABORTED_KEPT:
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
