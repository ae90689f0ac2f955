"""The embedded runtime: the core over in-memory state, no broker (DESIGN §5).

Events are partitioned by run scope across asyncio workers exactly like Kafka partitions
them across consumers (murmur2 of the key, the Kafka default partitioner), each worker
owning the state of its runs. Outputs are released in input order, so the result equals
the single-threaded core's, whatever the number of workers. One model turn's calls decided
together (:meth:`EmbeddedRuntime.decide_batch`) take one input position: its calls are
released together, in their order, after the events queued before it and before those queued
after it; the view and the fleet rules see them call by call.

The fleet-wide rules (:mod:`detectors.fleet`) see every event with its outputs as they are
released, in input order, so the same input gives the same alerts; their fail-fast blocks
apply to the calls processed after the outage opened. Alerts are kept in :attr:`alerts`,
handed to ``on_alert`` and to the fleet view, and given with the outputs by :meth:`run`.

Bounded: with ``state_ttl_s`` (the gateway: ``LOOPWATCH_STATE_TTL_S``, as the worker has) a
run that sends nothing for that long is forgotten, without a tombstone, by an expiry
``run_end`` its worker's engine steps (:meth:`detectors.engine.Engine.expire`), like the
worker's expiry; ended runs are kept as small tombstones (:class:`detectors.tombstone.Tombstone`).
One event that fails never holds up the others: its caller gets the exception, and its
input position is released like any other (:meth:`stalled` tells when that ever stops).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable
from typing import Any

from loopwatch.config.fleet import FleetConfig
from loopwatch.config.fleet_rules import fleet_rules
from loopwatch.detectors.batch_admission import BatchOutcome, batch_problem
from loopwatch.detectors.engine import Engine
from loopwatch.detectors.events import Event, Output, ToolCall, run_scope
from loopwatch.detectors.facade import BatchDecision, Decision, batch_decision_of, decision_of
from loopwatch.detectors.fleet.alerts import FleetAlert
from loopwatch.detectors.fleet.chains import chain_key
from loopwatch.detectors.fleet.watch import FleetWatch, WatchHooks
from loopwatch.detectors.hashing import digester_for
from loopwatch.detectors.step import Prepared
from loopwatch.streams.fleet_view.view import FleetView
from loopwatch.streams.partitions import key_partition

__all__ = ["EmbeddedRuntime", "partition_for"]

_STOP: Any = object()
_SWEEP: Any = object()
#: How many states the state-bytes gauge serialises (the rest is estimated from them).
GAUGE_SAMPLE: int = 256
AlertHandler = Callable[[FleetAlert], None]


class _Done:
    """A processed event waiting for its turn (input order) to be released."""

    __slots__ = (
        "aborted",
        "batch",
        "decides",
        "error",
        "event",
        "future",
        "outcome",
        "outputs",
        "prepared",
        "root",
        "ts",
    )

    def __init__(self, event: Event, future: asyncio.Future[list[Output]], ts: int) -> None:
        self.event = event
        self.future = future
        self.ts = ts
        self.outputs: list[Output] = []
        self.prepared: Prepared | None = None
        self.root: str | None = None  # the root of the run's delegation chain (F6), when watched
        self.error: BaseException | None = None
        self.aborted: tuple[str, str] | None = None  # a call's run: its first enforced abort
        self.decides = False  # asked for by decide(): the run's abort is handed over too
        # the calls of one model turn decided together (``event``: the first), and what that did
        self.batch: list[ToolCall] | None = None
        self.outcome: BatchOutcome | None = None


def partition_for(scope: str, partitions: int) -> int:
    """The partition Kafka's default partitioner gives the key ``scope``."""
    return key_partition(scope.encode("utf-8", "surrogatepass"), partitions)


class EmbeddedRuntime:
    """``await runtime.process(event)`` gives that event's outputs; state stays per worker."""

    def __init__(
        self,
        config: FleetConfig,
        workers: int = 4,
        view: FleetView | None = None,
        on_alert: AlertHandler | None = None,
        state_ttl_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.workers = workers
        self.state_ttl_s = state_ttl_s
        self.clock = clock
        self._progress_at = clock()  # when the released position last moved (or work arrived)
        self.expired = 0
        self.view = view  # fed every event and output, for the dashboard
        self.fleet = FleetWatch(fleet_rules(config.global_rules), digester_for(config.settings.digest))
        hooks = WatchHooks(self.fleet)
        engine_clock = clock if state_ttl_s is not None else None  # when runs were last applied
        self.engines = [Engine(config, fleet=hooks, clock=engine_clock) for _ in range(workers)]
        self.on_alert = on_alert
        self.alerts: list[FleetAlert] = []  # every alert given, in order
        self._queues: list[asyncio.Queue[Any]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._pending: dict[int, _Done] = {}  # processed, by input position
        self._released = 0  # the input position released next
        self._alerts_of: dict[asyncio.Future[list[Output]], list[FleetAlert]] = {}
        self._aborted_of: dict[asyncio.Future[list[Output]], tuple[str, str]] = {}
        self._outcome_of: dict[asyncio.Future[list[Output]], BatchOutcome] = {}  # decide_batch's
        self.events = 0

    @property
    def config(self) -> FleetConfig:
        return self.engines[0].config

    @config.setter
    def config(self, config: FleetConfig) -> None:
        for engine in self.engines:
            engine.config = config
        self.fleet.rules = fleet_rules(config.global_rules)

    async def __aenter__(self) -> EmbeddedRuntime:
        if self.view is not None:
            self.view.gauges = self.gauges
        self._queues = [asyncio.Queue(maxsize=10_000) for _ in range(self.workers)]
        self._tasks = [asyncio.create_task(self._work(index)) for index in range(self.workers)]
        if self.state_ttl_s is not None:
            self._tasks.append(asyncio.create_task(self._sweep_every(max(0.05, self.state_ttl_s / 4))))
        return self

    async def __aexit__(self, *exc: object) -> None:
        for queue in self._queues:
            await queue.put(_STOP)
        sweeper = self._tasks[self.workers :]
        for task in sweeper:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _sweep_every(self, interval: float) -> None:
        while True:
            await asyncio.sleep(min(interval, 10.0))
            for queue in self._queues:
                await queue.put(_SWEEP)

    def _expire(self, index: int) -> None:
        """Forget the runs of worker ``index`` idle past the state TTL (oldest first)."""
        assert self.state_ttl_s is not None
        self.expired += self.engines[index].expire(self.clock() - self.state_ttl_s)

    def stalled(self, after_s: float) -> bool:
        """Whether events wait and none was released for ``after_s`` seconds."""
        return self.events > self._released and self.clock() - self._progress_at > after_s

    async def _work(self, index: int) -> None:
        engine, queue = self.engines[index], self._queues[index]
        while True:
            item = await queue.get()
            if item is _STOP:
                return
            if item is _SWEEP:
                self._expire(index)
                continue
            position, done = item
            try:
                self._step(engine, done)
            except Exception as exc:  # noqa: BLE001 - handed to the caller awaiting this event
                done.error = exc
            finally:  # the position is released whatever happened: no event holds up the others
                self._pending[position] = done
                self._release()

    def _step(self, engine: Engine, done: _Done) -> None:
        """Step ``done``'s event (or batch) on its run's worker ``engine``; the view sees it."""
        event, calls, view = done.event, done.batch, self.view
        started = time.perf_counter()
        scope = run_scope(event)
        fresh = view is not None and scope not in engine.states  # the run's first event
        stepped = engine.step(event, done.ts) if calls is None else engine.step_batch(calls, done.ts)
        done.outputs, done.prepared, done.outcome = stepped.outputs, stepped.prepared, stepped.batch
        state = engine.states.get(scope) if stepped.kind == "applied" else None
        if state is not None and self.fleet.rules.delegation.enabled:
            done.root = chain_key(state)
        if done.decides:
            done.aborted = engine.aborted(scope)
        if view is None:
            return
        events: list[Event] = [event] if calls is None else list(calls)
        if state is not None:
            spend = stepped.loop_spend  # a turn's usage rides on the first of its calls that has any
            for one in events:
                if isinstance(one, ToolCall) and one.usage is not None:
                    view.metrics.spend(one.agent_id, one.usage, spend, state.first_detector)
                    spend = 0.0
        elapsed = (time.perf_counter() - started) / len(events)
        outputs_of = [done.outputs] if stepped.batch is None else stepped.batch.outputs
        for index, (one, outputs) in enumerate(zip(events, outputs_of, strict=True)):
            view.metrics.event(str(one.__struct_config__.tag), elapsed)
            if state is not None:
                view.metrics.chain(one, fresh and index == 0)
            for output in outputs:
                view.metrics.output(output)
            self._observe(one, outputs)

    def _release(self) -> None:
        """Hand processed events on in input order: fleet rules first, then their callers."""
        while (done := self._pending.pop(self._released, None)) is not None:
            self._released += 1
            self._progress_at = self.clock()
            alerts: list[FleetAlert] = []
            if done.error is None:
                try:
                    alerts = self._observe_fleet(done)
                except Exception as exc:  # noqa: BLE001 - handed to the caller awaiting this event
                    done.error = exc
            future = done.future
            if future.done():  # the caller may have been cancelled meanwhile
                continue
            if done.error is not None:
                future.set_exception(done.error)
            else:
                if alerts:
                    self._alerts_of[future] = alerts
                if done.aborted is not None:
                    self._aborted_of[future] = done.aborted
                if done.outcome is not None and done.decides:
                    self._outcome_of[future] = done.outcome
                future.set_result(done.outputs)

    def _observe_fleet(self, done: _Done) -> list[FleetAlert]:
        """The fleet rules see the released event; their alerts go to the view and ``on_alert``."""
        event, outcome = done.event, done.outcome
        if outcome is None:
            alerts = self.fleet.observe(
                event, run_scope(event), done.ts, done.prepared, done.outputs, done.root
            )
        else:  # a batch's calls in order, each with its hashes and outputs
            alerts = []
            for index, call in enumerate(outcome.calls):
                prepared = outcome.prepared[index] if outcome.kind == "applied" else None
                outputs = outcome.outputs[index]
                alerts.extend(
                    self.fleet.observe(call, run_scope(call), done.ts, prepared, outputs, done.root)
                )
        for alert in alerts:
            self.alerts.append(alert)
            if self.view is not None:  # on the view's clock, the one _observe stamps events with
                self.view.alert(alert, int(time.time() * 1000))
            if self.on_alert is not None:
                self.on_alert(alert)
        return alerts

    def gauges(self) -> tuple[int, int, int]:
        """Active runs, ended runs remembered, and the bytes of the active runs' state.

        O(1) in runs: the bytes are measured on at most :data:`GAUGE_SAMPLE` states (the most
        recently created of each worker) and scaled to all of them."""
        active = sum(len(engine.states) for engine in self.engines)
        ended = sum(len(engine.ended) for engine in self.engines)
        per_worker = max(1, GAUGE_SAMPLE // self.workers)
        sample = [
            len(state.to_bytes())
            for engine in self.engines
            for state in itertools.islice(reversed(engine.states.values()), per_worker)
        ]
        size = round(sum(sample) * active / len(sample)) if sample else 0
        return active, ended, size

    def _observe(self, event: Event, outputs: list[Output]) -> None:
        assert self.view is not None
        now_ms = int(time.time() * 1000)
        self.view.event(event, now_ms)
        for output in outputs:
            self.view.output(output, now_ms)

    def submit(
        self, event: Event, decides: bool = False, batch: list[ToolCall] | None = None
    ) -> asyncio.Future[list[Output]]:
        """Queue an event (or ``batch``: one run's calls, ``event`` the first of them) on its
        run's worker; the future resolves to its outputs, in input order."""
        index = partition_for(run_scope(event), self.workers)
        queue = self._queues[index]  # before taking a position
        future: asyncio.Future[list[Output]] = asyncio.get_running_loop().create_future()
        ts = event.ts if event.ts is not None else int(time.time() * 1000)  # event time (F0)
        done = _Done(event, future, ts)
        done.decides = decides
        done.batch = batch
        if self.events == self._released:
            self._progress_at = self.clock()  # idle until now: nothing was waiting
        queue.put_nowait((self.events, done))  # QueueFull (too much in flight) takes no position
        self.events += 1
        if self.state_ttl_s is not None:  # a run whose event waits in a queue is live
            self.engines[index].runs.touch(run_scope(event))
        return future

    def alerts_of(self, future: asyncio.Future[list[Output]]) -> list[FleetAlert]:
        """The fleet alerts the event of a resolved :meth:`submit` future gave (asked once)."""
        return self._alerts_of.pop(future, [])

    async def process(self, event: Event) -> list[Output]:
        future = self.submit(event)
        try:
            return await future
        finally:
            self._alerts_of.pop(future, None)

    async def decide(self, call: ToolCall) -> Decision:
        """A proposed call recorded and decided (an aborted run's calls all answer its abort)."""
        future = self.submit(call, decides=True)
        try:
            outputs = await future
        finally:
            self._alerts_of.pop(future, None)
            aborted = self._aborted_of.pop(future, None)
        return decision_of(outputs, aborted)

    async def decide_batch(self, calls: list[ToolCall]) -> BatchDecision:
        """One model turn's calls (one run's, in assistant order) decided together: admitted,
        or refused as a whole (openclaw-rules §7.6); one decision per call, in order.
        ``ValueError`` when they cannot be one batch (:func:`batch_problem`)."""
        problem = batch_problem(calls)
        if problem is not None:
            raise ValueError(problem)
        future = self.submit(calls[0], decides=True, batch=calls)
        try:
            await future
        finally:
            self._alerts_of.pop(future, None)
            aborted = self._aborted_of.pop(future, None)
            outcome = self._outcome_of.pop(future, None)
        assert outcome is not None
        return batch_decision_of(outcome, aborted)

    async def run(
        self, events: Iterable[Event] | AsyncIterable[Event], window: int = 1024
    ) -> AsyncIterator[list[Output | FleetAlert]]:
        """Outputs of each event, then the fleet alerts it gave, in input order (at most
        ``window`` events in flight)."""
        pending: asyncio.Queue[asyncio.Future[list[Output]] | None] = asyncio.Queue(maxsize=window)

        async def feed() -> None:
            try:
                if isinstance(events, AsyncIterable):
                    async for event in events:
                        await pending.put(self.submit(event))
                    return
                for event in events:
                    await pending.put(self.submit(event))
            finally:
                await pending.put(None)  # also when reading the input failed: run() re-raises

        feeder = asyncio.create_task(feed())
        while (future := await pending.get()) is not None:
            yield [*await future, *self.alerts_of(future)]
        await feeder
