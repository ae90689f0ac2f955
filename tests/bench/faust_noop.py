"""A faust-streaming agent that only forwards each event: faust's own per-event ceiling.

Started by ``stream_bench`` as a separate process, like the loopwatch worker:
``python -m tests.bench.faust_noop BOOTSTRAP APP_ID IN_TOPIC OUT_TOPIC``.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import faust


def main() -> None:
    bootstrap, app_id, source, sink = sys.argv[1:5]
    Path(".bench").mkdir(exist_ok=True)  # faust creates its data folder, not the folder's parent
    app = faust.App(
        app_id,
        broker=f"kafka://{bootstrap}",
        store="memory://",
        datadir=f".bench/{app_id}-data",  # faust makes it even with the memory store
        topic_partitions=4,
        web_enabled=False,
        topic_disable_leader=True,
        producer_acks=-1,
        producer_linger=0.0,  # as the passthrough and the worker
    )
    raw: dict[str, Any] = {
        "key_type": bytes,
        "value_type": bytes,
        "key_serializer": "raw",
        "value_serializer": "raw",
        "partitions": 4,
    }
    inbound = app.topic(source, **raw)
    outbound = app.topic(sink, **raw)

    @app.agent(inbound)
    async def forward(stream: Any) -> None:
        async for event in stream.events():
            await outbound.send(key=event.message.key, value=event.message.value, force=True)

    asyncio.set_event_loop(asyncio.new_event_loop())
    faust.Worker(app, loglevel="INFO", quiet=True).execute_from_commandline()


if __name__ == "__main__":
    main()
