"""All fleet-wide rules over all subjects, in memory: what the embedded runtime, ``run``,
``replay`` and the demo use (the Kafka worker keeps the same per-subject states in a table).

Feed it every event with its outputs, in input order (:meth:`FleetWatch.observe`); it gives
the alerts, keeps the ones it gave (:attr:`FleetWatch.alerts`) and answers fail-fast
questions for the next calls (:meth:`FleetWatch.fail_fast`).
"""

from __future__ import annotations

from loopwatch.config.fleet import FleetConfig
from loopwatch.config.fleet_rules import FleetRules
from loopwatch.detectors.events import Event, Output, ToolCall, Verdict
from loopwatch.detectors.fleet import systemic_loop, tool_outage
from loopwatch.detectors.fleet.alerts import FleetAlert
from loopwatch.detectors.fleet.facts import (
    CallFact,
    Fact,
    LoopFact,
    ResultFact,
    facts_of_event,
    facts_of_outputs,
)
from loopwatch.detectors.fleet.fail_fast import fail_fast_verdict, is_blocking
from loopwatch.detectors.hashing import Digester
from loopwatch.detectors.run_engine import FleetHooks
from loopwatch.detectors.step import Prepared

__all__ = ["FleetWatch", "WatchHooks", "apply_fact"]


def apply_fact(
    fact: Fact,
    rules: FleetRules,
    outages: dict[str, tool_outage.OutageState],
    agents: dict[str, systemic_loop.AgentLoops],
) -> list[FleetAlert]:
    """Step the subject state a fact belongs to (created on first use)."""
    if type(fact) is ResultFact:
        if not rules.tool_outage.enabled:
            return []
        outage = outages.get(fact.tool)
        if outage is None:
            outage = outages[fact.tool] = tool_outage.OutageState(fact.tool)
        return tool_outage.step(outage, fact, rules.tool_outage)
    assert type(fact) is CallFact or type(fact) is LoopFact
    if not rules.systemic_loop.enabled:
        return []
    loops = agents.get(fact.agent)
    if loops is None:
        loops = agents[fact.agent] = systemic_loop.AgentLoops(fact.agent)
    return systemic_loop.step(loops, fact, rules.systemic_loop)


class FleetWatch:
    """F1 and F2 over every tool and agent of the fleet."""

    def __init__(self, rules: FleetRules, digester: Digester) -> None:
        self.rules = rules
        self.digester = digester
        self.outages: dict[str, tool_outage.OutageState] = {}
        self.agents: dict[str, systemic_loop.AgentLoops] = {}
        self.alerts: list[FleetAlert] = []

    def observe(
        self, event: Event, scope: str, ts: int, prepared: Prepared | None, outputs: list[Output]
    ) -> list[FleetAlert]:
        """Apply an event (``prepared``: its hashes) and its outputs; the alerts they give."""
        facts = facts_of_event(event, scope, ts, prepared, self.digester)
        if outputs:
            facts += facts_of_outputs(outputs, scope, ts)
        alerts: list[FleetAlert] = []
        for fact in facts:
            alerts += apply_fact(fact, self.rules, self.outages, self.agents)
        self.alerts += alerts
        return alerts

    def open_outages(self) -> dict[str, tool_outage.OpenOutage]:
        """Tool → its open outage."""
        return {tool: state.open for tool, state in self.outages.items() if state.open is not None}

    def fail_fast(self, scope: str, event: ToolCall, ts: int, observe_only: bool) -> Verdict | None:
        """The fail-fast block of a call, if its tool is under an open outage and blocks are on."""
        state = self.outages.get(event.tool)
        opened = state.open if state is not None else None
        if opened is None or not is_blocking(opened.last_failure_ts, ts, self.rules.tool_outage):
            return None
        return fail_fast_verdict(scope, event, opened.alert_runs, observe_only)


class WatchHooks(FleetHooks):
    """A :class:`FleetWatch` as the run engine's fleet hooks: F1's fail-fast block when
    ``toolOutage.block`` is on. The watch sees the events itself, after each step
    (:meth:`FleetWatch.observe`, in input order), so nothing is noted here."""

    def __init__(self, watch: FleetWatch) -> None:
        self.watch = watch

    def fail_fast(self, scope: str, event: ToolCall, ts: int, config: FleetConfig) -> Output | None:
        watch = self.watch
        if not watch.rules.tool_outage.block:
            return None
        return watch.fail_fast(scope, event, ts, config.settings.observe_only)
