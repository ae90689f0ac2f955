"""The fleet view's handoff (streams.kafka.view_handoff) against a model of one input
partition: whatever the order of assignments, revocations (committed or not), other workers'
progress, the follower's start and its pace, every record is shown to the view exactly once,
in offset order (a run's events in the order they were sent)."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from loopwatch.streams.kafka.view_handoff import PAUSE, WAITING_MAX, ViewHandoff

RECORDS = 40
P = 3  # the partition (any)


class Partition:
    """One input partition of RECORDS records, this worker, its follower and the others."""

    def __init__(self, waiting_max: int = WAITING_MAX) -> None:
        self.handoff = ViewHandoff(self._shown, waiting_max)
        self.handoff.on_release = self._resumed
        self.shown: Counter[int] = Counter()
        self.order: list[int] = []  # offsets in the order the view was shown them
        self.follower: int | None = None  # its next offset, once positioned
        self.started_at = 0
        self.paused = False
        self.cursor: int | None = None  # this worker's next offset to apply, while it owns it
        self.committed = 0  # the group's committed offset
        self.applied = 0  # how far any worker applied

    def _shown(self, offset: int, ts_ms: int) -> None:
        assert ts_ms == offset  # (the model's record time is its offset)
        self.shown[offset] += 1
        self.order.append(offset)

    def _resumed(self, partition: int) -> None:
        assert partition == P
        self.paused = False

    def follower_starts(self, at: int = 0) -> None:
        if self.follower is None:
            self.follower = self.started_at = at  # (the view's horizon: the follower's start)
            self.handoff.positioned(P, at)

    def follower_reads(self) -> None:
        if self.follower is None or self.paused or self.follower >= RECORDS:
            return
        offset = self.follower
        goes_on = self.handoff.follower_skips(P, offset)
        if goes_on is None:
            self._shown(offset, offset)
            self.follower = offset + 1
        elif goes_on == PAUSE:
            self.paused = True  # (sought back to this record)
        else:
            assert goes_on > offset
            self.follower = goes_on

    def take(self, back: int) -> None:
        if self.cursor is None:
            start = max(0, self.committed - back) if back else self.committed
            start = min(start, self.applied)
            self.cursor = start
            self.handoff.take(P, start)

    def apply(self) -> None:
        if self.cursor is not None and self.cursor < RECORDS:
            self.handoff.worker_applies(P, self.cursor, self.cursor, self.cursor)
            self.cursor += 1
            self.applied = max(self.applied, self.cursor)

    def release(self, commits: bool) -> None:
        if self.cursor is not None:
            self.handoff.release(P, self.cursor)
            if commits:
                self.committed = max(self.committed, self.cursor)
            self.cursor = None

    def others_apply(self, count: int) -> None:
        if self.cursor is None:
            self.applied = min(RECORDS, self.applied + count)
            self.committed = max(self.committed, self.applied - count // 2)


STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("follower_starts"), st.integers(0, 20)),
        st.tuples(st.just("follower_reads"), st.integers(1, 8)),
        st.tuples(st.just("take"), st.integers(0, 6)),
        st.tuples(st.just("apply"), st.integers(1, 8)),
        st.tuples(st.just("release"), st.booleans()),
        st.tuples(st.just("others_apply"), st.integers(1, 10)),
    ),
    max_size=60,
)


def _play(model: Partition, steps: list[tuple[object, ...]]) -> int:
    """The steps, then the end: this worker applies what it owns to the end; the follower
    reads the rest. The follower's start: every record from there on must have been shown
    (before it, only the records this worker applied)."""
    for step in steps:
        name, arg = step[0], step[1]
        if name == "follower_starts":
            model.follower_starts(int(arg))  # type: ignore[call-overload]
        elif name == "follower_reads":
            for _ in range(int(arg)):  # type: ignore[call-overload]
                model.follower_reads()
        elif name == "take":
            model.take(int(arg))  # type: ignore[call-overload]
        elif name == "apply":
            for _ in range(int(arg)):  # type: ignore[call-overload]
                model.apply()
        elif name == "release":
            model.release(bool(arg))
        else:
            model.others_apply(int(arg))  # type: ignore[call-overload]
        assert all(n == 1 for n in model.shown.values()), model.shown
    model.follower_starts()
    if model.cursor is not None:
        while model.cursor < RECORDS:
            model.apply()
    for _ in range(4 * RECORDS):
        model.follower_reads()
    assert model.follower == RECORDS or model.paused
    return model.started_at


@settings(max_examples=3000)
@given(STEPS)
def test_every_record_is_shown_exactly_once_and_in_order(steps: list[tuple[object, ...]]) -> None:
    model = Partition()
    since = _play(model, steps)
    assert model.shown + Counter(range(since)) >= Counter(range(RECORDS))
    assert max(model.shown.values(), default=1) == 1
    assert model.order == sorted(model.order)


@settings(max_examples=1000)
@given(STEPS)
def test_a_worker_far_ahead_of_its_follower_still_shows_each_record_once(
    steps: list[tuple[object, ...]],
) -> None:
    """Beyond ``waiting_max`` held-back records the worker shows them at once (before older
    ones its follower has yet to read): each record still once."""
    model = Partition(waiting_max=2)
    since = _play(model, steps)
    assert model.shown + Counter(range(since)) >= Counter(range(RECORDS))
    assert max(model.shown.values(), default=1) == 1


def test_a_worker_that_owns_the_partition_from_the_start_reads_it_alone() -> None:
    """The follower pauses at the first record the worker shows and never reads on."""
    model = Partition()
    model.take(0)
    model.follower_starts()
    assert model.handoff.owned() == {P}
    model.follower_reads()
    assert model.paused
    assert model.follower == 0
    for _ in range(RECORDS):
        model.apply()
    assert model.shown == Counter(range(RECORDS))


def test_a_follower_ahead_of_the_committed_offset_is_not_shown_again() -> None:
    model = Partition()
    model.follower_starts()
    model.others_apply(10)  # another worker applied 10, committed 5
    for _ in range(10):
        model.follower_reads()
    assert model.committed == 5
    assert model.follower == 10
    model.take(0)  # from the committed offset: 5..9 are applied again, not shown again
    for _ in range(6):
        model.apply()
    assert model.order == [*range(11)]
