"""``loopwatch view``: the fleet view (the dashboard, ``/fleet``) in a process of its own.

A worker with the fleet view on reads every event and verdict of the fleet besides its own
partitions, so a group of N workers decodes the fleet N times for N copies of one view. At
scale the view runs once, here, and the workers run with ``LOOPWATCH_FLEET_VIEW=false``: they
then read only their own partitions, and the fleet's CPU per event stays flat as workers are
added (``make bench-scale``, ``--cpu-fleet-view process``).

The process follows what a worker's view follows (:mod:`streams.kafka.topic_followers`): every
event and verdict from the view's horizon on, and every fleet alert from the start of the
alerts topic; it serves the same routes from the same :class:`FleetView`, so its pages show
what a worker's would. It holds no run state, writes nothing, and any number of them can
run (each a full view); restarted, it reads the last horizon again.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TextIO

from loopwatch.config.fleet import FleetConfig
from loopwatch.config.stream_settings import StreamSettings
from loopwatch.streams.fleet_view.dashboard import Dashboard, serve_until_interrupted, start_server
from loopwatch.streams.fleet_view.view import FleetView
from loopwatch.streams.kafka.connect import ensure_topics, wait_for_broker
from loopwatch.streams.kafka.topic_followers import follow_alerts, follow_fleet

__all__ = ["run_view", "view_of"]


def view_of(settings: StreamSettings) -> FleetView:
    """The view a worker of these settings keeps, as its own process's."""
    return FleetView(
        f"loopwatch view ({settings.app_id})",
        horizon_s=settings.fleet_horizon_s,
        failing_runs=settings.fleet_failing_runs,
        previews=settings.dashboard_previews,
    )


async def run_view(settings: StreamSettings, config: FleetConfig, host: str, port: int, err: TextIO) -> None:
    """Follow the fleet and serve its dashboard at ``host:port`` until SIGINT or SIGTERM."""
    await wait_for_broker(settings)
    await ensure_topics(settings)  # (the same topics a worker makes: whichever starts first)
    view = view_of(settings)
    max_bytes = config.settings.max_event_bytes
    runner = await start_server(Dashboard(view), host, port)
    bound = runner.addresses[0][1] if runner.addresses else port
    shown = host if ":" not in host else f"[{host}]"
    print(f"loopwatch view: dashboard at http://{shown}:{bound}/dashboard", file=err, flush=True)
    followers = [
        asyncio.create_task(follow_fleet(settings, view, lambda: max_bytes)),
        asyncio.create_task(follow_alerts(settings, view.alerts)),
    ]
    try:
        stop = asyncio.create_task(serve_until_interrupted(err, "following the fleet"))
        done, _ = await asyncio.wait([stop, *followers], return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task is not stop:
                task.result()  # a follower that ended raised: the process says so and stops
    finally:
        for task in followers:
            task.cancel()
        for task in followers:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await runner.cleanup()
