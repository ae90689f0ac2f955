"""The worker's garbage-collector policy (``streams/kafka/gc_policy.py``) and its setting.

Full collections on a clock: automatic ones off, start-up objects frozen once the worker
runs, then one full collection per ``LOOPWATCH_GC_FULL_INTERVAL_S``; ``0`` leaves CPython's
own schedule. The policy changes process-wide state, so every test puts it back.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest

from loopwatch.config.errors import ConfigError
from loopwatch.config.stream_settings import parse_stream_settings
from loopwatch.streams.kafka import gc_policy


class _App:
    """What :func:`gc_policy.install` uses of a faust app: ``task``."""

    def __init__(self) -> None:
        self.tasks: list[Callable[[], Coroutine[Any, Any, None]]] = []

    def task(self, fun: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self.tasks.append(fun)


@pytest.fixture(autouse=True)
def _restore_collector() -> Iterator[None]:
    thresholds = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


def test_the_setting_defaults_to_ten_minutes_and_reads_the_environment() -> None:
    assert parse_stream_settings({}).gc_full_interval_s == 600.0
    assert parse_stream_settings({"LOOPWATCH_GC_FULL_INTERVAL_S": "0"}).gc_full_interval_s == 0.0
    assert parse_stream_settings({"LOOPWATCH_GC_FULL_INTERVAL_S": "2.5"}).gc_full_interval_s == 2.5


def test_a_negative_interval_is_refused_with_its_variable() -> None:
    with pytest.raises(ConfigError) as raised:
        parse_stream_settings({"LOOPWATCH_GC_FULL_INTERVAL_S": "-1"})
    assert [problem.path for problem in raised.value.problems] == ["LOOPWATCH_GC_FULL_INTERVAL_S"]


def test_zero_keeps_cpythons_own_schedule() -> None:
    before = gc.get_threshold()
    app = _App()
    gc_policy.install(app, 0)
    assert gc.get_threshold() == before
    assert app.tasks == []


def test_automatic_full_collections_are_turned_off_and_the_young_ones_kept() -> None:
    young, middle, _ = gc.get_threshold()
    app = _App()
    gc_policy.install(app, 600)
    assert gc.get_threshold() == (young, middle, gc_policy.OLD_GENERATION_OFF)
    assert len(app.tasks) == 1


def test_the_task_freezes_start_up_objects_then_collects_on_a_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app = _App()
    gc_policy.install(app, 0.001)
    collected: list[int] = []
    frozen_before: list[int] = []
    enough = asyncio.Event()
    real = gc_policy.full_collection

    def counting() -> tuple[int, float]:
        frozen_before.append(gc.get_freeze_count())
        collected.append(1)
        if len(collected) == 3:
            enough.set()
        return real()

    monkeypatch.setattr(gc_policy, "full_collection", counting)

    async def run() -> int:
        task = asyncio.create_task(app.tasks[0]())
        await enough.wait()
        frozen = gc.get_freeze_count()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return frozen

    frozen = asyncio.run(run())
    assert frozen_before[0] == 0  # the first collection comes before the freeze
    assert frozen_before[1] > 0  # ... then what was alive is frozen
    assert frozen > 0


def test_a_full_collection_finds_cycles() -> None:
    class Node:
        other: Any = None

    a, b = Node(), Node()
    a.other, b.other = b, a
    del a, b
    found, seconds = gc_policy.full_collection()
    assert found >= 2
    assert seconds >= 0
