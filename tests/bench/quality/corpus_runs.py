"""The real-trajectory corpus read as runs of tool calls, for the peer adapters (stdlib only).

Imported by the Python adapters inside the peers' own venvs (run as ``python -m`` from the
repository root) and by ``peers.py`` in the project's venv, so it uses the standard library only
and runs on Python 3.11 and later.

The rules it keeps:

* A run is every event with its ``run_id``; runs come in the order their first event appears.
* A run's calls are its ``tool_call`` events in file order; call indices are 1-based over them.
* A ``tool_result`` is the outcome of the oldest call of its run with the same ``tool_call_id``
  that has no outcome yet (the corpus repeats ids in a few tau-bench runs); it carries either
  ``result`` or ``error``. A call whose run ended before its result has no outcome.
* Consecutive calls with the same ``batch_id`` came from one model response (one agent step);
  a call without ``batch_id`` is a step of its own.
"""

from __future__ import annotations

import gzip
import io
import json
import sys
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

REPO_ROOT = Path(__file__).resolve().parents[3]
REPO_EVENTS = REPO_ROOT / "tests" / "data" / "real-trajectories" / "events.jsonl.gz"
SHARED_EVENTS = REPO_ROOT.parent / "shared" / "corpus" / "real-trajectories" / "events.jsonl.gz"


def default_events_path() -> Path:
    """The repository's copy of the corpus if it is there, else the shared corpus beside it."""
    return REPO_EVENTS if REPO_EVENTS.exists() else SHARED_EVENTS


@dataclass
class Call:
    """One tool call and, once its result arrived, its outcome."""

    index: int
    tool: str
    params: Any
    tool_call_id: str | None
    batch_id: str | None
    outcome: str | None = None  # "result", "error", or None (no result in the run)
    result: Any = None
    error: Any = None


@dataclass
class Run:
    run_id: str
    calls: list[Call] = field(default_factory=list)

    def steps(self) -> list[list[Call]]:
        """The calls grouped by agent step: consecutive calls sharing a ``batch_id``."""
        grouped: list[list[Call]] = []
        for call in self.calls:
            if grouped and call.batch_id is not None and grouped[-1][-1].batch_id == call.batch_id:
                grouped[-1].append(call)
            else:
                grouped.append([call])
        return grouped


def _open_text(source: str | Path) -> IO[str]:
    # The file is closed with the text wrapper returned (its caller's ``with``).
    raw: IO[bytes] = sys.stdin.buffer if str(source) == "-" else open(source, "rb")  # noqa: SIM115
    head = raw.peek(2)[:2] if isinstance(raw, io.BufferedReader) else b""
    if head == b"\x1f\x8b" or (not head and str(source).endswith(".gz")):
        return io.TextIOWrapper(gzip.GzipFile(fileobj=raw), encoding="utf-8")
    return io.TextIOWrapper(raw, encoding="utf-8")


def read_runs(source: str | Path) -> list[Run]:
    """Every run of the events file (gzip or plain JSON lines; ``-`` is standard input)."""
    runs: dict[str, Run] = {}
    pending: dict[str, dict[str, deque[Call]]] = {}
    with _open_text(source) as lines:
        for line in lines:
            if not line.strip():
                continue
            event = json.loads(line)
            run_id = event["run_id"]
            run = runs.get(run_id)
            if run is None:
                run = runs[run_id] = Run(run_id)
                pending[run_id] = {}
            kind = event["type"]
            if kind == "tool_call":
                call = Call(
                    index=len(run.calls) + 1,
                    tool=event["tool"],
                    params=event.get("params"),
                    tool_call_id=event.get("tool_call_id"),
                    batch_id=event.get("batch_id"),
                )
                run.calls.append(call)
                pending[run_id].setdefault(str(call.tool_call_id), deque()).append(call)
            elif kind == "tool_result":
                waiting = pending[run_id].get(str(event.get("tool_call_id")))
                if not waiting:
                    raise ValueError(f"{run_id}: a result for no pending call: {event.get('event_id')}")
                call = waiting.popleft()
                if event.get("error") is not None:
                    call.outcome, call.error = "error", event["error"]
                else:
                    call.outcome, call.result = "result", event.get("result")
    return list(runs.values())


def result_text(value: Any) -> str:
    """A result or error as the text a runtime would hand its model."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def answer_line(run: Run, first_stop: int | None, first_warn: int | None, **extra: Any) -> str:
    """The adapter's output line for one run."""
    answer: dict[str, Any] = {
        "run_id": run.run_id,
        "calls": len(run.calls),
        "first_stop": first_stop,
        "first_warn": first_warn,
    }
    answer.update(extra)
    return json.dumps(answer)
