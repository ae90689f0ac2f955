"""loopwatch inside a real CrewAI crew (crewai 1.15.30), offline.

CrewAI's pins conflict with the dev environment's, so the crew runs in CrewAI's own virtual
environment (``runtimes/python-framework.sh crewai``, which imports this checkout):
``runtimes/crewai_driver.py`` builds a real Agent, Task and Crew with a ``read`` tool that records its
executions, installs loopwatch's hooks, kicks the crew off and prints what happened as JSON.
CrewAI's OpenAI provider talks Chat Completions to the fake model on localhost, which proposes
the same call again and again; every other connection is refused in the driver.

What the crew did is read from the driver's report (how the kickoff ended, the tool's own
record of its executions, the calls the detector was asked) and from the requests the fake
model received (the tool results the model read). The expected warning, block and abort, and
their texts, come from the in-process core fed the same calls and results. The detector runs
the agents preset: CrewAI itself stops a run at the fifth identical call with an identical
result, before OpenClaw's rules alone would block one.
"""

from __future__ import annotations

import json
import re
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from loopwatch.config import parse_config_value
from loopwatch.detectors.facade import LoopDetector
from loopwatch.integrations import Call, LoopGuard, Ruling
from tests.gateway_process import gateway_process
from tests.integration.fake_model import Conversation, FakeModel, RepeatTool, Reply, Router, Steps, ToolCall
from tests.integration.fake_model.openai_chat import ChatCompletionsApi
from tests.integration.runtimes.process import child_env, run_bounded

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
DRIVER = HERE / "runtimes" / "crewai_driver.py"
ENVIRONMENT = HERE / "runtimes" / "python-framework.sh"
RESULT = "the same page"  # what the driver's read tool returns
PRESET = "agents"
CALLS = 40
CREWAI_BLOCKED = "Tool execution blocked by hook"


@pytest.fixture(scope="module")
def crewai_python() -> str:
    """CrewAI's own environment (made once under ``.tools/``): its python."""
    done = subprocess.run([str(ENVIRONMENT), "crewai"], capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        pytest.fail(f"python-framework.sh crewai failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout.split()[-1]


@pytest.fixture
def gateway_config(tmp_path: Path) -> Path:
    path = tmp_path / "loopwatch.json"
    path.write_text(json.dumps({"loopwatch": {"preset": PRESET}}))
    return path


def crewai_env(folder: Path) -> dict[str, str]:
    """The environment of a CrewAI process: ``HOME`` (and CrewAI's storage) under ``folder``, no
    telemetry, tracing or version check, and none of the test's own CrewAI or OpenAI settings."""
    home = folder / "home"
    home.mkdir(parents=True, exist_ok=True)
    own = {
        "HOME": str(home),
        "XDG_DATA_HOME": str(home / "data"),
        "CREWAI_STORAGE_DIR": "loopwatch-test",
        "CREWAI_DISABLE_TELEMETRY": "true",
        "CREWAI_DISABLE_TRACKING": "true",
        "OTEL_SDK_DISABLED": "true",
        "CREWAI_TRACING_ENABLED": "false",
        "CREWAI_TESTING": "true",
        "CREWAI_DISABLE_VERSION_CHECK": "true",
    }
    return child_env(own, drop_prefixes=("CREWAI_", "OPENAI_", "OTEL_"), drop=("MODEL", "MODEL_NAME"))


def drive(python: str, folder: Path, model: FakeModel, **settings: Any) -> dict[str, Any]:
    """The driver's report of one kickoff (``settings`` as the driver takes them)."""
    env = crewai_env(folder)
    settings = {"model_url": model.url, "scenario": "loop", "hooks": True, "preset": PRESET, **settings}
    finished = run_bounded([python, str(DRIVER), json.dumps(settings)], env=env, cwd=folder, timeout=300)
    finished.assert_succeeded()
    report: dict[str, Any] = json.loads(finished.stdout.strip().splitlines()[-1])
    assert report["connections"] == [], "the crew reached past localhost"
    assert report["hooks_left"] == 0, "uninstall left CrewAI's tool hooks registered"
    return report


def expected_rulings(n: int, outcomes: list[Any] | None = None) -> list[Ruling]:
    """What the in-process core decides for ``n`` reads of PLAN.md, each given its result
    (``RESULT``) when it runs, until the abort: with the texts the adapters give."""
    guard = LoopGuard(LoopDetector(parse_config_value({"loopwatch": {"preset": PRESET}})))
    rulings = []
    for _ in range(n):
        call = Call("expected", "read", {"path": "PLAN.md"})
        ruling = guard.before(call)
        rulings.append(ruling)
        if ruling.action == "abort":
            break
        if ruling.proceed:
            guard.after(call, result=RESULT)
    return rulings


def reads_of(conversations: list[Conversation]) -> list[Conversation]:
    """The Reader's model requests (the ones that offer the read tool)."""
    return [c for c in conversations if "read" in c.tool_names]


def check_looping_run(report: dict[str, Any], model: FakeModel) -> None:
    rulings = expected_rulings(CALLS)
    actions = [ruling.action for ruling in rulings]
    block, abort = actions.index("block"), actions.index("abort")
    assert "warn" in actions[:block], "the core should warn, block, then abort this loop"
    # the tool ran for every call the core let through, and for no other
    assert report["executed"] == ["read PLAN.md"] * sum(1 for ruling in rulings if ruling.proceed)
    # the kickoff ended on the abort, with loopwatch's exception (a HookAborted) and reason
    assert report["outcome"] == "aborted", report
    error = report["error"]
    assert error["type"] == "LoopAborted"
    assert error["hook_aborted"] is True
    assert error["code"] == rulings[abort].reason == "tool_loop_recovery_exhausted"
    assert error["message"] == error["reason"] == rulings[abort].text
    # the model was asked once per call up to the aborted one, and never after it: CrewAI did
    # not retry the task, and the aborted call's result reached no model
    reads = reads_of(model.conversations())
    assert len(reads) == abort + 1
    # what the model read of each call before the abort: the result, the result with the
    # warning, or loopwatch's reason for the block (never CrewAI's own "blocked" text)
    seen = [outcome.text for outcome in reads[-1].outcomes]
    assert len(seen) == abort
    for index, ruling in enumerate(rulings[:abort]):
        if ruling.action == "allow":
            assert seen[index] == RESULT
        elif ruling.action == "warn":
            assert ruling.text is not None
            assert "loopwatch warning" in ruling.text
            assert seen[index] == f"{RESULT}\n\n{ruling.text}"
        else:
            assert ruling.action == "block"
            assert ruling.text is not None
            assert "[same_call_streak]" in ruling.text
            assert seen[index] == ruling.text
    assert not any(CREWAI_BLOCKED in text for c in model.conversations() for text in c.texts)


def looping_model() -> FakeModel:
    return FakeModel(RepeatTool("read", {"path": "PLAN.md"}, max_calls=CALLS), ChatCompletionsApi)


def test_a_looping_crew_is_warned_blocked_then_stopped_in_process(crewai_python: str, tmp_path: Path) -> None:
    with looping_model() as model:
        report = drive(crewai_python, tmp_path, model)
    check_looping_run(report, model)
    # one run (the agent's task in this kickoff) in one session (the kickoff), no parent
    runs = {(run, session, parent) for run, _tool, session, parent in report["asked"]}
    assert len(runs) == 1
    ((run, session, parent),) = runs
    assert run == report["error"]["run_id"]
    assert session is not None
    assert session != run
    assert parent is None


def test_a_looping_crew_is_warned_blocked_then_stopped_through_a_gateway(
    crewai_python: str, tmp_path: Path, gateway_config: Path
) -> None:
    with looping_model() as model, gateway_process("--config", str(gateway_config)) as gateway:
        report = drive(crewai_python, tmp_path, model, gateway_url=gateway.url)
        run = gateway_json(gateway.url, f"/fleet/run?id={urllib.parse.quote(report['error']['run_id'])}")
    assert report["failures"] == []
    check_looping_run(report, model)
    assert run["status"] == "ended"  # the kickoff's end ended its run at the gateway


def dead_gateway() -> str:
    with gateway_process() as gateway:
        return gateway.url  # the gateway is gone once the block ends


#: fewer than CrewAI's own limit: it stops a run at the fifth identical call with the same result
FEW = 4


def test_a_dead_gateway_fails_open(crewai_python: str, tmp_path: Path) -> None:
    with FakeModel(RepeatTool("read", {"path": "PLAN.md"}, max_calls=FEW), ChatCompletionsApi) as model:
        report = drive(crewai_python, tmp_path, model, gateway_url=dead_gateway(), timeout_s=1)
    assert report["outcome"] == "finished", report
    assert report["executed"] == ["read PLAN.md"] * FEW
    assert report["failures"], "the guard should keep the failures to reach the gateway"
    seen = [outcome.text for outcome in reads_of(model.conversations())[-1].outcomes]
    assert seen == [RESULT] * FEW


def test_a_dead_gateway_refuses_every_call_when_failing_closed(crewai_python: str, tmp_path: Path) -> None:
    with FakeModel(RepeatTool("read", {"path": "PLAN.md"}, max_calls=FEW), ChatCompletionsApi) as model:
        report = drive(
            crewai_python, tmp_path, model, gateway_url=dead_gateway(), timeout_s=1, fail_open=False
        )
    assert report["outcome"] == "finished", report
    assert report["executed"] == []
    assert len(report["failures"]) == FEW + 1  # each call, and the run's end at the kickoff's end
    seen = [outcome.text for outcome in reads_of(model.conversations())[-1].outcomes]
    assert len(seen) == FEW
    assert all(text.startswith("loopwatch could not check this call, so it was not run") for text in seen)


def test_results_and_failures_are_reported_and_the_kickoff_ends_its_run(
    crewai_python: str, tmp_path: Path
) -> None:
    url = "https://example.com/plan"  # (the tool raises: nothing is fetched)
    steps = Steps(
        Reply(calls=(ToolCall("fetch", {"url": url}),)),
        Reply(calls=(ToolCall("read", {"path": "PLAN.md"}),)),
        final_text="finished",
    )
    with FakeModel(steps, ChatCompletionsApi) as model:
        report = drive(crewai_python, tmp_path, model)
    assert report["outcome"] == "finished", report
    assert report["executed"] == [f"fetch {url}", "read PLAN.md"]
    (run,) = {run for run, *_ in report["asked"]}
    error = f"{url} refused the connection"
    assert report["reported"] == [[run, "fetch", None, error], [run, "read", RESULT, None]]
    assert report["ended"] == [run]
    # the model read the tool's failure as CrewAI gives it
    seen = [outcome.text for outcome in reads_of(model.conversations())[-1].outcomes]
    assert seen == [f"Error executing tool: {error}", RESULT]


def test_the_parallel_calls_of_one_turn_are_each_decided_and_reported(
    crewai_python: str, tmp_path: Path
) -> None:
    """CrewAI runs the calls of one model turn on threads of their own: each is asked about and
    reported once, and each result reaches the model as the tool gave it."""
    turn = Reply(
        calls=(
            ToolCall("read", {"path": "a.md"}),
            ToolCall("read", {"path": "b.md"}),
            ToolCall("fetch", {"url": "u"}),
        )
    )
    with FakeModel(Steps(turn, turn, final_text="finished"), ChatCompletionsApi) as model:
        report = drive(crewai_python, tmp_path, model, preset=None)  # (no rule speaks: OpenClaw's)
    assert report["outcome"] == "finished", report
    calls = ["read a.md", "read b.md", "fetch u"] * 2
    assert sorted(report["executed"]) == sorted(calls)
    assert sorted(tool for _run, tool, *_ in report["asked"]) == sorted(["read", "read", "fetch"] * 2)
    assert sorted(tuple(entry[1:]) for entry in report["reported"]) == sorted(
        [("read", RESULT, None)] * 4 + [("fetch", None, "u refused the connection")] * 2
    )
    seen = [outcome.text for outcome in reads_of(model.conversations())[-1].outcomes]
    assert seen == [RESULT, RESULT, "Error executing tool: u refused the connection"] * 2


def test_crewais_own_repeat_limit_ends_the_kickoff_and_its_run(crewai_python: str, tmp_path: Path) -> None:
    """Under OpenClaw's rules alone (no preset) the same call with the same result is stopped by
    CrewAI first, at its fifth repeat: loopwatch saw every call and ends the run with the kickoff."""
    with looping_model() as model:
        report = drive(crewai_python, tmp_path, model, preset=None)
    assert report["outcome"] == "failed", report
    assert report["error"]["type"] == "ToolExecutionFailedError"
    assert report["executed"] == ["read PLAN.md"] * 5
    runs = {run for run, *_ in report["asked"]}
    assert len(report["asked"]) == 5
    assert report["ended"] == sorted(runs)
    assert not any("loopwatch" in text for c in model.conversations() for text in c.texts)


def test_a_healthy_crew_is_untouched(crewai_python: str, tmp_path: Path) -> None:
    def kickoff(hooks: bool) -> tuple[Any, list[str], list[tuple[str, ...]]]:
        steps = [Reply(calls=(ToolCall("read", {"path": f"f{i}.md"}),)) for i in range(6)]
        with FakeModel(Steps(*steps, final_text="finished"), ChatCompletionsApi) as model:
            report = drive(crewai_python, tmp_path / str(hooks), model, hooks=hooks)
        seen = [outcome.text for outcome in reads_of(model.conversations())[-1].outcomes]
        assert report["outcome"] == "finished", report
        return report["final"], report["executed"], [tuple(seen)]

    assert (
        kickoff(True) == kickoff(False) == ("finished", [f"read f{i}.md" for i in range(6)], [(RESULT,) * 6])
    )


def test_a_coworker_is_a_subagent_of_its_delegator_and_its_abort_ends_its_own_run(
    crewai_python: str, tmp_path: Path
) -> None:
    delegate = ToolCall(
        "delegate_work_to_coworker",
        {"task": "Read the plan in PLAN.md.", "context": "The manager needs it.", "coworker": "Reader"},
    )
    script = Router(
        {"Coordinate the team": Steps(Reply(calls=(delegate,)), final_text="the manager is done")},
        default=RepeatTool("read", {"path": "PLAN.md"}, max_calls=CALLS),
    )
    with FakeModel(script, ChatCompletionsApi) as model:
        report = drive(crewai_python, tmp_path, model, scenario="delegation")
    rulings = expected_rulings(CALLS)
    abort = [ruling.action for ruling in rulings].index("abort")
    # the manager's delegation, then the coworker's reads up to the abort
    asked = report["asked"]
    tools = [tool for _run, tool, _session, _parent in asked]
    assert tools == ["delegate_work_to_coworker"] + ["read"] * (abort + 1)
    manager, _tool, session, parent = asked[0]
    assert parent is None
    ((coworker, coworker_session, coworker_parent),) = {(run, ses, par) for run, _tool, ses, par in asked[1:]}
    assert coworker != manager
    assert coworker_session == session  # one kickoff
    assert coworker_parent == manager  # the delegating run is the coworker's parent
    assert report["executed"] == ["read PLAN.md"] * sum(1 for ruling in rulings if ruling.proceed)
    # the coworker's run ended at its abort (its model was not asked again); the manager read
    # the reason as the delegation's answer and finished its own run
    conversations = model.conversations()
    assert len(reads_of(conversations)) == abort + 1
    managing = [c for c in conversations if "Coordinate the team" in c.prompt]
    assert len(managing) == 2
    (answer,) = managing[1].last_outcomes
    assert answer.name == "delegate_work_to_coworker"
    reason = rulings[abort].text
    assert reason is not None
    assert reason in answer.text
    assert report["outcome"] == "finished", report
    assert report["final"] == "the manager is done"
    assert sorted(report["ended"]) == sorted([manager, coworker])
    assert [run for run, tool, *_ in report["reported"] if tool == "delegate_work_to_coworker"] == [manager]


def gateway_json(url: str, path: str) -> Any:
    with urllib.request.urlopen(f"{url}{path}", timeout=10) as page:
        return json.loads(page.read())


#: runs a script with the driver's guard: a connection beyond localhost is refused and listed
GUARDED = """import json, runpy, sys
from tests.integration.runtimes.crewai_driver import CONNECTIONS, _no_network
sys.addaudithook(_no_network)
try:
    runpy.run_path(sys.argv[1], run_name="__main__")
finally:
    print("connections:", json.dumps(CONNECTIONS), file=sys.stderr)
"""


def test_the_quick_start_of_the_docs_runs_as_written(crewai_python: str, tmp_path: Path) -> None:
    """docs/crewai.md's snippet, pasted as it is (no API key, no network), prints what the page
    says it prints."""
    page = (ROOT / "docs" / "crewai.md").read_text()
    snippet = re.search(r"```python\n(.*?)```", page, re.S)
    said = re.search(r"It prints `(.*?)…`", page, re.S)
    assert snippet is not None
    assert said is not None
    (tmp_path / "quick_start.py").write_text(snippet.group(1))
    env = crewai_env(tmp_path)
    finished = run_bounded(
        [crewai_python, "-c", GUARDED, "quick_start.py"], env=env, cwd=tmp_path, timeout=300
    )
    finished.assert_succeeded()
    printed = finished.stdout.strip().splitlines()[-1]
    assert printed.startswith(" ".join(said.group(1).split()))
    assert printed == expected_rulings(CALLS)[-1].text  # the core's abort, in loopwatch's words
    assert finished.stderr.strip().splitlines()[-1] == "connections: []"
