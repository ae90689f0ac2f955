from streams.stall_watch import StallWatch


def test_a_partition_that_does_not_move_while_records_wait_is_stalled() -> None:
    watch = StallWatch(after_s=20)
    assert watch.check(0, position=10, end=50, now=0) is None  # first sight: the clock starts
    assert watch.check(0, position=10, end=50, now=19) is None
    assert watch.check(0, position=10, end=60, now=21) == 21
    assert watch.check(0, position=10, end=60, now=30) is None  # one recovery a period
    assert watch.check(0, position=10, end=60, now=41.5) == 20.5  # still stuck: again


def test_progress_or_an_empty_backlog_is_not_a_stall() -> None:
    watch = StallWatch(after_s=20)
    for second in range(0, 100, 10):
        assert watch.check(1, position=second, end=1000, now=second) is None  # moving
    assert watch.check(2, position=50, end=50, now=0) is None
    assert watch.check(2, position=50, end=50, now=500) is None  # caught up, idle


def test_forgotten_partitions_start_over() -> None:
    watch = StallWatch(after_s=20)
    watch.check(3, position=5, end=9, now=0)
    watch.forget({0, 1})
    assert watch.check(3, position=5, end=9, now=30) is None  # reassigned later: a new clock
    assert watch.check(3, position=5, end=9, now=51) == 21
