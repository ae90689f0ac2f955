"""The Kafka client's batches: one model turn's calls published under one ``batch_id`` and gated
together (refused as a whole when one of them may not run). The workers decide each call on
its own (docs/openclaw-rules.md §7.6); the refusal is the client's. No broker: the producer is
a recorder and the verdicts are those the client's follower would have read."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import msgspec
import pytest

from loopwatch.config.stream_settings import parse_stream_settings
from loopwatch.detectors.batch_admission import SIBLING_MESSAGE
from loopwatch.detectors.events import Abort, ToolCall, Verdict
from loopwatch.streams.client import LoopwatchClient, ProposedCall, RunDecision
from loopwatch.streams.client.kafka_client import refuse_together


class Recorder:
    """What the client produced: (topic, event, key)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any], bytes]] = []

    async def send_and_wait(self, topic: str, value: bytes, key: bytes) -> None:
        self.sent.append((topic, msgspec.json.decode(value), key))

    async def stop(self) -> None:
        pass


def client() -> tuple[LoopwatchClient, Recorder]:
    lw = LoopwatchClient(parse_stream_settings({}), "coder", follow_verdicts=False, follow_alerts=False)
    recorder = Recorder()
    lw._producer = recorder  # type: ignore[assignment,unused-ignore]
    lw._running = True  # (as start() leaves it, without a broker)
    return lw, recorder


def verdict(trigger: str, action: str, detector: str = "generic_repeat") -> Verdict:
    return Verdict(
        verdict_id=f"v-{trigger}",
        run_id="r",
        agent_id="coder",
        session_id=None,
        tool_call_id=None,
        trigger_event_id=trigger,
        level="critical" if action == "block" else "warning",
        action=action,  # type: ignore[arg-type]
        detector=detector,
        count=20,
        message=f"{action}: {detector}",
        warning_key="k",
        paired_tool=None,
        tool="read",
        ts=None,
    )


def test_tool_calls_publishes_a_turn_under_one_batch_id_in_order() -> None:
    async def scenario() -> None:
        lw, recorder = client()
        calls = [ProposedCall("read", {"path": "a"}, "t1"), ProposedCall("ls", {"dir": "."}, "t2")]
        ids = await lw.tool_calls("r", calls, usage={"cost_usd": 0.1})
        assert [event["event_id"] for _, event, _ in recorder.sent] == ids
        assert [(e["tool"], e["tool_call_id"], e["type"]) for _, e, _ in recorder.sent] == [
            ("read", "t1", "tool_call"),
            ("ls", "t2", "tool_call"),
        ]
        batch_ids = {event["batch_id"] for _, event, _ in recorder.sent}
        assert len(batch_ids) == 1
        assert next(iter(batch_ids))
        assert [("usage" in e and e["usage"] is not None) for _, e, _ in recorder.sent] == [True, False]
        assert {key for _, _, key in recorder.sent} == {b"r"}
        await lw.tool_calls("r", calls, batch_id="turn-3")
        assert {e["batch_id"] for _, e, _ in recorder.sent[2:]} == {"turn-3"}
        assert (
            msgspec.json.decode(msgspec.json.encode(recorder.sent[2][1]), type=ToolCall).batch_id == "turn-3"
        )
        # a single call carries no batch_id unless given one
        await lw.tool_call("r", "read", {"path": "a"})
        assert "batch_id" not in recorder.sent[-1][1]

    asyncio.run(scenario())


def test_gate_batch_refuses_the_whole_batch_when_one_call_is_blocked() -> None:
    async def scenario() -> None:
        lw, _ = client()
        ids = await lw.tool_calls("r", [ProposedCall("read", {"n": n}) for n in range(3)])
        lw._by_trigger[ids[0]] = [verdict(ids[0], "warn")]
        lw._by_trigger[ids[2]] = [verdict(ids[2], "block")]
        decisions = await lw.gate_batch(ids, timeout=0.01)
        assert [d.action for d in decisions] == ["block", "block", "block"]
        assert decisions[2] == RunDecision("block", "block: generic_repeat", "generic_repeat", f"v-{ids[2]}")
        for sibling in decisions[:2]:
            assert (sibling.message, sibling.detector, sibling.refused_by) == (
                SIBLING_MESSAGE,
                "generic_repeat",
                ids[2],
            )

    asyncio.run(scenario())


def test_gate_batch_lets_an_allowed_batch_run_with_its_warnings() -> None:
    async def scenario() -> None:
        lw, _ = client()
        ids = await lw.tool_calls("r", [ProposedCall("read", {"n": n}) for n in range(3)])
        lw._by_trigger[ids[1]] = [verdict(ids[1], "warn")]
        decisions = await lw.gate_batch(ids, timeout=0.01)
        assert [d.action for d in decisions] == ["allow", "warn", "allow"]
        assert all(d.refused_by is None for d in decisions)

    asyncio.run(scenario())


def test_refuse_together_keeps_every_call_that_may_not_run_and_names_the_first() -> None:
    abort = RunDecision("abort", "stopped", "tool_loop_recovery_exhausted")
    block = RunDecision("block", "blocked", "ping_pong")
    decided = refuse_together(["a", "b", "c", "d"], [RunDecision("allow"), abort, block, RunDecision("warn")])
    assert decided[1] == abort
    assert decided[2] == block
    assert [(d.action, d.refused_by, d.detector) for d in (decided[0], decided[3])] == [
        ("block", "b", "tool_loop_recovery_exhausted"),
        ("block", "b", "tool_loop_recovery_exhausted"),
    ]
    allowed = [RunDecision("allow"), RunDecision("warn")]
    assert refuse_together(["a", "b"], allowed) == allowed
    assert (
        RunDecision.of(
            Abort(
                verdict_id="x",
                run_id="r",
                agent_id="a",
                session_id=None,
                trigger_event_id="t",
                reason="r",
                tool="read",
                count=None,
                message="m",
                ts=None,
            )
        ).refused_by
        is None
    )


class _Message:
    def __init__(self, key: bytes | None, value: bytes | None) -> None:
        self.key, self.value = key, value


class _Records:
    """A consumer of the verdicts topic that yields the given records, then stops."""

    def __init__(self, records: list[_Message]) -> None:
        self.records = records

    def __aiter__(self) -> _Records:
        return self

    async def __anext__(self) -> _Message:
        if not self.records:
            raise StopAsyncIteration
        return self.records.pop(0)


def test_records_the_workers_did_not_write_do_not_end_the_verdict_reader() -> None:
    """A record with no value, a key that is not UTF-8 or JSON that is not an output: passed
    over. Before, the reader's task ended there and every later call was allowed."""
    from loopwatch.detectors.events import encode_output

    async def scenario() -> None:
        lw, _ = client()
        lw._consumer = _Records(
            [
                _Message(b"r", None),
                _Message(b"\xff\xfe", encode_output(verdict("e0", "warn"))),
                _Message(b"r", b'{"type": "something else"}'),
                _Message(b"r", b"[1, 2"),
                _Message(b"r", encode_output(verdict("e1", "block"))),
            ]
        )
        await lw._follow_verdicts()
        decision = await lw.decision("r")
        assert (decision.action, decision.verdict_id) == ("block", "v-e1")

    asyncio.run(scenario())


class _Redis:
    def __init__(self, fields: dict[bytes, bytes]) -> None:
        self.fields = fields

    async def hgetall(self, key: str) -> dict[bytes, bytes]:
        return self.fields


def test_a_redis_hash_the_workers_did_not_write_falls_back_to_the_stream() -> None:
    async def scenario() -> None:
        lw, _ = client()
        lw._latest["r"] = verdict("e1", "block")
        for odd in (
            {b"message": b"no action"},
            {b"action": b"explode"},
            {b"action": b"\xff"},
            {b"\xfe": b"block"},
        ):
            lw._redis = _Redis(odd)
            decision = await lw.decision("r")
            assert (decision.action, decision.verdict_id) == ("block", "v-e1"), odd
        lw._redis = _Redis({b"action": b"abort", b"message": b"stop", b"verdict_id": b"v-9"})
        assert (await lw.decision("r")).verdict_id == "v-9"

    asyncio.run(scenario())


def test_a_client_started_after_an_abort_learns_it_from_redis_at_its_first_gate() -> None:
    async def scenario() -> None:
        lw, _ = client()
        lw._redis = _Redis({b"action": b"abort", b"message": b"stop", b"verdict_id": b"v-9"})
        event_id = await lw.tool_call("r", "write", {"path": "a"})
        gated = await lw.gate(event_id, timeout=0.01)
        assert (gated.action, gated.message, gated.verdict_id) == ("abort", "stop", "v-9")
        lw._redis = _Redis({b"action": b"warn", b"message": b"careful"})  # an earlier warning only
        other = await lw.tool_call("r", "write", {"path": "b"})
        assert (await lw.gate(other, timeout=0.01)).action == "allow"  # nothing for this call

    asyncio.run(scenario())


def test_a_client_that_cannot_reach_kafka_says_where_without_a_traceback() -> None:
    import os
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "loopwatch.streams.client.example_agent"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "LOOPWATCH_KAFKA_BOOTSTRAP": "127.0.0.1:1"},
    )
    assert done.returncode == 2
    assert "loopwatch: Kafka at 127.0.0.1:1 (LOOPWATCH_KAFKA_BOOTSTRAP): " in done.stderr
    assert "Traceback" not in done.stderr


def test_a_client_not_running_says_so_and_gate_needs_a_bound() -> None:
    async def scenario() -> None:
        from loopwatch.streams.client.kafka_client import ClientNotRunning

        idle = LoopwatchClient(parse_stream_settings({}), "coder", follow_verdicts=False, follow_alerts=False)
        with pytest.raises(ClientNotRunning, match="publishing a tool_call: the client is not running"):
            await idle.tool_call("r", "read", {})  # (it used to wait forever after stop())
        with pytest.raises(ClientNotRunning, match="gate: the client is not running"):
            await idle.gate("some-id")  # (it used to answer allow)
        lw, recorder = client()
        for bound in (None, -1.0, float("nan")):
            with pytest.raises(ValueError, match="timeout must be seconds"):
                await lw.gate("some-id", bound)  # type: ignore[arg-type]
        assert (await lw.gate("some-id", 0)).action == "allow"
        await lw.stop()
        with pytest.raises(ClientNotRunning):
            await lw.run_end("r")
        assert len(recorder.sent) == 0

    asyncio.run(scenario())


def test_the_client_refuses_an_event_no_worker_would_take_before_publishing_it() -> None:
    from loopwatch.detectors.events import InvalidEvent

    async def scenario() -> None:
        lw, recorder = client()
        deep: Any = []
        for _ in range(70):
            deep = [deep]
        cases: list[tuple[dict[str, Any], str]] = [
            ({"tool": None}, "tool: must be a string, not None"),
            ({"run_id": None}, "run_id or session_id: one of them is required"),
            ({"run_id": 5}, "run_id: must be a string, not int"),
            ({"params": deep}, "params: nests more than 64"),
            ({"tool": "t" * 600}, "tool: holds 600 bytes"),
            ({"ts": 2**70}, "ts: must fit in a signed 64-bit integer"),
            ({"params": {"o": object()}}, "params: a object has no JSON form"),
        ]
        for change, reason in cases:
            fields: dict[str, Any] = {"run_id": "r", "tool": "read", "params": {}, **change}
            with pytest.raises(InvalidEvent, match=re.escape(reason)):
                await lw.tool_call(fields.pop("run_id"), fields.pop("tool"), fields.pop("params"), **fields)
        with pytest.raises(InvalidEvent, match="result: nests more than 64"):
            await lw.tool_result("r", "read", {}, result=deep)
        with pytest.raises(InvalidEvent, match="run_id or session_id"):
            await lw.run_end("")
        assert recorder.sent == []  # nothing reached the topic

    asyncio.run(scenario())


def test_the_client_keeps_the_latest_verdicts_of_a_bounded_number_of_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The whole fleet's verdicts pass by a client: it forgets the run least recently decided."""
    from loopwatch.streams.client import kafka_client

    monkeypatch.setattr(kafka_client, "RUNS_KEPT", 3)

    class Message:
        def __init__(self, run: str, output: Verdict) -> None:
            self.key = run.encode()
            self.value = msgspec.json.encode(output)

    def decided(run: str, trigger: str, action: str) -> Message:
        return Message(run, msgspec.structs.replace(verdict(trigger, action), run_id=run))

    async def messages() -> Any:
        for message in [
            decided("a", "a1", "warn"),
            decided("b", "b1", "warn"),
            decided("c", "c1", "block"),
            decided("a", "a2", "block"),  # a is decided again: b is now the oldest
            decided("d", "d1", "warn"),
        ]:
            yield message

    async def scenario() -> None:
        lw, _ = client()
        lw._consumer = messages()
        await lw._follow_verdicts()
        assert list(lw._latest) == ["c", "a", "d"]
        assert (await lw.decision("a")).action == "block"
        assert (await lw.decision("b")).action == "allow"  # forgotten

    asyncio.run(scenario())


def test_a_late_verdict_of_an_ended_run_is_not_the_decision_of_the_run_id_used_again() -> None:
    """The client ends a run while the worker's abort of its last call is still on its way: read
    after the end, that abort must not decide (and keep aborted) a new run under the same id."""

    async def scenario() -> None:
        lw, _ = client()
        last_call = await lw.tool_call("r", "read", {"path": "a"})
        await lw.run_end("r")
        again = await lw.tool_call("r", "read", {"path": "b"})  # the id used again: a new run

        def message(trigger: str, action: str) -> Any:
            output: Any = verdict(trigger, action)
            if action == "abort":
                output = Abort(
                    verdict_id="a-1",
                    run_id="r",
                    agent_id="coder",
                    session_id=None,
                    trigger_event_id=trigger,
                    reason="global_circuit_breaker",
                    message="stop",
                    count=30,
                    tool="read",
                    ts=None,
                )
            return type("Message", (), {"key": b"r", "value": msgspec.json.encode(output)})()

        async def late() -> Any:
            yield message(last_call, "abort")
            yield message("another-client-7", "warn")  # another client's event: taken as it is

        lw._consumer = late()
        await lw._follow_verdicts()
        assert (await lw.decision("r")).action == "warn"
        assert (await lw.gate(again, 0)).action == "allow"
        assert (await lw.gate(last_call, 0)).action == "abort"  # the ended run's own call: its answer

    asyncio.run(scenario())


def test_a_start_that_fails_half_way_closes_what_started() -> None:
    from loopwatch.streams.kafka.connect import start_client

    closed: list[str] = []

    async def start() -> None:
        raise ValueError("Redis URL must specify one of the following schemes")

    async def stop() -> None:
        closed.append("stopped")

    with pytest.raises(ValueError, match="Redis URL"):
        asyncio.run(start_client(start, stop, "127.0.0.1:9092", "LOOPWATCH_KAFKA_BOOTSTRAP"))
    assert closed == ["stopped"]  # (the producer started before was left open)


def test_the_client_publishes_what_the_in_process_detector_hashes_and_refuses_an_empty_outcome() -> None:
    import enum
    import pathlib

    from loopwatch.detectors.events import InvalidEvent

    class Tool(enum.StrEnum):
        READ = "read"

    from loopwatch.streams.client import kafka_client

    async def scenario() -> None:
        lw, recorder = client()
        await lw.tool_call("r", Tool.READ, {"path": pathlib.PurePosixPath("/x"), "blob": b"ab"})
        _, sent, _ = recorder.sent[-1]
        assert sent["tool"] == "read"
        assert sent["params"] == {"path": "/x", "blob": {"data": "YWI=", "type": "Uint8Array"}}
        with pytest.raises(InvalidEvent, match="a tool_result needs the one or the other"):
            await lw.tool_result("r", "read", {})
        with pytest.raises(InvalidEvent, match="run_id or session_id"):
            await lw.tool_result("", "read", {}, result="x")
        with pytest.raises(InvalidEvent, match="tool: holds 600 bytes"):
            await lw.tool_result("r", "t" * 600, {}, error="boom")
        assert len(recorder.sent) == 1
        await lw.stop()
        lw._latest["r"] = verdict("x", "block")
        with pytest.raises(kafka_client.ClientNotRunning):
            await lw.run_end("r")
        assert "r" in lw._latest  # a stopped client changed nothing before it refused

    asyncio.run(scenario())


class _CountingRedis(_Redis):
    def __init__(self, fields: dict[bytes, bytes]) -> None:
        super().__init__(fields)
        self.asked = 0

    async def hgetall(self, key: str) -> dict[bytes, bytes]:
        self.asked += 1
        return self.fields


def _following() -> LoopwatchClient:
    lw, _ = client()
    lw._follow = True  # (as a client that reads the verdict stream: its follower is not started here)
    return lw


def test_a_healthy_run_is_asked_of_redis_once_while_the_client_follows_the_verdicts() -> None:
    from loopwatch.detectors.events import encode_output

    async def scenario() -> None:
        lw = _following()
        redis = lw._redis = _CountingRedis({})
        for n in range(5):
            assert (await lw.gate(await lw.tool_call("r", "read", {"n": n}), timeout=0)).action == "allow"
        assert redis.asked == 1
        # a verdict of the run is read, then forgotten (more than RUNS_KEPT runs decided since):
        # Redis is asked again, and knows of the abort the stream's latest no longer holds
        lw._consumer = _Records([_Message(b"r", encode_output(verdict("e9", "warn")))])
        await lw._follow_verdicts()
        assert "r" not in lw._not_aborted
        del lw._latest["r"]
        redis.fields = {b"action": b"abort", b"message": b"stop", b"verdict_id": b"v-9"}
        gated = await lw.gate(await lw.tool_call("r", "read", {"n": 9}), timeout=0)
        assert (gated.action, gated.verdict_id, redis.asked) == ("abort", "v-9", 2)

    asyncio.run(scenario())


def test_redis_is_asked_at_every_gate_where_it_failed_or_the_client_reads_no_verdicts() -> None:
    class Failing:
        asked = 0

        async def hgetall(self, key: str) -> dict[bytes, bytes]:
            Failing.asked += 1
            raise ConnectionError("redis down")

    async def scenario() -> None:
        lw = _following()
        lw._redis = Failing()
        for n in range(3):
            assert (await lw.gate(await lw.tool_call("r", "read", {"n": n}), timeout=0)).action == "allow"
        assert Failing.asked == 3
        blind, _ = client()  # follows no verdicts: Redis is how it learns of an abort, every time
        redis = blind._redis = _CountingRedis({})
        await blind.gate(await blind.tool_call("r", "read", {}), timeout=0)
        redis.fields = {b"action": b"abort", b"message": b"stop", b"verdict_id": b"v-9"}
        gated = await blind.gate(await blind.tool_call("r", "read", {"n": 1}), timeout=0)
        assert (gated.action, redis.asked) == ("abort", 2)

    asyncio.run(scenario())
