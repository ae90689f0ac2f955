"""A table's values on the worker's RocksDB store (``LOOPWATCH_STORE=rocksdb``, DESIGN §5).

The run and fleet processors write a table value and send its changelog record themselves
(:mod:`streams.kafka.run_processor`), a whole batch at a time and outside any faust event, so
they never go through faust's ``Table.__setitem__``. :class:`LocalState` is the mapping they
use instead of the faust store, and it keeps one rule: **the local database holds only what
the changelog holds, up to the offset it records** (faust's persisted offset).

* A value written is kept in memory, and read from there, until its changelog record is
  confirmed by the broker. A processor writing a batch says so (:meth:`LocalState.writing`):
  its records are registered only as each send returns, so a commit persisting meanwhile
  leaves the cache and the deletions for a commit after the batch. :meth:`LocalState.persist`
  (the worker calls it on every commit, after the producer's flush) writes the confirmed
  records of each partition, in offset order, to RocksDB in one write batch through the
  store's ``apply_changelog_batch``, which records the highest offset written. A record not
  confirmed yet waits for the next commit; one the broker refused never reaches the disk (nor
  the changelog).
* So whether a worker stops with SIGTERM or ``kill -9``, its database is the changelog's
  prefix up to the recorded offset: at the next start faust's recovery reads only the records
  past it (those confirmed after the last commit, and any written by another worker
  meanwhile). A value ahead of the changelog (written, never confirmed) cannot survive a crash
  and hide the changelog's own value of that run.
* Values read are cached as the same ``bytes`` objects: the processors keep each value's
  parsed state and re-parse only when the table holds another object.
* On a revocation (:meth:`LocalState.forget`, after the worker's commit) the cache goes: the
  next owner may change those runs, and faust's recovery writes into the store directly.
* At shutdown faust closes its stores before the worker's last commit (the batch in progress
  finishes after the fetcher stopped); that commit opens the databases again to persist, and
  :meth:`LocalState.close` closes them.
"""

from __future__ import annotations

from collections.abc import Callable, ItemsView, Iterator, MutableMapping, ValuesView
from contextlib import AbstractContextManager, contextmanager
from typing import Any, NamedTuple

__all__ = ["LocalState", "writing_notice"]


class _Message(NamedTuple):
    """What faust's ``Store.apply_changelog_batch`` reads of a changelog record."""

    tp: Any
    partition: int
    offset: int
    key: bytes
    value: bytes | None


class _Change(NamedTuple):
    message: _Message


def _same(raw: Any) -> Any:
    return raw


class _ScannedItems(ItemsView[bytes, bytes]):
    def __init__(self, state: LocalState) -> None:
        super().__init__(state)
        self._state = state

    def __iter__(self) -> Iterator[tuple[bytes, bytes]]:
        return self._state.scan()


class _ScannedValues(ValuesView[bytes]):
    def __init__(self, state: LocalState) -> None:
        super().__init__(state)
        self._state = state

    def __iter__(self) -> Iterator[bytes]:
        return (value for _, value in self._state.scan())


class LocalState(MutableMapping[bytes, bytes]):
    """The processors' view of one table on the RocksDB store: unconfirmed writes in memory,
    confirmed ones on disk with their changelog offset."""

    def __init__(self, store: Any) -> None:
        self.store = store  # faust's rocksdb Store (the table's ``data``)
        self._values: dict[bytes, bytes] = {}  # written (pending or persisted) or read: current
        self._deleted: set[bytes] = set()  # deleted here, the deletion not on disk yet
        self._sent: dict[int, list[tuple[bytes, bytes | None, Any]]] = {}  # partition -> in send order
        #: changelog records written to the local database so far
        self.persisted = 0
        #: keys whose cached value goes once their writes are on disk (:meth:`uncache`)
        self._uncache: set[bytes] = set()
        #: a processor is writing a batch (:meth:`writing`): its records are registered only as
        #: each send returns, so which keys wait for the disk is not known until it is done
        self._writing = False
        self._on_disk: list[bytes] = []  # deletions on disk, still marked deleted here

    # -- the mapping -----------------------------------------------------------------------------

    def __getitem__(self, key: bytes) -> bytes:
        value = self._values.get(key)
        if value is not None:
            return value
        if key in self._deleted:
            raise KeyError(key)
        self._open_databases()
        stored: bytes | None = self.store.get(key)
        if stored is None:
            raise KeyError(key)
        self._values[key] = stored
        return stored

    def _open_databases(self) -> None:
        """faust forgets its databases at shutdown (its store's ``stop``) while the last batch
        is still applied: its store then finds no database and answers every key absent, and a
        run read again would start afresh (its verdicts wrong, its reset state sent to the
        changelog for the next owner). So once faust holds no database at all, those of the
        partitions it last assigned to this worker are opened again first, as the last
        commit's persist opens them to write. Never while faust holds any: a partition
        revoked but not yet dropped by faust must not be opened again once it is. Every access
        of this class to the store comes here first, so the first after faust's ``stop`` finds
        no database and opens them all (a write opening only its own would hide the others)."""
        store = self.store
        if store._dbs:
            return
        topic = store.table.changelog_topic_name
        for tp in store.app.assignor.assigned_actives():
            if tp.topic == topic:
                store._db_for_partition(tp.partition)

    def __setitem__(self, key: bytes, value: bytes) -> None:
        self._values[key] = value
        self._deleted.discard(key)
        self._uncache.discard(key)  # a run written again is parsed again: it stays cached

    def __delitem__(self, key: bytes) -> None:
        self[key]  # KeyError when absent
        self._values.pop(key, None)
        self._deleted.add(key)
        self._uncache.discard(key)

    def __iter__(self) -> Iterator[bytes]:
        for key, _ in self.scan():
            yield key

    def __len__(self) -> int:
        return sum(1 for _ in self.scan())

    def items(self) -> ItemsView[bytes, bytes]:
        return _ScannedItems(self)

    def values(self) -> ValuesView[bytes]:
        return _ScannedValues(self)

    def scan(self) -> Iterator[tuple[bytes, bytes]]:
        """Every (key, value) of the partitions this worker owns, without filling the cache
        (take it whole, e.g. with ``list``, before the next write)."""
        values = self._values
        deleted = self._deleted
        self._open_databases()  # (see there: at shutdown faust has closed them)
        # the raw keys and values (the table's codec is "raw": decoding them changes nothing)
        stored: Iterator[tuple[bytes, bytes]] = self.store._iteritems()
        if not values and not deleted:
            yield from stored
            return
        replaced: set[bytes] = set()
        for key, value in stored:
            if key in deleted:
                continue
            current = values.get(key)
            if current is not None:
                replaced.add(key)
                value = current
            yield key, value
        for key, value in list(values.items()):
            if key not in replaced:
                yield key, value

    def partition_items(self, partition: int) -> Iterator[tuple[bytes, bytes]]:
        """Every (key, value) of one partition: its database, with this worker's writes not on
        disk yet (take it whole before the next write)."""
        values = self._values
        deleted = self._deleted
        store = self.store
        done: set[bytes] = set()
        self._open_databases()
        for key, value in store._visible_items(store._db_for_partition(partition)):
            if key in deleted:
                continue
            done.add(key)
            yield key, values.get(key, value)
        pending: dict[bytes, bytes | None] = {}
        for key, value, _ in self._sent.get(partition, ()):
            pending[key] = value  # the newest write of each key, in send order
        for key, value in pending.items():
            if key not in done and value is not None and key not in deleted:
                yield key, values.get(key, value)

    # -- changelog records and the disk ----------------------------------------------------------

    def sent(self, key: bytes | None, value: bytes | None, partition: int | None, future: Any) -> None:
        """A changelog record was sent for ``key`` (``value`` None: a deletion)."""
        if key is None or partition is None:
            return
        self._sent.setdefault(partition, []).append((key, value, future))

    def writing(self, active: bool) -> None:
        """A processor starts (True) or ends (False) writing a batch. Meanwhile a commit may
        persist (the producer's sends are awaited), but leaves the cache and the deletions as
        they are: a key written or deleted whose record is not registered yet would look done."""
        self._writing = active

    def pending(self) -> bool:
        return any(self._sent.values())

    def persist(self) -> int:
        """Write every confirmed changelog record, partition by partition up to the first one
        still unconfirmed, to the local database with its offset; how many were written."""
        changes: list[_Change] = []
        deletions: list[bytes] = []
        for partition, records in self._sent.items():
            done = 0
            for key, value, future in records:
                if not future.done():
                    break
                done += 1
                if future.cancelled() or future.exception() is not None:
                    continue  # refused: not on the changelog, so not on disk either
                meta = future.result()
                changes.append(_Change(_Message(meta.topic_partition, partition, meta.offset, key, value)))
                if value is None:
                    deletions.append(key)
            del records[:done]
        if changes:
            changes.sort(key=lambda change: (change.message.partition, change.message.offset))
            self._open_databases()  # all of them, not only those written (see there)
            self.store.apply_changelog_batch(changes, _same, _same)
            self.persisted += len(changes)
        self._on_disk.extend(deletions)
        if self._writing or not (self._on_disk or self._uncache):
            return len(changes)  # cache and deletions settled at a commit after the batch
        waiting = self._waiting()
        # the store no longer has them, unless written again since
        self._deleted.difference_update(key for key in self._on_disk if key not in waiting)
        self._on_disk.clear()
        for key in [key for key in self._uncache if key not in waiting]:
            self._uncache.discard(key)
            self._values.pop(key, None)
        return len(changes)

    def uncache(self, keys: list[bytes]) -> None:
        """Runs no longer parsed (``LOOPWATCH_PARSED_RUNS_MAX``): their values leave the cache,
        at once or, for one whose write is not on disk yet, once it is (:meth:`persist`), unless
        written again before. Read again, a value comes from the disk: the cache holds only what
        the parsed runs need. Called once every write of the batch has its record registered."""
        waiting = self._waiting() if self._sent else set()
        for key in keys:
            if key in waiting:
                self._uncache.add(key)
            else:
                self._values.pop(key, None)

    def _waiting(self) -> set[bytes]:
        return {key for records in self._sent.values() for key, _, _ in records}

    def forget(self, partitions: set[int]) -> None:
        """After a revocation (the worker's commit done): drop what was not persisted for
        ``partitions``, and the cache (the next owner may change those runs)."""
        for partition in partitions:
            self._sent.pop(partition, None)
        waiting = self._waiting()
        self._values = {key: value for key, value in self._values.items() if key in waiting}
        self._uncache &= waiting
        self._deleted &= waiting
        self._on_disk.clear()

    def close(self) -> None:
        """At shutdown, after the last :meth:`persist`: close the databases. (faust closes its
        stores before the consumer stops, so the worker's last commit opens them again.)"""
        databases: dict[int, Any] = getattr(self.store, "_dbs", {})
        for database in list(databases.values()):
            database.close()
        databases.clear()


def _no_notice(active: bool) -> None:
    """The memory store needs no notice of a batch being written."""


def writing_notice(data: object) -> Callable[[], AbstractContextManager[None]]:
    """What a processor enters while it writes a batch to its table ``data``: on the RocksDB
    store :meth:`LocalState.writing` is told (True on entry, False on exit, whatever raised),
    on the memory one nothing."""
    notice: Callable[[bool], None] = getattr(data, "writing", _no_notice)

    @contextmanager
    def writing() -> Iterator[None]:
        notice(True)
        try:
            yield
        finally:
            notice(False)

    return writing
