"""A model turn's calls on ``loopwatch gateway --kafka``: one record, admitted or refused as a
whole by the worker's run engine, answered as the embedded gateway answers the same calls."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.gateway_process import gateway_process
from tests.helpers import post_json
from tests.integration.harness import Names, WorkerProcess, consume, run
from tests.integration.test_gateway_kafka import Gateway, gateways  # noqa: F401 - a fixture
from tests.integration.test_worker import start_worker

pytestmark = pytest.mark.integration

SAME = {"path": "notes.md"}
UNCHANGED = {"content": [{"type": "text", "text": "unchanged"}]}


def _turns(run_id: str) -> list[list[dict[str, Any]]]:
    """Turns of a looping run: two identical reads a turn, then a turn of three distinct calls."""
    turns = []
    for turn in range(14):
        calls = [
            {"run_id": run_id, "event_id": f"{run_id}-t{turn}-{n}", "tool": "read", "params": SAME}
            for n in range(2)
        ]
        if turn == 6:
            calls.append(
                {"run_id": run_id, "event_id": f"{run_id}-t{turn}-x", "tool": "exec", "params": {"cmd": "ls"}}
            )
        turns.append(calls)
    return turns


def _drive(url: str, run_id: str) -> list[dict[str, Any]]:
    """Post each turn as one batch, report the results of the calls allowed to run; the answers."""
    answers = []
    for calls in _turns(run_id):
        status, answer = post_json(url + "/v1/decide", calls)
        assert status == 200, answer
        answers.append(answer)
        for call, decision in zip(calls, answer["decisions"], strict=True):
            if decision["decision"] in ("allow", "warn"):
                result = {
                    **call,
                    "type": "tool_result",
                    "event_id": call["event_id"] + "-r",
                    "result": UNCHANGED,
                }
                status, accepted = post_json(url + "/v1/events", result)
                assert status in (200, 202), accepted  # (202 on Kafka: taken, decided later)
    return answers


def _kept(answer: dict[str, Any]) -> dict[str, Any]:
    """What the two gateways must agree on (not how long it took)."""
    return {
        "refused": answer["refused"],
        "refused_by": answer["refused_by"],
        "decisions": [
            {key: value for key, value in decision.items() if key not in ("timed_out",)}
            for decision in answer["decisions"]
        ],
    }


@pytest.fixture
def gateway(
    kafka_bootstrap: str,
    names: Names,
    tmp_path: Path,
    workers: list[WorkerProcess],
    gateways: list[Gateway],  # noqa: F811 - the fixture
) -> Gateway:
    """A gateway on Kafka in front of one real worker."""
    start_worker(names, kafka_bootstrap, tmp_path, workers, "w1")
    started = Gateway(names, kafka_bootstrap, timeout_ms=10_000)
    gateways.append(started)
    return started


def test_a_batch_on_kafka_is_decided_as_the_embedded_gateway_decides_it(gateway: Gateway) -> None:
    on_kafka = _drive(gateway.url, "batch-run")
    with gateway_process() as embedded:
        in_memory = _drive(embedded.url, "batch-run")
    assert [_kept(a) for a in on_kafka] == [_kept(a) for a in in_memory]
    assert all("timed_out" not in d for a in on_kafka for d in a["decisions"])
    kinds = {d["decision"] for a in on_kafka for d in a["decisions"]}
    assert {"allow", "block"} <= kinds  # the loop was refused, as a batch
    assert any(a["refused"] for a in on_kafka)
    refused = next(a for a in on_kafka if a["refused_by"] is not None)
    siblings = [d for i, d in enumerate(refused["decisions"]) if i != refused["refused_by"]]
    assert siblings
    assert all(d["decision"] == "block" for d in siblings)


def test_a_malformed_batch_record_is_dead_lettered_and_the_run_goes_on(
    kafka_bootstrap: str, names: Names, gateway: Gateway
) -> None:
    """A batch record whose second call is not a call (a producer of its own): refused whole,
    with the reason naming the call; the run's next batch is decided as usual."""
    from aiokafka import AIOKafkaProducer

    from loopwatch.streams.kafka.batch_records import BATCH_HEADER

    async def produce() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
        await producer.start()
        try:
            value = b'[{"type":"tool_call","event_id":"p1","run_id":"poisoned","tool":"read","params":{}},'
            value += b'{"type":"run_end","event_id":"p2","run_id":"poisoned"}]'
            await producer.send_and_wait(names.events, value, key=b"poisoned", headers=[(BATCH_HEADER, b"1")])
        finally:
            await producer.stop()

    run(produce())
    letters = run(consume(kafka_bootstrap, names.dead_letter, until=1, timeout=60))
    assert len(letters) == 1
    assert letters[0]["reason"] == "call 1: a batch holds tool_call events only, not run_end"
    status, answer = post_json(
        gateway.url + "/v1/decide",
        [{"run_id": "poisoned", "event_id": f"q{n}", "tool": "read", "params": {"n": n}} for n in range(2)],
    )
    assert status == 200, answer
    assert [d["decision"] for d in answer["decisions"]] == ["allow", "allow"]
    assert all("timed_out" not in d for d in answer["decisions"])


def test_a_body_whose_record_the_broker_cannot_take_answers_413_and_the_gateway_goes_on(
    gateway: Gateway,
) -> None:
    """Within maxEventBytes (1 MiB), but the record the gateway makes of it (the event ids and
    fields added) is larger than the broker takes: the client is told so, not a 500."""
    big = "x" * 3_900
    turn = [{"run_id": "huge", "tool": "read", "params": {"p": big}} for _ in range(256)]
    status, answer = post_json(gateway.url + "/v1/decide", turn)
    assert status == 413, answer
    assert "too large for the broker" in answer["error"]
    assert "fewer or smaller" in answer["error"]
    one = {"run_id": "huge", "tool": "read", "params": {"p": "y" * 1_048_300}}
    status, answer = post_json(gateway.url + "/v1/decide", one)
    assert status == 413, answer
    result = {**one, "type": "tool_result", "event_id": "huge-r", "result": "z"}
    status, answer = post_json(gateway.url + "/v1/events", result)
    assert status == 413, answer
    status, answer = post_json(
        gateway.url + "/v1/decide",
        [{"run_id": "huge", "event_id": f"s{n}", "tool": "read", "params": {"n": n}} for n in range(2)],
    )
    assert status == 200, answer
    assert [d["decision"] for d in answer["decisions"]] == ["allow", "allow"]
