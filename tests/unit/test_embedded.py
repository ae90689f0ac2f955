"""The embedded runtime when its callers go away."""

from __future__ import annotations

import asyncio

from loopwatch.config import FleetConfig
from loopwatch.streams.embedded.runtime import EmbeddedRuntime
from tests.helpers import Trace


def test_a_cancelled_caller_does_not_stop_the_runtime() -> None:
    trace = Trace("r")
    for _ in range(12):
        trace.both("read", {"path": "/missing"}, error="ENOENT")
    first, *rest = trace.events

    async def scenario() -> list[str]:
        async with EmbeddedRuntime(FleetConfig.enabled_default(), workers=1) as runtime:
            abandoned = asyncio.create_task(runtime.process(first))
            await asyncio.sleep(0)  # submitted; its worker has not answered yet
            abandoned.cancel()
            actions = []
            for event in rest:
                outputs = await asyncio.wait_for(runtime.process(event), 5)
                actions += [getattr(o, "action", "abort") for o in outputs]
            return actions

    assert asyncio.run(scenario()) == ["warn"]  # the run goes on: its 10th identical call warns
