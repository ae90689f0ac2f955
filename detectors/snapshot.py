"""The persisted form of a run's state: one array-encoded msgpack record (a msgspec Struct,
kept outside the modules mypyc compiles)."""

from __future__ import annotations

from typing import Any, Final

import msgspec

__all__ = ["DECODER", "ENCODER", "FORMAT_VERSION", "PackedRecord", "RunSnapshot"]

#: 2: the compact form (``tools``, ``packed``, ``seen_keys``; ``records`` and ``seen`` empty).
#: 1 (read, no longer written): records and event ids as strings.
FORMAT_VERSION: Final = 2

#: A history record in the compact form: ``[tool, args, result]`` or, when any of them is
#: set, ``[tool, args, result, tool_call_id, unknown_tool_name, ts]``: the index of its tool in
#: ``tools``; its argsHash (the digest's bytes when it is ``{tool}:{lower-case hex}``, else the
#: whole text); its result hash (bytes when lower-case hex, else the text, or None); its
#: toolCallId (pending calls only: no other record is ever matched by it). A list of ``Any``:
#: msgspec takes no ``bytes | str`` union, and the short form saves the three empty fields.
PackedRecord = list[Any]


class RunSnapshot(msgspec.Struct, array_like=True, frozen=True):
    """The persisted shape of a :class:`RunState` (array-encoded msgpack)."""

    version: int
    scope: str
    agent_id: str
    run_id: str | None
    session_id: str | None
    # version 1's records; None in version 2, so that a release before it (which has no
    # version check) refuses the compact form and starts the run afresh instead of misreading it
    records: list[tuple[str, str, str | None, str | None, str | None, int | None]] | None
    seen: list[str]
    buckets: list[tuple[str, int]]
    guard_remaining: int
    guard_window: int
    guard_observations: list[tuple[str, str, str]]
    criticals: int
    recovery_aborted: bool
    last_ts: int | None
    events: int
    outbox: list[tuple[str, list[bytes]]] = []
    # revision 2026-08 (absent in older snapshots): (record index, kind, no_progress,
    # failure_id) of the records that have any of them, and the churn lease
    record_marks: list[tuple[int, str | None, bool, str | None]] = []
    churn_since: int | None = None
    churn_aborted: bool = False
    # loopwatch's own rules (absent in older snapshots): spend (usd, loop usd, input and output
    # tokens), the run's first detector, the budget's verdict and abort given; run_no_progress
    # and edit_undo state
    spend: tuple[float, float, int, int] = (0.0, 0.0, 0, 0)
    first_detector: str | None = None
    budget: tuple[bool, bool] = (False, False)
    outcome_tools: list[str] = []
    since_new: int = 0
    seen_pairs: list[str] = []
    edits: list[tuple[str, list[str], list[str], int]] = []
    # the first enforced abort's (reason, message) (absent in older snapshots): sticky decisions
    aborted: tuple[str, str] | None = None
    # (rule name, the rule's state as plain values) of the rules that keep any (absent in older
    # snapshots, whose guard, churn, budget, run_no_progress and edit_undo fields above are
    # read into these; newer snapshots leave those fields empty)
    rules: list[tuple[str, Any]] = []
    # how deep in a delegation chain the run is (F6; from its first event; absent: 0), the root
    # its first event named (absent: a root) and that event's time (absent: unknown)
    depth: int = 0
    root: str | None = None
    first_ts: int | None = None
    # the compact form (version 2): the records' tools once each, the records, the event ids
    # seen (short ones as they are, others as their 64-bit hashes: detectors.tombstone.seen_key)
    tools: list[str] = []
    packed: list[PackedRecord] = []
    seen_keys: list[str | int] = []


ENCODER: Final = msgspec.msgpack.Encoder()
DECODER: Final = msgspec.msgpack.Decoder(RunSnapshot)
