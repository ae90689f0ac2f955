"""What the gateway asks of a backend (the embedded runtime, or the Kafka workers), and the
two ways a backend says it cannot answer; shared by the server and every backend."""

from __future__ import annotations

import re
from typing import Protocol

from loopwatch.config.errors import LoopwatchError
from loopwatch.detectors.events import Event, Output, ToolCall
from loopwatch.detectors.facade import BatchDecision, Decision

__all__ = ["ANSWERS_KEPT", "STALL_S", "Backend", "BackendUnavailable", "RecordTooLarge", "is_named"]

#: ``/health`` is unhealthy when events wait and none was processed for this long.
STALL_S = 5.0
#: Answers kept for calls whose clients named their event ids (a retry gets the same answer).
ANSWERS_KEPT = 16_384

#: The event id the gateway gives a call whose client named none (``gateway-`` and a uuid4).
_GENERATED_ID = re.compile(r"gateway-[0-9a-f]{32}")


def is_named(event_id: str) -> bool:
    """Whether the client named the call's event id (it may ask again: the same answer), or
    the gateway made one up for it (asked once)."""
    return _GENERATED_ID.fullmatch(event_id) is None


class Backend(Protocol):
    """Where the gateway's events go and its decisions come from."""

    async def events(self, events: list[Event]) -> list[Output] | None: ...

    async def decide(self, call: ToolCall) -> tuple[Decision, bool]: ...

    async def decide_batch(self, calls: list[ToolCall]) -> BatchDecision:
        """One model turn's calls decided together (openclaw-rules §7.6)."""
        ...

    async def refuse(self, body: bytes, reason: str) -> None: ...

    def stalled(self) -> bool: ...


class RecordTooLarge(LoopwatchError):
    """What was asked makes a record larger than the broker takes (answered 413)."""


class BackendUnavailable(LoopwatchError):
    """A backend that could not take the request in time (answered 503: the client tries again)."""
