"""A real Google ADK agent run with loopwatch's plugin, for ``test_google_adk_agent.py``.

Run by the google-adk environment's python (``python-framework.sh google-adk``, which imports
this checkout), one JSON argument::

    {"model_url": "http://127.0.0.1:PORT",   # the fake model (Gemini API)
     "prompt": "read the plan",
     "plugin": null | {"gateway_url": ..., "timeout_s": ..., "fail_open": ...},  # null: no plugin
     "record": false,                        # true: the in-process core, recording what it is asked
     "tree": false}                          # true: an agent with an AgentTool and a sub-agent

The agents are real ``LlmAgent`` s on ``Gemini(base_url=model_url)`` (a dummy API key), run by an
``InMemoryRunner`` (one ``run_async`` invocation; a confirmation its ``deploy`` tool asks for is
given in a second ``run_async``, which resumes the invocation). Printed on stdout, one JSON line: what each
tool function itself executed, the runner's events (and the exception the run raised, if any),
the guard's failures, and with ``record`` what the core was asked (run, tool, session, parent
run, tool call id), the outcomes reported to it and the runs it ended.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.models import Gemini
from google.adk.runners import InMemoryRunner
from google.adk.tools import FunctionTool
from google.adk.tools.agent_tool import AgentTool
from google.genai import types

from loopwatch.detectors.facade import Decision, LoopDetector
from loopwatch.integrations.google_adk import LoopwatchPlugin

RESULT = "the same page"


class RecordingDetector(LoopDetector):
    """The core, recording what each call was asked with and the runs it ended."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[list[str | None]] = []
        self.reported: list[list[Any]] = []
        self.ended: list[str] = []

    def before_tool_call(self, run_id: str, tool: str, params: Any, **kwargs: Any) -> Decision:
        self.asked.append(
            [run_id, tool, kwargs.get("session_id"), kwargs.get("parent_run_id"), kwargs.get("tool_call_id")]
        )
        return super().before_tool_call(run_id, tool, params, **kwargs)

    def after_tool_call(self, run_id: str, tool: str, params: Any, **kwargs: Any) -> Decision:
        error = kwargs.get("error")
        outcome = ["error", str(error)] if error is not None else ["result", kwargs.get("result")]
        self.reported.append([run_id, tool, *outcome])
        return super().after_tool_call(run_id, tool, params, **kwargs)

    def end_run(self, run_id: str) -> None:
        self.ended.append(run_id)
        super().end_run(run_id)


def reader(agent: str, executed: list[list[str]]) -> Any:
    """A ``read`` tool that records every execution (the proof a call ran or did not)."""

    def read(path: str) -> str:
        """Read a file."""
        executed.append([agent, path])
        return RESULT

    return read


def failing(executed: list[list[str]]) -> list[Any]:
    """A tool that answers ADK's failure shape, one that raises, one that needs a confirmation."""

    def chmod(path: str) -> dict[str, str]:
        """Change a file's mode."""
        executed.append(["coder", f"chmod {path}"])
        return {"error": "permission denied"}

    def explode(path: str) -> str:
        """Fail badly."""
        executed.append(["coder", f"explode {path}"])
        raise RuntimeError("disk on fire")

    def deploy(target: str) -> str:
        """Deploy, once a human confirmed."""
        executed.append(["coder", f"deploy {target}"])
        return f"deployed {target}"

    return [chmod, explode, FunctionTool(deploy, require_confirmation=True)]


def part_of(part: Any) -> dict[str, Any]:
    if part.function_call is not None:
        call = part.function_call
        return {"function_call": {"id": call.id, "name": call.name, "args": call.args}}
    if part.function_response is not None:
        response = part.function_response
        return {
            "function_response": {"id": response.id, "name": response.name, "response": response.response}
        }
    return {"text": part.text}


async def invoke(runner: Any, session_id: str, message: Any, events: list[dict[str, Any]]) -> Any:
    """One ``run_async`` invocation, its events added to ``events``; the confirmation it asked
    for, if any."""
    confirmation = None
    async for event in runner.run_async(user_id="user", session_id=session_id, new_message=message):
        parts = event.content.parts if event.content is not None and event.content.parts else []
        events.append(
            {
                "author": event.author,
                "invocation_id": event.invocation_id,
                "final": event.is_final_response(),
                "parts": [part_of(part) for part in parts],
            }
        )
        for call in event.get_function_calls():
            if call.name == "adk_request_confirmation":
                confirmation = call
    return confirmation


async def run(spec: dict[str, Any]) -> dict[str, Any]:
    model = Gemini(model="gemini-2.5-flash", base_url=spec["model_url"])
    executed: list[list[str]] = []
    tools: list[Any] = [reader("coder", executed), *failing(executed)]
    sub_agents: list[Any] = []
    if spec.get("tree"):
        inner = LlmAgent(
            name="inner", model=model, instruction="Do the task.", tools=[reader("inner", executed)]
        )
        helper = LlmAgent(name="helper", model=model, instruction="Help.", tools=[reader("helper", executed)])
        tools.append(AgentTool(agent=inner))
        sub_agents.append(helper)
    agent = LlmAgent(
        name="coder", model=model, instruction="Do the task.", tools=tools, sub_agents=sub_agents
    )
    detector = RecordingDetector() if spec.get("record") else None
    plugin = None
    if spec.get("plugin") is not None:
        plugin = LoopwatchPlugin(detector, **spec["plugin"])
    runner = InMemoryRunner(agent=agent, app_name="loopwatch-test", plugins=[plugin] if plugin else [])
    session = await runner.session_service.create_session(app_name=runner.app_name, user_id="user")
    message = types.Content(role="user", parts=[types.Part.from_text(text=spec["prompt"])])
    events: list[dict[str, Any]] = []
    ended_at_pause = None
    raised = None
    try:
        confirmation = await invoke(runner, session.id, message, events)
        if confirmation is not None:
            ended_at_pause = list(detector.ended) if detector is not None else None
            answer = types.FunctionResponse(
                id=confirmation.id, name=confirmation.name, response={"confirmed": True}
            )
            resumed = types.Content(role="user", parts=[types.Part(function_response=answer)])
            await invoke(runner, session.id, resumed, events)
    except Exception as exc:  # noqa: BLE001 - a tool that raised ends the run: reported
        raised = f"{type(exc).__name__}: {exc}"
    await runner.close()
    return {
        "session_id": session.id,
        "executed": executed,
        "events": events,
        "failures": plugin.guard.failures if plugin is not None else [],
        "raised": raised,
        "ended_at_pause": ended_at_pause,
        "asked": detector.asked if detector is not None else [],
        "reported": detector.reported if detector is not None else [],
        "ended": detector.ended if detector is not None else [],
    }


def main() -> None:
    print(json.dumps(asyncio.run(run(json.loads(sys.argv[1])))))


if __name__ == "__main__":
    main()
