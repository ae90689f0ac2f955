"""The embedded runtime: the core over in-memory state, no broker (DESIGN §5).

Events are partitioned by run scope across asyncio workers exactly like Kafka partitions
them across consumers (murmur2 of the key, the Kafka default partitioner), each worker
owning the state of its runs. Outputs are released in input order, so the result equals
the single-threaded core's, whatever the number of workers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterable, AsyncIterator, Iterable
from typing import Any

from aiokafka.partitioner import murmur2

from config.fleet import FleetConfig
from detectors.engine import Engine
from detectors.events import Event, Output, ToolCall, run_scope
from streams.fleet_view import FleetView

__all__ = ["EmbeddedRuntime", "partition_for"]

_STOP: Any = object()


def partition_for(scope: str, partitions: int) -> int:
    """The partition Kafka's default partitioner gives the key ``scope``."""
    return int(murmur2(scope.encode()) & 0x7FFFFFFF) % partitions


class EmbeddedRuntime:
    """``await runtime.process(event)`` gives that event's outputs; state stays per worker."""

    def __init__(self, config: FleetConfig, workers: int = 4, view: FleetView | None = None) -> None:
        self.workers = workers
        self.view = view  # fed every event and output, for the dashboard
        self.engines = [Engine(config) for _ in range(workers)]
        self._queues: list[asyncio.Queue[Any]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self.events = 0

    @property
    def config(self) -> FleetConfig:
        return self.engines[0].config

    @config.setter
    def config(self, config: FleetConfig) -> None:
        for engine in self.engines:
            engine.config = config

    async def __aenter__(self) -> EmbeddedRuntime:
        if self.view is not None:
            self.view.gauges = self.gauges
        self._queues = [asyncio.Queue(maxsize=10_000) for _ in range(self.workers)]
        self._tasks = [asyncio.create_task(self._work(index)) for index in range(self.workers)]
        return self

    async def __aexit__(self, *exc: object) -> None:
        for queue in self._queues:
            await queue.put(_STOP)
        await asyncio.gather(*self._tasks)

    async def _work(self, index: int) -> None:
        engine, queue = self.engines[index], self._queues[index]
        while True:
            item = await queue.get()
            if item is _STOP:
                return
            event, future = item
            view = self.view
            started = time.perf_counter()
            try:
                if view is not None and isinstance(event, ToolCall) and event.usage is not None:
                    outputs = self._process_counting_spend(engine, event, view)
                else:
                    outputs = engine.process(event)
            except Exception as exc:  # noqa: BLE001 - handed to the caller awaiting this event
                if not future.done():
                    future.set_exception(exc)
                continue
            if view is not None:
                view.metrics.event(str(event.__struct_config__.tag), time.perf_counter() - started)
                for output in outputs:
                    view.metrics.output(output)
                self._observe(event, outputs)
            if not future.done():  # the caller may have been cancelled meanwhile
                future.set_result(outputs)

    @staticmethod
    def _process_counting_spend(engine: Engine, event: ToolCall, view: FleetView) -> list[Output]:
        state = engine.states.get(run_scope(event))
        before = state.loop_spend_usd if state is not None else 0.0
        outputs = engine.process(event)
        state = engine.states.get(run_scope(event))
        if state is not None and event.usage is not None:
            view.metrics.spend(
                event.agent_id, event.usage, state.loop_spend_usd - before, state.first_detector
            )
        return outputs

    def gauges(self) -> tuple[int, int, int]:
        """Active runs, ended runs remembered, and the bytes of the active runs' state."""
        active = sum(len(engine.states) for engine in self.engines)
        ended = sum(len(engine.ended) for engine in self.engines)
        size = sum(len(state.to_bytes()) for engine in self.engines for state in list(engine.states.values()))
        return active, ended, size

    def _observe(self, event: Event, outputs: list[Output]) -> None:
        assert self.view is not None
        now_ms = int(time.time() * 1000)
        self.view.event(event, now_ms)
        for output in outputs:
            self.view.output(output, now_ms)

    def submit(self, event: Event) -> asyncio.Future[list[Output]]:
        """Queue an event on its run's worker; the future resolves to its outputs."""
        future: asyncio.Future[list[Output]] = asyncio.get_running_loop().create_future()
        self.events += 1
        self._queues[partition_for(run_scope(event), self.workers)].put_nowait((event, future))
        return future

    async def process(self, event: Event) -> list[Output]:
        return await self.submit(event)

    async def run(
        self, events: Iterable[Event] | AsyncIterable[Event], window: int = 1024
    ) -> AsyncIterator[list[Output]]:
        """Outputs of each event, in input order (at most ``window`` events in flight)."""
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
            yield await future
        await feeder
