"""What loops cost, from the event and verdict streams: spend, loop spend, what stopping saved.

Pure (no clock). Calls and verdicts may come in any order (a worker follows the event and
the verdict topics apart): a verdict's trigger call is looked up among the run's calls. A
call's ``usage.cost_usd`` is the cost of the model turn that proposed it. Per run:

* ``spend``: every call's cost;
* ``loop``: the cost of the calls from the run's first verdict on, the call that got it
  included (the run state's ``loop_spend_usd``, the same definition);
* ``after_stop``: the cost of the calls after the run's first abort, the calls a runtime
  that honours verdicts would never have made: what stopping saves on recorded history.

Totals are kept per agent, per tool (the tool of the call) and per detector of the run's
first verdict; per run for the newest ``runs_kept`` runs (the dashboard's run list).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from loopwatch.detectors.events import Abort, Event, Output, ToolCall, run_scope

__all__ = ["RunSpend", "SpendLedger"]

CALLS_KEPT = 4096  # per run: a verdict for an older call than these starts the loop at its arrival


@dataclass
class RunSpend:
    agent: str
    spend: float = 0.0
    loop: float = 0.0
    after_stop: float = 0.0
    detector: str | None = None  # of the run's first verdict
    loop_from: str | None = None  # trigger of the first verdict, until its call is seen
    stop_after: str | None = None  # trigger of the first abort, until its call is seen
    looping: bool = False  # calls from here on are loop spend
    stopped: bool = False  # calls from here on would not have been made
    calls: list[tuple[str, str, float]] = field(default_factory=list)  # (event id, tool, cost)


@dataclass
class _Totals:
    spend: dict[str, float] = field(default_factory=dict)
    loop: dict[str, float] = field(default_factory=dict)
    after_stop: dict[str, float] = field(default_factory=dict)

    def add(self, name: str, spend: float, loop: float, after_stop: float) -> None:
        for table, value in ((self.spend, spend), (self.loop, loop), (self.after_stop, after_stop)):
            if value:
                table[name] = table.get(name, 0.0) + value

    def rows(self) -> list[dict[str, Any]]:
        names = sorted(set(self.spend) | set(self.loop), key=lambda n: (-self.loop.get(n, 0.0), n))
        return [
            {
                "name": name,
                "spend_usd": round(self.spend.get(name, 0.0), 6),
                "loop_spend_usd": round(self.loop.get(name, 0.0), 6),
                "saved_usd": round(self.after_stop.get(name, 0.0), 6),
            }
            for name in names
        ]


class SpendLedger:
    def __init__(self, runs_kept: int = 2000) -> None:
        self.runs: OrderedDict[str, RunSpend] = OrderedDict()
        self.runs_kept = runs_kept
        self.agents = _Totals()
        self.tools = _Totals()
        self.detectors = _Totals()

    def _run(self, scope: str, agent: str) -> RunSpend:
        run = self.runs.get(scope)
        if run is None:
            run = self.runs[scope] = RunSpend(agent)
            if len(self.runs) > self.runs_kept:
                self.runs.popitem(last=False)
        else:
            self.runs.move_to_end(scope)
        return run

    def event(self, event: Event) -> None:
        if not isinstance(event, ToolCall):
            return
        cost = event.usage.cost_usd if event.usage is not None else 0.0
        run = self._run(run_scope(event), event.agent_id)
        if run.loop_from == event.event_id:  # the verdict came first (two topics, followed apart)
            run.loop_from, run.looping = None, True
        loop = cost if run.looping else 0.0
        after_stop = cost if run.stopped else 0.0
        if run.stop_after == event.event_id:
            run.stop_after, run.stopped = None, True
        run.spend += cost
        run.loop += loop
        run.after_stop += after_stop
        run.calls.append((event.event_id, event.tool, cost))
        if len(run.calls) > CALLS_KEPT:
            del run.calls[0]
        self._add(run, event.tool, cost, loop, after_stop)

    def output(self, output: Output) -> None:
        scope = output.run_id or (f"session:{output.session_id}" if output.session_id else None)
        if scope is None:
            return
        run = self._run(scope, output.agent_id)
        trigger = output.trigger_event_id
        if run.detector is None:
            run.detector = output.detector
            later = self._calls_from(run, trigger)
            if later is None:
                run.loop_from = trigger
            else:
                run.looping = True
                for _, tool, cost in later:
                    run.loop += cost
                    self._add(run, tool, 0.0, cost, 0.0)
        if isinstance(output, Abort) and not run.stopped and run.stop_after is None:
            later = self._calls_from(run, trigger)
            if later is None:
                run.stop_after = trigger
            else:
                run.stopped = True
                for _, tool, cost in later[1:]:
                    run.after_stop += cost
                    self._add(run, tool, 0.0, 0.0, cost)

    @staticmethod
    def _calls_from(run: RunSpend, trigger: str) -> list[tuple[str, str, float]] | None:
        """The run's calls from ``trigger`` on, or ``None`` when that call is not seen yet."""
        for index in range(len(run.calls) - 1, -1, -1):
            if run.calls[index][0] == trigger:
                return run.calls[index:]
        return None

    def _add(self, run: RunSpend, tool: str, spend: float, loop: float, after_stop: float) -> None:
        self.agents.add(run.agent, spend, loop, after_stop)
        self.tools.add(tool, spend, loop, after_stop)
        if run.detector is not None:
            self.detectors.add(run.detector, 0.0, loop, after_stop)

    def summary(self, top_runs: int = 25) -> dict[str, Any]:
        """Totals, per agent, per tool, per first detector, and the costliest loops."""
        looping = sorted(
            ((scope, run) for scope, run in self.runs.items() if run.loop),
            key=lambda item: -item[1].loop,
        )[:top_runs]
        return {
            "spend_usd": round(sum(self.agents.spend.values()), 6),
            "loop_spend_usd": round(sum(self.agents.loop.values()), 6),
            "saved_usd": round(sum(self.agents.after_stop.values()), 6),
            "per_agent": self.agents.rows(),
            "per_tool": self.tools.rows(),
            "per_detector": self.detectors.rows(),
            "runs": [
                {
                    "run": scope,
                    "agent": run.agent,
                    "detector": run.detector,
                    "spend_usd": round(run.spend, 6),
                    "loop_spend_usd": round(run.loop, 6),
                    "saved_usd": round(run.after_stop, 6),
                }
                for scope, run in looping
            ],
        }
