"""The doors never fall: every malformed input is refused where it enters, and nothing else
is lost — the worker's record path, the config topic, the gateway, the embedded runtime."""

from __future__ import annotations

import asyncio
import base64
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import faust
import pytest
from aiohttp.test_utils import TestClient, TestServer
from aiokafka.errors import MessageSizeTooLargeError

from loopwatch.config import FleetConfig
from loopwatch.detectors.decoding import decode_event
from loopwatch.detectors.events import InvalidEvent, ToolCall, encode_event
from loopwatch.detectors.input_limits import MAX_ID_BYTES, MAX_NESTING
from loopwatch.detectors.stable_json import canonical_bytes
from loopwatch.detectors.tombstone import Tombstone
from loopwatch.streams.embedded.runtime import EmbeddedRuntime
from loopwatch.streams.fleet_view.view import FleetView
from loopwatch.streams.gateway.server import EmbeddedBackend, gateway_app
from loopwatch.streams.gateway.web_safety import WebSafety
from loopwatch.streams.kafka.config_topic import apply_logged
from loopwatch.streams.kafka.connect import partition_problems, session_timeout_problems
from tests.poison import POISON
from tests.unit.test_run_processor import TP, Broker, Record, expected, loop_trace, processor, records

Client = TestClient[Any, Any]
JSON = {"Content-Type": "application/json"}


# -- the limits themselves ------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(POISON))
def test_every_poison_class_is_an_invalid_event_never_another_exception(kind: str) -> None:
    with pytest.raises(InvalidEvent):
        decode_event(POISON[kind]("run", 1))


def params_of(data: bytes) -> Any:
    event = decode_event(data)
    assert isinstance(event, ToolCall)
    return event.params


def test_the_limits_let_their_edges_through() -> None:
    def call(**fields: Any) -> bytes:
        return json.dumps(
            {"type": "tool_call", "event_id": "e", "run_id": "r", "tool": "t", **fields}
        ).encode()

    nested: Any = 1
    for _ in range(MAX_NESTING):
        nested = [nested]
    assert params_of(call(params=nested)) == nested
    with pytest.raises(InvalidEvent, match="params: nests more than 64"):
        decode_event(call(params=[nested]))
    assert decode_event(call(params={}, run_id="é" * (MAX_ID_BYTES // 2))).run_id == "é" * 256
    with pytest.raises(InvalidEvent, match="run_id: holds 514 bytes"):
        decode_event(call(params={}, run_id="é" * 257))
    # unescaped UTF-8: an id of four-byte characters is measured once it can pass the limit
    raw = {"type": "tool_call", "event_id": "e", "run_id": "r", "tool": "t", "params": {}}
    edge = json.dumps({**raw, "tool": "\U0001f600" * 128}, ensure_ascii=False).encode()
    assert len(decode_event(edge).tool) == 128  # type: ignore[union-attr]
    with pytest.raises(InvalidEvent, match="tool: holds 516 bytes"):
        decode_event(json.dumps({**raw, "tool": "\U0001f600" * 129}, ensure_ascii=False).encode())
    assert decode_event(call(params={}, ts=2**63 - 1)).ts == 2**63 - 1
    # lone surrogates stay valid inside params (OpenClaw sanitises them before hashing)
    assert params_of(call(params={"q": "\ud800"})) == {"q": "\ud800"}
    # a key with one names no field: ignored like any unknown key (JavaScript reads it)
    assert params_of(call(params={"q": 1}, **{"x\ud800": 1})) == {"q": 1}


def test_a_typed_field_holding_a_lone_surrogate_is_named() -> None:
    """Text msgspec must encode (the type tag, a typed field, a key of ``usage``): refused with
    the field's name, from bytes and from a str alike (``loopwatch run``'s lines are str)."""
    for kind, field in (
        ("surrogate type", "type"),
        ("surrogate outcome_kind", "outcome_kind"),
        ("surrogate usage key", "usage.input_tokens\\ud800"),
    ):
        data = POISON[kind]("run", 1)
        for given in (data, data.decode()):
            with pytest.raises(InvalidEvent) as refused:
                decode_event(given)
            assert str(refused.value) == f"{field}: a lone UTF-16 surrogate is not valid here"
    raw = json.dumps({"type": "run_end", "event_id": "e", "run_id": "r\ud800"}, ensure_ascii=False)
    with pytest.raises(InvalidEvent, match="run_id: must be valid Unicode"):
        decode_event(raw)  # a str with the surrogate itself, not its escape


# -- the worker's record path -----------------------------------------------------------------


def test_every_poison_record_is_dead_lettered_once_and_the_worker_goes_on() -> None:
    async def go() -> None:
        broker = Broker()
        proc = processor(broker)
        proc.cursors.start(0, 0)
        valid = loop_trace(calls=25).events
        batch = records(valid)
        poisons = [
            Record("in", 0, 0, 1, b"k", maker("run-1", index)) for index, maker in enumerate(POISON.values())
        ]
        mixed: list[Record] = []
        for index, record in enumerate(batch):  # a poison record after every third valid one
            mixed.append(record)
            if index % 3 == 0 and poisons:
                mixed.append(poisons.pop())
        mixed.extend(poisons)
        for offset, record in enumerate(mixed):
            record.offset = offset
        await proc.process({TP("in", 0): mixed})
        assert broker.on("v") == expected(valid)
        letters = [json.loads(value) for value in broker.on("dl")]
        assert len(letters) == len(POISON)
        assert sorted(letter["offset"] for letter in letters) == sorted(
            r.offset for r in mixed if r.key == b"k"
        )
        assert all(letter["reason"] for letter in letters)
        assert proc.cursors.positions() == {0: len(mixed)}

    asyncio.run(go())


class SizedBroker(Broker):
    """A producer with faust's request limit: a record larger is refused as aiokafka refuses it."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    async def send(self, topic: str, key: bytes | None, value: bytes | None, partition: int | None) -> Any:
        size = len(key or b"") + len(value or b"") + 64  # aiokafka adds a record's framing
        if size > self.limit:
            raise MessageSizeTooLargeError(f"{topic}: {size} bytes")
        return await super().send(topic, key, value, partition)


def test_huge_invalid_records_are_dead_lettered_within_the_producer_s_limit() -> None:
    """An invalid record near the input limit, one over it and one with a huge key: each letter
    fits one producer request (base64 of the whole value would not), keeps what fits of the
    value, says how large it was, and the worker goes on."""
    limit = faust.App("doors").conf.producer_max_request_size
    whole = b'{"type":"tool_call","x":"' + b"a" * 600_000 + b'"}'  # its base64 fits
    near = b'{"type":"tool_call","x":"' + b"a" * 800_000 + b'"}'  # under max_event_bytes
    over = b"b" * 1_200_000
    valid = records(loop_trace(calls=4).events)
    invalid = [
        Record("in", 0, 0, 1, b"k", whole),
        Record("in", 0, 0, 1, b"k", near),
        Record("in", 0, 0, 1, b"k", over),
        Record("in", 0, 0, 1, bytes(range(256)) * 1200, b"{"),
    ]
    mixed = [valid[0], *invalid, *valid[1:]]
    for offset, record in enumerate(mixed):
        record.offset = offset

    async def go() -> None:
        broker = SizedBroker(limit)
        proc = processor(broker)
        proc.cursors.start(0, 0)
        await proc.process({TP("in", 0): mixed})
        assert proc.cursors.positions() == {0: len(mixed)}
        assert broker.on("v") == expected(loop_trace(calls=4).events)
        sent = [(key, value) for topic, key, value, _ in broker.sent if topic == "dl"]
        assert len(sent) == 4
        for (key, value), record in zip(sent, invalid, strict=True):
            assert len(key or b"") + len(value or b"") <= limit - 64
            letter = json.loads(value or b"")
            kept = base64.b64decode(letter["value_base64"])
            assert letter["value_size"] == len(record.value or b"")
            assert kept
            assert (record.value or b"").startswith(kept)
            assert letter["offset"] == record.offset
        assert len(base64.b64decode(json.loads(sent[0][1] or b"")["value_base64"])) == len(whole)
        assert sent[3][0] == (invalid[3].key or b"")[:1024]

    asyncio.run(go())


def test_a_producer_limit_below_the_letter_s_bound_gets_the_letter_without_the_value() -> None:
    record = Record("in", 0, 0, 1, b"k", b'{"type":"tool_call","x":"' + b"a" * 200_000 + b'"}')

    async def go() -> None:
        broker = SizedBroker(100_000)
        proc = processor(broker)
        proc.cursors.start(0, 0)
        await proc.process({TP("in", 0): [record]})
        assert proc.cursors.positions() == {0: 1}
        (letter,) = [json.loads(value) for value in broker.on("dl")]
        assert letter["value_base64"] == ""
        assert letter["value_size"] == len(record.value or b"")
        assert letter["reason"] == "invalid event: Object missing required field `tool`"

    asyncio.run(go())


# -- the followed topics ----------------------------------------------------------------------


def test_a_config_override_nested_3000_deep_is_refused_and_the_config_kept() -> None:
    config = FleetConfig.enabled_default()
    deep = b"{" + b'"a":{' * 3000 + b"}" * 3001
    assert apply_logged(config, b"agent-1", deep) is config
    assert apply_logged(config, b"agent-1", b"\xff\xfe") is config
    changed = apply_logged(config, b"agent-1", b'{"warningThreshold": 5}')
    assert changed is not config


def test_a_session_timeout_the_brokers_refuse_is_named_per_broker() -> None:
    limits = {
        "2": {"group.min.session.timeout.ms": 6000, "group.max.session.timeout.ms": 1_800_000},
        "1": {"group.min.session.timeout.ms": 1000, "group.max.session.timeout.ms": 2500},
    }
    problems = session_timeout_problems(3.0, limits)
    assert len(problems) == 2
    assert problems[0].startswith("broker 1: group.max.session.timeout.ms is 2500 ms, below 3000 ms")
    assert problems[1].startswith("broker 2: group.min.session.timeout.ms is 6000 ms, above 3000 ms")
    assert "LOOPWATCH_KAFKA_SESSION_TIMEOUT_S to 6 or more" in problems[1]
    assert session_timeout_problems(6.0, {"2": limits["2"]}) == []


def test_topics_with_another_partition_count_are_each_named() -> None:
    needed = {"loopwatch.tool-events": 6, "loopwatch.fleet-facts": 6, "loopwatch.config": 1}
    found = {"loopwatch.tool-events": 6, "loopwatch.fleet-facts": 3, "loopwatch.config": 2}
    assert partition_problems(needed, found) == [
        "topic loopwatch.fleet-facts: 3 partition(s) found, 6 needed",
        "topic loopwatch.config: 2 partition(s) found, 1 needed",
    ]


# -- the embedded runtime ---------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_idle_runs_expire_after_the_state_ttl_without_a_tombstone() -> None:
    async def go() -> None:
        clock = Clock()
        async with EmbeddedRuntime(FleetConfig.enabled_default(), state_ttl_s=0.2, clock=clock) as runtime:
            for event in (
                loop_trace(calls=3, run_id="idle").events + loop_trace(calls=3, run_id="busy").events
            ):
                await runtime.process(event)
            clock.now += 0.1
            await runtime.process(loop_trace(calls=1, run_id="busy").events[0])
            clock.now += 0.15  # idle: 0.25 s; busy: 0.15 s
            await asyncio.sleep(0.3)  # the sweeper runs every ttl / 4 (at least 50 ms)
            live = {scope for engine in runtime.engines for scope in engine.states}
            assert live == {"busy"}
            assert runtime.expired == 1
            assert not any(engine.ended for engine in runtime.engines)

    asyncio.run(go())


class BrokenView(FleetView):
    def event(self, event: Any, now_ms: int) -> None:
        if event.event_id == "breaks-the-view":
            raise RuntimeError("view broke")
        super().event(event, now_ms)


def test_an_event_that_fails_holds_up_no_other_and_health_tells_a_stall() -> None:
    async def go() -> None:
        clock = Clock()
        view = BrokenView("test")
        async with EmbeddedRuntime(FleetConfig.enabled_default(), view=view, clock=clock) as runtime:
            bad = ToolCall(event_id="breaks-the-view", run_id="r", tool="read", params={})
            with pytest.raises(RuntimeError, match="view broke"):
                await asyncio.wait_for(runtime.process(bad), 5)
            good = loop_trace(calls=1, run_id="fine").events[0]
            assert await asyncio.wait_for(runtime.process(good), 5) == []
            assert not runtime.stalled(5)
            runtime.events += 1  # an input position that is never released
            assert not runtime.stalled(5)
            clock.now += 6
            assert runtime.stalled(5)

    asyncio.run(go())


def test_an_ended_run_costs_about_two_kilobytes() -> None:
    ids = [f"{'e' * 30}-{i}" for i in range(257)]  # the default window of 256 ids and the run_end
    tombstone = Tombstone(ids)
    size = sys.getsizeof(tombstone) + sys.getsizeof(tombstone.hashes)
    assert size <= 2_200, size
    assert all(i in tombstone for i in ids)
    assert "another" not in tombstone


# -- the gateway ------------------------------------------------------------------------------


@asynccontextmanager
async def gateway(
    safety: WebSafety | None = None, tokens: frozenset[str] = frozenset()
) -> AsyncIterator[Client]:
    view = FleetView("test gateway")
    async with EmbeddedRuntime(FleetConfig.enabled_default(), view=view) as runtime:
        app = gateway_app(EmbeddedBackend(runtime), view, tokens, 1_048_576, safety)
        client = TestClient(TestServer(app), headers=JSON)
        await client.start_server()
        try:
            yield client
        finally:
            await client.close()


async def decide_works(client: Client, run_id: str = "after") -> None:
    body = {"run_id": run_id, "tool": "read", "params": {"path": "a"}}
    answer = await asyncio.wait_for(client.post("/v1/decide", json=body), 1)
    assert answer.status == 200
    assert (await answer.json())["decision"] == "allow"


def test_every_poison_class_answers_400_naming_the_problem_in_every_body_form() -> None:
    async def go() -> None:
        async with gateway() as client:
            for kind, maker in POISON.items():
                raw = maker("run", 1)
                array = b"[" + raw + b"]"
                for path, body in (("/v1/events", raw), ("/v1/events", array), ("/v1/decide", raw)):
                    answer = await asyncio.wait_for(client.post(path, data=body), 2)
                    text = await answer.text()
                    assert answer.status == 400, (kind, path, answer.status, text)
                    assert json.loads(text)["error"], (kind, path)
                await decide_works(client, f"after {kind}")
            metrics = await client.get("/metrics")
            assert metrics.status == 200
            health = await client.get("/health")
            assert health.status == 200

    asyncio.run(go())


def test_a_body_whose_content_encoding_does_not_decode_is_a_400_on_every_route() -> None:
    async def go() -> None:
        async with gateway() as client:
            for encoding in ("gzip", "deflate"):
                for path in ("/v1/decide", "/v1/events", "/v1/hooks/claude-code", "/v1/hooks/gemini"):
                    answer = await client.post(
                        path, data=b"not compressed at all", headers={"Content-Encoding": encoding}
                    )
                    text = await answer.text()
                    assert answer.status == 400, (encoding, path, text)
                    assert (
                        json.loads(text)["error"]
                        == f"the body does not decode as its Content-Encoding ({encoding})"
                    )
            await decide_works(client)

    asyncio.run(go())


def test_a_hook_s_session_id_too_long_for_a_run_id_is_a_400_and_nothing_is_kept() -> None:
    """The HTTP hooks keep a prompt number per session: an unbounded key would grow the
    gateway's memory by the size of each session id."""

    async def go() -> None:
        async with gateway() as client:
            for runtime, event in (("claude-code", "UserPromptSubmit"), ("gemini", "BeforeAgent")):
                body = {"hook_event_name": event, "session_id": "s" * 100_000, "prompt": "go"}
                answer = await client.post(f"/v1/hooks/{runtime}", json=body)
                assert answer.status == 400
                assert (await answer.json())["error"].startswith("session_id: gives run ids of 100020 bytes")
            await decide_works(client)

    asyncio.run(go())


def test_a_hook_s_agent_id_that_is_no_id_is_a_400_and_the_prompt_number_stays() -> None:
    """The agent is checked with the session, before the hook keeps a new prompt number: a
    refused prompt must not move the session's later calls into a run of their own."""

    async def go() -> None:
        view = FleetView("test gateway")
        async with EmbeddedRuntime(FleetConfig.enabled_default(), view=view) as runtime:
            app = gateway_app(EmbeddedBackend(runtime), view, frozenset(), 1_048_576)
            async with TestClient(TestServer(app), headers=JSON) as client:
                prompt = {"hook_event_name": "UserPromptSubmit", "session_id": "s", "prompt": "go"}
                assert (await client.post("/v1/hooks/claude-code", json=prompt)).status == 200
                refused = await client.post("/v1/hooks/claude-code?agent_id=" + "a" * 600, json=prompt)
                assert refused.status == 400
                assert (await refused.json())["error"] == (
                    "agent_id: holds 600 bytes, more than the limit of 512"
                )
                call = {
                    "hook_event_name": "PreToolUse",
                    "session_id": "s",
                    "tool_name": "Read",
                    "tool_input": {"file_path": "a"},
                }
                assert (await client.post("/v1/hooks/claude-code", json=call)).status == 200
                runs = {scope for engine in runtime.engines for scope in engine.states}
                assert runs == {"s#1"}

    asyncio.run(go())


def test_connections_idle_or_stuck_in_their_headers_are_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A client that opens connections and sends nothing, or half a header, must not hold the
    gateway's file descriptors until it can accept no more (aiohttp keeps them an hour)."""
    from aiohttp import web

    from loopwatch.streams.gateway import server

    monkeypatch.setattr(server, "IDLE_TIMEOUT_S", 0.5)

    async def go() -> None:
        view = FleetView("test gateway")
        async with EmbeddedRuntime(FleetConfig.enabled_default(), view=view) as runtime:
            runner = server.gateway_runner(gateway_app(EmbeddedBackend(runtime), view, frozenset(), 1 << 20))
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            port = runner.addresses[0][1]
            try:
                streams = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
                streams[1][1].write(b"POST /v1/decide HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # headers unfinished
                body = b'{"run_id": "r", "tool": "read", "params": {}}'
                streams[2][1].write(
                    b"POST /v1/decide HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                    + f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )  # answered, then idle
                for reader, writer in streams:
                    rest = await asyncio.wait_for(reader.read(), 20)  # to the end: closed by the server
                    writer.close()
                assert b"HTTP/1.1 200" in rest
            finally:
                await runner.cleanup()

    asyncio.run(go())


def test_surrogate_ids_name_their_field() -> None:
    async def go() -> None:
        async with gateway() as client:
            for field in ("run_id", "session_id", "event_id", "tool", "agent_id", "tool_call_id"):
                body = json.dumps({"run_id": "r", "tool": "read", "params": {}, field: "x\ud800"})
                answer = await client.post("/v1/decide", data=body)
                assert answer.status == 400
                assert (await answer.json())["error"].startswith(f"{field}: must be valid Unicode")
            await decide_works(client)

    asyncio.run(go())


def test_web_safety_refuses_foreign_hosts_origins_and_content_types() -> None:
    async def go() -> None:
        async with gateway(WebSafety.of("127.0.0.1", 0, ["s3cret"])) as client:
            auth = {"Authorization": "Bearer s3cret"}
            body = json.dumps({"run_id": "r", "tool": "read", "params": {}})
            plain = await client.post("/v1/decide", data=body, headers={**auth, "Content-Type": "text/plain"})
            assert plain.status == 415
            form = await client.post(
                "/v1/decide", data=body, headers={**auth, "Content-Type": "application/x-www-form-urlencoded"}
            )
            assert form.status == 415
            evil = await client.post(
                "/v1/decide", data=body, headers={**auth, "Origin": "https://evil.example"}
            )
            assert evil.status == 403
            rebound = await client.get("/fleet/overview", headers={**auth, "Host": "evil.example:6070"})
            assert rebound.status == 421
            no_token = await client.post("/v1/decide", data=body)
            assert no_token.status == 401
            odd_token = await client.post("/v1/decide", data=body, headers={"Authorization": "Bearer s3crét"})
            assert odd_token.status == 401
            page = await client.get("/dashboard")  # the page holds no data; its fetches send the token
            assert page.status == 200
            fine = await client.post("/v1/decide", data=body, headers=auth)
            assert fine.status == 200

    asyncio.run(go())


def test_a_non_ascii_digit_in_a_query_number_answers_400() -> None:
    async def go() -> None:
        async with gateway() as client:
            for raw in ("\u0663", "\u00b2", "5\u0660"):
                answer = await client.get("/fleet/overview", params={"minutes": raw})
                assert answer.status == 400, raw

    asyncio.run(go())


# -- what a state may hold (found by review: input that passed the doors and broke a store) -----


def test_token_counts_at_the_limit_leave_a_storable_state_and_the_worker_goes_on() -> None:
    from loopwatch.streams.kafka.run_table import unpack

    async def go() -> None:
        broker = Broker()
        data: dict[bytes, bytes] = {}
        proc = processor(broker, data)
        proc.cursors.start(0, 0)
        big = {"input_tokens": 2**63 - 1, "output_tokens": 2**63 - 1}
        calls = [
            json.dumps(
                {
                    "type": "tool_call",
                    "event_id": f"t{n}",
                    "run_id": "r",
                    "tool": "read",
                    "params": {"n": n},
                    "usage": big,
                }
            ).encode()
            for n in range(3)
        ]
        await proc.process(
            {TP("in", 0): [Record("in", 0, n, 1, b"r", value) for n, value in enumerate(calls)]}
        )
        assert broker.on("dl") == []
        assert unpack(data[b"r"]).offset == 2
        state = proc._runs[b"r"].state
        assert state is not None
        assert (state.input_tokens, state.events) == (2**63 - 1, 3)  # capped, not started afresh

    asyncio.run(go())


def test_a_reverted_edit_of_a_path_with_a_lone_surrogate_gives_an_encodable_verdict() -> None:
    import msgspec

    from loopwatch.config import parse_config_text
    from loopwatch.detectors.engine import Engine
    from loopwatch.detectors.events import encode_output

    config = parse_config_text(
        json.dumps(
            {
                "tools": {"loopDetection": {"enabled": True}},
                "loopwatch": {"detectors": {"editUndo": {"enabled": True}}},
            }
        )
    )
    engine = Engine(config)
    outputs = []
    for n, content in enumerate(["a", "b", "a", "b", "a", "b", "a"]):
        raw = json.dumps(
            {
                "type": "tool_call",
                "event_id": f"w{n}",
                "run_id": "r",
                "tool": "write",
                "params": {"path": "/x\ud800", "content": content},
            }
        )
        outputs += engine.process(decode_event(raw))
    assert outputs, "the reverts are flagged"
    for output in outputs:
        assert msgspec.json.decode(encode_output(output))
    assert engine.states["r"].to_bytes()


def test_a_cost_too_large_to_count_is_refused_at_the_door() -> None:
    raw = json.dumps(
        {
            "type": "tool_call",
            "event_id": "e",
            "run_id": "r",
            "tool": "t",
            "params": {},
            "usage": {"cost_usd": 1e307},
        }
    )
    with pytest.raises(InvalidEvent, match="cost_usd"):
        decode_event(raw)


def test_a_run_whose_next_event_waits_in_its_queue_is_not_expired() -> None:
    async def go() -> None:
        clock = Clock()
        async with EmbeddedRuntime(
            FleetConfig.enabled_default(), workers=1, state_ttl_s=10, clock=clock
        ) as runtime:
            first, second = loop_trace(calls=2, run_id="queued").events[:2]
            await runtime.process(first)
            clock.now += 10.5  # idle past the TTL since it was last processed...
            future = runtime.submit(second)  # ...but its next event is already queued
            runtime._expire(0)
            assert "queued" in runtime.engines[0].states
            await future

    asyncio.run(go())


def test_the_fleet_view_s_follower_survives_every_poison_record_and_a_bug_of_the_view(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The follower of the events topic feeds the monitoring view on every worker: a record it
    cannot take is passed over (a crash would repeat at the same record after each restart)."""
    from loopwatch.streams.kafka import topic_followers

    view = FleetView("worker")
    for maker in POISON.values():
        topic_followers._observe(view, False, maker("run-1", 1), 0, 1 << 20)
        topic_followers._observe(view, True, maker("run-1", 1), 0, 1 << 20)
    valid = json.dumps({"type": "tool_call", "event_id": "e", "run_id": "r", "tool": "t", "params": {}})

    def broken(event: Any, ts_ms: int) -> None:
        raise KeyError("a bug of the view")

    monkeypatch.setattr(view, "event", broken)
    topic_followers._observe(view, False, valid.encode(), 0, 1 << 20)  # logged, not raised
    monkeypatch.undo()
    topic_followers._observe(view, False, valid.encode(), 0, 1 << 20)
    assert view.events == 1


def test_events_with_lone_surrogates_are_encoded_and_decode_back_the_same() -> None:
    """The sidecar, ``loopwatch import`` and the gateway's Kafka backend write events whose
    params or results carry lone surrogates (a tool output cut inside an emoji)."""
    lone = "\ud83d"
    params = {f"k{lone}": [1.5, 2**60, f"v{lone}", {"in": lone, f"x{lone}y": {"deep": [lone]}}], "ok": "é"}
    call = decode_event(
        json.dumps({"type": "tool_call", "event_id": "e1", "run_id": "r", "tool": "t", "params": params})
    )
    result = decode_event(
        json.dumps(
            {
                "type": "tool_result",
                "event_id": "e2",
                "run_id": "r",
                "tool": "t",
                "params": params,
                "result": {"content": [{"type": "text", "text": f"out{lone}"}], "n": 1e300},
            }
        ).replace("1e+300", "1e999")  # JSON's way to say Infinity, as JavaScript reads it
    )
    failed = decode_event(
        json.dumps(
            {"type": "tool_result", "event_id": "e3", "run_id": "r", "tool": "t", "params": {}, "error": lone}
        )
    )
    for event in (call, result, failed):
        again = decode_event(encode_event(event))
        assert again == event
        assert canonical_bytes(again) == canonical_bytes(event)


def test_the_fleet_view_s_follower_shows_what_the_events_values_show() -> None:
    """The follower keeps params and results as their JSON text (cheaper to read): the view it
    feeds shows the same fingerprints, previews and outcomes as one fed decoded values."""
    from loopwatch.streams.kafka import topic_followers

    lines = [
        {
            "type": "tool_call",
            "event_id": "c1",
            "run_id": "r",
            "tool": "read",
            "params": {"b": [1, 2.5], "a": "é"},
        },
        {
            "type": "tool_result",
            "event_id": "r1",
            "run_id": "r",
            "tool": "read",
            "params": {"b": [1, 2.5], "a": "é"},
            "result": {"content": [{"type": "text", "text": "x" * 300}]},
        },
        {
            "type": "tool_call",
            "event_id": "c2",
            "run_id": "r",
            "tool": "exec",
            "params": {"command": "ls  -l\u2028"},
        },
        {
            "type": "tool_result",
            "event_id": "r2",
            "run_id": "r",
            "tool": "exec",
            "params": {"command": "ls"},
            "error": "ENOENT",
        },
    ]
    followed, direct = FleetView("worker"), FleetView("worker")
    for line in lines:
        value = json.dumps(line, indent=1).encode()
        topic_followers._observe(followed, False, value, 5, 1 << 20)
        direct.event(decode_event(value), 5)
    assert followed.events == len(lines)
    assert followed.overview(10) == direct.overview(10)
    shown = followed.run("r")
    assert shown == direct.run("r")
    assert shown is not None
    assert [step.get("preview") for step in shown["recent"]][:1] == ['{"b":[1,2.5],"a":"é"}']
