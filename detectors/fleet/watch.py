"""All fleet-wide rules over all subjects, in memory: what the embedded runtime, ``run``,
``replay`` and the demo use (the Kafka worker keeps the same per-subject states in a table).

Feed it every event with its outputs, in input order (:meth:`FleetWatch.observe`, with the
root of the event's delegation chain for F6); it gives the alerts, keeps the ones it gave
(:attr:`FleetWatch.alerts`; a chain's ``chain_active`` records, which the Kafka worker
publishes for the other workers' blocks, only go to its own :attr:`FleetWatch.blocks`) and
answers fail-fast and chain-block questions for the next calls (:meth:`FleetWatch.fail_fast`,
:attr:`FleetWatch.blocks`).
"""

from __future__ import annotations

from typing import Final

from loopwatch.config.fleet import FleetConfig
from loopwatch.config.fleet_rules import FleetRules
from loopwatch.detectors.events import Event, Output, ToolCall, ToolResult, Verdict
from loopwatch.detectors.fleet import chains, systemic_loop, tool_outage
from loopwatch.detectors.fleet.alerts import FleetAlert
from loopwatch.detectors.fleet.chain_blocks import ChainBlocks
from loopwatch.detectors.fleet.facts import (
    CallFact,
    ChainResultFact,
    ChainRunFact,
    Fact,
    LoopFact,
    ResultFact,
    chain_facts,
    facts_of_event,
    facts_of_outputs,
)
from loopwatch.detectors.fleet.fail_fast import fail_fast_verdict, is_blocking
from loopwatch.detectors.hashing import Digester
from loopwatch.detectors.run_engine import FleetHooks
from loopwatch.detectors.state import RunState
from loopwatch.detectors.step import Prepared

__all__ = ["FleetWatch", "WatchHooks", "apply_fact"]

#: The watch looks for expired delegation chains to forget after this many chain facts.
CHAIN_SWEEP_EVERY: Final = 4096


def apply_fact(
    fact: Fact,
    rules: FleetRules,
    outages: dict[str, tool_outage.OutageState],
    agents: dict[str, systemic_loop.AgentLoops],
    chain_states: dict[str, chains.ChainState] | None = None,
) -> list[FleetAlert]:
    """Step the subject state a fact belongs to (created on first use)."""
    if type(fact) is ChainRunFact or type(fact) is ChainResultFact:
        if chain_states is None or not rules.delegation.enabled:
            return []
        chain = chain_states.get(fact.root)
        if chain is None:
            chain = chain_states[fact.root] = chains.ChainState(fact.root)
        return chains.step(chain, fact, rules.delegation)
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
    """F1, F2 and F6b/F6c over every tool, agent and delegation chain of the fleet."""

    def __init__(self, rules: FleetRules, digester: Digester) -> None:
        self.rules = rules
        self.digester = digester
        self.outages: dict[str, tool_outage.OutageState] = {}
        self.agents: dict[str, systemic_loop.AgentLoops] = {}
        self.chains: dict[str, chains.ChainState] = {}  # root -> its chain
        self.blocks = ChainBlocks(rules.delegation.chain_ttl_s)  # the chain alerts given, for F6's blocks
        self.alerts: list[FleetAlert] = []
        self._chain_facts = 0
        self._chain_top = chains.NEVER  # the latest event time of any chain fact

    def observe(
        self,
        event: Event,
        scope: str,
        ts: int,
        prepared: Prepared | None,
        outputs: list[Output],
        root: str | None = None,
    ) -> list[FleetAlert]:
        """Apply an event (``prepared``: its hashes, when it was applied) and its outputs; the
        alerts they give. ``root``: the root of its run's delegation chain (F6; see
        :func:`detectors.fleet.chains.chain_key`)."""
        facts = facts_of_event(event, scope, ts, prepared, self.digester)
        if outputs:
            facts += facts_of_outputs(outputs, scope, ts)
        rules = self.rules
        if root is not None and prepared is not None and rules.delegation.enabled:
            if type(event) is ToolCall or type(event) is ToolResult:
                facts += chain_facts(event, root, scope, ts, prepared)
            else:
                root = None  # no chain event
        else:
            root = None
        alerts: list[FleetAlert] = []
        for fact in facts:
            alerts += apply_fact(fact, rules, self.outages, self.agents, self.chains)
        if root is not None:
            alerts += self._swept(ts)
            blocks = self.blocks
            for alert in alerts:
                blocks.add(alert)
            alerts = [alert for alert in alerts if alert.kind != chains.ACTIVE_KIND]
        self.alerts += alerts
        return alerts

    def _swept(self, ts: int) -> list[FleetAlert]:
        """Every :data:`CHAIN_SWEEP_EVERY` chain events, forget the chains expired by the latest
        event time seen (their next fact would start them afresh anyway); the ``chain_expired``
        alerts of those that had alerts."""
        self._chain_top = max(self._chain_top, ts)
        self._chain_facts += 1
        if self._chain_facts % CHAIN_SWEEP_EVERY:
            return []
        rule, top = self.rules.delegation, self._chain_top
        closed: list[FleetAlert] = []
        for root in [r for r, chain in self.chains.items() if chains.expired(chain, top, rule)]:
            alert = chains.expiry_alert(self.chains.pop(root), rule)
            if alert is not None:
                closed.append(alert)
        return closed

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
    ``toolOutage.block`` is on, F6's chain blocks when ``delegation.block`` is. The watch sees
    the events itself, after each step (:meth:`FleetWatch.observe`, in input order), so nothing
    is noted here."""

    def __init__(self, watch: FleetWatch) -> None:
        self.watch = watch

    def fail_fast(self, scope: str, event: ToolCall, ts: int, config: FleetConfig) -> Output | None:
        watch = self.watch
        if not watch.rules.tool_outage.block:
            return None
        return watch.fail_fast(scope, event, ts, config.settings.observe_only)

    def chain_block(
        self, state: RunState, event: ToolCall, ts: int, prepared: Prepared, config: FleetConfig
    ) -> Output | None:
        watch = self.watch
        rule = watch.rules.delegation
        if not rule.block or not rule.enabled or not len(watch.blocks):
            return None
        root = chains.chain_key(state)
        observe_only = config.settings.observe_only
        return watch.blocks.block(
            state.scope, root, state.first_ts, event, prepared.args_hash, ts, rule, observe_only
        )
