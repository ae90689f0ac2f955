"""The embedded gateway on the agents preset decides as the in-process core does."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from loopwatch.config.fleet import parse_config_text
from loopwatch.detectors.engine import Engine
from loopwatch.detectors.events import Abort, ToolCall, ToolResult
from loopwatch.streams.embedded.runtime import EmbeddedRuntime
from loopwatch.streams.fleet_view.view import FleetView
from loopwatch.streams.gateway.server import EmbeddedBackend, gateway_app

PRESET = parse_config_text('{"loopwatch": {"preset": "agents"}}')
#: prose sent to a shell, reworded each time: the same two failures (spec of ``sameFailure``)
FAILURES = (
    "/bin/bash: line 2: unexpected EOF while looking for matching `''",
    "/bin/bash: line {n}: DISCUSSION: command not found",
)


def _events(calls: int) -> list[ToolCall | ToolResult]:
    events: list[ToolCall | ToolResult] = []
    for n in range(calls):
        params = {"command": f"DISCUSSION\nattempt {n}: let us look at the file"}
        common: dict[str, Any] = {"run_id": "r", "agent_id": "coder", "tool": "DISCUSSION", "params": params}
        events.append(ToolCall(event_id=f"call-{n}", tool_call_id=f"c{n}", **common))
        result = FAILURES[n % 2].format(n=100 + 15 * n)
        events.append(ToolResult(event_id=f"res-{n}", tool_call_id=f"c{n}", result=result, **common))
    return events


def _core_decisions(calls: int) -> list[str]:
    engine = Engine(PRESET)
    decisions: list[str] = []
    for event in _events(calls):
        outputs = engine.process(event)
        if isinstance(event, ToolCall):
            actions = ["abort" if isinstance(o, Abort) else o.action for o in outputs]
            if "abort" in decisions:  # an aborted run stays aborted (the gateway's sticky abort)
                actions.append("abort")
            decisions.append(next((a for a in ("abort", "block", "warn") if a in actions), "allow"))
    return decisions


def test_decide_on_the_preset_gives_the_cores_answers() -> None:
    calls = 8
    expected = _core_decisions(calls)
    assert "block" in expected  # the loop is one the preset stops, under OpenClaw's thresholds

    async def scenario() -> list[dict[str, Any]]:
        view = FleetView("test gateway")
        async with EmbeddedRuntime(PRESET, view=view) as runtime:
            app = gateway_app(EmbeddedBackend(runtime), view, frozenset(), 1_048_576)
            client: TestClient[Any, Any] = TestClient(TestServer(app))
            await client.start_server()
            try:
                answers = []
                for event in _events(calls):
                    wire = {
                        "run_id": event.run_id,
                        "agent_id": event.agent_id,
                        "tool": event.tool,
                        "params": event.params,
                        "tool_call_id": event.tool_call_id,
                    }
                    if isinstance(event, ToolCall):
                        answer = await client.post("/v1/decide", json={**wire, "event_id": event.event_id})
                        assert answer.status == 200
                        answers.append(await answer.json())
                    else:
                        sent = {
                            **wire,
                            "type": "tool_result",
                            "event_id": event.event_id,
                            "result": event.result,
                        }
                        assert (await client.post("/v1/events", json=sent)).status == 200
                return answers
            finally:
                await client.close()

    answers = asyncio.run(scenario())
    assert [answer["decision"] for answer in answers] == expected
    first_block = next(answer for answer in answers if answer["decision"] == "block")
    assert first_block["reason"] == "same_failure"
    assert "failed the same way" in first_block["message"]
