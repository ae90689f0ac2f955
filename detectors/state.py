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

import msgspec

from loopwatch.detectors.history import History
from loopwatch.detectors.rule_state import RuleState, load_rule_state
from loopwatch.detectors.snapshot import DECODER, ENCODER, FORMAT_VERSION, RunSnapshot

__all__ = ["RunSnapshot", "RunState"]

OUTBOX_LIMIT: Final = 64
_UNMARKED: Final[tuple[str | None, bool, str | None]] = (None, False, None)


class RunState:
    """Mutable state of one run scope; changed only by :func:`detectors.step.apply`."""

    __slots__ = (
        "_seen_limit",
        "aborted",
        "agent_id",
        "buckets",
        "criticals",
        "depth",
        "events",
        "first_detector",
        "first_ts",
        "history",
        "input_tokens",
        "last_ts",
        "loop_spend_usd",
        "outbox",
        "output_tokens",
        "recovery_aborted",
        "root",
        "rule_states",
        "run_id",
        "scope",
        "seen",
        "seen_set",
        "session_id",
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
        self.criticals = 0
        self.recovery_aborted = False
        self.last_ts: int | None = None
        self.events = 0
        # spend (always counted, by the loop_budget rule): usage of the run's calls, and of
        # those from its first verdict on
        self.spend_usd = 0.0
        self.loop_spend_usd = 0.0
        self.input_tokens = 0
        self.output_tokens = 0
        self.first_detector: str | None = None
        # what each rule keeps, under the rule's name (detectors.rules.base)
        self.rule_states: dict[str, RuleState] = {}
        # how deep in a delegation chain the run is (F6: fixed by its first event; 0: a root),
        # the root run its first event named (None: a root, whose chain is keyed by its scope),
        # and its first event's time (F6b's blocks spare the runs that began before an alert)
        self.depth = 0
        self.root: str | None = None
        self.first_ts: int | None = None
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
        rules = [(name, self.rule_states[name].dump()) for name in sorted(self.rule_states)]
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
            spend=(self.spend_usd, self.loop_spend_usd, self.input_tokens, self.output_tokens),
            first_detector=self.first_detector,
            seen=list(self.seen),
            buckets=list(self.buckets.items()),
            guard_remaining=0,  # the guard's own fields: see _with_legacy_fields
            guard_window=3,
            guard_observations=[],
            criticals=self.criticals,
            recovery_aborted=self.recovery_aborted,
            last_ts=self.last_ts,
            events=self.events,
            outbox=list(self.outbox.items()),
            aborted=self.aborted,
            rules=rules,
            depth=self.depth,
            root=self.root,
            first_ts=self.first_ts,
        )

    def to_bytes(self) -> bytes:
        """Compact msgpack bytes of the state."""
        return ENCODER.encode(_with_legacy_fields(self.snapshot()))

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
        state.criticals = snap.criticals
        state.recovery_aborted = snap.recovery_aborted
        state.last_ts = snap.last_ts
        state.events = snap.events
        state.outbox = dict(snap.outbox)
        state.spend_usd, state.loop_spend_usd, state.input_tokens, state.output_tokens = snap.spend
        state.first_detector = snap.first_detector
        state.depth = snap.depth
        state.root = snap.root
        state.first_ts = snap.first_ts
        state.aborted = (snap.aborted[0], snap.aborted[1]) if snap.aborted is not None else None
        rule_states = state.rule_states
        for name, raw in _legacy_rule_states(snap):
            rule_states[name] = load_rule_state(name, raw)
        for name, raw in snap.rules:
            rule_states[name] = load_rule_state(name, raw)
        return state

    @classmethod
    def from_bytes(cls, data: bytes, seen_limit: int = 256) -> RunState:
        """Rebuild a state (and its indexes) from :meth:`to_bytes` output."""
        return cls.from_snapshot(DECODER.decode(data), seen_limit)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunState) and self.snapshot() == other.snapshot()

    __hash__ = None  # type: ignore[assignment]


def _legacy_rule_states(snap: RunSnapshot) -> list[tuple[str, object]]:
    """The rules' states of a snapshot written before rules kept their own (commit 55edc0a and
    older), in the stored form of each rule's state today."""
    found: list[tuple[str, object]] = []
    if snap.guard_remaining or snap.guard_observations:
        observations = [list(t) for t in snap.guard_observations]
        found.append(("compaction_loop_persisted", [snap.guard_remaining, snap.guard_window, observations]))
    if snap.churn_since is not None or snap.churn_aborted:
        found.append(("argument_churn_stale", [snap.churn_since, snap.churn_aborted]))
    if snap.budget != (False, False):
        found.append(("loop_budget", list(snap.budget)))
    if snap.outcome_tools or snap.since_new or snap.seen_pairs:
        found.append(("run_no_progress", [snap.outcome_tools, snap.since_new, snap.seen_pairs]))
    if snap.edits:
        found.append(("edit_undo", [[p, c, h, n] for p, c, h, n in snap.edits]))
    return found


def _with_legacy_fields(snap: RunSnapshot) -> RunSnapshot:
    """The snapshot with the fields a release before rules kept their own (55edc0a) reads for
    the built-in rules filled from their states too: a worker of that release that takes a
    run over in a rolling upgrade goes on with the run's guard, churn lease, budget,
    run_no_progress and edit_undo state (this release reads ``rules`` over them)."""
    fields: dict[str, object] = {}
    for name, raw in snap.rules:
        if name == "compaction_loop_persisted":
            remaining, window, observations = raw
            fields["guard_remaining"] = remaining
            fields["guard_window"] = window
            fields["guard_observations"] = [tuple(triple) for triple in observations]
        elif name == "argument_churn_stale":
            fields["churn_since"], fields["churn_aborted"] = raw
        elif name == "loop_budget":
            fields["budget"] = (raw[0], raw[1])
        elif name == "run_no_progress":
            tools, since_new, seen_pairs = raw
            fields["outcome_tools"] = list(tools)
            fields["since_new"] = since_new
            fields["seen_pairs"] = list(seen_pairs)
        elif name == "edit_undo":
            fields["edits"] = [(path, list(c), list(h), n) for path, c, h, n in raw]
    return msgspec.structs.replace(snap, **fields) if fields else snap
