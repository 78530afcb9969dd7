"""Ledger storage: write cache -> checkpoint -> entry logs + location index; reads.

On-disk format
--------------
Entry logs (`entry_logger.py`) and the RocksDB location index with per-ledger state and
LastLogMark (`entry_location_index.py`) under the ledger directory; see those modules.

The write cache holds entries by ledger, then by entry id. A checkpoint:
  1. swaps the write cache (adds keep landing in a fresh one) and notes the journal's
     synced position and the ledger states changed since the last checkpoint;
  2. writes the swapped entries, ledger by ledger in entry order, to the current entry
     log in slices of `FLUSH_SLICE_ENTRIES`, starting each slice's disk writes and pacing
     them (`checkpoint_pause`), and keeps their locations in memory;
  3. fsyncs the log (by then little is left to write);
  4. writes the locations to the index, a slice per unsynced RocksDB batch: only now,
     when the bytes they name are on disk;
  5. writes the states, the per-log byte counts and the LastLogMark in one synced RocksDB
     batch (which makes the slices' batches durable too);
  6. deletes journal files wholly before the mark.

Each slice is its own call on the storage thread. That thread holds the interpreter
lock while it runs Python, and the event loop, which gives the lock up on every socket
call, waits up to the switch interval to get it back: in one call, a whole checkpoint
(tens of thousands of entries, one RocksDB batch) would make it wait again and again
until the checkpoint is done. Between slices the loop runs freely, so a checkpoint
delays a request by at most one slice.

Faults tolerated
----------------
- kill -9 between any two steps: the mark moves only in step 5, after everything it covers
  is durable, so restart replays the journal from the previous mark and rebuilds the rest.
- A short write is completed; a failed write, writeback or fsync of the entry log (ENOSPC,
  EIO) fails the checkpoint before step 4: the index never names bytes the log does not
  hold, before or after any later checkpoint (the entry logger starts a new log and
  writes every later entry where its location says). The failed checkpoint's entries
  and ledger states go back into the write cache (reads still find them) and its mark is
  not moved, so the journal keeps them: the next checkpoint retries them, a restart
  replays them. The bookie turns read-only meanwhile (`bookie.py`).
- A reader never misses an entry during a checkpoint: an entry is in the write cache, the
  swapped cache or the index at every instant (all swaps happen on the event loop).
- Entry log writes, compaction and ledger deletion run on one storage thread, and a
  checkpoint holds the storage lock across its slices, so they never interleave.

Direct adds
-----------
A large add's entry is in a direct entry log before its journal record is written
(`direct_entry_log.py`, `direct_adds.py`); applying the record notes its location in
`direct` (`direct_locations.py`), not its bytes in the write cache. A checkpoint swaps
those locations with the write cache and indexes them with the slices' (after the log's
fsync, in the same batches), so the LastLogMark moves past a DIRECT_ADD record only once
its location is durable in the index, exactly as for an ADD. Until then the location is
pinned (`entry_logger.LogPins`): compaction leaves its log alone, and a replay after a
crash finds the bytes where the record says. Replay reads them back and checks their length
and CRC32C against the record: the record was written only after those bytes were
fdatasync'd, so a mismatch is damage to an acknowledged entry and the bookie does not
start (`DirectEntryCorruptError`, exit code 4 as for a damaged journal).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

from blobstore.wire import protocol
from bookie.direct_locations import DirectLocations
from bookie.entry_location_index import EntryLocationIndex, LedgerStateRecord
from bookie.entry_logger import (
    EntryLogger,
    EntryLogMissingError,
    FileWrites,
    split_location,
)
from bookie.journal import (
    Journal,
    JournalCorruptError,
    JournalRecord,
    RecordKind,
    file_name,
    replay,
)
from bookie.metrics import METRICS

logger = logging.getLogger(__name__)

EntryKey = tuple[int, int]
# ledger id -> entry id -> entry bytes
WriteCache = dict[int, dict[int, bytes]]
# One slice of a checkpoint: (ledger id, entry ids, entries) runs, in order.
FlushSlice = list[tuple[int, list[int], list[bytes]]]

# Entries per storage-thread call of a checkpoint (about a millisecond of Python), and
# bytes: a slice of big entries stays a few writes long.
FLUSH_SLICE_ENTRIES = 512
FLUSH_SLICE_BYTES = 4 << 20

# After each checkpoint slice, the checkpoint pauses this many times the slice's duration
# (unless the write cache is full): its CPU comes in small pieces between requests.
CHECKPOINT_PAUSE_RATIO = 1.0

# An index lookup slower than this went to the disk: for the next while, lookups run on
# the read pool instead of the event loop.
INLINE_INDEX_SLOW_S = 0.001
INLINE_INDEX_BACKOFF_S = 1.0


def checkpoint_pause(
    slice_s: float,
    slice_bytes: int,
    left_bytes: int,
    room_bytes: int,
    fill_bytes_per_s: float,
    write_bytes_per_s: float,
    cpu_ratio: float = CHECKPOINT_PAUSE_RATIO,
) -> float:
    """Seconds a checkpoint waits after a slice that took `slice_s` and wrote
    `slice_bytes`, with `left_bytes` still to write.

    - No wait while the write cache has no room (`room_bytes` <= 0): adds wait for it.
    - At least `cpu_ratio` times the slice's time: at most about half a core.
    - Bytes at `write_bytes_per_s` (0: not paced by bytes), raised when the adds
      arriving at `fill_bytes_per_s` would fill the room before the rest is written: the
      checkpoint then aims to finish by the time half the room is used.
    - Not paced by bytes while adds arrive at half that rate or more: the journal then
      writes large batches at the disk's pace and the checkpoint must keep up with it.
    """
    if room_bytes <= 0:
        return 0.0
    pause = slice_s * cpu_ratio
    if write_bytes_per_s <= 0 or fill_bytes_per_s >= write_bytes_per_s / 2:
        return pause
    rate = write_bytes_per_s
    if fill_bytes_per_s > 0 and left_bytes > 0:
        finish_within_s = room_bytes / fill_bytes_per_s / 2
        rate = max(rate, left_bytes / finish_within_s)
    return max(pause, slice_bytes / rate - slice_s)


@dataclass(slots=True)
class CheckpointWrites:
    """What a checkpoint's slices appended to the entry logs: indexed and counted only
    once the log is fsync'd (a failed write leaves no trace in the index)."""

    # One list of (ledger id, entry id, location) per slice.
    locations: list[list[tuple[int, int, int]]] = field(default_factory=list)
    # (log id, ledger id) -> record bytes appended.
    added_bytes: dict[tuple[int, int], int] = field(default_factory=dict)


class StorageWriteError(Exception):
    """The entry logs or the index cannot be written (a full or failing disk). The
    journal still holds every entry not checkpointed."""


class DirectEntryCorruptError(JournalCorruptError):
    """A DIRECT_ADD record names bytes that are not its entry: the record was written
    only after they were fdatasync'd, so this is damage to an acknowledged entry."""


class ReadWouldWait(Exception):
    """Only the disk has the entry: reading it on the event loop would stall the loop."""


T = TypeVar("T")


def flush_slices(
    cache: WriteCache,
    slice_entries: int = FLUSH_SLICE_ENTRIES,
    slice_bytes: int = FLUSH_SLICE_BYTES,
) -> Iterator[FlushSlice]:
    """A swapped write cache as slices of at most `slice_entries` entries and
    `slice_bytes` (or one bigger entry), ledgers in id order and each ledger's entries
    in id order (so a ledger's entries sit together in the entry log, and a sequential
    read of it is sequential on disk)."""
    current: FlushSlice = []
    count = size = 0
    for ledger_id in sorted(cache):
        entries = cache[ledger_id]
        ids: list[int] = []
        datas: list[bytes] = []
        for entry_id in sorted(entries):  # one pass when they arrived in order, as they do
            data = entries[entry_id]
            if count and (count >= slice_entries or size + len(data) > slice_bytes):
                if ids:
                    current.append((ledger_id, ids, datas))
                    ids, datas = [], []
                yield current
                current, count, size = [], 0, 0
            ids.append(entry_id)
            datas.append(data)
            count += 1
            size += len(data)
        if ids:
            current.append((ledger_id, ids, datas))
    if current:
        yield current


class LedgerState:
    """A ledger as this bookie knows it (mutable, loop thread only)."""

    __slots__ = (
        "master_key",
        "fenced",
        "last_add_confirmed",
        "explicit_lac",
        "last_entry_id",
        "lac_waiters",
    )

    def __init__(self, record: LedgerStateRecord | None = None) -> None:
        self.master_key: bytes | None = record.master_key if record else None
        self.fenced = record.fenced if record else False
        self.last_add_confirmed = record.last_add_confirmed if record else protocol.NO_ENTRY
        self.explicit_lac = record.explicit_lac if record else protocol.NO_ENTRY
        self.last_entry_id = record.last_entry_id if record else protocol.NO_ENTRY
        self.lac_waiters: list[asyncio.Future[None]] = []

    def to_record(self) -> LedgerStateRecord:
        return LedgerStateRecord(
            self.master_key,
            self.fenced,
            self.last_add_confirmed,
            self.explicit_lac,
            self.last_entry_id,
        )

    def raise_lac(self, lac: int) -> None:
        if lac > self.last_add_confirmed:
            self.last_add_confirmed = lac
            if self.lac_waiters:
                waiters, self.lac_waiters = self.lac_waiters, []
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_result(None)


class ReadCache:
    """LRU of entries read from entry logs, bounded in bytes."""

    def __init__(self, bytes_max: int) -> None:
        self.bytes_max = bytes_max
        self.bytes = 0
        self._entries: collections.OrderedDict[EntryKey, bytes] = collections.OrderedDict()

    def get(self, key: EntryKey) -> bytes | None:
        data = self._entries.get(key)
        if data is not None:
            self._entries.move_to_end(key)
        return data

    def put(self, key: EntryKey, data: bytes) -> None:
        if len(data) > self.bytes_max // 4 or key in self._entries:
            return
        self._entries[key] = data
        self.bytes += len(data)
        while self.bytes > self.bytes_max:
            _, old = self._entries.popitem(last=False)
            self.bytes -= len(old)

    def discard(self, key: EntryKey) -> None:
        data = self._entries.pop(key, None)
        if data is not None:
            self.bytes -= len(data)

    def drop_ledger(self, ledger_id: int) -> None:
        for key in [k for k in self._entries if k[0] == ledger_id]:
            self.bytes -= len(self._entries.pop(key))


class LedgerStorage:
    def __init__(
        self,
        ledger_dir: str,
        *,
        entry_log_bytes_max: int,
        write_cache_bytes_max: int,
        read_cache_bytes_max: int,
        checkpoint_write_bytes_per_s: float = 0.0,
        file_writes: FileWrites | None = None,
    ) -> None:
        self.ledger_dir = ledger_dir
        self.write_cache_bytes_max = write_cache_bytes_max
        self.checkpoint_write_bytes_per_s = checkpoint_write_bytes_per_s
        self._swapped_at = time.monotonic()  # the last checkpoint's swap (or the start)
        self.index = EntryLocationIndex(ledger_dir)
        self.entry_logger = EntryLogger(ledger_dir, entry_log_bytes_max, file_writes)
        self.states: dict[int, LedgerState] = {
            ledger_id: LedgerState(record) for ledger_id, record in self.index.load_states().items()
        }
        # log id -> ledger id -> bytes of that ledger's records in the log (storage thread).
        self.log_ledger_bytes: dict[int, dict[int, int]] = self.index.load_log_ledger_bytes()
        self.mark = self.index.load_mark()
        self.active: WriteCache = {}
        self.active_bytes = 0
        self.flushing: WriteCache = {}
        self.flushing_bytes = 0
        self.dirty: set[int] = set()
        # Direct adds whose locations the index does not hold yet.
        self.direct = DirectLocations(self.entry_logger.pins, FLUSH_SLICE_ENTRIES)
        self.read_cache = ReadCache(read_cache_bytes_max)
        self.storage_executor = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="storage"
        )
        self.read_executor = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="read")
        self._inline_index_after = 0.0  # monotonic time from which lookups may run inline
        # Held by a checkpoint across its slices, by each compaction step and deletion.
        self._storage_lock = asyncio.Lock()
        self._checkpoint_done = asyncio.Event()
        self.journal: Journal | None = None

    # ------------------------------------------------------------------ startup

    def replay_journal(self, journal_dir: str) -> int:
        """Re-apply journal records after LastLogMark (blocking; before serving)."""
        count = 0
        position = self.mark
        try:
            for record, position in replay(journal_dir, self.mark):
                if record.kind == RecordKind.DIRECT_ADD:
                    self._replay_direct_add(record, position)
                else:
                    self.apply_record(record)
                count += 1
                if self.active_bytes >= self.write_cache_bytes_max // 2:
                    self._checkpoint_sync(position)
            if count:
                self._checkpoint_sync(position)
        except OSError as e:
            raise StorageWriteError(
                f"the journal's entries cannot be written to the entry logs in "
                f"{self.entry_logger.directory}: {e}"
            ) from e
        logger.info("journal replayed records=%d mark=%s", count, self.mark)
        return count

    def _replay_direct_add(self, record: JournalRecord, position: tuple[int, int]) -> None:
        """Apply a DIRECT_ADD record once the bytes it names are its entry (else
        DirectEntryCorruptError: the class docstring)."""
        direct = record.direct()
        log_id, offset = split_location(direct.location)
        try:
            entry = self.entry_logger.read(direct.location, record.ledger_id, record.value)
            if not direct.names(entry):
                raise ValueError(
                    f"{len(entry)} bytes whose digest does not match the record's "
                    f"({direct.entry_length} bytes)"
                )
        except (OSError, ValueError, EntryLogMissingError) as e:
            raise DirectEntryCorruptError(
                f"journal file {file_name(position[0])} holds, before offset {position[1]}, "
                f"a direct add of ledger_id={record.ledger_id} entry_id={record.value} whose "
                f"bytes in entry log {log_id:08x} at offset {offset} are not that entry "
                f"({type(e).__name__}: {e}); they were fdatasync'd before the record was "
                "written, so an acknowledged entry is damaged"
            ) from None
        self.entry_logger.pins.pin(log_id)  # taken over by apply_direct_add
        _, _, lac = protocol.entry_ids(entry)
        self.apply_direct_add(
            record.ledger_id, record.value, record.master_key, direct.location, len(entry), lac
        )

    def _checkpoint_sync(self, mark: tuple[int, int]) -> None:
        """A whole checkpoint on this thread (replay, before serving), in the steps and
        with the failure handling of `checkpoint`."""
        states = self._swap()
        writes = CheckpointWrites()
        self._add_direct_writes(writes)
        try:
            for piece in flush_slices(self.flushing):
                self._flush_slice(piece, writes)
            self._sync_log(writes)
            for locations in writes.locations:
                self._index_slice(locations)
            self._flush_end(states, writes, mark)
        except BaseException:
            self._unswap(states)
            raise
        self.flushing = {}
        self.flushing_bytes = 0
        self.direct.indexed()
        self.mark = mark

    def apply_record(self, record: JournalRecord) -> None:
        state = self.state_for(record.ledger_id, record.master_key)
        if record.kind == RecordKind.ADD:
            self.apply_add(record.ledger_id, record.value, record.master_key, record.entry)
        elif record.kind == RecordKind.FENCE:
            state.fenced = True
            self.dirty.add(record.ledger_id)
        elif record.kind == RecordKind.LAC:
            self.apply_explicit_lac(record.ledger_id, record.value)

    # ------------------------------------------------------------------ state (loop thread)

    def state_for(self, ledger_id: int, master_key: bytes) -> LedgerState:
        """The ledger's state, created (with this master key) when unseen."""
        state = self.states.get(ledger_id)
        if state is None:
            state = self.states[ledger_id] = LedgerState()
        if state.master_key is None:
            state.master_key = master_key
            self.dirty.add(ledger_id)
        return state

    def apply_add(
        self, ledger_id: int, entry_id: int, master_key: bytes, entry: bytes, lac: int | None = None
    ) -> None:
        """A journaled add becomes readable (called right after its fsync)."""
        state = self.state_for(ledger_id, master_key)
        cached = self.active.get(ledger_id)
        if cached is None:
            cached = self.active[ledger_id] = {}
        old = cached.get(entry_id)
        if self.direct.active:
            self.direct.drop((ledger_id, entry_id))
        if old is not None:
            self.active_bytes -= len(old)
        elif self.read_cache.bytes:
            # A copy written again (a repair of a bad one): the read cache may hold the
            # bytes it replaces.
            self.read_cache.discard((ledger_id, entry_id))
        cached[entry_id] = entry
        self.active_bytes += len(entry)
        if entry_id > state.last_entry_id:
            state.last_entry_id = entry_id
        if lac is None:
            _, _, lac = protocol.entry_ids(entry)
        state.raise_lac(lac)
        self.dirty.add(ledger_id)

    def apply_direct_add(
        self,
        ledger_id: int,
        entry_id: int,
        master_key: bytes,
        loc: int,
        entry_bytes: int,
        lac: int,
        entry: bytes | None = None,
    ) -> None:
        """A DIRECT_ADD record is durable: the entry, already in a direct entry log at
        `loc` (pinned there by the caller; the pin is this storage's from now on),
        becomes readable. `entry`, when given, goes to the read cache: the log was
        written around the page cache."""
        state = self.state_for(ledger_id, master_key)
        cached = self.active.get(ledger_id)
        if cached is not None:
            old = cached.pop(entry_id, None)
            if old is not None:
                self.active_bytes -= len(old)
        self.direct.add((ledger_id, entry_id), loc, entry_bytes)
        self.read_cache.discard((ledger_id, entry_id))
        if entry is not None:
            self.read_cache.put((ledger_id, entry_id), entry)
        if entry_id > state.last_entry_id:
            state.last_entry_id = entry_id
        state.raise_lac(lac)
        self.dirty.add(ledger_id)

    def apply_explicit_lac(self, ledger_id: int, lac: int) -> None:
        state = self.states.get(ledger_id)
        if state is None:
            return
        if lac > state.explicit_lac:
            state.explicit_lac = lac
        state.raise_lac(lac)
        self.dirty.add(ledger_id)

    def write_cache_full(self) -> bool:
        return self.active_bytes >= self.write_cache_bytes_max // 2

    def needs_room(self) -> bool:
        """Both halves of the write cache are full: the journal writer must wait."""
        return self.write_cache_full() and bool(self.flushing)

    async def wait_for_room(self) -> None:
        """Hold the journal writer while both halves of the write cache are full."""
        while self.needs_room():
            self._checkpoint_done.clear()
            await self._checkpoint_done.wait()

    # ------------------------------------------------------------------ reads

    async def read(self, ledger_id: int, entry_id: int) -> bytes | None:
        try:
            return self.read_now(ledger_id, entry_id)
        except ReadWouldWait:
            return await self.read_from_disk(ledger_id, entry_id)

    async def read_from_disk(self, ledger_id: int, entry_id: int) -> bytes | None:
        """The entry from its entry log on the read pool, for a read `read_now` found
        only on disk (it is not looked for in the caches again)."""
        METRICS.log_reads_pool.inc()
        data = await asyncio.get_running_loop().run_in_executor(
            self.read_executor, self._read_from_log, ledger_id, entry_id
        )
        if data is not None and ledger_id in self.states:
            self.read_cache.put((ledger_id, entry_id), data)
        return data

    def read_now(self, ledger_id: int, entry_id: int) -> bytes | None:
        """The entry (None: not stored) from the write cache, the read cache or, when the
        page cache holds its bytes, the entry log; raises ReadWouldWait when only the
        disk has it (`read` then takes it to the read pool)."""
        cached = self.active.get(ledger_id)
        data = None if cached is None else cached.get(entry_id)
        if data is None:
            cached = self.flushing.get(ledger_id)
            data = None if cached is None else cached.get(entry_id)
        if data is not None:
            METRICS.write_cache_hit.inc()
            return data
        METRICS.write_cache_miss.inc()
        key = (ledger_id, entry_id)
        data = self.read_cache.get(key)
        if data is not None:
            METRICS.read_cache_hit.inc()
            return data
        METRICS.read_cache_miss.inc()
        data = self._read_inline(ledger_id, entry_id)
        METRICS.log_reads_inline.inc()
        if data is not None and ledger_id in self.states:
            self.read_cache.put(key, data)
        return data

    def _location(self, ledger_id: int, entry_id: int) -> int | None:
        """Where the entry is: a direct add not yet indexed, or the index (any thread:
        `direct_locations.py` says why a location is always in one of them)."""
        loc = self.direct.get((ledger_id, entry_id))
        if loc is not None:
            return loc
        return self.index.get_location(ledger_id, entry_id)

    def _read_inline(self, ledger_id: int, entry_id: int) -> bytes | None:
        """The entry (or None: not stored) when memory holds everything needed to find
        and read it, else ReadWouldWait. Runs on the event loop: a hand-off to the read pool
        and back costs more CPU than the read itself when the page cache has the bytes.

        The entry's bytes are read with RWF_NOWAIT, which never waits for the disk. The
        index lookup cannot be asked that of RocksDB, so it is timed: one that took disk
        time sends index lookups to the read pool for a while."""
        now = time.monotonic()
        if now < self._inline_index_after:
            raise ReadWouldWait
        loc = self._location(ledger_id, entry_id)
        took = time.monotonic() - now
        if took > INLINE_INDEX_SLOW_S:
            self._inline_index_after = now + INLINE_INDEX_BACKOFF_S
            logger.debug("index lookup took %.1f ms: reads go to the pool for a while", took * 1e3)
        if loc is None:
            return None
        try:
            data = self.entry_logger.read_if_cached(loc, ledger_id, entry_id)
        except EntryLogMissingError:
            raise ReadWouldWait from None  # compaction moved it: the pool looks it up again
        if data is None:
            raise ReadWouldWait
        return data

    def _read_from_log(self, ledger_id: int, entry_id: int) -> bytes | None:
        for _ in range(3):
            loc = self._location(ledger_id, entry_id)
            if loc is None:
                return None
            try:
                return self.entry_logger.read(loc, ledger_id, entry_id)
            except EntryLogMissingError:
                continue  # compaction moved it meanwhile: look it up again
        raise OSError(f"entry ledger_id={ledger_id} entry_id={entry_id} keeps moving")

    # ------------------------------------------------------------------ checkpoint

    def _swap(self) -> dict[int, LedgerStateRecord]:
        """Start a fresh write cache; the old one (only ledgers still known) is flushed.
        Returns the records of the ledger states changed since the last checkpoint."""
        assert not self.flushing, "one checkpoint at a time"
        swapped, self.active = self.active, {}
        self.flushing = {
            ledger_id: entries for ledger_id, entries in swapped.items() if ledger_id in self.states
        }
        self.flushing_bytes, self.active_bytes = self.active_bytes, 0
        self.direct.swap(self.states)
        states = {
            ledger_id: self.states[ledger_id].to_record()
            for ledger_id in self.dirty
            if ledger_id in self.states
        }
        self.dirty = set()
        return states

    def _add_direct_writes(self, writes: CheckpointWrites) -> None:
        """The swapped direct adds' locations join the checkpoint's (indexed after the
        log's fsync, in slices) and their record bytes its per-log counts."""
        slices, added = self.direct.checkpoint_writes()
        writes.locations += slices
        for key, size in added.items():
            writes.added_bytes[key] = writes.added_bytes.get(key, 0) + size

    async def in_storage_thread(self, fn: Callable[..., T], *args: object) -> T:
        """Run `fn(*args)` on the storage thread, never inside a checkpoint."""
        async with self._storage_lock:
            return await asyncio.get_running_loop().run_in_executor(
                self.storage_executor, fn, *args
            )

    async def checkpoint(self, *, paced: bool = True) -> None:
        """One checkpoint (module docstring); `paced=False` (at shutdown) writes at full
        speed: nothing else is running to yield to.

        The order is what makes it durable: the slices write the entry log, the log is
        fsync'd, only then are the locations indexed (unsynced batches), `_flush_end`
        moves the LastLogMark in one synced index batch, and only after that are journal
        files before the mark deleted. Any failure puts the entries back in the write
        cache and raises (module docstring)."""
        assert self.journal is not None
        async with self._storage_lock:
            if not self.active and not self.dirty:
                return
            started = time.monotonic()
            mark = self.journal.synced_position
            # Adds' arrival rate since the last swap: one slice's look at the fresh cache
            # right after this swap may see nothing yet (adds land a batch at a time).
            arrived_per_s = self.active_bytes / max(started - self._swapped_at, 1e-3)
            self._swapped_at = started
            states = self._swap()
            METRICS.write_cache_bytes.set(self.active_bytes + self.flushing_bytes)
            loop = asyncio.get_running_loop()
            writes = CheckpointWrites()
            self._add_direct_writes(writes)
            try:
                entries = await self._write_slices(writes, started, arrived_per_s, paced)
                written = time.monotonic()
                await loop.run_in_executor(self.storage_executor, self._sync_log, writes)
                for locations in writes.locations:
                    await loop.run_in_executor(self.storage_executor, self._index_slice, locations)
                await loop.run_in_executor(
                    self.storage_executor, self._flush_end, states, writes, mark
                )
            except BaseException:
                self._unswap(states)
                raise
            synced = time.monotonic()
            self.direct.indexed()
            self._end_flushing()
            self.mark = mark
            await loop.run_in_executor(
                self.storage_executor, self.journal.delete_files_before, mark[0]
            )
            METRICS.checkpoints.inc()
            METRICS.checkpoint_seconds.observe(time.monotonic() - started)
            METRICS.write_cache_bytes.set(self.active_bytes)
            logger.debug(
                "checkpoint done entries=%d states=%d mark=%s write_ms=%.1f sync_ms=%.1f",
                entries,
                len(states),
                mark,
                (written - started) * 1e3,
                (synced - written) * 1e3,
            )

    async def _write_slices(
        self,
        writes: CheckpointWrites,
        started: float,
        arrived_per_s: float,
        paced: bool,
    ) -> int:
        """Checkpoint step 2: the swapped entries, slice by slice, to the entry log (their
        locations kept in `writes`), with a pause after each slice. Returns the entry
        count."""
        loop = asyncio.get_running_loop()
        entries = 0
        left_bytes = self.flushing_bytes
        half = self.write_cache_bytes_max // 2
        for piece in flush_slices(self.flushing):
            sliced = time.monotonic()
            slice_bytes = await loop.run_in_executor(
                self.storage_executor, self._flush_slice, piece, writes
            )
            entries += sum(len(ids) for _, ids, _ in piece)
            left_bytes -= sum(len(data) for _, _, datas in piece for data in datas)
            now = time.monotonic()
            # Background work, paced in CPU and in bytes (`checkpoint_pause`): bookies
            # checkpointing at once on a few cores would hold adds back, and a
            # checkpoint's writes reaching the disk in one burst would hold every
            # journal fsync behind them.
            pause = checkpoint_pause(
                now - sliced,
                slice_bytes,
                left_bytes,
                0 if self.write_cache_full() else half - self.active_bytes,
                max(arrived_per_s, self.active_bytes / max(now - started, 1e-3)),
                self.checkpoint_write_bytes_per_s,
            )
            if pause > 0 and paced:
                await asyncio.sleep(pause)
        return entries

    def _unswap(self, states: dict[int, LedgerStateRecord]) -> None:
        """A checkpoint failed: keep its entries readable and retry them, and its ledger
        states, with the next checkpoint."""
        for ledger_id, flushed in self.flushing.items():
            cached = self.active.setdefault(ledger_id, {})
            for entry_id, data in flushed.items():
                cached.setdefault(entry_id, data)
        self.active_bytes = sum(
            len(data) for cached in self.active.values() for data in cached.values()
        )
        self.dirty.update(states)
        self.direct.unswap()
        self._end_flushing()

    def _end_flushing(self) -> None:
        """The swapped cache is written (or back in the write cache): adds waiting for
        room go on."""
        self.flushing = {}
        self.flushing_bytes = 0
        self._checkpoint_done.set()

    def _flush_slice(self, piece: FlushSlice, writes: CheckpointWrites) -> int:
        """Storage thread: one slice -> entry log (its disk writes started, not waited
        for), its locations and byte counts kept in `writes`. Returns the bytes
        written to the log."""
        locations: list[tuple[int, int, int]] = []
        for ledger_id, entry_ids, entries in piece:
            locs, per_log_sizes = self.entry_logger.append_many(entries)
            locations += zip([ledger_id] * len(entry_ids), entry_ids, locs, strict=True)
            for log_id, size in per_log_sizes.items():
                key = (log_id, ledger_id)
                writes.added_bytes[key] = writes.added_bytes.get(key, 0) + size
        writes.locations.append(locations)
        return self.entry_logger.write_out()

    def _sync_log(self, writes: CheckpointWrites) -> None:
        """Storage thread: fsync the current log (earlier ones were at their roll), so
        every location in `writes` names bytes on disk."""
        if writes.locations:
            self.entry_logger.sync()

    def _index_slice(self, locations: list[tuple[int, int, int]]) -> None:
        """Storage thread: one slice's locations to the index (unsynced), after the sync."""
        self.index.write(locations, {}, {}, None, sync=False)

    def _flush_end(
        self,
        states: dict[int, LedgerStateRecord],
        writes: CheckpointWrites,
        mark: tuple[int, int],
    ) -> None:
        """Storage thread: one synced batch of states, per-log byte counts and the mark;
        the byte counts in memory follow once it is durable."""
        touched = {
            (log_id, ledger_id): self.log_ledger_bytes.get(log_id, {}).get(ledger_id, 0) + size
            for (log_id, ledger_id), size in writes.added_bytes.items()
        }
        self.index.write([], states, touched, mark)
        for (log_id, ledger_id), size in touched.items():
            self.log_ledger_bytes.setdefault(log_id, {})[ledger_id] = size

    # ------------------------------------------------------------------ deletion / compaction

    async def delete_ledger(self, ledger_id: int) -> None:
        """Drop a ledger deleted from the cluster: state, caches, index (GC)."""
        state = self.states.pop(ledger_id, None)
        if state is not None:
            for waiter in state.lac_waiters:
                if not waiter.done():
                    waiter.set_result(None)
        cached = self.active.pop(ledger_id, None)
        if cached:
            self.active_bytes -= sum(len(data) for data in cached.values())
        self.direct.drop_ledger(ledger_id)
        self.read_cache.drop_ledger(ledger_id)
        self.dirty.discard(ledger_id)
        await self.in_storage_thread(self._delete_ledger, ledger_id)

    def _delete_ledger(self, ledger_id: int) -> None:
        log_ids = [log_id for log_id, per in self.log_ledger_bytes.items() if ledger_id in per]
        self.index.delete_ledger(ledger_id, log_ids)
        for log_id in log_ids:
            self.log_ledger_bytes[log_id].pop(ledger_id, None)

    # ------------------------------------------------------------------ shutdown

    async def close(self) -> None:
        self.storage_executor.shutdown(wait=True)
        self.read_executor.shutdown(wait=True)
        self.entry_logger.close()
        self.index.close()
