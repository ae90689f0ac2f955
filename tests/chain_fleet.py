"""A delegation chain whose runs land on every partition, in three phases, for the worker tests
(``tests/integration/test_chain_alerts.py``) and the ``chain-across-workers`` fault scenario.

* **A**: the root and four subagents: two do their own work, two (``reader-a``, ``reader-b``)
  read the same file with the same result 4 and 3 times. Five runs, seven repeated reads in
  two runs: no alert.
* **B**: a sixth run (``reader-c``) reads the file once: the chain reaches ``maxRuns`` (6), and
  the read 8 calls in 3 runs, past both repeat thresholds (5, 8) at once. Three alerts, whose
  every field is the same whatever order the workers' facts arrive in.
* **C** (after every worker knows the alerts): four new runs, one per partition, and one
  started too deep: each of their calls is blocked (``chain_runaway``; the deep one's also
  ``delegation_depth``, whose second critical aborts it); the readers read the file again
  (blocked, ``chain_repeat``) and another one (free); the root goes on (free). The chain ends
  at 11 runs, short of the next runaway alert (12).

With ``block: true`` the in-process core fed A, B, C in that order gives the same verdicts as
workers that learn the alerts between B and C.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from typing import Any

from loopwatch.detectors.events import Event, ToolCall, ToolResult
from loopwatch.detectors.stable_json import from_python
from loopwatch.streams.embedded.runtime import partition_for

__all__ = ["DELEGATION", "ChainPhases", "chain_phases", "with_delegation"]

DELEGATION: dict[str, Any] = {
    "enabled": True,
    "maxDepth": 3,
    "maxRuns": 6,
    "minRuns": 3,
    "chainWarningThreshold": 5,
    "chainCriticalThreshold": 8,
    "block": True,
}
AGENT = "orchestrated"
SPEC = {"path": "/docs/spec.md"}


@dataclass(frozen=True)
class ChainPhases:
    root: str
    a: list[Event]
    b: list[Event]
    c: list[Event]

    @property
    def events(self) -> list[Event]:
        return [*self.a, *self.b, *self.c]


def with_delegation(config_text: str) -> str:
    """A JSON config with the chain rules of this fleet switched on (blocks included)."""
    document = json.loads(config_text)
    section = document.setdefault("loopwatch", {})
    detectors = section.setdefault("detectors", {})
    detectors["delegation"] = dict(DELEGATION)
    return json.dumps(document, indent=1)


def _spread(prefix: str, partitions: int, count: int, taken: set[int] | None = None) -> list[str]:
    """``count`` run ids ``{prefix}-{n}``, on as many different partitions as there are."""
    chosen: list[str] = []
    used: set[int] = set(taken or ())
    for n in itertools.count():
        run = f"{prefix}-{n}"
        partition = partition_for(run, partitions)
        if partition in used and len(used) < partitions:
            continue
        used.add(partition)
        chosen.append(run)
        if len(chosen) == count:
            return chosen
    raise AssertionError("unreachable")


class _Runs:
    def __init__(self, root: str, t0: int) -> None:
        self.root = root
        self.clock = t0
        self.ids = itertools.count()
        self.started: set[str] = set()

    def call(self, run: str, params: Any, depth: int | None = None, with_result: bool = True) -> list[Event]:
        self.clock += 700
        n = next(self.ids)
        chain: dict[str, Any] = {}
        if run not in self.started:
            self.started.add(run)
            if run != self.root:
                chain = {"parent_run_id": self.root, "root_run_id": self.root, "depth": depth or 1}
        call = ToolCall(
            event_id=f"{run}-c{n}",
            run_id=run,
            agent_id=AGENT,
            ts=self.clock,
            tool="read",
            params=from_python(params),
            tool_call_id=f"{run}-t{n}",
            **chain,
        )
        if not with_result:
            return [call]
        text = "the spec" if params == SPEC else f"contents of {params['path']}"
        result = ToolResult(
            event_id=f"{run}-r{n}",
            run_id=run,
            agent_id=AGENT,
            ts=self.clock + 200,
            tool="read",
            params=call.params,
            tool_call_id=call.tool_call_id,
            result=from_python({"content": [{"type": "text", "text": text}]}),
        )
        return [call, result]


def chain_phases(tag: str, partitions: int = 4, t0: int = 1_000) -> ChainPhases:
    """The three phases of one chain rooted at ``{tag}-root`` (event times from ``t0`` ms)."""
    root = f"{tag}-root"
    runs = _Runs(root, t0)
    workers = _spread(f"{root}/worker", partitions, 2, {partition_for(root, partitions)})
    readers = _spread(f"{root}/reader", partitions, 3)
    fresh = _spread(f"{root}/late", partitions, 4)
    deep = f"{root}/deep-0"
    a: list[Event] = runs.call(root, {"path": "/plan.md"})
    for run in workers:
        a += runs.call(run, {"path": f"/{run}.md"})
    for run, reads in ((readers[0], 4), (readers[1], 3)):
        for _ in range(reads):
            a += runs.call(run, SPEC)
    b = runs.call(readers[2], SPEC)
    c: list[Event] = []
    for run in fresh:
        c += runs.call(run, {"path": f"/{run}/1.md"}, with_result=False)
        c += runs.call(run, {"path": f"/{run}/2.md"}, with_result=False)
    for n in range(3):
        c += runs.call(deep, {"path": f"/deep/{n}.md"}, depth=5, with_result=False)
    c += runs.call(readers[0], SPEC, with_result=False)
    c += runs.call(readers[1], SPEC, with_result=False)
    c += runs.call(readers[0], {"path": "/docs/other.md"})
    c += runs.call(root, {"path": "/plan-2.md"})
    return ChainPhases(root, a, b, c)
