"""Per-run state (DESIGN §4) and its compact byte form for faust tables.

Bounded by construction: at most ``historySize`` history records, ``seen_event_ids`` event
ids, 256 warning keys, ``windowSize`` guard observations, the outputs of the events
awaiting delivery confirmation (the shell waits for confirmations at 64), and a few counters. The live object
(:class:`RunState`) carries indexes derived from the history; :class:`RunSnapshot` is what is
persisted, and :meth:`RunState.from_bytes` rebuilds the indexes from it.
"""

from __future__ import annotations

from binascii import unhexlify
from sys import intern
from typing import Any, Final

from loopwatch.detectors.history import History
from loopwatch.detectors.rule_state import RuleState, load_rule_state
from loopwatch.detectors.snapshot import DECODER, ENCODER, FORMAT_VERSION, PackedRecord, RunSnapshot
from loopwatch.detectors.tombstone import seen_key

__all__ = ["RunSnapshot", "RunState"]

OUTBOX_LIMIT: Final = 64
_UNMARKED: Final[tuple[str | None, bool, str | None]] = (None, False, None)
_NO_EXTRAS: Final[tuple[str | None, str | None, int | None]] = (None, None, None)


class RunState:
    """Mutable state of one run scope; changed only by :func:`detectors.step.apply`."""

    __slots__ = (
        "_seen_at",
        "_seen_limit",
        "_seen_ring",
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
        # The event ids seen, as detectors.tombstone.seen_key keeps them (long ids hashed), oldest
        # first (only the oldest is ever deleted); _seen_ring: slot -> id, a ring of the
        # seenEventIds slots whose oldest is at _seen_at, made from the dict's order when it is
        # first full (then the oldest goes in O(1): iterating a dict from its start passes over
        # the slots of every id deleted since it was last resized); empty before. Dicts of
        # strings and ints are not tracked by the garbage collector: a deque and a set (or a
        # list) would be visited, id by id, by every full collection.
        self.seen: dict[str | int, None] = {}
        self._seen_ring: dict[int, str | int] = {}
        self._seen_at = 0
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

    def remember(self, event_id: str, limit: int | None = None) -> bool:
        """Record an event id; ``False`` if it was already seen (a redelivery).

        ``limit``: ``seenEventIds`` as the config gives it now. A changed limit applies here, as
        it would to the state parsed again from its bytes: a worker that parses a run again
        (after a restart, a rebalance, an eviction) and one that never did keep the same ids."""
        if limit is not None and limit != self._seen_limit:
            self._set_seen_limit(limit)
        return self._remember_key(seen_key(event_id))

    def has_seen(self, event_id: str, limit: int | None = None) -> bool:
        """Whether the event id is among those the run remembers (``limit``: as for
        :meth:`remember`, applied first)."""
        if limit is not None and limit != self._seen_limit:
            self._set_seen_limit(limit)
        return seen_key(event_id) in self.seen

    def _set_seen_limit(self, limit: int) -> None:
        """Keep the newest ``limit`` ids, as :meth:`from_snapshot` with that limit would."""
        self._seen_limit = limit
        kept = list(self.seen)
        for key in kept[: max(0, len(kept) - limit)]:
            del self.seen[key]
        self._seen_ring = {}  # (made again from the dict's order once it is full)
        self._seen_at = 0

    def _remember_key(self, key: str | int) -> bool:
        seen = self.seen
        size = len(seen)
        if size < self._seen_limit:
            seen.setdefault(key, None)  # (one lookup: a key it had leaves the size as it was)
            return len(seen) != size
        if key in seen:
            return False
        ring = self._seen_ring
        if not ring:  # full for the first time: the ring from the dict's order, oldest first
            ring = self._seen_ring = dict(enumerate(seen))
            self._seen_at = 0
        at = self._seen_at
        del seen[ring[at]]
        seen[key] = None
        ring[at] = key  # (a value replaced in place: the ring's dict never grows)
        self._seen_at = at + 1 if at + 1 < len(ring) else 0
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
        """The persisted form (version 2, compact: see :class:`~detectors.snapshot.RunSnapshot`)."""
        rules = [(name, self.rule_states[name].dump()) for name in sorted(self.rule_states)]
        tools: dict[str, int] = {}
        packed: list[PackedRecord] = []
        for record in self.history.records:
            tool = record.tool
            index = tools.get(tool)
            if index is None:
                index = tools[tool] = len(tools)
            result_hash = record.result_hash
            call_id = record.tool_call_id if result_hash is None and record.kind is None else None
            entry: PackedRecord = [
                index,
                _packed_args(tool, record.args_hash),
                None if result_hash is None else _packed_hash(result_hash),
            ]
            unknown, ts = record.unknown_tool_name, record.ts
            if call_id is not None or unknown is not None or ts is not None:
                entry += (call_id, unknown, ts)
            packed.append(entry)
        return RunSnapshot(
            version=FORMAT_VERSION,
            scope=self.scope,
            agent_id=self.agent_id,
            run_id=self.run_id,
            session_id=self.session_id,
            records=None,
            tools=list(tools),
            packed=packed,
            record_marks=[
                (index, record.kind, record.no_progress, record.failure_id)
                for index, record in enumerate(self.history.records)
                if record.kind is not None or record.no_progress
            ],
            spend=(self.spend_usd, self.loop_spend_usd, self.input_tokens, self.output_tokens),
            first_detector=self.first_detector,
            seen=[],
            seen_keys=list(self.seen),
            buckets=list(self.buckets.items()),
            guard_remaining=0,  # version 1's fields of the rules: in ``rules`` now
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
        return ENCODER.encode(self.snapshot())

    @classmethod
    def from_snapshot(cls, snap: RunSnapshot, seen_limit: int = 256) -> RunState:
        scope = snap.scope
        run_id = scope if snap.run_id == scope else snap.run_id
        state = cls(scope, intern(snap.agent_id), run_id, snap.session_id, seen_limit)
        records = snap.records or []
        unbounded = len(records)
        marks = {
            index: (kind, no_progress, failure_id)
            for index, kind, no_progress, failure_id in snap.record_marks
        }
        history = state.history
        for index, (tool, args_hash, call_id, result_hash, unknown, ts) in enumerate(records):
            kind, no_progress, failure_id = marks.get(index, _UNMARKED)
            history.append(
                tool, args_hash, call_id, result_hash, unknown, ts, unbounded, kind, no_progress, failure_id
            )
        tools = [intern(tool) for tool in snap.tools]  # (one string per tool name, as decoded events have)
        unbounded += len(snap.packed)
        for index, entry in enumerate(snap.packed):
            kind, no_progress, failure_id = marks.get(index, _UNMARKED)
            tool = tools[entry[0]]
            args, result = entry[1], entry[2]
            call_id, unknown, ts = (entry[3], entry[4], entry[5]) if len(entry) > 3 else _NO_EXTRAS
            history.append(
                tool,
                f"{tool}:{args.hex()}" if isinstance(args, bytes) else args,
                call_id,
                result.hex() if isinstance(result, bytes) else result,
                unknown,
                ts,
                unbounded,
                kind,
                no_progress,
                failure_id,
            )
        keys = snap.seen_keys
        if not snap.seen and len(keys) <= seen_limit:  # no id forgotten: the keys in their order
            state.seen = dict.fromkeys(keys)
        else:
            for event_id in snap.seen:  # version 1: the ids themselves
                state.remember(event_id)
            for key in keys:
                state._remember_key(key)
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
        legacy = _legacy_rule_states(snap)
        if legacy or snap.rules:
            # the hashes and tools the rules keep are those of the history: one string each
            strings = {record.args_hash: record.args_hash for record in history.records}
            for tool in tools:
                strings[tool] = tool
            for name, raw in legacy:
                rule_states[name] = load_rule_state(name, _shared(raw, strings))
            for name, raw in snap.rules:
                rule_states[name] = load_rule_state(name, _shared(raw, strings))
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


def _shared(raw: Any, strings: dict[str, str]) -> Any:
    """A rule's stored state with each string found in ``strings`` replaced by the one there."""
    if isinstance(raw, str):
        return strings.get(raw, raw)
    if isinstance(raw, list):
        return [_shared(item, strings) for item in raw]
    return raw


def _packed_hash(digest: str) -> bytes | str:
    """A digest in lower-case hex (XXH3-128 or SHA-256) as its bytes; any other text as it is."""
    size = len(digest)
    if size == 32 or size == 64:
        try:
            raw = unhexlify(digest)
        except (ValueError, TypeError):  # binascii.Error is a ValueError; non-ASCII: TypeError
            return digest
        if raw.hex() == digest:  # no capitals (unhexlify takes them): the text comes back as it was
            return raw
    return digest


def _packed_args(tool: str, args_hash: str) -> bytes | str:
    """An argsHash ``{tool}:{hex}`` as the digest's bytes (the tool is the record's); any other
    (a client's digest-only argsHash) as it is."""
    start = len(tool) + 1
    if len(args_hash) > start and args_hash[start - 1] == ":" and args_hash.startswith(tool):
        packed = _packed_hash(args_hash[start:])
        if isinstance(packed, bytes):
            return packed
    return args_hash
