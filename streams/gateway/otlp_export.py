"""The embedded gateway's verdict export (:mod:`streams.otlp_verdicts`): a backend that hands
every output its inner backend returns to the exporter (``LOOPWATCH_OTLP_ENDPOINT``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from loopwatch.detectors.events import Event, Output, ToolCall
from loopwatch.detectors.facade import BatchDecision, Decision
from loopwatch.streams.otlp_verdicts import VerdictExporter

if TYPE_CHECKING:
    from loopwatch.streams.gateway.backend import Backend

__all__ = ["ExportingBackend"]


class ExportingBackend:
    """``inner``'s answers, each verdict and abort also exported as an OTLP log record."""

    def __init__(self, inner: Backend, exporter: VerdictExporter) -> None:
        self.inner = inner
        self.exporter = exporter

    async def events(self, events: list[Event]) -> list[Output] | None:
        outputs = await self.inner.events(events)
        if outputs:
            self.exporter.export(outputs)
        return outputs

    async def decide(self, call: ToolCall) -> tuple[Decision, bool]:
        decision, timed_out = await self.inner.decide(call)
        if decision.outputs:
            self.exporter.export(decision.outputs)
        return decision, timed_out

    async def decide_batch(self, calls: list[ToolCall]) -> BatchDecision:
        batch = await self.inner.decide_batch(calls)
        outputs = [output for decision in batch.decisions for output in decision.outputs]
        if outputs:
            self.exporter.export(outputs)
        return batch

    async def refuse(self, body: bytes, reason: str) -> None:
        await self.inner.refuse(body, reason)

    def stalled(self) -> bool:
        return self.inner.stalled()
