"""The Kafka gateway's deadlines hold while the broker takes nothing (it is down): a decision
is the timed-out allow of ``--decide-timeout-ms``, events answer 503, and ``/health`` tells."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from loopwatch.config.stream_settings import parse_stream_settings
from loopwatch.streams.fleet_view.view import FleetView
from loopwatch.streams.gateway import backend, kafka_backend, server
from loopwatch.streams.gateway.kafka_backend import KafkaBackend
from loopwatch.streams.gateway.server import gateway_app


class _DownBroker:
    """A producer whose sends never complete (what aiokafka does while no broker answers)."""

    def __init__(self) -> None:
        self.sends = 0

    async def send(self, *args: Any, **kwargs: Any) -> asyncio.Future[Any]:
        self.sends += 1
        return asyncio.get_running_loop().create_future()

    async def send_and_wait(self, *args: Any, **kwargs: Any) -> Any:
        self.sends += 1
        await asyncio.Event().wait()


def test_decisions_events_and_health_keep_their_deadlines_with_the_broker_down(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kafka_backend, "EVENTS_TIMEOUT_S", 0.3)
    monkeypatch.setattr(backend, "STALL_S", 0.5)  # what a backend's stalled() reads
    monkeypatch.setattr(server, "STALL_S", 0.5)  # what the 503 says

    async def scenario() -> None:
        view = FleetView("test")
        backend = KafkaBackend(
            parse_stream_settings({}), decide_timeout_s=0.2, max_bytes=1_048_576, view=view
        )
        broker = _DownBroker()
        backend._producer = broker
        app = gateway_app(backend, view, frozenset(), 1_048_576)
        async with TestClient(TestServer(app), headers={"Content-Type": "application/json"}) as client:
            call = {"run_id": "r", "tool": "read", "params": {"path": "a"}}
            answer = await asyncio.wait_for(client.post("/v1/decide", json=call), 60)  # (not: hang)
            assert answer.status == 200
            body = await answer.json()
            assert (body["decision"], body["timed_out"]) == ("allow", True)
            event = {"type": "run_end", "event_id": "e1", "run_id": "r"}
            refused = await asyncio.wait_for(client.post("/v1/events", json=event), 60)
            assert refused.status == 503
            assert "did not take the events within 0.3 s" in (await refused.json())["error"]
            await asyncio.sleep(0.6)
            assert (await client.get("/health")).status == 503
            assert broker.sends == 2

    asyncio.run(scenario())
