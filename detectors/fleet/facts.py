"""What an event or a verdict tells the fleet-wide rules (spec BEYOND-OPENCLAW F1, F2, F6).

A *fact* is the small part of an event the fleet rules need, with its event time:

* :class:`ResultFact` — a ``tool_result`` of a tool that failed (with its error class and
  argument hash) or succeeded (any other result with a result hash); subject ``tool:{tool}``.
* :class:`CallFact` — a run of an agent made a ``tool_call`` (F2's active runs); subject
  ``agent:{agent}``.
* :class:`LoopFact` — a run of an agent got a verdict of a detector on a tool (F2's loop
  runs); aborts count under the detector of the verdict they follow; subject ``agent:{agent}``.
* :class:`ChainRunFact` — a run of a delegation chain made a call or got a result, from its
  first to its last event time here (F6b's runs, the chain's expiry); subject ``chain:{root}``.
* :class:`ChainResultFact` — a result with a result hash in a run of a chain (F6c's repeated
  work), named by its run and event id and, in the worker, by its input partition and offset,
  so it counts once; subject ``chain:{root}``.

Every rule over facts counts distinct runs and argument sets, so a fact seen twice (a
redelivery) changes nothing. The Kafka worker sends facts to the subject's partition; the
embedded runtime applies them where they arise.
"""

from __future__ import annotations

import re
from typing import Any, Final

import msgspec
from msgspec import UNSET

from loopwatch.detectors.events import Abort, Event, Output, ToolCall, ToolResult, Verdict
from loopwatch.detectors.hashing import Digester
from loopwatch.detectors.outcomes import error_text
from loopwatch.detectors.rules.post_compaction_guard import DETECTOR as GUARD_DETECTOR
from loopwatch.detectors.step import Prepared

__all__ = [
    "CallFact",
    "ChainResultFact",
    "ChainRunFact",
    "Fact",
    "LoopFact",
    "ResultFact",
    "chain_facts",
    "decode_facts",
    "encode_facts",
    "error_class",
    "facts_of_event",
    "facts_of_outputs",
    "result_fact",
    "subject_of",
]

#: Fail-fast blocks are the outage's, not a loop of the agent: F2 does not count them.
OUTAGE_DETECTOR: Final = "tool_outage"
#: The fleet's own blocks (F1's fail-fast, F6b's and F6c's chain blocks): no loop of an agent.
FLEET_DETECTORS: Final = frozenset({OUTAGE_DETECTOR, "chain_runaway", "chain_repeat"})
#: Aborts whose reason names no verdict's detector, and the detector they count under.
_ABORT_DETECTORS: Final = {
    GUARD_DETECTOR: GUARD_DETECTOR,
    "argument_churn_stale": "argument_churn",
    "loop_budget_exhausted": "loop_budget",
}
_UUID: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_HEX_RUN: Final = re.compile(r"[0-9a-f]{8,}")
_DIGITS: Final = re.compile(r"[0-9]+")


class CallFact(msgspec.Struct, array_like=True, frozen=True, tag=1):
    agent: str
    run: str
    ts: int


class ResultFact(msgspec.Struct, array_like=True, frozen=True, tag=2):
    tool: str
    agent: str
    run: str
    ts: int
    error_class: str | None = None  # None: a success
    args: str | None = None  # the failing call's argument hash


class LoopFact(msgspec.Struct, array_like=True, frozen=True, tag=3):
    agent: str
    tool: str
    detector: str
    run: str
    ts: int


class ChainRunFact(msgspec.Struct, array_like=True, frozen=True, tag=4):
    root: str
    run: str
    agent: str
    ts: int  # the run's first event time among the events this fact stands for
    last: int  # ... and its last


class ChainResultFact(msgspec.Struct, array_like=True, frozen=True, tag=5):
    root: str
    run: str
    event: str  # the result's event id: with the run, what makes a call count once
    tool: str
    args: str  # the args hash
    result: str  # the result hash
    ts: int
    partition: int = -1  # the worker's input partition and offset of the result (-1: none)
    offset: int = -1


Fact = CallFact | ResultFact | LoopFact | ChainRunFact | ChainResultFact

_ENCODER: Final = msgspec.msgpack.Encoder()
_DECODER: Final[Any] = msgspec.msgpack.Decoder(list[Fact])


def encode_facts(facts: list[Fact]) -> bytes:
    return _ENCODER.encode(facts)


def decode_facts(data: bytes) -> list[Fact]:
    facts: list[Fact] = _DECODER.decode(data)
    return facts


def subject_of(fact: Fact) -> str:
    """The key that aggregates a fact: ``tool:{tool}`` (F1), ``agent:{agent}`` (F2) or
    ``chain:{root}`` (F6)."""
    if type(fact) is ResultFact:
        return f"tool:{fact.tool}"
    if type(fact) is ChainRunFact or type(fact) is ChainResultFact:
        return f"chain:{fact.root}"
    assert type(fact) is CallFact or type(fact) is LoopFact
    return f"agent:{fact.agent}"


def error_class(text: str, digester: Digester) -> str:
    """F1's error class, normalised in the spec's order — lower-case; UUIDs → ``x``; runs of 8
    or more hex characters → ``x``; the remaining digit runs → ``0`` (digits first would turn a
    request id ``70ba78037343`` into ``0ba0`` and split one outage by request id) — then hashed
    as a result hash is (``error:`` + digest)."""
    normalised = _DIGITS.sub("0", _HEX_RUN.sub("x", _UUID.sub("x", text.lower())))
    return "error:" + digester.digest_text(normalised)


def facts_of_event(
    event: Event, scope: str, ts: int, prepared: Prepared | None, digester: Digester
) -> list[Fact]:
    """The facts of one event (``prepared``: its hashes, needed for a result)."""
    if type(event) is ToolCall:
        return [CallFact(event.agent_id, scope, ts)]
    if type(event) is not ToolResult or prepared is None:
        return []
    fact = result_fact(event, scope, ts, prepared, digester)
    return [] if fact is None else [fact]


def result_fact(
    event: ToolResult, scope: str, ts: int, prepared: Prepared, digester: Digester
) -> ResultFact | None:
    """F1's fact of a result: a failure with its error class, a success, or ``None`` (no outcome)."""
    result_hash = prepared.result_hash
    if result_hash is None:
        return None  # no outcome (no result, or the detector's own veto)
    if not result_hash.startswith("error:"):
        return ResultFact(event.tool, event.agent_id, scope, ts)
    digest_only = event.result_digest is not UNSET  # then the digest is the class
    cls = result_hash if digest_only else error_class(error_text(event.error), digester)
    return ResultFact(event.tool, event.agent_id, scope, ts, cls, prepared.args_hash)


def chain_facts(
    event: ToolCall | ToolResult, root: str, scope: str, ts: int, prepared: Prepared
) -> list[Fact]:
    """The chain facts of an applied call or result of run ``scope`` in the chain of ``root``."""
    facts: list[Fact] = [ChainRunFact(root, scope, event.agent_id, ts, ts)]
    result_hash = prepared.result_hash
    if type(event) is ToolResult and result_hash is not None:
        facts.append(
            ChainResultFact(root, scope, event.event_id, event.tool, prepared.args_hash, result_hash, ts)
        )
    return facts


def facts_of_outputs(outputs: list[Output], scope: str, ts: int) -> list[Fact]:
    """The loop facts of one event's verdicts and aborts."""
    facts: list[Fact] = []
    last: str | None = None
    for out in outputs:
        if type(out) is Verdict:
            last = out.detector
            if last not in FLEET_DETECTORS:
                facts.append(LoopFact(out.agent_id, out.tool, last, scope, ts))
        elif type(out) is Abort:
            detector = _ABORT_DETECTORS.get(out.reason, last)
            if detector is not None and detector != last and detector not in FLEET_DETECTORS:
                facts.append(LoopFact(out.agent_id, out.tool, detector, scope, ts))
    return facts
