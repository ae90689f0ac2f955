"""A run's window of seen event ids (E4): the newest ``seenEventIds`` are kept, oldest forgotten
first, through the state's byte form too, and out of the garbage collector's sight."""

from __future__ import annotations

import gc

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopwatch.detectors.state import RunState

LIMIT = 256


def filled(count: int) -> RunState:
    state = RunState("run-1", seen_limit=LIMIT)
    for n in range(count):
        assert state.remember(f"event-{n}")
    return state


def test_the_newest_ids_are_kept_and_the_oldest_forgotten_first() -> None:
    state = filled(LIMIT + 10)
    assert not state.remember(f"event-{LIMIT + 9}")  # the newest: a redelivery
    assert not state.remember("event-10")  # the oldest still kept
    assert state.has_seen("event-10")
    assert not state.has_seen("event-9")  # beyond the window: forgotten
    assert state.remember("event-9")  # so it counts as new again, and pushes out event-10
    assert not state.has_seen("event-10")
    assert state.has_seen("event-11")


def test_the_window_and_its_order_survive_the_byte_form() -> None:
    state = filled(LIMIT + 3)
    again = RunState.from_bytes(state.to_bytes(), LIMIT)
    assert list(again.seen) == list(state.seen)
    assert again.remember("event-0")  # forgotten before, forgotten after
    assert not again.has_seen("event-3")  # and the oldest kept went first


def test_the_seen_ids_are_not_tracked_by_the_garbage_collector() -> None:
    """A full collection visits every tracked object: a window per parsed run would cost every
    pause as many visits as the runs hold ids."""
    state = filled(LIMIT + 1)
    state.remember("x" * 5000)  # a long id is kept as its hash
    assert not gc.is_tracked(state.seen)
    assert not gc.is_tracked(state._seen_ring)


@pytest.mark.parametrize(
    ("new_limit", "fresh"),
    [
        (LIMIT, [True, True, True, False, True]),  # the oldest 256 forgotten at once
        (4 * LIMIT, [False, False, False, False, True]),  # nothing forgotten
    ],
)
def test_a_changed_limit_keeps_the_ids_a_state_parsed_again_would(new_limit: int, fresh: list[bool]) -> None:
    """``seenEventIds`` changed by a config reload: the state a worker kept in memory and the
    one it parsed again from its bytes (restart, rebalance) refuse the same redeliveries."""
    kept = RunState("run-1", seen_limit=2 * LIMIT)
    for n in range(2 * LIMIT):
        kept.remember(f"event-{n}")
    parsed = RunState.from_bytes(kept.to_bytes(), new_limit)
    probes = [f"event-{n}" for n in (0, LIMIT - 1, LIMIT, 2 * LIMIT - 1, 2 * LIMIT)]
    # asked first whether an id is known (the fleet's blocks are decided before the step)
    assert [kept.has_seen(p, new_limit) for p in probes] == [parsed.has_seen(p, new_limit) for p in probes]
    assert [kept.remember(p, new_limit) for p in probes] == fresh
    assert [parsed.remember(p, new_limit) for p in probes] == fresh
    assert list(kept.seen) == list(parsed.seen)


@given(
    st.integers(1, 6),
    st.lists(st.one_of(st.integers(0, 9), st.tuples(st.just("limit"), st.integers(1, 6))), max_size=60),
)
def test_the_window_is_the_newest_distinct_ids_whatever_the_order_of_events(
    limit: int, steps: list[int | tuple[str, int]]
) -> None:
    """Against a model: the newest ``limit`` ids not seen before, a changed limit dropping the
    oldest; the state in memory and the one parsed again from its bytes answer alike."""
    state = RunState("run-1", seen_limit=limit)
    model: dict[str, None] = {}
    for step in steps:
        if isinstance(step, tuple):
            limit = step[1]
            for key in list(model)[: max(0, len(model) - limit)]:
                del model[key]
            state.has_seen("any", limit)  # (the limit is applied first)
        else:
            event_id = f"event-{step}"
            expected = event_id not in model
            if expected:
                model[event_id] = None
                if len(model) > limit:
                    del model[next(iter(model))]
            assert state.remember(event_id, limit) is expected
            again = RunState.from_bytes(state.to_bytes(), limit)
            assert list(again.seen) == list(state.seen) == list(model)
