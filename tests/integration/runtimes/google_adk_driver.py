"""A real Google ADK agent run with loopwatch's plugin, for ``test_google_adk_agent.py``.

Run by the google-adk environment's python (``python-framework.sh google-adk``, which imports
this checkout), one JSON argument::

    {"model_url": "http://127.0.0.1:PORT",   # the fake model (Gemini API)
     "prompt": "read the plan",
     "plugin": null | {"gateway_url": ..., "timeout_s": ..., "fail_open": ...},  # null: no plugin
     "record": false,                        # true: the in-process core, recording what it is asked
     "tree": false}                          # true: an agent with an AgentTool and a sub-agent

The agents are real ``LlmAgent`` s on ``Gemini(base_url=model_url)`` (a dummy API key), run by an
``InMemoryRunner`` (one ``run_async`` invocation). Printed on stdout, one JSON line: what each
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
    """A tool that answers ADK's failure shape, and one that raises."""

    def chmod(path: str) -> dict[str, str]:
        """Change a file's mode."""
        executed.append(["coder", f"chmod {path}"])
        return {"error": "permission denied"}

    def explode(path: str) -> str:
        """Fail badly."""
        executed.append(["coder", f"explode {path}"])
        raise RuntimeError("disk on fire")

    return [chmod, explode]


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
    events = []
    raised = None
    try:
        async for event in runner.run_async(user_id="user", session_id=session.id, new_message=message):
            parts = event.content.parts if event.content is not None and event.content.parts else []
            events.append(
                {
                    "author": event.author,
                    "invocation_id": event.invocation_id,
                    "final": event.is_final_response(),
                    "parts": [part_of(part) for part in parts],
                }
            )
    except Exception as exc:  # noqa: BLE001 - a tool that raised ends the run: reported
        raised = f"{type(exc).__name__}: {exc}"
    await runner.close()
    return {
        "session_id": session.id,
        "executed": executed,
        "events": events,
        "failures": plugin.guard.failures if plugin is not None else [],
        "raised": raised,
        "asked": detector.asked if detector is not None else [],
        "reported": detector.reported if detector is not None else [],
        "ended": detector.ended if detector is not None else [],
    }


def main() -> None:
    print(json.dumps(asyncio.run(run(json.loads(sys.argv[1])))))


if __name__ == "__main__":
    main()
