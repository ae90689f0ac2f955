"""CrewAI's shipped repeated-call stop, replayed over the corpus (runs in .bench/quality-venv).

Usage, from the repository root:
    .bench/quality-venv/bin/python -m tests.bench.quality.crewai_adapter [EVENTS|-]
prints one JSON line per run: {"run_id", "calls", "first_stop", "first_warn"}.

What is called: ``crewai.utilities.agent_utils.check_repeated_tool_call`` of crewai 1.15.30,
imported from the installed package, not re-implemented. Its executor (``AgentExecutor``) keeps
one ``counts`` dict per execution (cleared when an execution starts) and calls it after every
tool call that ran, with the tool's name, its arguments and what it returned; the check tallies
(tool, arguments, str(result)) over the whole execution and raises ``ToolExecutionFailedError``
on the ``MAX_REPEATED_TOOL_CALLS``-th (5th) identical triple, ending the run. The replay:

* one fresh ``counts`` dict per run (one run is one execution);
* every call with an outcome, in order: ``tool_name`` = the call's tool, ``tool_args`` = its
  ``params``, ``result`` = its result, or for a failed call the text the native tool path makes of
  a tool's exception, ``"Error executing tool: <error>"``;
* a call without a result (the run ended first) is not checked, as the executor checks only after
  the tool returned;
* ``first_stop`` = the index of the call on which the check raised (that call ran, its result is
  withheld and the run ends); calls after it are not fed.
* ``first_warn`` is always null: the check has no warning stage.

No stand-ins: ``agent`` and ``task`` are optional and only name the run in the error message.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from tests.bench.quality.corpus_runs import Run, answer_line, default_events_path, read_runs


def first_repeated_stop(run: Run, check: Any, stop_error: type[BaseException]) -> int | None:
    counts: dict[int, int] = {}
    for call in run.calls:
        if call.outcome is None:
            continue
        result = call.result if call.outcome == "result" else f"Error executing tool: {call.error}"
        try:
            check(counts, tool_name=call.tool, tool_args=call.params, result=result)
        except stop_error:
            return call.index
    return None


def main(argv: list[str]) -> int:
    source = argv[1] if len(argv) > 1 else str(default_events_path())
    os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("OTEL_SDK_DISABLED", "true")
    out = sys.stdout
    sys.stdout = sys.stderr  # the package's own printing must not mix with the answers
    agent_utils = importlib.import_module("crewai.utilities.agent_utils")
    tool_failure = importlib.import_module("crewai.tools.tool_failure")
    check = agent_utils.check_repeated_tool_call
    stop_error: type[BaseException] = tool_failure.ToolExecutionFailedError
    for run in read_runs(source):
        out.write(answer_line(run, first_repeated_stop(run, check, stop_error), None) + "\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
