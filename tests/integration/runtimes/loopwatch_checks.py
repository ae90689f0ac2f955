"""What the tests of real agent CLIs share (``test_codex_real.py``, ``test_gemini_real.py``,
``test_codex_loopwatch.py``, ``test_gemini_loopwatch.py``, ``test_claude_code_real.py``):

* the failing command the scripted model asks for each turn (:func:`failing_loop`);
* loopwatch's command hook (:func:`hook_command`), beside a recording hook on every event a
  runtime's hook maps, with its stderr kept for the fail-open checks (:class:`LoopwatchHooks`);
* what the in-process core decides for the calls a CLI proposed (:func:`core_decisions`), and
  what loopwatch says for a decision (:func:`hook_text`);
* the gateway's pages (:func:`gateway_json`, :func:`run_page`).
"""

from __future__ import annotations

import json
import shlex
import socket
import sys
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import msgspec

from loopwatch import LoopDetector
from loopwatch.detectors.facade import Decision
from loopwatch.detectors.runtime_texts import decision_text
from tests.integration.fake_model import FakeModel, RepeatTool, refused_with
from tests.integration.runtimes.process import Cli, CliRun
from tests.integration.runtimes.recording_hook import RecordingHook

__all__ = [
    "FAILING_COMMAND",
    "FAIL_OPEN",
    "FINAL_TEXT",
    "MISSING",
    "PROMPT",
    "HookedRun",
    "LoopwatchHooks",
    "core_decisions",
    "failing_loop",
    "first_refused",
    "first_with_action",
    "gateway_json",
    "hook_command",
    "hook_text",
    "loopwatch_command",
    "repeated_call_decisions",
    "run_page",
    "run_with_loopwatch",
    "unreachable_gateway_url",
]

PROMPT = "Find out why the build fails."
FAILING_COMMAND = "cat /nonexistent-file-xyz"
MISSING = "No such file or directory"  # in the failing command's output
FINAL_TEXT = "Stopping."  # the scripted model's answer once it stops calling
FAIL_OPEN = "allowing (fail open)"  # loopwatch's hook on stderr, when it lets a call through unasked


def failing_loop(
    tool: str, params: Mapping[str, Any], max_calls: int, until: str | None = None
) -> RepeatTool:
    """The model asks for ``tool`` with ``params`` (the failing command) each turn, until a tool
    result of the last request says ``until`` (a refusal's words) or ``max_calls`` calls were
    made; then it answers :data:`FINAL_TEXT`."""
    stop_when = refused_with(until) if until is not None else None
    return RepeatTool(tool, params, stop_when=stop_when, max_calls=max_calls, final_text=FINAL_TEXT)


def loopwatch_command() -> list[str]:
    """The ``loopwatch`` command beside this Python (or ``python -m loopwatch``)."""
    script = Path(sys.executable).with_name("loopwatch")
    return [str(script)] if script.exists() else [sys.executable, "-m", "loopwatch"]


def hook_command(runtime: str, gateway_url: str, stderr: Path | None = None) -> str:
    """``loopwatch hook RUNTIME`` asking ``gateway_url``, as a shell command; its stderr appended
    to ``stderr`` when given."""
    # a generous --timeout-ms: on a busy machine a slow answer would fail open and skew the counts
    hook_args = ["hook", runtime, "--gateway", gateway_url, "--timeout-ms", "10000"]
    command = shlex.join([*loopwatch_command(), *hook_args])
    return command if stderr is None else f"{command} 2>>{shlex.quote(str(stderr))}"


class LoopwatchHooks:
    """loopwatch's command hook for ``runtime`` beside a recording hook (which keeps what the CLI
    gave the hooks), files in ``directory``: the recorder's, loopwatch's stderr and its state."""

    def __init__(self, directory: Path, runtime: str, gateway_url: str) -> None:
        self.recorder = RecordingHook(directory / "recorder")
        self.stderr = directory / "loopwatch-hook.stderr"
        self.command = hook_command(runtime, gateway_url, self.stderr)
        self.env = {"LOOPWATCH_HOOK_STATE_DIR": str(directory / "hook-state")}

    def on(self, events: Iterable[str]) -> dict[str, list[str]]:
        """The CLI's hooks: the recorder, then loopwatch, on each of ``events``."""
        return {event: [self.recorder.command, self.command] for event in events}

    def calls(self, event: str) -> list[dict[str, Any]]:
        """What the CLI gave the hooks of ``event``, in order."""
        return self.recorder.calls(event)

    def stderr_lines(self) -> list[str]:
        text = self.stderr.read_text() if self.stderr.exists() else ""
        return [line for line in text.splitlines() if line.strip()]

    def assert_never_failed_open(self) -> None:
        lines = self.stderr_lines()
        assert lines == [], lines

    def assert_failed_open(self, times: int, gateway_url: str) -> None:
        """loopwatch's hook ran ``times`` times, and each time let the call through: no gateway
        answered at ``gateway_url``."""
        lines = self.stderr_lines()
        assert len(lines) == times, lines
        assert all(FAIL_OPEN in line and gateway_url in line for line in lines), lines


RunT = TypeVar("RunT", bound=CliRun)


@dataclass
class HookedRun(Generic[RunT]):
    """A CLI run against the fake ``model``, with ``hooks`` on every event."""

    run: RunT
    model: FakeModel
    hooks: LoopwatchHooks

    def calls(self, event: str) -> list[dict[str, Any]]:
        """What the CLI gave the hooks of ``event``, in order."""
        return self.hooks.calls(event)

    def requests(self) -> list[Any]:
        """The bodies of the model's turns (the requests the script answered), in order."""
        return [e.body for e in self.model.exchanges() if e.conversation is not None]


def run_with_loopwatch(
    cli: Cli[RunT],
    model: FakeModel,
    folder: Path,
    *,
    runtime: str,
    events: Iterable[str],
    gateway_url: str,
    base_path: str = "",
    timeout: float = 120.0,
) -> HookedRun[RunT]:
    """A run of ``cli`` (files under ``folder``) against ``model`` (at its URL + ``base_path``),
    with ``loopwatch hook RUNTIME`` asking ``gateway_url`` (and the recorder) on ``events``. The
    run must succeed."""
    hooks = LoopwatchHooks(folder, runtime, gateway_url)
    with model:
        base_url = model.url + base_path
        run = cli.run_in(
            folder, base_url=base_url, prompt=PROMPT, hooks=hooks.on(events), env=hooks.env, timeout=timeout
        )
    return HookedRun(run, model, hooks)


def unreachable_gateway_url() -> str:
    """A URL on 127.0.0.1 where nothing listens (a port that was free a moment ago)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


def gateway_json(gateway_url: str, path: str) -> Any:
    with urllib.request.urlopen(f"{gateway_url}{path}", timeout=10) as page:
        return json.loads(page.read())


def run_page(gateway_url: str, run_id: str) -> Any:
    """The gateway's view of one run (``/fleet/run``)."""
    return gateway_json(gateway_url, f"/fleet/run?id={urllib.parse.quote(run_id)}")


Outcome = Callable[[int], Mapping[str, Any]]


def core_decisions(calls: Sequence[tuple[str, Any]], outcome: Outcome) -> list[Decision]:
    """The in-process core's decision for each call (tool name, params) of one run, in order; a
    call that may proceed gets ``outcome(its index)`` as its result (``after_tool_call``'s
    ``result=`` or ``error=``)."""
    core = LoopDetector()
    decisions = []
    for index, (tool, params) in enumerate(calls):
        decision = core.before_tool_call("run", tool, params)
        decisions.append(decision)
        if decision.proceed:
            core.after_tool_call("run", tool, params, **outcome(index))
    return decisions


def repeated_call_decisions(tool: str, params: Any, calls: int, **outcome: Any) -> list[Decision]:
    """The in-process core's decision for each of ``calls`` identical calls of one run; a call
    that may proceed gets ``outcome`` (``error=`` or ``result=``) as its result."""
    return core_decisions([(tool, params)] * calls, lambda _: outcome)


def _first(decisions: Sequence[Decision], what: str, where: Callable[[Decision], bool]) -> int:
    for number, decision in enumerate(decisions, 1):
        if where(decision):
            return number
    raise AssertionError(f"no call {what}: {[d.action for d in decisions]}")


def first_refused(decisions: Sequence[Decision]) -> int:
    """The number (from 1) of the first call the core does not let proceed."""
    return _first(decisions, "refused", lambda decision: not decision.proceed)


def first_with_action(decisions: Sequence[Decision], action: str) -> int:
    """The number (from 1) of the first call the core answers with ``action``."""
    return _first(decisions, f"with {action}", lambda decision: decision.action == action)


def hook_text(decision: Decision) -> str:
    """What loopwatch says for ``decision`` (the gateway's answer to it, in a runtime's terms)."""
    answer = {
        "decision": decision.action,
        "message": decision.message,
        "reason": decision.reason,
        "verdicts": [msgspec.to_builtins(output) for output in decision.outputs],
    }
    return decision_text(answer)
