"""Per-run state (DESIGN §4) and its compact byte form for faust tables.

Bounded by construction: at most ``historySize`` history records, ``seen_event_ids`` event
ids, 256 warning keys, ``windowSize`` guard observations, the outputs of the events
awaiting delivery confirmation (the shell waits for confirmations at 64), and a few counters. The live object
(:class:`RunState`) carries indexes derived from the history; :class:`RunSnapshot` is what is
persisted, and :meth:`RunState.from_bytes` rebuilds the indexes from it.
"""

from __future__ import annotations

from collections import deque
from typing import Final

from loopwatch.detectors.compaction_guard import PostCompactionGuard
from loopwatch.detectors.history import History
from loopwatch.detectors.snapshot import DECODER, ENCODER, FORMAT_VERSION, RunSnapshot

__all__ = ["PathEdits", "RunSnapshot", "RunState"]

OUTBOX_LIMIT: Final = 64
_UNMARKED: Final[tuple[str | None, bool, str | None]] = (None, False, None)


class PathEdits:
    """What ``edit_undo`` keeps of one path: recent content digests, recent edits, the count."""

    __slots__ = ("changes", "contents", "count")

    def __init__(
        self, contents: list[str] | None = None, changes: list[str] | None = None, count: int = 0
    ) -> None:
        self.contents: list[str] = contents if contents is not None else []
        self.changes: list[str] = changes if changes is not None else []
        self.count = count


class RunState:
    """Mutable state of one run scope; changed only by :func:`detectors.step.apply`."""

    __slots__ = (
        "_seen_limit",
        "aborted",
        "agent_id",
        "buckets",
        "budget_aborted",
        "budget_fired",
        "churn_aborted",
        "churn_since",
        "criticals",
        "edits",
        "events",
        "first_detector",
        "guard",
        "history",
        "input_tokens",
        "last_ts",
        "loop_spend_usd",
        "outbox",
        "outcome_tools",
        "output_tokens",
        "recovery_aborted",
        "run_id",
        "scope",
        "seen",
        "seen_pairs",
        "seen_set",
        "session_id",
        "since_new",
        "spend_usd",
    )

    def __init__(
        self,
        scope: str,
        agent_id: str = "default",
        run_id: str | None = None,
        session_id: str | None = None,
        seen_limit: int = 256,
    ) -> None:
        self.scope = scope
        self.agent_id = agent_id
        self.run_id = run_id
        self.session_id = session_id
        self.history = History()
        self._seen_limit = seen_limit
        self.seen: deque[str] = deque()
        self.seen_set: set[str] = set()
        self.buckets: dict[str, int] = {}
        self.guard = PostCompactionGuard()
        self.criticals = 0
        self.recovery_aborted = False
        self.last_ts: int | None = None
        self.events = 0
        # revision 2026-08: when the argument-churn lease started (event ms), and whether the
        # run was aborted for stale churn (detectors.churn_liveness)
        self.churn_since: int | None = None
        self.churn_aborted = False
        # spend (always counted): usage of the run's calls, and of those from its first verdict on
        self.spend_usd = 0.0
        self.loop_spend_usd = 0.0
        self.input_tokens = 0
        self.output_tokens = 0
        self.first_detector: str | None = None
        self.budget_fired = False
        self.budget_aborted = False
        # run_no_progress (when on): tools of the last windowSize outcomes, outcomes since the
        # last new one, the 256 most recently seen (tool, result hash) pairs, oldest first
        self.outcome_tools: deque[str] = deque()
        self.since_new = 0
        self.seen_pairs: dict[str, None] = {}
        # edit_undo (when on): per path, most recently changed last
        self.edits: dict[str, PathEdits] = {}
        # Encoded outputs whose delivery the shell has not confirmed yet, by trigger event id:
        # a redelivered event re-publishes them (at most OUTBOX_LIMIT events).
        self.outbox: dict[str, list[bytes]] = {}
        # the run's first enforced abort (reason, message): every later decision of the run is
        # that abort (a sticky decision; no new verdict is published for it)
        self.aborted: tuple[str, str] | None = None

    def remember(self, event_id: str) -> bool:
        """Record an event id; ``False`` if it was already seen (a redelivery)."""
        if event_id in self.seen_set:
            return False
        self.seen.append(event_id)
        self.seen_set.add(event_id)
        if len(self.seen) > self._seen_limit:
            self.seen_set.discard(self.seen.popleft())
        return True

    def hold(self, event_id: str, encoded: list[bytes]) -> None:
        """Keep an event's encoded outputs until :meth:`delivered`.

        Nothing is dropped here (a dropped entry could be a lost verdict after a crash): the
        shell keeps the outbox bounded by waiting for confirmations once a run holds
        :data:`OUTBOX_LIMIT` events' outputs.
        """
        self.outbox[event_id] = encoded

    def delivered(self, event_id: str) -> None:
        self.outbox.pop(event_id, None)

    def snapshot(self) -> RunSnapshot:
        return RunSnapshot(
            version=FORMAT_VERSION,
            scope=self.scope,
            agent_id=self.agent_id,
            run_id=self.run_id,
            session_id=self.session_id,
            records=[record.as_tuple() for record in self.history.records],
            record_marks=[
                (index, record.kind, record.no_progress, record.failure_id)
                for index, record in enumerate(self.history.records)
                if record.kind is not None or record.no_progress
            ],
            churn_since=self.churn_since,
            churn_aborted=self.churn_aborted,
            spend=(self.spend_usd, self.loop_spend_usd, self.input_tokens, self.output_tokens),
            first_detector=self.first_detector,
            budget=(self.budget_fired, self.budget_aborted),
            outcome_tools=list(self.outcome_tools),
            since_new=self.since_new,
            seen_pairs=list(self.seen_pairs),
            edits=[(path, e.contents, e.changes, e.count) for path, e in self.edits.items()],
            seen=list(self.seen),
            buckets=list(self.buckets.items()),
            guard_remaining=self.guard.remaining,
            guard_window=self.guard.window,
            guard_observations=list(self.guard.observations),
            criticals=self.criticals,
            recovery_aborted=self.recovery_aborted,
            last_ts=self.last_ts,
            events=self.events,
            outbox=list(self.outbox.items()),
            aborted=self.aborted,
        )

    def to_bytes(self) -> bytes:
        """Compact msgpack bytes of the state."""
        return ENCODER.encode(self.snapshot())

    @classmethod
    def from_snapshot(cls, snap: RunSnapshot, seen_limit: int = 256) -> RunState:
        state = cls(snap.scope, snap.agent_id, snap.run_id, snap.session_id, seen_limit)
        unbounded = len(snap.records)
        marks = {
            index: (kind, no_progress, failure_id)
            for index, kind, no_progress, failure_id in snap.record_marks
        }
        for index, (tool, args_hash, call_id, result_hash, unknown, ts) in enumerate(snap.records):
            kind, no_progress, failure_id = marks.get(index, _UNMARKED)
            state.history.append(
                tool, args_hash, call_id, result_hash, unknown, ts, unbounded, kind, no_progress, failure_id
            )
        for event_id in snap.seen:
            state.remember(event_id)
        state.buckets = dict(snap.buckets)
        state.guard = PostCompactionGuard(
            snap.guard_remaining,
            snap.guard_window,
            [tuple(t) for t in snap.guard_observations],  # type: ignore[misc]
        )
        state.criticals = snap.criticals
        state.recovery_aborted = snap.recovery_aborted
        state.last_ts = snap.last_ts
        state.events = snap.events
        state.outbox = dict(snap.outbox)
        state.churn_since = snap.churn_since
        state.churn_aborted = snap.churn_aborted
        state.spend_usd, state.loop_spend_usd, state.input_tokens, state.output_tokens = snap.spend
        state.first_detector = snap.first_detector
        state.budget_fired, state.budget_aborted = snap.budget
        state.outcome_tools = deque(snap.outcome_tools)
        state.since_new = snap.since_new
        state.seen_pairs = dict.fromkeys(snap.seen_pairs)
        state.edits = {path: PathEdits(list(c), list(h), n) for path, c, h, n in snap.edits}
        state.aborted = (snap.aborted[0], snap.aborted[1]) if snap.aborted is not None else None
        return state

    @classmethod
    def from_bytes(cls, data: bytes, seen_limit: int = 256) -> RunState:
        """Rebuild a state (and its indexes) from :meth:`to_bytes` output."""
        return cls.from_snapshot(DECODER.decode(data), seen_limit)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunState) and self.snapshot() == other.snapshot()

    __hash__ = None  # type: ignore[assignment]
