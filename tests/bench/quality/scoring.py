"""How a detector did on the real-trajectory corpus: loops stopped, healthy runs left alone.

A detector's answer is, per run, the call index (1-based over the run's tool calls) of its
first warning and of its first stop (a block or an abort: the agent does not get to make that
call), or ``None``. Scored against the hand labels (``labels-dev.jsonl``: ``loop`` or
``healthy``, for some loops ``loop_start`` and ``stop_by``) and the benchmark outcomes of the
manifest (``resolved`` runs are ones a stop would have cost a solved task), per detector and
per agent family:

* loops stopped, of the labelled loops; healthy runs stopped, and healthy runs warned (not
  stopped); resolved runs stopped (of the whole corpus);
* the median first-stop call index over the loops stopped; where ``loop_start`` is labelled,
  the median number of calls from it to the first stop (negative: stopped before the loop
  began), and how many were stopped by ``stop_by``.
"""

from __future__ import annotations

import gzip
import json
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Answer", "Corpus", "Score", "load_corpus", "score"]

CORPUS_DIR = Path(__file__).resolve().parents[2] / "data" / "real-trajectories"


@dataclass(frozen=True)
class Answer:
    """A detector's answer for one run."""

    first_warn: int | None = None
    first_stop: int | None = None


@dataclass(frozen=True)
class Corpus:
    """The corpus's runs (their families and call counts), labels and benchmark outcomes."""

    events_path: Path
    families: dict[str, str]
    calls: dict[str, int]
    labels: dict[str, dict[str, Any]]
    outcomes: dict[str, str]

    @property
    def loops(self) -> list[str]:
        return [run for run, label in self.labels.items() if label["label"] == "loop"]

    @property
    def healthy(self) -> list[str]:
        return [run for run, label in self.labels.items() if label["label"] == "healthy"]

    @property
    def resolved(self) -> list[str]:
        return [run for run in self.calls if self.outcomes.get(run) == "resolved"]


def _jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def load_corpus(directory: Path = CORPUS_DIR) -> Corpus:
    """The corpus in ``directory`` (events, labels, manifest)."""
    events_path = directory / "events.jsonl.gz"
    families: dict[str, str] = {}
    calls: dict[str, int] = {}
    with gzip.open(events_path, "rt", encoding="utf-8") as lines:
        for line in lines:
            event = json.loads(line)
            run = event["run_id"]
            families.setdefault(run, event.get("agent_id") or run.split("/", 1)[0])
            calls[run] = calls.get(run, 0) + (event["type"] == "tool_call")
    labels = {row["run_id"]: row for row in _jsonl(directory / "labels-dev.jsonl")}
    outcomes = {row["run_id"]: row.get("outcome", "unknown") for row in _jsonl(directory / "manifest.jsonl")}
    return Corpus(events_path, families, calls, labels, outcomes)


@dataclass
class Score:
    """One detector's figures over a set of runs (the whole corpus, or one family)."""

    loops: int = 0
    loops_stopped: int = 0
    loops_warned: int = 0
    healthy: int = 0
    healthy_stopped: int = 0
    healthy_warned: int = 0
    resolved: int = 0
    resolved_stopped: int = 0
    runs_stopped: int = 0
    stop_calls: list[int] = field(default_factory=list)
    from_loop_start: list[int] = field(default_factory=list)
    by_stop_by: int = 0
    with_stop_by: int = 0

    @property
    def median_stop(self) -> float | None:
        return statistics.median(self.stop_calls) if self.stop_calls else None

    @property
    def median_from_start(self) -> float | None:
        return statistics.median(self.from_loop_start) if self.from_loop_start else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "loops_stopped": self.loops_stopped,
            "loops": self.loops,
            "loops_warned": self.loops_warned,
            "healthy_stopped": self.healthy_stopped,
            "healthy_warned": self.healthy_warned,
            "healthy": self.healthy,
            "resolved_stopped": self.resolved_stopped,
            "resolved": self.resolved,
            "runs_stopped": self.runs_stopped,
            "median_stop": self.median_stop,
            "median_from_loop_start": self.median_from_start,
            "stopped_by_stop_by": self.by_stop_by,
            "with_stop_by": self.with_stop_by,
        }


def score(corpus: Corpus, answers: Mapping[str, Answer], family: str | None = None) -> Score:
    """The figures of one detector's ``answers`` (runs it did not answer: no warning, no stop)."""
    found = Score()
    nothing = Answer()
    for run in corpus.calls:
        if family is not None and corpus.families[run] != family:
            continue
        answer = answers.get(run, nothing)
        stopped = answer.first_stop is not None
        found.runs_stopped += stopped
        if corpus.outcomes.get(run) == "resolved":
            found.resolved += 1
            found.resolved_stopped += stopped
        label = corpus.labels.get(run)
        if label is None:
            continue
        if label["label"] == "loop":
            found.loops += 1
            found.loops_warned += answer.first_warn is not None
            if label.get("stop_by") is not None:
                found.with_stop_by += 1
                found.by_stop_by += stopped and answer.first_stop <= label["stop_by"]
            if answer.first_stop is None:
                continue
            found.loops_stopped += 1
            found.stop_calls.append(answer.first_stop)
            if label.get("loop_start") is not None:
                found.from_loop_start.append(answer.first_stop - label["loop_start"])
        else:
            found.healthy += 1
            if stopped:
                found.healthy_stopped += 1
            elif answer.first_warn is not None:
                found.healthy_warned += 1
    return found
