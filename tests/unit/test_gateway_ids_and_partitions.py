"""The Kafka gateway's cheaper paths give what the costlier ones gave: the event id it makes up
for a call (a uuid4's hex), and the partition of a record's key (aiokafka's default)."""

from __future__ import annotations

import random
import uuid

import pytest
from aiokafka.partitioner import DefaultPartitioner

from loopwatch.streams.gateway.backend import is_named
from loopwatch.streams.gateway.server import _call_of, _generated_id
from loopwatch.streams.kafka import key_partitioner
from loopwatch.streams.kafka.key_partitioner import KeyPartitioner


def test_a_made_up_event_id_is_a_fresh_uuid4_the_gateway_knows_as_its_own() -> None:
    ids = [_generated_id() for _ in range(5_000)]
    assert len(set(ids)) == len(ids)
    for made in ids[:500]:
        assert made.startswith("gateway-")
        parsed = uuid.UUID(made.removeprefix("gateway-"))
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
        assert parsed.hex == made.removeprefix("gateway-")
        assert not is_named(made)


def test_a_call_keeps_the_id_its_client_named_and_gets_one_when_it_named_none() -> None:
    named = _call_of({"event_id": "mine", "run_id": "r", "tool": "read", "params": {}}, False)
    assert named.event_id == "mine"
    assert is_named(named.event_id)
    unnamed = _call_of({"run_id": "r", "tool": "read", "params": {}}, False)
    assert not is_named(unnamed.event_id)
    assert unnamed.run_id == "r"


def test_a_call_s_fields_are_the_client_s_over_the_gateway_s_in_the_same_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from loopwatch.streams.gateway import server
    from loopwatch.streams.gateway.tolerant_json import dumps

    encoded: list[dict[str, object]] = []

    def recording(value: dict[str, object], surrogates: bool) -> bytes:
        encoded.append(dict(value))
        return dumps(value, surrogates)

    monkeypatch.setattr(server, "dumps", recording)
    monkeypatch.setattr(server, "_generated_id", lambda: "gateway-" + "0" * 32)
    for value in (
        {"tool": "read", "run_id": "r", "params": {}},
        {"tool": "read", "type": "tool_call", "run_id": "r", "event_id": "e", "params": {}},
        {"event_id": "e", "tool": "read", "run_id": "r", "params": {}, "type": "tool_call"},
    ):
        encoded.clear()
        _call_of(value, False)
        old = {"type": "tool_call", "event_id": "gateway-" + "0" * 32, **value}  # (as it was built)
        assert list(encoded[0].items()) == list(old.items())
    with pytest.raises(Exception, match="event_id"):  # an id of null is the client's, refused
        _call_of({"event_id": None, "tool": "read", "run_id": "r", "params": {}}, False)
    with pytest.raises(Exception, match="a decision is asked for a tool_call"):  # the client's type
        _call_of({"type": "run_end", "run_id": "r"}, False)


def test_a_key_goes_to_the_partition_the_default_partitioner_chooses() -> None:
    chosen, default = KeyPartitioner(), DefaultPartitioner()
    draw = random.Random(43)
    keys = [draw.randbytes(draw.randint(0, 48)) for _ in range(3_000)] + [b"run:a", "séance:ü".encode()]
    for key in keys * 2:  # (the second time from the kept hashes)
        for count in (1, 4, 7, 12, 64):
            partitions = list(range(count))
            assert chosen(key, partitions, partitions) == default(key, partitions, partitions)


def test_the_kept_hashes_start_again_beyond_their_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(key_partitioner, "KEYS_KEPT", 10)
    chosen, default = KeyPartitioner(), DefaultPartitioner()
    partitions = list(range(4))
    for n in range(100):
        key = b"run-%d" % n
        assert chosen(key, partitions, partitions) == default(key, partitions, partitions)
        assert len(chosen._hashes) <= 10
    assert chosen(None, partitions, [2]) == 2  # no key: one of the available partitions
    chosen = KeyPartitioner()
    long_key = b"r" * (key_partitioner.KEY_BYTES_KEPT + 1)
    assert chosen(long_key, partitions, partitions) == default(long_key, partitions, partitions)
    assert not chosen._hashes  # (a long key is hashed each time, not kept)
