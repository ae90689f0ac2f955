"""/v1/decide speaks loopwatch's words, except to the OpenClaw plugin, which asks for OpenClaw's."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from loopwatch.config import FleetConfig
from loopwatch.streams.embedded.runtime import EmbeddedRuntime
from loopwatch.streams.fleet_view.view import FleetView
from loopwatch.streams.gateway.server import EmbeddedBackend, gateway_app


async def _messages(headers: dict[str, str]) -> dict[str, str]:
    """The first message of each decision of a 22-call loop of failing reads."""
    view = FleetView("test gateway")
    found: dict[str, str] = {}
    async with EmbeddedRuntime(FleetConfig.enabled_default(), view=view) as runtime:
        client: TestClient[Any, Any] = TestClient(
            TestServer(gateway_app(EmbeddedBackend(runtime), view, frozenset(), 1_048_576))
        )
        await client.start_server()
        try:
            for n in range(22):
                call = {"run_id": "r", "tool": "read", "params": {"path": "/x"}, "tool_call_id": f"c{n}"}
                body = await (await client.post("/v1/decide", json=call, headers=headers)).json()
                if body["decision"] != "allow":
                    found.setdefault(body["decision"], body["message"])
                result = {**call, "type": "tool_result", "event_id": f"res-{n}", "error": "ENOENT"}
                await client.post("/v1/events", json=result)
        finally:
            await client.close()
    return found


def test_a_client_is_told_in_loopwatch_s_words_and_the_plugin_in_openclaw_s() -> None:
    words = asyncio.run(_messages({}))
    openclaw = asyncio.run(_messages({"X-Loopwatch-Texts": "openclaw"}))
    assert set(words) == set(openclaw) == {"warn", "block", "abort"}
    assert words["warn"].startswith("loopwatch warning: read was called 10 times")
    assert words["block"].startswith("loopwatch blocked this read call")
    assert words["abort"].startswith("loopwatch stopped this turn")
    assert openclaw["block"].startswith("CRITICAL")
    assert openclaw["abort"].startswith("OpenClaw stopped this run")
