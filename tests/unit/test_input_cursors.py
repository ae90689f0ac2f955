from loopwatch.streams.kafka.input_cursors import Admission, InputCursors


def test_a_partition_without_a_cursor_applies_nothing() -> None:
    cursors = InputCursors()
    assert cursors.admit(0, 0) == Admission(None, None, 0)
    cursors.start(0, 10)
    assert cursors.ready() == {0}
    assert cursors.admit(1, 10) == Admission(None, None, 0)


def test_a_batch_overlapping_what_was_applied_applies_from_the_cursor() -> None:
    cursors = InputCursors()
    cursors.start(2, 100)
    assert cursors.admit(2, 100) == Admission(100, None, 0)
    assert cursors.admit(2, 40) == Admission(100, None, 0)  # a stale pre-fetch, a re-read
    cursors.advance(2, 150)
    assert cursors.admit(2, 120) == Admission(150, None, 0)
    cursors.advance(2, 140)  # never backwards
    assert cursors.positions() == {2: 150}


def test_a_batch_past_the_cursor_is_sought_back_once_then_the_gap_is_accepted() -> None:
    cursors = InputCursors()
    cursors.start(0, 100)
    assert cursors.admit(0, 400) == Admission(None, 100, 0)  # records 100..399 would be skipped
    assert cursors.admit(0, 100) == Admission(100, None, 0)  # the seek brought them
    cursors.start(1, 7)
    assert cursors.admit(1, 9) == Admission(None, 7, 0)
    assert cursors.admit(1, 9) == Admission(9, None, 2)  # still missing after the seek: gone


def test_an_advance_after_a_seek_forgets_it() -> None:
    cursors = InputCursors()
    cursors.start(0, 100)
    assert cursors.admit(0, 300).seek_to == 100
    cursors.advance(0, 120)
    assert cursors.admit(0, 300) == Admission(None, 120, 0)  # a new gap: seek again first


def test_stopped_partitions_give_their_positions_for_the_last_commit() -> None:
    cursors = InputCursors()
    cursors.start(0, 5)
    cursors.start(1, 9)
    cursors.advance(0, 8)
    assert cursors.stop({0, 3}) == {0: 8}
    assert cursors.ready() == {1}
    assert cursors.stop_all() == {1: 9}
    assert cursors.admit(0, 8) == Admission(None, None, 0)


def test_a_fetched_batch_applies_each_admitted_offset_once_in_order() -> None:
    import asyncio
    from typing import NamedTuple

    from loopwatch.streams.kafka.input_cursors import apply_admitted

    class TP(NamedTuple):
        topic: str
        partition: int

    class Rec(NamedTuple):
        offset: int

    cursors = InputCursors()
    cursors.start(0, 10)  # overlapping re-read: 8, 9 skipped
    cursors.start(1, 5)  # starts past the cursor: sought back, nothing applied
    cursors.start(3, 0)  # sought back already, the broker has lost 0..1: the gap is accepted
    assert cursors.admit(3, 2) == Admission(None, 0, 0)
    applied: list[tuple[int, int]] = []
    seeks: list[tuple[int, int, int]] = []
    gaps: list[tuple[int, int, int]] = []

    async def apply(record: Rec) -> None:
        applied.append((current[0], record.offset))

    async def seek_back(partition: int, first: int, to: int) -> None:
        seeks.append((partition, first, to))

    current = [0]
    fetched = {
        TP("in", 0): [Rec(8), Rec(9), Rec(10), Rec(11)],
        TP("in", 1): [Rec(7), Rec(8)],
        TP("in", 2): [Rec(0)],  # no cursor: not ready
        TP("in", 3): [Rec(2), Rec(3)],
        TP("in", 4): [],
    }

    async def scenario() -> dict[int, int]:
        result: dict[int, int] = {}
        for tp, records in fetched.items():  # one partition at a time, to know which applied
            current[0] = tp.partition
            result |= await apply_admitted(
                cursors, {tp: records}, apply, seek_back, lambda *gap: gaps.append(gap)
            )
        return result

    advanced = asyncio.run(scenario())
    assert applied == [(0, 10), (0, 11), (3, 2), (3, 3)]
    assert seeks == [(1, 7, 5)]
    assert gaps == [(3, 0, 2)]
    assert advanced == {0: 12, 3: 4}
    assert cursors.positions() == {0: 10, 1: 5, 3: 0}  # the caller advances, once written
