"""The fleet side of a run processor: the facts of its batches, sent to the facts topic.

The run processor hands every applied event here (and every redelivered one: its facts may
not have reached the topic before a crash; the rules count distinct runs, so a fact sent
twice changes nothing). At the end of each batch the facts go out compacted
(:class:`detectors.fleet.fact_batch.FactBatch`), one record per subject. Verdicts that wait
for their facts (:meth:`FactSender.wait`) are confirmed once those records are.

It also answers F1's fail-fast question for a call, from the alerts this worker follows
(:class:`streams.fleet_view.alert_board.AlertBoard`), and keeps each open outage's last failure up to
date with the failures this worker's runs meet. With ``delegation`` on, the facts of a run's
calls and results also go to its chain (``chain:{root}``, the root from the run's state), and
F6's chain blocks are answered from the chain alerts the worker follows (:attr:`FactSender.chains`),
and the chain's ``chain_active`` / ``chain_expired`` records its owner publishes (so they end
as the embedded runtime's do, whichever runs' events this worker saw).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from loopwatch.config.fleet import FleetConfig
from loopwatch.config.fleet_rules import FleetRules, fleet_rules
from loopwatch.detectors.events import Output, ToolCall, ToolResult, Verdict
from loopwatch.detectors.fleet.chain_blocks import ChainBlocks
from loopwatch.detectors.fleet.chains import chain_key
from loopwatch.detectors.fleet.fact_batch import FactBatch
from loopwatch.detectors.fleet.facts import ChainResultFact, encode_facts, result_fact
from loopwatch.detectors.fleet.fail_fast import fail_fast_verdict, is_blocking
from loopwatch.detectors.hashing import digester_for
from loopwatch.detectors.run_engine import FleetHooks
from loopwatch.detectors.state import RunState
from loopwatch.detectors.step import Prepared
from loopwatch.streams.fleet_view.alert_board import AlertBoard

__all__ = ["FactSender"]

Send = Callable[[str, bytes | None, bytes | None, int | None], Awaitable["asyncio.Future[Any]"]]


class FactSender(FleetHooks):
    """The fleet hooks of the worker's run engine, and the facts topic's producer side."""

    def __init__(self, topic: str | None, send: Send, alerts: AlertBoard | None = None) -> None:
        self.topic = topic
        self._send = send
        self.alerts = alerts
        self.batch = FactBatch()
        self.active = False  # a facts topic and a fleet rule on (set per batch by begin)
        self.chained = False  # ... and delegation chains (F6) on
        #: the chain alerts this worker knows (its follower of the alerts topic adds them)
        self.chains = ChainBlocks()
        self._rules: tuple[object, FleetRules] = (object(), fleet_rules(None))
        self._waiters: list[Callable[[], None]] = []
        #: the input partition and offset of the record being applied (set by the run processor):
        #: a chain result's fact names it, so that a redelivered one counts once (F6c)
        self.source = (-1, -1)

    def rules(self, config: FleetConfig) -> FleetRules:
        if self._rules[0] is not config.global_rules:
            self._rules = (config.global_rules, fleet_rules(config.global_rules))
        return self._rules[1]

    def begin(self, config: FleetConfig) -> None:
        """A batch begins under ``config``."""
        rules = self.rules(config)
        self.active = self.topic is not None and rules.any
        self.chained = self.active and rules.delegation.enabled
        self.batch.outage_bucket_ms = rules.tool_outage.bucket_s * 1000
        self.batch.loop_bucket_ms = rules.systemic_loop.bucket_s * 1000
        self.batch.chain_ttl_ms = rules.delegation.chain_ttl_s * 1000
        self.chains.ttl_ms = self.batch.chain_ttl_ms

    def fail_fast(self, scope: str, event: ToolCall, ts: int, config: FleetConfig) -> Verdict | None:
        """F1's block of a call to a tool under an open outage, when ``toolOutage.block`` is on."""
        board = self.alerts
        if not self.active or board is None or not board.open_outages:
            return None
        last_failure = board.last_failure(event.tool)
        if last_failure is None or not is_blocking(last_failure, ts, self.rules(config).tool_outage):
            return None
        return fail_fast_verdict(
            scope, event, board.open_outages[event.tool].runs, config.settings.observe_only
        )

    def chain_block(
        self, state: RunState, event: ToolCall, ts: int, prepared: Prepared, config: FleetConfig
    ) -> Verdict | None:
        """F6's block of a call of a run of a chain with alerts, when ``delegation.block`` is on."""
        if not self.chained or not len(self.chains):
            return None
        rule = self.rules(config).delegation
        if not rule.block:
            return None
        observe_only = config.settings.observe_only
        root = chain_key(state)
        return self.chains.block(
            state.scope, root, state.first_ts, event, prepared.args_hash, ts, rule, observe_only
        )

    def noted(
        self,
        scope: str,
        event: ToolCall | ToolResult,
        ts: int,
        prepared: Prepared,
        outputs: list[Output],
        config: FleetConfig,
        state: RunState | None = None,
    ) -> None:
        if not self.active:
            return
        if type(event) is ToolCall:
            self.call(event, scope, ts)
        else:
            assert isinstance(event, ToolResult)
            self.result(event, scope, ts, prepared, config)
        if outputs:
            self.outputs(outputs, scope, ts)
        if self.chained and state is not None:
            self.chain(event, chain_key(state), scope, ts, prepared)

    def call(self, event: ToolCall, scope: str, ts: int) -> None:
        self.batch.call(event.agent_id, scope, ts)

    def result(self, event: ToolResult, scope: str, ts: int, prepared: Prepared, config: FleetConfig) -> None:
        result_hash = prepared.result_hash
        if result_hash is None:
            return  # no outcome: nothing for F1
        if not result_hash.startswith("error:"):
            self.batch.success(event.tool, scope, ts)
            return
        failure = result_fact(event, scope, ts, prepared, digester_for(config.settings.digest))
        assert failure is not None
        self.batch.failure(failure)
        if self.alerts is not None:
            self.alerts.note_failure(event.tool, ts)

    def outputs(self, outputs: list[Output], scope: str, ts: int) -> None:
        self.batch.outputs(outputs, scope, ts)

    def chain(self, event: ToolCall | ToolResult, root: str, scope: str, ts: int, prepared: Prepared) -> None:
        """The chain facts of a call or result of run ``scope`` in the chain of ``root``."""
        batch = self.batch
        batch.chain_run(root, scope, event.agent_id, ts)
        result_hash = prepared.result_hash
        if type(event) is ToolResult and result_hash is not None:
            args = prepared.args_hash
            partition, offset = self.source
            batch.chain_result(
                ChainResultFact(
                    root, scope, event.event_id, event.tool, args, result_hash, ts, partition, offset
                )
            )

    def wait(self, waiter: Callable[[], None]) -> None:
        """Call ``waiter`` once the facts of this batch are confirmed."""
        self._waiters.append(waiter)

    async def send(self) -> None:
        """The batch's facts, one record per subject; then the waiters, once they are confirmed."""
        waiters, self._waiters = self._waiters, []
        facts = self.batch.drain()
        if self.topic is None or not facts:
            for waiter in waiters:
                waiter()
            return
        futures = [
            await self._send(self.topic, subject.encode(), encode_facts(items), None)
            for subject, items in facts.items()
        ]
        if not waiters:
            return

        def confirmed(future: asyncio.Future[Any]) -> None:
            if future.cancelled() or future.exception() is not None:
                return  # the verdicts stay in their outboxes: re-published, facts and all
            for waiter in waiters:
                waiter()

        asyncio.gather(*futures).add_done_callback(confirmed)
