import pytest

from loopwatch.config.fleet import FleetConfig
from loopwatch.detectors.events import ToolCall
from loopwatch.detectors.state import RunState
from loopwatch.detectors.step import apply, new_state
from loopwatch.streams.kafka.run_table import (
    ENDED,
    LIVE,
    NO_OFFSET,
    TableValue,
    id_hash,
    pack_ended,
    pack_live,
    unpack,
)


def _state() -> RunState:
    config = FleetConfig.enabled_default()
    event = ToolCall(event_id="e1", run_id="r", tool="read", params={"path": "a"})
    state = new_state(event, config)
    apply(state, event, config)
    return state


def test_a_live_value_keeps_its_offset_and_state() -> None:
    state = _state()
    value = unpack(pack_live(41, state.to_bytes()))
    assert (value.kind, value.offset, value.ended_ms) == (LIVE, 41, 0)
    assert RunState.from_bytes(value.state) == state


def test_an_ended_value_is_a_small_tombstone() -> None:
    blob = pack_ended(7, 1_764_000_000_000)
    assert len(blob) == 17
    assert unpack(blob) == TableValue(ENDED, 7, b"", 1_764_000_000_000)


def test_a_state_written_before_the_header_reads_as_live_without_offset() -> None:
    state = _state()
    value = unpack(state.to_bytes())
    assert (value.kind, value.offset) == (LIVE, NO_OFFSET)
    assert RunState.from_bytes(value.state) == state


@pytest.mark.parametrize("blob", [b"", b"X123456789", b"E\x00"])
def test_other_bytes_are_refused(blob: bytes) -> None:
    with pytest.raises(ValueError, match="table value"):
        unpack(blob)


def test_an_ended_value_keeps_the_hashes_of_the_ids_its_run_had_seen() -> None:
    value = unpack(pack_ended(7, 5, ["a", "b", "a"]))
    assert value.ended_ids == {id_hash("a"), id_hash("b")}
    assert id_hash("c") not in value.ended_ids
