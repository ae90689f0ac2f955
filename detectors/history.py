"""Per-run tool-call history with incremental indexes (spec §4, §11 D2).

Rules:

* A run scope keeps at most ``historySize`` records, oldest dropped first (§4.1, §4.3).
  loopwatch keeps one history per run scope, so every record shares the run id (D2).
* A call appends a pending record; an outcome fills the newest pending record with the same
  ``argsHash`` (and the same ``toolCallId`` when the outcome has one), or appends an
  outcome-only record (§4.2).

Theory of operation: the detectors need, for the proposed call's ``argsHash``, how many
records share it, and the trailing run of identical result hashes among those that have one.
Instead of rescanning the window on every call (what OpenClaw does, linear in
``historySize``), each ``argsHash`` keeps its records and a run-length encoding of their result
hashes, updated on append, fill and trim; the alternating tail that ping-pong needs is kept as
one integer. Every query is O(1) in the common case; the only walks left are the unknown-tool
streak and the ping-pong evidence, which stop at the first record that breaks them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

from mypy_extensions import mypyc_attr

from loopwatch.detectors.outcomes import TERMINAL_EXEC_FAILURE
from loopwatch.detectors.stable_json import same_value

__all__ = ["History", "Record"]


@mypyc_attr(acyclic=True)
class Record:
    """One history entry: a call, its outcome, or both.

    Acyclic (compiled, it stays out of the cyclic garbage collector): it holds strings,
    numbers and a call's wire-decoded params, none of which can lead back to it. Records were
    30 of a parsed run's 36 tracked objects; without them a full collection in a worker
    holding many runs pauses half as long or less (``python -m tests.bench.gc_pause``).

    A record is *pending* while it has neither a result hash nor a kind. Revision 2026-08
    adds ``kind`` (:data:`~detectors.outcomes.VETO` for a blocked call's veto record, which
    has no result hash; :data:`~detectors.outcomes.TERMINAL_EXEC_FAILURE`), ``no_progress``
    (an error or a no-op write) and ``failure_id`` (a terminal exec failure's identity).
    """

    __slots__ = (
        "args_hash",
        "failure_id",
        "kind",
        "no_progress",
        "params",
        "result_hash",
        "seq",
        "tool",
        "tool_call_id",
        "ts",
        "unknown_tool_name",
    )

    def __init__(
        self,
        tool: str,
        args_hash: str,
        tool_call_id: str | None,
        result_hash: str | None,
        unknown_tool_name: str | None,
        ts: int | None,
        seq: int,
        kind: str | None = None,
        no_progress: bool = False,
        failure_id: str | None = None,
        params: Any = None,
    ) -> None:
        self.tool = tool
        self.args_hash = args_hash
        self.tool_call_id = tool_call_id
        self.result_hash = result_hash
        self.unknown_tool_name = unknown_tool_name
        self.ts = ts
        self.seq = seq
        self.kind = kind
        self.no_progress = no_progress
        self.failure_id = failure_id
        # a pending call's decoded params (never persisted): its result's argsHash without
        # hashing again when the result carries the same params (see History.newest_call_hash)
        self.params = params

    def as_tuple(self) -> tuple[str, str, str | None, str | None, str | None, int | None]:
        """The persisted fields of revision 2026-05 (``seq`` is positional, rebuilt on load)."""
        return (
            self.tool,
            self.args_hash,
            self.tool_call_id,
            self.result_hash,
            self.unknown_tool_name,
            self.ts,
        )


# The records of one ``argsHash`` and the run-length encoding of their result hashes, kept as
# a plain list (creating one per new signature is on the hot path; a class costs 3x more):
#   [records oldest first, runs [[result_hash, count], ...] oldest first,
#    pending records, seq of the newest hashed record, veto records]
# An ``argsHash`` with one record in the window (most of them, in a healthy run) is that
# Record itself, promoted to the list when a second record joins it: one object per record
# instead of five, which is what the cyclic garbage collector scans.
_RECORDS: Final = 0
_RUNS: Final = 1
_PENDING: Final = 2
_LAST_HASHED: Final = 3
_VETOES: Final = 4


def _promoted(single: Record) -> list[Any]:
    """The list form of a signature that so far holds ``single`` alone."""
    if single.result_hash is not None:
        return [[single], [[single.result_hash, 1]], 0, single.seq, 0]
    pending = 1 if single.kind is None else 0
    return [[single], [], pending, -1, 1 - pending]


def _push_hash(signature: list[Any], record: Record) -> None:
    runs = signature[_RUNS]
    if runs and runs[-1][0] == record.result_hash:
        runs[-1][1] += 1
    else:
        runs.append([record.result_hash, 1])
    signature[_LAST_HASHED] = record.seq


def _rebuild_runs(signature: list[Any]) -> None:
    signature[_RUNS] = []
    signature[_LAST_HASHED] = -1
    for record in signature[_RECORDS]:
        if record.result_hash is not None:
            _push_hash(signature, record)


def _streak_with_vetoes(records: list[Record]) -> tuple[int, str | None]:
    """The exact-arguments streak of one signature that holds veto records (2026-08).

    Newest first: a veto record is held until an outcome anchors it; the first outcome is
    ``latest`` and takes the held vetoes; each older identical outcome adds itself and the
    vetoes held since; the first different outcome ends the walk (vetoes held then are lost).
    With no outcome at all, the vetoes count alone.
    """
    pending = 0
    count = 0
    latest: str | None = None
    record: Record
    for record in reversed(records):
        result_hash = record.result_hash
        if result_hash is None:
            if record.kind is not None:
                pending += 1
            continue
        if latest is None:
            latest = result_hash
        elif result_hash != latest:
            break
        count += pending + 1
        pending = 0
    if latest is None:
        return pending, None
    return count, latest


def _answered_by(record: Record, tool_call_id: str | None) -> bool:
    """Whether ``record`` is a pending call an outcome with ``tool_call_id`` may answer."""
    return (
        record.result_hash is None
        and record.kind is None
        and (not tool_call_id or record.tool_call_id == tool_call_id)
    )


class History:
    """The bounded history of one run scope. At most ``limit`` records (the caller's)."""

    __slots__ = ("_alt", "_by_args", "_next_seq", "records")

    def __init__(self) -> None:
        # oldest first; a list, not a deque: compiled, a list's append, index and reversed
        # iteration are direct C calls (a deque's are method calls by name), and dropping the
        # oldest of a few hundred records moves a few hundred pointers
        self.records: list[Record] = []
        self._by_args: dict[str, Record | list[Any]] = {}
        self._alt = 0  # length of the strictly alternating tail (A, B, A, B, ...)
        self._next_seq = 0

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records)

    # -- updates -------------------------------------------------------------------------

    def append(
        self,
        tool: str,
        args_hash: str,
        tool_call_id: str | None,
        result_hash: str | None,
        unknown_tool_name: str | None,
        ts: int | None,
        limit: int,
        kind: str | None = None,
        no_progress: bool = False,
        failure_id: str | None = None,
        params: Any = None,
    ) -> Record:
        """Append a record (pending when it has no ``result_hash`` and no ``kind``), trim to ``limit``.

        ``params``: a pending call's decoded params, kept while it is the newest record and
        unanswered (not persisted)."""
        record = Record(
            tool,
            args_hash,
            tool_call_id,
            result_hash,
            unknown_tool_name,
            ts,
            self._next_seq,
            kind,
            no_progress,
            failure_id,
            params,
        )
        self._next_seq += 1
        records = self.records
        if not records:
            self._alt = 1
        else:
            previous = records[-1]
            previous.params = None  # only the newest record's params are ever read
            newest = previous.args_hash
            if args_hash == newest:
                self._alt = 1
            elif self._alt >= 2 and records[-2].args_hash == args_hash:
                self._alt += 1
            else:
                self._alt = 2
        records.append(record)
        by_args = self._by_args
        found = by_args.get(args_hash)
        if found is None:
            by_args[args_hash] = record
        else:
            signature: list[Any]
            if isinstance(found, Record):
                signature = _promoted(found)
                by_args[args_hash] = signature
            else:
                signature = found
            signature[_RECORDS].append(record)
            if result_hash is None:
                pending = 1 if kind is None else 0
                signature[_PENDING] += pending
                signature[_VETOES] += 1 - pending
            else:
                _push_hash(signature, record)
        if len(records) > limit:
            self.trim(limit)
        return record

    def fill(
        self,
        record: Record,
        result_hash: str | None,
        unknown_tool_name: str | None,
        kind: str | None = None,
        no_progress: bool = False,
        failure_id: str | None = None,
    ) -> None:
        """Give a pending record its outcome (a result hash, or a kind, or both)."""
        found = self._by_args[record.args_hash]
        record.params = None
        record.result_hash = result_hash
        record.unknown_tool_name = unknown_tool_name
        record.kind = kind
        record.no_progress = no_progress
        record.failure_id = failure_id
        if isinstance(found, Record):  # the record alone: its fields are the signature
            return
        signature: list[Any] = found
        signature[_PENDING] -= 1
        if result_hash is None:
            signature[_VETOES] += 1
        elif record.seq > signature[_LAST_HASHED]:
            _push_hash(signature, record)
        else:  # an older call answered after a newer one: rare, recount this signature
            _rebuild_runs(signature)

    def trim(self, limit: int) -> None:
        """Drop the oldest records until at most ``limit`` remain."""
        records = self.records
        while len(records) > limit:
            old = records.pop(0)
            found = self._by_args[old.args_hash]
            if isinstance(found, Record):  # the record alone
                del self._by_args[old.args_hash]
                continue
            signature: list[Any] = found
            kept = signature[_RECORDS]
            del kept[0]
            if old.result_hash is None:
                if old.kind is None:
                    signature[_PENDING] -= 1
                else:
                    signature[_VETOES] -= 1
            else:
                runs = signature[_RUNS]
                runs[0][1] -= 1
                if runs[0][1] == 0:
                    del runs[0]
            if not kept:
                del self._by_args[old.args_hash]
        if self._alt > len(records):
            self._alt = len(records)

    # -- queries -------------------------------------------------------------------------

    def find_pending(self, args_hash: str, tool_call_id: str | None) -> Record | None:
        """The newest pending record of ``args_hash`` (matching the call id if given)."""
        found = self._by_args.get(args_hash)
        if found is None:
            return None
        if isinstance(found, Record):
            return found if _answered_by(found, tool_call_id) else None
        signature: list[Any] = found
        if signature[_PENDING] == 0:
            return None
        record: Record
        for record in reversed(signature[_RECORDS]):
            if _answered_by(record, tool_call_id):
                return record
        return None

    def newest_call_hash(self, tool: str, tool_call_id: str | None, params: Any, hex_size: int) -> str | None:
        """The ``argsHash`` of the newest record when it is the pending call this outcome answers
        (same tool, same call id, the same params value, hashed with a digest of ``hex_size``
        hex characters): the outcome's own ``argsHash`` without serialising its params again.
        None: not known, hash them."""
        records = self.records
        if not records or not tool_call_id:
            return None
        newest = records[-1]
        kept = newest.params
        if (
            kept is None
            or newest.tool_call_id != tool_call_id
            or newest.tool != tool
            or newest.result_hash is not None
            or newest.kind is not None
            or len(newest.args_hash) != len(tool) + 1 + hex_size
            or not same_value(kept, params)
        ):
            return None
        return newest.args_hash

    def recent(self, args_hash: str) -> int:
        """How many records ``args_hash`` has in the window (calls, outcomes, vetoes)."""
        found = self._by_args.get(args_hash)
        if found is None:
            return 0
        if isinstance(found, Record):
            return 1
        signature: list[Any] = found
        return len(signature[_RECORDS])

    def counts(self, args_hash: str) -> tuple[int, int, str | None]:
        """``(recent, no_progress, latest_result_hash)`` for ``args_hash`` in one lookup.

        ``no_progress`` is the exact-arguments streak: the newest run of identical result
        hashes among the records of ``args_hash`` that have one (pending calls are passed
        over). Veto records (revision 2026-08) each add one to the streak when an identical
        outcome older than them anchors it, and count alone when no outcome is left at all
        (see :meth:`_streak_with_vetoes`).
        """
        found = self._by_args.get(args_hash)
        if found is None:
            return 0, 0, None
        if isinstance(found, Record):  # one record: an outcome, a veto or a pending call
            if found.result_hash is not None:
                return 1, 1, found.result_hash
            return 1, 0 if found.kind is None else 1, None
        signature: list[Any] = found
        if signature[_VETOES]:
            count, latest = _streak_with_vetoes(signature[_RECORDS])
            return len(signature[_RECORDS]), count, latest
        runs = signature[_RUNS]
        if not runs:
            return len(signature[_RECORDS]), 0, None
        return len(signature[_RECORDS]), runs[-1][1], runs[-1][0]

    def exec_terminal_tail(self, args_hash: str) -> tuple[int, str | None]:
        """``(count, latest_result_hash)`` of the ``exec`` terminal-failure tail (2026-08).

        Newest first over the run's trailing ``exec`` records: veto records wait for an
        anchor, pending calls are passed over, any outcome that is not a terminal failure
        ends the tail, and so does a failure with neither the result hash nor the failure
        identity of the newest one. Commands may differ, but the proposed command
        (``args_hash``) may only be the newest contiguous block: met again after another
        command, it ends the tail (A, B, A is a reset).
        """
        pending = 0
        count = 0
        latest: Record | None = None
        crossed = False
        record: Record
        for record in reversed(self.records):
            if record.tool != "exec":
                break
            if record.result_hash is None:
                if record.kind is not None:  # a veto record (a pending call is passed over)
                    pending += 1
                continue
            if record.kind != TERMINAL_EXEC_FAILURE:
                break
            if latest is None:
                latest = record
                count = pending + 1
                pending = 0
                crossed = record.args_hash != args_hash
                continue
            if record.args_hash != args_hash:
                crossed = True
            elif crossed:
                break
            if record.result_hash != latest.result_hash and record.failure_id != latest.failure_id:
                break
            count += pending + 1
            pending = 0
        if latest is None:
            return 0, None
        return count, latest.result_hash

    def unknown_tool_streak(self, tool: str, skip_vetoes: bool = False) -> tuple[int, str | None]:
        """Newest records of ``tool`` that failed as the same unavailable tool (spec §5).

        With ``skip_vetoes`` (revision 2026-08) veto records, of any tool, are passed over.
        """
        records = self.records
        if not records:
            return 0, None
        newest = records[-1]
        if newest.unknown_tool_name is None and not (skip_vetoes and newest.kind is not None):
            return 0, None
        count = 0
        name: str | None = None
        for record in reversed(records):
            unknown = record.unknown_tool_name
            if unknown is None and skip_vetoes and record.result_hash is None and record.kind is not None:
                continue
            if record.tool != tool or unknown is None:
                break
            if name is None:
                name = unknown
            elif unknown != name:
                break
            count += 1
        return count, name

    def alternating_tail(self) -> int:
        """Length of the strictly alternating tail (2 or more means a ping-pong pattern)."""
        return self._alt

    def tail_has_stable_outcomes(self, length: int) -> bool:
        """Ping-pong ``noProgressEvidence`` over the newest ``length`` records."""
        records = self.records
        first_hash: dict[str, str] = {}
        for index in range(len(records) - 1, len(records) - 1 - length, -1):
            record = records[index]
            if record.result_hash is None:
                return False
            seen = first_hash.setdefault(record.args_hash, record.result_hash)
            if seen != record.result_hash:
                return False
        return len(first_hash) == 2
