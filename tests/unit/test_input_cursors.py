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
