"""One model turn's calls as one record of the input topic: read strictly, and applied by the
worker's run engine as the in-memory engine applies the same batch."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

import pytest

from loopwatch.config.fleet import FleetConfig
from loopwatch.detectors.engine import Engine
from loopwatch.detectors.events import InvalidEvent, ToolCall, ToolResult, encode_event, encode_output
from loopwatch.streams.kafka.batch_records import (
    BATCH_HEADER,
    MAX_BATCH_CALLS,
    decode_batch,
    encode_batch,
    is_batch,
)
from loopwatch.streams.kafka.run_processor import REPLY_HEADER
from tests.unit.test_run_processor import TP, Broker, Record, processor

CALL = b'{"type":"tool_call","event_id":"%d","run_id":"r","tool":"read","params":{}}'


def calls_json(*ids: int) -> bytes:
    return b"[" + b",".join(CALL % n for n in ids) + b"]"


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b'{"type":"tool_call"}', "holds a JSON array of tool_call events"),
        (b"[", "holds a JSON array of tool_call events"),
        (b"\xff\xfe", "holds a JSON array of tool_call events"),
        (b"[]", "a batch holds 1 to 256 calls, this one 0"),
        (calls_json(*range(MAX_BATCH_CALLS + 1)), f"1 to {MAX_BATCH_CALLS} calls, this one 257"),
        (
            calls_json(1)[:-1] + b',{"type":"run_end","event_id":"e","run_id":"r"}]',
            "call 1: a batch holds tool_call events only, not run_end",
        ),
        (b'[{"type":"tool_call","event_id":"a","run_id":"r","tool":7}]', "call 0: "),
        (b"[" + b"[" * 5000 + b"]" * 5000 + b"]", "holds a JSON array of tool_call events"),
        (
            b'[{"type":"tool_call","event_id":"a","run_id":"r","tool":"read","params":{}},'
            b'{"type":"tool_call","event_id":"b","run_id":"s","tool":"read","params":{}}]',
            "call 1: a batch's calls share one run",
        ),
        (
            b'[{"type":"tool_call","event_id":"a","run_id":"r","tool":"read","params":{"x":"'
            + b"y" * 300
            + b'"}}]',
            "call 0: event of ",
        ),
    ],
)
def test_a_batch_record_that_is_not_one_run_s_calls_is_refused_with_what_and_where(
    value: bytes, reason: str
) -> None:
    with pytest.raises(InvalidEvent) as refused:
        decode_batch(value, 200)
    assert reason in refused.value.reason


def test_a_batch_record_reads_back_the_calls_it_was_made_of() -> None:
    calls = [
        ToolCall(event_id=f"c{n}", run_id="r", tool="read", params={"path": f"/{n}"}, batch_id="t1")
        for n in range(3)
    ]
    value = encode_batch(calls)
    assert json.loads(value) == [json.loads(encode_event(call)) for call in calls]
    assert decode_batch(value, 1 << 20) == calls
    assert is_batch(BatchRecord("in", 0, 0, 0, b"r", value, [(BATCH_HEADER, b"1")]))
    assert not is_batch(Record("in", 0, 0, 0, b"r", value))


@dataclass
class BatchRecord(Record):
    headers: list[tuple[str, bytes]] = field(default_factory=list)


def _turns() -> list[list[ToolCall]]:
    """A run's turns: two identical failing reads a turn (a loop), once with a third call."""
    turns = []
    for turn in range(12):
        ids = ["a", "b", "x"] if turn == 5 else ["a", "b"]
        turns.append(
            [
                ToolCall(
                    event_id=f"t{turn}{n}",
                    run_id="r",
                    tool="exec" if n == "x" else "read",
                    params={"cmd": "ls"} if n == "x" else {"path": "/missing"},
                    tool_call_id=f"t{turn}{n}",
                )
                for n in ids
            ]
        )
    return turns


def _result(call: ToolCall) -> ToolResult:
    return ToolResult(
        event_id=call.event_id + "-r",
        run_id="r",
        tool=call.tool,
        params=call.params,
        tool_call_id=call.tool_call_id,
        error="ENOENT",
    )


def test_the_worker_applies_batch_records_as_the_engine_applies_the_batches_and_answers_each_call() -> None:
    """Each turn a batch record asking for its answer, the results of the calls let through as
    records of their own: the verdicts the in-memory engine gives the same batches, in order,
    and each answer holds every call's outputs and the call that refused the turn."""
    engine = Engine(FleetConfig.enabled_default())
    want_verdicts: list[bytes] = []
    want_answers: list[tuple[list[list[bytes]], int | None]] = []
    inputs: list[ToolCall | list[ToolCall]] = []
    for turn in _turns():
        outcome = engine.step_batch(turn).batch
        assert outcome is not None
        answers = [[encode_output(out) for out in outputs] for outputs in outcome.outputs]
        want_verdicts += [value for one in answers for value in one]
        want_answers.append((answers, outcome.refused_by))
        inputs.append(turn)
        ran = (
            []
            if outcome.refused_by is not None
            else [
                c
                for c, o in zip(turn, outcome.outputs, strict=True)
                if not any(b'"block"' in encode_output(x) or b'"abort"' in encode_output(x) for x in o)
            ]
        )
        for call in ran:
            result = _result(call)
            want_verdicts += [encode_output(out) for out in engine.process(result)]
            inputs.append(result)  # type: ignore[arg-type]
    assert any(refused is not None for _, refused in want_answers)

    async def go() -> tuple[Broker, list[bytes]]:
        broker = Broker(confirm_at_once=False)  # nothing confirmed: every output stays held
        proc = processor(broker)
        replies: list[bytes] = []

        async def reply(topic: str, key: bytes, value: bytes, scope: bytes) -> None:
            replies.append(value)

        proc._replies = "replies"
        proc.send_reply = reply
        proc.cursors.start(0, 0)
        batch: list[Record] = []
        for offset, item in enumerate(inputs):
            if isinstance(item, list):
                headers = [(BATCH_HEADER, b"1"), (REPLY_HEADER, b"1")]
                batch.append(BatchRecord("in", 0, offset, 1_000 + offset, b"r", encode_batch(item), headers))
            else:
                batch.append(Record("in", 0, offset, 1_000 + offset, b"r", encode_event(item)))
        await proc.process({TP("in", 0): batch})
        # the same records again (a redelivery after a crash): nothing applied twice, nothing
        # new; what was never confirmed is published again, and each batch answered as before
        proc.cursors.start(0, 0)
        await proc.process({TP("in", 0): batch})
        return broker, replies

    broker, replies = asyncio.run(go())
    assert broker.on("v") == want_verdicts + want_verdicts
    assert broker.on("dl") == []
    answered = [json.loads(reply) for reply in replies]
    assert len(answered) == 2 * len(want_answers)  # asked twice: answered twice
    for got, (answers, refused_by) in zip(answered, want_answers + want_answers, strict=True):
        assert got["refused_by"] == refused_by
        assert got["batch"] == [[json.loads(value) for value in one] for one in answers]
        assert got["outputs"] == [json.loads(value) for one in answers for value in one]
        assert got["scope"] == "r"


def test_the_fleet_view_s_follower_shows_each_call_of_a_batch_record_and_passes_over_a_bad_one() -> None:
    """A worker's follower of the events topic (the fleet view of the runs it does not own)
    reads a batch record as its calls; a malformed one is passed over, as any poison record."""
    from loopwatch.streams.fleet_view.view import FleetView
    from loopwatch.streams.kafka import topic_followers

    view = FleetView("worker")
    topic_followers._observe(view, False, calls_json(1, 2, 3), 0, 1 << 20)
    assert view.events == 3
    topic_followers._observe(view, False, b"[" + b"[" * 5000 + b"]" * 5000 + b"]", 0, 1 << 20)
    topic_followers._observe(view, False, calls_json(*range(MAX_BATCH_CALLS + 1)), 0, 1 << 20)
    assert view.events == 3
