"""loopwatch's batch admission against OpenClaw's shipped ``admitToolCallBatch`` (issue 22 §3).

The same steps go through ``openclaw@2026.9.6``'s own batch admission on its own session state
(``openclaw_batch_oracle.mjs``: ``admitToolCallBatch``, then ``commitReadyCalls`` for an
admitted batch; ``recordToolCall`` / ``recordToolCallOutcome`` for the history around it) and
through loopwatch's core (:func:`detectors.batch_admission.admit_batch` on a run's state, with
the history functions the conformance runner uses), revision 2026-08 with SHA-256 digests.

Compared after every batch: whether it was refused and by which call, the critical's detector
and count, the warnings an admitted batch collected (call and count, in order), the whole
history after it (tool, arguments hash, call id, result hash, outcome kind: the projection
left nothing behind, the admitted calls are committed in order, a refused batch left exactly
its veto records) and the warning buckets (a refused batch's warnings update them too).

First the batch vectors (``tests/data/loopwatch-batch.jsonl``), step for step, so their
expectations are OpenClaw's; then a seeded random fleet of histories and batches over a few
tools, arguments and outcomes (repeats, polls, alternations, errors), with outcomes reported
for some calls of every batch whatever became of it. The tools avoid the known differences of
``test_openclaw_oracle.py`` (update_plan, unknown tools, sends, markers).
"""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

from loopwatch.config.fleet import FleetConfig
from loopwatch.config.settings import DetectorSettings
from loopwatch.detectors.batch_admission import admit_batch
from loopwatch.detectors.conformance import _template
from loopwatch.detectors.events import ToolCall, ToolResult, Verdict
from loopwatch.detectors.state import RunState
from loopwatch.detectors.step import prepare_for, record_outcome
from tests.differential.oracle import OpenClawOracle, locate_openclaw
from tests.helpers import ROOT

DRIVER = Path(__file__).resolve().parent / "openclaw_batch_oracle.mjs"
VECTORS = ROOT / "tests" / "data" / "loopwatch-batch.jsonl"
SEED = 2026_09_22
RUNS = 600
SETTINGS = DetectorSettings(digest="sha256", openclaw_revision="2026-08")

Step = dict[str, Any]


class Loopwatch:
    """loopwatch's side of the same steps: one run state per run."""

    def __init__(self) -> None:
        self.config = FleetConfig({"enabled": True}, {}, SETTINGS)
        self.resolved = self.config.for_agent("default")
        self.states: dict[str, RunState] = {}
        self.events = 0

    def _state(self, run: str) -> RunState:
        state = self.states.get(run)
        if state is None:
            state = self.states[run] = RunState(run, "default", run, None)
        return state

    def _id(self) -> str:
        self.events += 1
        return f"e{self.events}"

    def step(self, step: Step) -> dict[str, Any]:
        run, op = step["run"], step["op"]
        state = self._state(run)
        if op == "call":
            call = ToolCall(event_id=self._id(), run_id=run, tool=step["tool"], params=step["params"])
            args_hash = prepare_for(call, self.config, self.resolved).args_hash
            state.history.append(
                step["tool"], args_hash, step["toolCallId"], None, None, None, self.resolved.history_size
            )
            return {}
        if op == "outcome":
            fields = {"error": step["error"]} if "error" in step else {"result": step["result"]}
            result = ToolResult(
                event_id=self._id(), run_id=run, tool=step["tool"], params=step["params"], **fields
            )
            hashes = prepare_for(result, self.config, self.resolved)
            record_outcome(state, step["tool"], step["toolCallId"], None, hashes, self.resolved)
            return {}
        if op == "end":
            del self.states[run]
            return {}
        assert op == "batch", op
        calls = [
            ToolCall(
                event_id=self._id(),
                run_id=run,
                tool=call["tool"],
                params=call["params"],
                tool_call_id=call["toolCallId"],
                batch_id=f"batch-{self.events}",
            )
            for call in step["calls"]
        ]
        outcome = admit_batch(state, calls, self.config)
        trigger = outcome.refused_by
        found = outcome.found[trigger] if trigger is not None else None
        warnings = [
            [call.tool_call_id, verdict.count]
            for call, outputs in zip(calls, outcome.outputs, strict=True)
            for verdict in outputs
            if isinstance(verdict, Verdict) and verdict.action == "warn"
        ]
        return {
            "refusedBy": calls[trigger].tool_call_id if trigger is not None else None,
            "detector": found.detector if found is not None else None,
            "count": found.count if found is not None else None,
            "warnings": [] if trigger is not None else warnings,
            "history": [
                [r.tool, r.args_hash, r.tool_call_id, r.result_hash, r.kind] for r in state.history.records
            ],
            "buckets": [[key, bucket] for key, bucket in state.buckets.items()],
        }


def _vector_steps(vector: dict[str, Any], run: str) -> list[Step]:
    """A batch vector's record and invoke_batch steps in the oracle's vocabulary."""
    steps: list[Step] = []
    for raw in vector["steps"]:
        for rep in range(raw.get("repeat", 1)):
            step = {k: (v if k == "expect" else _template(v, rep)) for k, v in raw.items() if k != "repeat"}
            op = step["op"]
            if op == "record":
                call = {
                    "run": run,
                    "tool": step["tool"],
                    "params": step["params"],
                    "toolCallId": step["toolCallId"],
                }
                steps.append({**call, "op": "call"})
                steps.append({**call, "op": "outcome", "result": step["result"]})
            elif op == "invoke_batch":
                calls = [
                    {"tool": c["tool"], "params": c["params"], "toolCallId": c["toolCallId"]}
                    for c in step["calls"]
                ]
                steps.append({"run": run, "op": "batch", "calls": calls})
    return steps


_CALLS = [
    ("read", {"path": "a.txt"}),
    ("read", {"path": "b.txt"}),
    ("ls", {"dir": "."}),
    ("command_status", {"id": "job-1"}),
    ("process", {"action": "poll", "sessionId": "s1"}),
]
_RESULTS: list[dict[str, Any]] = [
    {"result": {"content": [{"type": "text", "text": "same"}]}},
    {"result": {"content": [{"type": "text", "text": "other"}]}},
    {"result": {"content": [{"type": "text", "text": "still running"}], "details": {"status": "running"}}},
    {"error": "ENOENT: no such file"},
]


def _random_run(rng: random.Random, run: str) -> list[Step]:
    """A run: stretches of recorded calls (a favourite call repeated, two calls alternating,
    noise), each followed by one to three batches of 1 to 5 calls (mostly the favourites, in
    the stretch's pattern), with outcomes for most calls of every batch."""
    steps: list[Step] = []
    ids = iter(range(1_000_000))
    favourite, other = rng.sample(_CALLS, 2)
    result = rng.choice(_RESULTS)

    def pick(shape: float, index: int) -> tuple[str, dict[str, Any]]:
        if shape < 0.5:
            return favourite
        if shape < 0.8:
            return favourite if index % 2 == 0 else other
        return rng.choice(_CALLS)

    def outcome() -> dict[str, Any]:
        return result if rng.random() < 0.9 else rng.choice(_RESULTS)

    for _ in range(rng.randint(4, 10)):
        shape = rng.random()
        length = rng.randint(2, 26)
        for index in range(length):
            tool, params = pick(shape, index)
            call: Step = {"run": run, "tool": tool, "params": params, "toolCallId": f"h{next(ids)}"}
            steps.append({**call, "op": "call"})
            steps.append({**call, "op": "outcome", **outcome()})
        for _ in range(rng.choice([1, 1, 2, 3])):
            batch: list[Step] = []
            for index in range(rng.choice([1, 2, 2, 3, 3, 4, 5])):
                tool, params = pick(shape, length + index) if rng.random() < 0.8 else rng.choice(_CALLS)
                batch.append({"tool": tool, "params": params, "toolCallId": f"b{next(ids)}"})
            steps.append({"run": run, "op": "batch", "calls": batch})
            for call in batch:
                if rng.random() < 0.8:
                    steps.append({"run": run, "op": "outcome", **call, **outcome()})
    steps.append({"run": run, "op": "end"})
    return steps


def _compare(steps: list[Step], answers: list[dict[str, Any]], where: str) -> Counter[str]:
    ours = Loopwatch()
    seen: Counter[str] = Counter()
    for index, (step, theirs) in enumerate(zip(steps, answers, strict=True)):
        mine = ours.step(step)
        assert mine == theirs, (
            f"{where}, step {index} {json.dumps(step)[:300]}:\nloopwatch {mine}\nOpenClaw  {theirs}"
        )
        if step["op"] == "batch":
            seen["batches"] += 1
            seen["refused" if theirs["refusedBy"] is not None else "admitted"] += 1
            seen["warned" if theirs["warnings"] else "quiet"] += 1
            if theirs["refusedBy"] is not None:
                seen[f"refused: {theirs['detector']}"] += 1
                if theirs["refusedBy"] != step["calls"][0]["toolCallId"]:
                    seen["refused by a later call"] += 1
    return seen


def test_batch_admission_is_openclaws() -> None:
    node, package = locate_openclaw()
    oracle = OpenClawOracle(node, package, DRIVER)
    try:
        vectors = [json.loads(line) for line in VECTORS.read_text().splitlines() if line.strip()]
        assert len(vectors) >= 3
        for number, vector in enumerate(vectors):
            steps = _vector_steps(vector, f"vector-{number}")
            answers = oracle.exchange([json.dumps(step).encode() + b"\n" for step in steps])
            seen = _compare(steps, answers, vector["name"])
            assert seen["batches"] >= 1, vector["name"]
        rng = random.Random(SEED)
        totals: Counter[str] = Counter()
        runs = [_random_run(rng, f"run-{number}") for number in range(RUNS)]
        lines = [json.dumps(step).encode() + b"\n" for run in runs for step in run]
        answers = oracle.exchange(lines)
        start = 0
        for number, run in enumerate(runs):
            totals += _compare(run, answers[start : start + len(run)], f"random run {number}")
            start += len(run)
        print(f"batch admission vs OpenClaw: {dict(totals)}")
        # the fleet must make OpenClaw refuse, refuse by a later call and warn, or this proves little
        assert totals["refused"] >= 200
        assert totals["refused by a later call"] >= 100
        assert totals["warned"] >= 500
        assert totals["admitted"] >= 1000
        for detector in ("generic_repeat", "known_poll_no_progress", "global_circuit_breaker", "ping_pong"):
            assert totals[f"refused: {detector}"] >= 5, detector
    finally:
        oracle.close()
