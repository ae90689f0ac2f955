"""A real CrewAI crew with loopwatch's hooks, for ``test_crewai_agent.py``.

Run by CrewAI's own environment's python (``python-framework.sh crewai``, which imports this
checkout), one JSON argument::

    {"model_url": "http://127.0.0.1:PORT",  # the fake model: Chat Completions under /v1
     "scenario": "loop" | "delegation",     # an agent with a read and a fetch tool; or a
                                            # manager that may delegate to that agent
     "hooks": true,                         # false: CrewAI alone
     "preset": "agents" | null,             # the in-process detector's preset
     "gateway_url": null, "timeout_s": 2.0, "fail_open": true}

It prints one JSON object on stdout (CrewAI's own output goes to stderr): ``outcome``
(``finished``; ``aborted``: ``LoopAborted``; ``failed``: another exception), ``final`` (the
crew's output), ``error``, ``executed`` (what the tools themselves executed: ``read PATH``,
``fetch URL``), with the in-process detector what it was asked (``asked``: run, tool, session,
parent run), the outcomes reported to it (``reported``: run, tool, result, error) and the runs
it ended (``ended``), ``failures`` (the guard's), ``hooks_left`` (CrewAI's global tool hooks
after ``uninstall``) and ``connections`` (each connection or name lookup attempted beyond the
loopback interface: every one is refused).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

# before CrewAI is imported: no telemetry, no tracing, no version check (the test's environment
# sets them too, with HOME and the storage folder in the test's temporary folder)
for _name, _value in {
    "CREWAI_DISABLE_TELEMETRY": "true",
    "CREWAI_DISABLE_TRACKING": "true",
    "OTEL_SDK_DISABLED": "true",
    "CREWAI_TRACING_ENABLED": "false",
    "CREWAI_TESTING": "true",
    "CREWAI_DISABLE_VERSION_CHECK": "true",
}.items():
    os.environ.setdefault(_name, _value)

RESULT = "the same page"
LOOPBACK = ("127.0.0.1", "::1", "localhost")
CONNECTIONS: list[str] = []


def _no_network(event: str, args: tuple[Any, ...]) -> None:
    """An audit hook: a connection or a name lookup beyond the loopback interface is refused."""
    if event == "socket.connect":
        address = args[1]
        host = address[0] if isinstance(address, tuple) else None
    elif event == "socket.getaddrinfo":
        host = args[0]
    else:
        return
    if isinstance(host, bytes):
        host = host.decode(errors="replace")
    if isinstance(host, str) and host not in LOOPBACK:
        CONNECTIONS.append(f"{event} {host}")
        raise OSError(f"no network in this test: {event} {host}")


def run(settings: dict[str, Any]) -> dict[str, Any]:
    from crewai import LLM, Agent, Crew, Task
    from crewai.hooks import HookAborted, get_after_tool_call_hooks, get_before_tool_call_hooks
    from crewai.tools import tool

    from loopwatch.config import parse_config_value
    from loopwatch.detectors.facade import Decision, LoopDetector
    from loopwatch.detectors.outcomes import MISSING
    from loopwatch.integrations.crewai import LoopAborted, LoopwatchHooks

    asked: list[list[str | None]] = []
    reported: list[list[Any]] = []
    ended: list[str] = []

    class RecordingDetector(LoopDetector):
        """The core, recording what it is asked, the outcomes reported and the runs ended."""

        def before_tool_call(self, run_id: str, tool: str, params: Any, **kwargs: Any) -> Decision:
            asked.append([run_id, tool, kwargs.get("session_id"), kwargs.get("parent_run_id")])
            return super().before_tool_call(run_id, tool, params, **kwargs)

        def after_tool_call(self, run_id: str, tool: str, params: Any, **kwargs: Any) -> Decision:
            result, error = kwargs.get("result", MISSING), kwargs.get("error")
            reported.append([run_id, tool, None if result is MISSING else result, error and str(error)])
            return super().after_tool_call(run_id, tool, params, **kwargs)

        def end_run(self, run_id: str) -> None:
            ended.append(run_id)
            super().end_run(run_id)

    executed: list[str] = []

    def read(path: str) -> str:
        """Read a file."""
        executed.append(f"read {path}")
        return RESULT

    def fetch(url: str) -> str:
        """Fetch a web page."""
        executed.append(f"fetch {url}")
        raise ConnectionError(f"{url} refused the connection")

    tools = [tool("read")(read), tool("fetch")(fetch)]  # (CrewAI's decorator, applied)

    llm = LLM(model="fake-model", base_url=settings["model_url"] + "/v1", api_key="fake-key")
    reader = Agent(
        role="Reader",
        goal="Read the files you are asked about",
        backstory="You read files.",
        llm=llm,
        tools=tools,
        max_iter=100,
        allow_delegation=False,
        verbose=False,
    )
    if settings["scenario"] == "delegation":
        manager = Agent(
            role="Manager",
            goal="Get the plan read",
            backstory="You hand work to your coworkers.",
            llm=llm,
            allow_delegation=True,
            max_iter=100,
            verbose=False,
        )
        task = Task(
            description="Coordinate the team: get PLAN.md read.", expected_output="the plan", agent=manager
        )
        agents = [manager, reader]
    else:
        task = Task(description="Read the plan in PLAN.md.", expected_output="the plan", agent=reader)
        agents = [reader]
    crew = Crew(agents=agents, tasks=[task], cache=False, verbose=False)

    hooks: LoopwatchHooks | None = None
    if settings["hooks"]:
        if settings.get("gateway_url"):
            hooks = LoopwatchHooks(
                gateway_url=settings["gateway_url"],
                timeout_s=settings.get("timeout_s", 2.0),
                fail_open=settings.get("fail_open", True),
            )
        else:
            preset = settings.get("preset")
            config = parse_config_value({"loopwatch": {"preset": preset}}) if preset else None
            hooks = LoopwatchHooks(RecordingDetector(config))
        hooks.install()
    report: dict[str, Any] = {"outcome": "finished", "final": None, "error": None}
    try:
        report["final"] = str(crew.kickoff().raw)
    except LoopAborted as stop:
        report["outcome"] = "aborted"
        report["error"] = {
            "type": type(stop).__name__,
            "message": str(stop),
            "reason": stop.reason,
            "code": stop.code,
            "run_id": stop.run_id,
            "hook_aborted": isinstance(stop, HookAborted),
        }
    except Exception as exc:  # noqa: BLE001 - reported to the test
        report["outcome"] = "failed"
        report["error"] = {"type": type(exc).__name__, "message": str(exc)}
    finally:
        if hooks is not None:
            hooks.uninstall()
    report["executed"] = executed
    report["asked"] = asked
    report["reported"] = reported
    report["ended"] = ended
    report["failures"] = hooks.guard.failures if hooks is not None else []
    report["hooks_left"] = len(get_before_tool_call_hooks()) + len(get_after_tool_call_hooks())
    report["connections"] = CONNECTIONS
    return report


def main() -> None:
    settings = json.loads(sys.argv[1])
    answer = os.dup(1)
    os.dup2(2, 1)  # CrewAI prints to stdout: only the report goes there
    sys.addaudithook(_no_network)
    report = run(settings)
    sys.stdout.flush()
    with os.fdopen(answer, "w") as out:
        out.write(json.dumps(report) + "\n")


if __name__ == "__main__":
    main()
