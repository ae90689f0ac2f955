"""The orchestrator client: publish tool events, follow verdicts, ask before each tool cycle.

Example agent loop (see the README for the complete program)::

    async with LoopwatchClient.from_env(agent_id="coder") as lw:
        for step in plan:
            decision = await lw.decision(run_id)          # before the tool cycle
            if decision.action in ("block", "abort"):
                ...  # tell the model decision.message; stop on abort
            call_id = await lw.tool_call(run_id, step.tool, step.params)
            verdict = await lw.gate(call_id)              # optional: wait for this call's verdict
            result = await run_tool(step)
            await lw.tool_result(run_id, step.tool, step.params, result=result)
        await lw.run_end(run_id)

Events are produced with an idempotent producer keyed by run scope. In digest-only mode
(``digest_only=True``) arguments and results are hashed here with the same normaliser as
the worker and only digests leave the host. Decisions come from the verdict topic (the
client follows it from the moment it starts) or, with ``redis_url``, from the Redis cache.

The client also follows the fleet alerts (``loopwatch.alerts``, from its start):
``tool_available(tool)`` is false while the tool has an open outage, and with
``fail_fast=True`` the gate blocks a call to such a tool at once, while the outage's last
failure is less than ``block_seconds`` old (F1's fail-fast, as the workers apply it).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import time
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import msgspec
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from msgspec import UNSET

from loopwatch.config.errors import LoopwatchError
from loopwatch.config.settings import DetectorSettings
from loopwatch.config.stream_settings import StreamSettings, parse_stream_settings
from loopwatch.detectors.batch_admission import SIBLING_MESSAGE
from loopwatch.detectors.digest_only import digest_only
from loopwatch.detectors.event_builders import call_event, checked, result_event
from loopwatch.detectors.events import (
    Abort,
    Action,
    CompactionRetry,
    Event,
    InvalidEvent,
    Output,
    RunEnd,
    ToolCall,
    ToolResult,
    Usage,
    Verdict,
    encode_event,
    run_scope,
)
from loopwatch.detectors.facade import ProposedCall
from loopwatch.detectors.fleet.alerts import decode_alert
from loopwatch.detectors.fleet.fail_fast import DETECTOR as OUTAGE_DETECTOR
from loopwatch.detectors.fleet.fail_fast import block_message
from loopwatch.detectors.outcomes import MISSING
from loopwatch.streams.fleet_view.alert_board import AlertBoard
from loopwatch.streams.kafka.connect import KafkaUnreachable, aiokafka_auth, start_client

__all__ = [
    "RUNS_KEPT",
    "ClientNotRunning",
    "LoopwatchClient",
    "ProposedCall",
    "RunDecision",
    "refuse_together",
]

_OUTPUT = msgspec.json.Decoder(Verdict | Abort)


@dataclass(frozen=True, slots=True)
class RunDecision:
    """May the next tool cycle of a run proceed, and with which message?"""

    action: Action
    message: str | None = None
    detector: str | None = None
    verdict_id: str | None = None
    #: the event id of the call of its batch whose decision refused this one with the batch
    refused_by: str | None = None

    @property
    def proceed(self) -> bool:
        return self.action in ("allow", "warn")

    @classmethod
    def of(cls, output: Output | None) -> RunDecision:
        if output is None or not output.enforced:
            return cls("allow")
        return cls(output.action, output.message, output.detector, output.verdict_id)


_ACTIONS: frozenset[str] = frozenset({"allow", "warn", "block", "abort"})


def _redis_decision(fields: dict[bytes, bytes]) -> RunDecision | None:
    """The run's decision as the workers keep it in Redis; ``None`` for a hash they did not
    write (no action, an unknown one, bytes that are not UTF-8): the stream answers then."""
    try:
        data = {key.decode(): value.decode() for key, value in fields.items()}
    except UnicodeDecodeError:
        return None
    action = data.get("action")
    if action not in _ACTIONS:
        return None
    if data.get("enforced") == "false":
        return RunDecision("allow")
    return RunDecision(action, data.get("message"), data.get("detector"), data.get("verdict_id"))  # type: ignore[arg-type]


BrokerUnreachable = KafkaUnreachable  # the client could not connect (what and where in the message)

#: the runs whose latest verdict the client keeps from the verdict topic (the whole fleet's
#: verdicts pass by; the least recently decided run is forgotten first)
RUNS_KEPT = 100_000


class ClientNotRunning(LoopwatchError):
    """The client was used before :meth:`LoopwatchClient.start` or after :meth:`~LoopwatchClient.stop`."""


class LoopwatchClient:
    """Publishes one agent runtime's events and answers decisions for its runs."""

    def __init__(
        self,
        settings: StreamSettings,
        agent_id: str = "default",
        *,
        digest_only: bool = False,
        detector_settings: DetectorSettings | None = None,
        follow_verdicts: bool = True,
        follow_alerts: bool = True,
        fail_fast: bool = False,
        block_seconds: int = 60,
    ) -> None:
        self.settings = settings
        self.agent_id = agent_id
        self.digest_only = digest_only
        self._detector = detector_settings or DetectorSettings()
        self._follow = follow_verdicts
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._follower: asyncio.Task[None] | None = None
        self._redis: Any = None
        self._latest: dict[str, Output] = {}
        #: runs Redis was asked about and held no abort for, no verdict of theirs read since:
        #: an abort of theirs can only come through the verdict stream now (followed)
        self._not_aborted: OrderedDict[str, None] = OrderedDict()
        self._by_trigger: dict[str, list[Output]] = {}
        self._waiters: dict[str, asyncio.Future[Output]] = {}
        self._ids = itertools.count()
        self._prefix = uuid.uuid4().hex[:12]
        self.alerts = AlertBoard()
        self._follow_fleet = follow_alerts
        self.fail_fast = fail_fast
        self.block_seconds = block_seconds
        self._alert_consumer: AIOKafkaConsumer | None = None
        self._alert_follower: asyncio.Task[None] | None = None
        self._call_tools: dict[str, str] = {}  # event id of a call -> its tool (for the gate)
        self._call_runs: dict[str, str] = {}  # event id of a call -> its run scope (for the gate)
        self._running = False
        #: run scope -> the number of this client's next event id when it ended the run: a
        #: verdict the run's earlier events caused, read after, is not the decision of a new
        #: run under the same id
        self._ended: dict[str, int] = {}

    @classmethod
    def from_env(cls, agent_id: str = "default", **kwargs: Any) -> LoopwatchClient:
        """A client configured from ``LOOPWATCH_*`` environment variables."""
        return cls(parse_stream_settings(os.environ), agent_id, **kwargs)

    async def __aenter__(self) -> LoopwatchClient:
        await self.start()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    async def start(self) -> None:
        """Connect; :class:`BrokerUnreachable` (a :class:`LoopwatchError`) when Kafka does not answer."""
        await start_client(self._start, self.stop, self.settings.kafka_bootstrap, "LOOPWATCH_KAFKA_BOOTSTRAP")
        self._running = True

    def _check_running(self, what: str) -> None:
        if not self._running:
            raise ClientNotRunning(
                f"{what}: the client is not running (start() it first, or use `async with`; "
                "a stopped client publishes nothing)"
            )

    async def _start(self) -> None:
        auth = aiokafka_auth(self.settings)
        self._producer = AIOKafkaProducer(
            bootstrap_servers=self.settings.kafka_bootstrap,
            enable_idempotence=True,
            acks="all",
            linger_ms=0,
            **auth,
        )
        await self._producer.start()
        if self.settings.redis_url:
            import redis.asyncio as aioredis

            self._redis = aioredis.Redis.from_url(
                self.settings.redis_url, password=self.settings.redis_password, socket_timeout=0.5
            )
        if self._follow:
            self._consumer = AIOKafkaConsumer(
                self.settings.topic_verdicts,
                bootstrap_servers=self.settings.kafka_bootstrap,
                group_id=None,
                auto_offset_reset="latest",
                enable_auto_commit=False,
                **auth,
            )
            await self._consumer.start()
            await self._consumer.seek_to_end()
            for partition in self._consumer.assignment():
                await self._consumer.position(partition)  # fix the start before publishing
            self._follower = asyncio.create_task(self._follow_verdicts())
        if self._follow_fleet:
            self._alert_consumer = AIOKafkaConsumer(
                self.settings.topic_alerts,
                bootstrap_servers=self.settings.kafka_bootstrap,
                group_id=None,
                auto_offset_reset="earliest",
                enable_auto_commit=False,
                **auth,
            )
            await self._alert_consumer.start()
            self._alert_follower = asyncio.create_task(self._follow_alerts())

    async def stop(self) -> None:
        self._running = False
        for task in (self._follower, self._alert_follower):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        for consumer in (self._consumer, self._alert_consumer):
            if consumer is not None:
                await consumer.stop()
        if self._producer is not None:
            await self._producer.stop()
        if self._redis is not None:
            await self._redis.aclose()

    # -- publishing ----------------------------------------------------------------------

    def _event_id(self) -> str:
        return f"{self._prefix}-{next(self._ids)}"

    def _number(self, event_id: str) -> int | None:
        """The number of one of this client's event ids (None: another's)."""
        head, _, number = event_id.rpartition("-")
        return int(number) if head == self._prefix and number.isdigit() else None

    def _before_end(self, scope: str, trigger: str) -> bool:
        """Whether ``trigger`` is an event this client published before it ended run ``scope``."""
        ended = self._ended.get(scope)
        if ended is None:
            return False
        number = self._number(trigger)
        return number is not None and number < ended

    async def _publish(self, event: Event) -> str:
        assert self._producer is not None  # (each publishing method checks it runs, first)
        await self._producer.send_and_wait(
            self.settings.topic_events, encode_event(event), key=run_scope(event).encode()
        )
        return event.event_id

    def _digested(self, event: ToolCall | ToolResult) -> ToolCall | ToolResult:
        return digest_only(event, self._detector)

    async def tool_call(
        self,
        run_id: str,
        tool: str,
        params: Any,
        *,
        tool_call_id: str | None = None,
        session_id: str | None = None,
        ts: int | None = None,
        usage: Usage | dict[str, Any] | None = None,
        batch_id: str | None = None,
    ) -> str:
        """Publish a ``tool_call`` before the tool executes; returns its event id.

        ``usage`` (``input_tokens``, ``output_tokens``, ``cost_usd``): what the model turn that
        proposed this call cost; give it with the turn's first call only. ``batch_id``: shared
        by the calls of one model turn (:meth:`tool_calls`).
        """
        self._check_running("publishing a tool_call")
        now = ts if ts is not None else int(time.time() * 1000)
        event: ToolCall | ToolResult = call_event(
            self._event_id(),
            run_id,
            tool,
            params,
            agent_id=self.agent_id,
            session_id=session_id,
            ts=now,
            tool_call_id=tool_call_id,
            usage=usage,
            batch_id=batch_id,
        )
        self._call_tools[event.event_id] = tool
        self._call_runs[event.event_id] = run_scope(event)
        if len(self._call_tools) > 10_000:
            del self._call_tools[next(iter(self._call_tools))]
            del self._call_runs[next(iter(self._call_runs))]
        return await self._publish(self._digested(event) if self.digest_only else event)

    async def tool_calls(
        self,
        run_id: str,
        calls: Sequence[ProposedCall],
        *,
        batch_id: str | None = None,
        session_id: str | None = None,
        ts: int | None = None,
        usage: Usage | dict[str, Any] | None = None,
    ) -> list[str]:
        """Publish one model turn's calls, in assistant order, under one ``batch_id`` (made up
        when not given; ``usage`` goes with the first call); their event ids, for
        :meth:`gate_batch`.

        The workers decide each call on its own, as it arrives (docs/openclaw-rules.md §7.6):
        the batch is refused together by :meth:`gate_batch`, not admitted together.
        """
        batch = batch_id or f"{self._prefix}-batch-{next(self._ids)}"
        return [
            await self.tool_call(
                run_id,
                call.tool,
                call.params,
                tool_call_id=call.tool_call_id,
                session_id=session_id,
                ts=ts,
                usage=usage if index == 0 else None,
                batch_id=batch,
            )
            for index, call in enumerate(calls)
        ]

    async def tool_result(
        self,
        run_id: str,
        tool: str,
        params: Any,
        *,
        result: Any = UNSET,
        error: str | None = None,
        tool_call_id: str | None = None,
        session_id: str | None = None,
        ts: int | None = None,
    ) -> str:
        """Publish a ``tool_result`` (``result`` returned, or ``error`` raised)."""
        self._check_running("publishing a tool_result")
        if error is None and (result is UNSET or result is MISSING):
            raise InvalidEvent("result / error: a tool_result needs the one or the other")
        now = ts if ts is not None else int(time.time() * 1000)
        event: ToolCall | ToolResult = result_event(
            self._event_id(),
            run_id,
            tool,
            params,
            agent_id=self.agent_id,
            result=result,
            error=error,
            session_id=session_id,
            ts=now,
            tool_call_id=tool_call_id,
        )
        if error is not None:
            self.alerts.note_failure(tool, event.ts or 0)
        return await self._publish(self._digested(event) if self.digest_only else event)

    async def compaction_retry(self, run_id: str) -> str:
        """Publish that a compaction after context overflow succeeded and the run retries."""
        self._check_running("publishing a compaction_retry")
        return await self._publish(
            checked(
                CompactionRetry(
                    event_id=self._event_id(),
                    run_id=run_id,
                    agent_id=self.agent_id,
                    ts=int(time.time() * 1000),
                )
            )
        )

    async def run_end(self, run_id: str) -> str:
        """Publish the end of a run."""
        self._check_running("publishing a run_end")
        event = checked(
            RunEnd(
                event_id=self._event_id(), run_id=run_id, agent_id=self.agent_id, ts=int(time.time() * 1000)
            )
        )
        scope = run_scope(event)
        self._latest.pop(scope, None)
        self._not_aborted.pop(scope, None)
        self._ended.pop(scope, None)
        self._ended[scope] = self._number(event.event_id) or 0
        if len(self._ended) > RUNS_KEPT:
            del self._ended[next(iter(self._ended))]
        return await self._publish(event)

    # -- decisions -----------------------------------------------------------------------

    async def _follow_verdicts(self) -> None:
        assert self._consumer is not None
        async for message in self._consumer:
            try:  # a record the workers did not write (no value, a key not UTF-8) is passed over:
                output = _OUTPUT.decode(message.value)  # the reader ending would allow every call
                scope = (message.key or b"").decode()
            except (msgspec.DecodeError, TypeError, UnicodeDecodeError):
                continue
            self._not_aborted.pop(scope, None)  # (its decision is the stream's now, while kept)
            if not self._before_end(scope, output.trigger_event_id):  # (a late one of an ended run)
                previous = self._latest.pop(scope, None)
                self._latest[scope] = (  # (the newest decided run last: the oldest is forgotten first)
                    previous if isinstance(previous, Abort) and previous.enforced else output
                )
                if len(self._latest) > RUNS_KEPT:
                    del self._latest[next(iter(self._latest))]
            self._by_trigger.setdefault(output.trigger_event_id, []).append(output)
            if len(self._by_trigger) > 10_000:
                del self._by_trigger[next(iter(self._by_trigger))]
            waiter = self._waiters.pop(output.trigger_event_id, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(output)

    async def _follow_alerts(self) -> None:
        assert self._alert_consumer is not None
        async for message in self._alert_consumer:
            try:
                self.alerts.add(decode_alert(message.value or b""))
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue

    def tool_available(self, tool: str) -> bool:
        """False while the fleet has an open outage of ``tool`` (F1), as far as the alerts say."""
        return tool not in self.alerts.open_outages

    def _outage_block(self, event_id: str) -> RunDecision | None:
        tool = self._call_tools.get(event_id)
        if not self.fail_fast or tool is None:
            return None
        last = self.alerts.last_failure(tool)
        if last is None or time.time() * 1000 - last >= self.block_seconds * 1000:
            return None
        message = block_message(tool, self.alerts.open_outages[tool].runs)
        return RunDecision("block", message, OUTAGE_DETECTOR)

    async def decision(self, run_id: str) -> RunDecision:
        """The run's current decision: from Redis when configured, else from the verdict stream."""
        if self._redis is not None:
            try:
                fields = await self._redis.hgetall(f"loopwatch:run:{run_id}")
            except Exception:  # noqa: BLE001 - Redis trouble (any) falls back to the stream
                fields = None
            decided = _redis_decision(fields) if fields else None
            if decided is not None:
                return decided
        return RunDecision.of(self._latest.get(run_id))

    async def _kept_abort(self, run: str) -> RunDecision | None:
        """The abort Redis holds for a run this client has read no verdict of (one decided
        before it started), or ``None``. Where Redis answered without one and this client
        follows the verdicts, the run is not asked about again until a verdict of it is read
        (a later abort comes through the stream; one forgotten from the stream's latest is
        asked about again)."""
        try:
            fields = await self._redis.hgetall(f"loopwatch:run:{run}")
        except Exception:  # noqa: BLE001 - Redis trouble (any): the stream decides, asked again next time
            return None
        decided = _redis_decision(fields) if fields else None
        if decided is not None and decided.action == "abort":
            return decided
        if self._follow and run not in self._latest:  # (no verdict of it read while Redis answered)
            self._not_aborted[run] = None
            if len(self._not_aborted) > RUNS_KEPT:
                self._not_aborted.popitem(last=False)
        return None

    async def gate(self, event_id: str, timeout: float = 0.25) -> RunDecision:
        """Wait up to ``timeout`` seconds for the verdict of the event just published.

        No verdict within the bound means the call may proceed (the worker publishes
        verdicts only for warnings, blocks and aborts). With ``fail_fast``, a call to a tool
        under an open outage is blocked at once.
        """
        self._check_running("gate")
        if timeout is None or not timeout >= 0:
            raise ValueError(
                f"gate: timeout must be seconds (0 or more), not {timeout!r}: no verdict in time is allow"
            )
        run = self._call_runs.get(event_id, "")
        aborted = self._latest.get(run)
        if isinstance(aborted, Abort) and aborted.enforced:
            return RunDecision.of(aborted)  # an aborted run stays aborted: every later call too
        if run and self._redis is not None and aborted is None and run not in self._not_aborted:
            kept = await self._kept_abort(run)  # aborted before this client started: Redis knows
            if kept is not None:
                return kept
        blocked = self._outage_block(event_id)
        if blocked is not None:
            return blocked
        outputs = self._by_trigger.get(event_id)
        if outputs:
            return _strongest(outputs)
        loop = asyncio.get_running_loop()
        waiter = self._waiters.setdefault(event_id, loop.create_future())
        try:
            await asyncio.wait_for(asyncio.shield(waiter), timeout)
        except TimeoutError:
            self._waiters.pop(event_id, None)
            return RunDecision("allow")
        await asyncio.sleep(0)  # let an abort published with the same trigger arrive
        return _strongest(self._by_trigger.get(event_id, []))

    async def gate_batch(self, event_ids: Sequence[str], timeout: float = 0.25) -> list[RunDecision]:
        """:meth:`gate` for each call of a batch (:meth:`tool_calls`), refused together: when
        one call is blocked or aborted, none may run (:func:`refuse_together`)."""
        decisions = await asyncio.gather(*(self.gate(event_id, timeout) for event_id in event_ids))
        return refuse_together(list(event_ids), list(decisions))


def refuse_together(event_ids: list[str], decisions: list[RunDecision]) -> list[RunDecision]:
    """A batch's decisions, refused as a whole: once a call may not proceed (the first such,
    in the batch's order, is the trigger), every call that could gets ``block`` with
    :data:`~detectors.batch_admission.SIBLING_MESSAGE`, the trigger's detector and
    ``refused_by`` its event id."""
    trigger = next((index for index, decision in enumerate(decisions) if not decision.proceed), None)
    if trigger is None:
        return decisions
    cause = decisions[trigger]
    return [
        decision
        if not decision.proceed
        else RunDecision("block", SIBLING_MESSAGE, cause.detector, refused_by=event_ids[trigger])
        for decision in decisions
    ]


def _strongest(outputs: list[Output]) -> RunDecision:
    order = {"allow": 0, "warn": 1, "block": 2, "abort": 3}
    decisions = [RunDecision.of(output) for output in outputs] or [RunDecision("allow")]
    return max(decisions, key=lambda decision: order[decision.action])
