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

from collections import deque
from collections.abc import Iterator

__all__ = ["History", "Record"]


class Record:
    """One history entry: a call, its outcome, or both."""

    __slots__ = ("args_hash", "result_hash", "seq", "tool", "tool_call_id", "ts", "unknown_tool_name")

    def __init__(
        self,
        tool: str,
        args_hash: str,
        tool_call_id: str | None,
        result_hash: str | None,
        unknown_tool_name: str | None,
        ts: int | None,
        seq: int,
    ) -> None:
        self.tool = tool
        self.args_hash = args_hash
        self.tool_call_id = tool_call_id
        self.result_hash = result_hash
        self.unknown_tool_name = unknown_tool_name
        self.ts = ts
        self.seq = seq

    def as_tuple(self) -> tuple[str, str, str | None, str | None, str | None, int | None]:
        """The persisted fields (``seq`` is positional and rebuilt on load)."""
        return (
            self.tool,
            self.args_hash,
            self.tool_call_id,
            self.result_hash,
            self.unknown_tool_name,
            self.ts,
        )


class _Signature:
    """The records of one ``argsHash`` and the run-length encoding of their result hashes."""

    __slots__ = ("last_hashed_seq", "pending", "records", "runs")

    def __init__(self) -> None:
        self.records: deque[Record] = deque()
        self.runs: deque[list[object]] = deque()  # [result_hash, count], oldest first
        self.pending = 0
        self.last_hashed_seq = -1

    def push_hash(self, record: Record) -> None:
        runs = self.runs
        if runs and runs[-1][0] == record.result_hash:
            runs[-1][1] += 1  # type: ignore[operator]
        else:
            runs.append([record.result_hash, 1])
        self.last_hashed_seq = record.seq

    def rebuild_runs(self) -> None:
        self.runs.clear()
        self.last_hashed_seq = -1
        for record in self.records:
            if record.result_hash is not None:
                self.push_hash(record)


class History:
    """The bounded history of one run scope. At most ``limit`` records (the caller's)."""

    __slots__ = ("_alt", "_by_args", "_next_seq", "records")

    def __init__(self) -> None:
        self.records: deque[Record] = deque()
        self._by_args: dict[str, _Signature] = {}
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
    ) -> Record:
        """Append a record (pending when ``result_hash`` is None) and trim to ``limit``."""
        record = Record(tool, args_hash, tool_call_id, result_hash, unknown_tool_name, ts, self._next_seq)
        self._next_seq += 1
        records = self.records
        if not records:
            self._alt = 1
        else:
            newest = records[-1].args_hash
            if args_hash == newest:
                self._alt = 1
            elif self._alt >= 2 and records[-2].args_hash == args_hash:
                self._alt += 1
            else:
                self._alt = 2
        records.append(record)
        signature = self._by_args.get(args_hash)
        if signature is None:
            signature = self._by_args[args_hash] = _Signature()
        signature.records.append(record)
        if result_hash is None:
            signature.pending += 1
        else:
            signature.push_hash(record)
        self.trim(limit)
        return record

    def fill(self, record: Record, result_hash: str, unknown_tool_name: str | None) -> None:
        """Give a pending record its outcome."""
        signature = self._by_args[record.args_hash]
        record.result_hash = result_hash
        record.unknown_tool_name = unknown_tool_name
        signature.pending -= 1
        if record.seq > signature.last_hashed_seq:
            signature.push_hash(record)
        else:  # an older call answered after a newer one: rare, recount this signature
            signature.rebuild_runs()

    def trim(self, limit: int) -> None:
        """Drop the oldest records until at most ``limit`` remain."""
        records = self.records
        while len(records) > limit:
            old = records.popleft()
            signature = self._by_args[old.args_hash]
            signature.records.popleft()
            if old.result_hash is None:
                signature.pending -= 1
            else:
                first = signature.runs[0]
                first[1] -= 1  # type: ignore[operator]
                if first[1] == 0:
                    signature.runs.popleft()
            if not signature.records:
                del self._by_args[old.args_hash]
        if self._alt > len(records):
            self._alt = len(records)

    # -- queries -------------------------------------------------------------------------

    def find_pending(self, args_hash: str, tool_call_id: str | None) -> Record | None:
        """The newest record of ``args_hash`` without an outcome (matching the call id if given)."""
        signature = self._by_args.get(args_hash)
        if signature is None or signature.pending == 0:
            return None
        for record in reversed(signature.records):
            if record.result_hash is None and (not tool_call_id or record.tool_call_id == tool_call_id):
                return record
        return None

    def recent_count(self, args_hash: str) -> int:
        """How many records share ``args_hash`` (with or without an outcome)."""
        signature = self._by_args.get(args_hash)
        return len(signature.records) if signature is not None else 0

    def no_progress(self, args_hash: str) -> tuple[int, str | None]:
        """Trailing run of identical result hashes for ``args_hash``, and the newest hash."""
        signature = self._by_args.get(args_hash)
        if signature is None or not signature.runs:
            return 0, None
        result_hash, count = signature.runs[-1]
        return count, result_hash  # type: ignore[return-value]

    def unknown_tool_streak(self, tool: str) -> tuple[int, str | None]:
        """Newest records of ``tool`` that failed as the same unavailable tool (spec §5)."""
        count = 0
        name: str | None = None
        for record in reversed(self.records):
            unknown = record.unknown_tool_name
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
