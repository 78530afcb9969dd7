"""The journal: every add, fence and explicit LAC is appended here and fsync'd before it is
acknowledged. Group commit turns many adds into one write and one fsync.

On-disk format
--------------
The journal directory holds files named ``<journal_id as 16 hex digits>.txn``. Each file
starts with a 16-byte header and is followed by records::

    header: b"BKJN" | u16 version (3) | u16 reserved (0) | u64 journal_id
    record: u32 body_length | u32 crc32c(body) | body
    body:   u8 kind | u64 ledger_id | i64 value | 20s master_key | entry bytes (ADD only)
            | u64 location | u32 entry_length | u32 digest (DIRECT_ADD only)

``kind`` is ADD (value = entry id, followed by the entry bytes as the writer built them),
FENCE (value unused), LAC (value = the explicit LAC) or DIRECT_ADD (value = entry id): an
entry written, and fdatasync'd, to a direct entry log before this record was queued
(`bookie/direct_entry_log.py`); the record names where, and replay checks those bytes
against the length and digest it carries: the bytes must verify against their own digest
(the entry's CRC32C, which the bookie verified when the add arrived), and that digest
must be the record's. Every record carries the ledger's master key, so replay restores
it together with the entry, fence or LAC. Files of version 2 and 3 may hold DIRECT_ADD
records; a version 2 record carries the CRC32C of the whole entry instead (computed
again over the entry after its write: version 3 saves that pass), and version 1 files
(written before DIRECT_ADD) are read as well. A bookie refuses a file of a version it
does not know instead of dropping its records.

The LastLogMark ``(journal_id, offset)`` stored with the location index says how far a
checkpoint has made the journal redundant: replay starts there. Files wholly before it are
deleted after the checkpoint that covers them.

Zero-ahead
----------
An fdatasync that follows a write into new blocks must also commit the file system's
metadata for them (the blocks' allocation and the file's size: on ext4 a commit of its
own journal), and that costs more than the data itself for the small batches of a
journal below saturation. A helper thread keeps the next ``journal_zero_ahead_bytes`` of
the current file written with zeros and fsync'd, so the writer overwrites allocated,
written blocks and its fdatasync has only data to flush (space reserved with fallocate
or a sparse size does not help: the blocks must be written).
The zeros double the journal's disk writes, so the thread stops while the journal writes
faster than ``journal_zero_ahead_max_mb_s``: there batches are large and the metadata
commit is a small part of each. Zeros are only ever written past every byte the writer
has written or is writing; a batch that reaches a chunk being zeroed waits for it.

A file's zero tail is cut off (ftruncate + fsync) before the next file is created and at
close, so every file but the newest ends exactly after its last record, as without
zero-ahead. The newest file of a bookie killed with -9 keeps its tail: replay reads the
zeros as the end of the file (event ``journal_zero_tail``) and cuts them off.

Faults tolerated
----------------
- kill -9 or power loss at any moment: a record is acknowledged only after the fsync of the
  write that holds it; a torn or half-written tail record fails its length or CRC check and
  replay stops there (event ``journal_torn_tail``). A new file is started on every start, so
  nothing is ever appended after a torn tail. Zero-ahead does not change this: a record
  is whole and its CRC matches or it is not replayed, whatever follows it.
- A crash between creating a file and syncing its directory: the directory is fsync'd
  after each file is created, before the file's first record is acknowledged.
- Short writes: a batch is written at its own offset (`pwritev`) and continued where the
  kernel stopped; a write that makes no progress is an I/O error (EIO): on a full disk
  the kernel fails the retry with ENOSPC, so a silent stop is a failing device.
- A failed write or fsync (ENOSPC, EIO, a short write that cannot be finished): the
  writer stops for good (event ``journal_write_failed``). The adds of the failed batch,
  those queued and every later one fail with `JournalUnavailableError` (the bookie answers
  them READ_ONLY: the writer replaces it), and `write_failed` tells the bookie, which
  turns read-only or stops (bookie/ledger_dirs_monitor.py `journal_error_action`). Nothing
  is written after the failed batch, so what it left on disk (a torn record, or whole
  records never acknowledged) is the newest file's tail at the next start: replay drops
  a torn record and applies whole ones, which is allowed for adds never acknowledged.
"""

from __future__ import annotations

import asyncio
import collections
import enum
import errno
import logging
import os
import struct
import threading
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Self

import crc32c

from blobstore.runtime.batched_metrics import BatchedHistogram, batched_counter
from blobstore.wire import protocol
from bookie.disk_io import (
    IOVECS_MAX,
    Buffer,
    drop_from_page_cache,
    fsync_directory,
    pwrite_all,
    skip_bytes,
    write_all,
)
from bookie.entry_logger import FileWrites
from bookie.metrics import METRICS

logger = logging.getLogger(__name__)

# Per-batch updates, batched (blobstore.runtime.batched_metrics): at low rates a batch is one add.
FSYNC_SECONDS = BatchedHistogram(METRICS.journal_fsync_seconds)
BATCH_ENTRIES = BatchedHistogram(METRICS.journal_batch_entries)
BATCH_BYTES = BatchedHistogram(METRICS.journal_batch_bytes)


FILE_MAGIC = b"BKJN"
FILE_VERSION = 3
FILE_VERSIONS_READ = frozenset({1, 2, 3})
FILE_HEADER = struct.Struct(">4sHHQ")
FILE_HEADER_BYTES = FILE_HEADER.size
RECORD_HEADER = struct.Struct(">II")
RECORD_BODY = struct.Struct(f">BQq{protocol.MASTER_KEY_BYTES}s")
RECORD_PREFIX = struct.Struct(f">IIBQq{protocol.MASTER_KEY_BYTES}s")
RECORD_BODY_BYTES_MAX = RECORD_BODY.size + protocol.FRAME_BYTES_MAX
# A DIRECT_ADD record's payload: where its entry is, and what the bytes there must be.
DIRECT_DESCRIPTOR = struct.Struct(">QII")
PAGE_BYTES = 4096

# Zero-ahead writes zeros in chunks of a quarter of its window, at most this much.
ZERO_AHEAD_CHUNK_MAX = 1 << 20
# The zero-ahead thread looks at the journal's write rate over windows of this length,
# and this often when nothing wakes it.
ZERO_AHEAD_RATE_WINDOW_S = 0.5
ZERO_AHEAD_RECHECK_S = 0.1
# A group commit whose write + fsync takes longer is logged (a disk that stalls).
SLOW_SYNC_S = 0.1
# One write + fsync never carries more than this many bytes, whatever is queued.
GROUP_COMMIT_BYTES_MAX = 16 << 20
# An idle writer looks at its queue this often even unnotified (a bound, not the path).
WRITER_IDLE_RECHECK_S = 1.0
# A writer held for room in the write cache looks whether the journal is closing this often.
ROOM_RECHECK_S = 0.2
FILE_SUFFIX = ".txn"

assert RECORD_PREFIX.size == RECORD_HEADER.size + RECORD_BODY.size


class RecordKind(enum.IntEnum):
    ADD = 1
    FENCE = 2
    LAC = 3
    DIRECT_ADD = 4


# Kinds whose value is an entry id; kinds that carry a payload after the fixed body.
ENTRY_KINDS = frozenset({RecordKind.ADD, RecordKind.DIRECT_ADD})


@dataclass(frozen=True, slots=True)
class DirectDescriptor:
    """What a DIRECT_ADD record says of its entry: its location in a direct entry log,
    its length and its digest (the CRC32C stored in the entry; in version 2 files, the
    CRC32C of all its bytes)."""

    location: int
    entry_length: int
    crc: int

    def encode(self) -> bytes:
        return DIRECT_DESCRIPTOR.pack(self.location, self.entry_length, self.crc)

    def names(self, entry: bytes) -> bool:
        """Whether `entry`, read back from where the record says, is the entry the record
        was written for: its length, its bytes verifying against their own digest, and
        that digest the record's (or, as a version 2 record has it, the CRC32C of all
        its bytes the record's)."""
        if len(entry) != self.entry_length or not protocol.verify_entry(entry):
            return False
        return protocol.entry_digest(entry) == self.crc or crc32c.crc32c(entry) == self.crc

    @classmethod
    def decode(cls, payload: bytes) -> Self:
        location, entry_length, crc = DIRECT_DESCRIPTOR.unpack(payload)
        return cls(location, entry_length, crc)


@dataclass(frozen=True, slots=True)
class JournalRecord:
    kind: RecordKind
    ledger_id: int
    value: int  # ADD: entry id; LAC: the explicit LAC; FENCE: -1
    master_key: bytes
    entry: bytes = b""  # ADD: the entry; DIRECT_ADD: its encoded DirectDescriptor

    def __post_init__(self) -> None:
        assert len(self.master_key) == protocol.MASTER_KEY_BYTES, len(self.master_key)
        assert self.kind in ENTRY_KINDS or not self.entry, self.kind
        assert self.kind not in ENTRY_KINDS or self.value >= 0, self.value
        assert self.kind != RecordKind.DIRECT_ADD or len(self.entry) == DIRECT_DESCRIPTOR.size

    def direct(self) -> DirectDescriptor:
        assert self.kind == RecordKind.DIRECT_ADD, self.kind
        return DirectDescriptor.decode(self.entry)

    def encode(self) -> bytes:
        return b"".join(
            encode_parts(self.kind, self.ledger_id, self.value, self.master_key, self.entry)
        )

    @classmethod
    def decode(cls, buf: bytes | memoryview) -> tuple[Self, int]:
        """(record, bytes consumed); raises ValueError on a short, torn or corrupt record."""
        if len(buf) < RECORD_HEADER.size:
            raise ValueError("short record header")
        length, crc = RECORD_HEADER.unpack_from(buf, 0)
        if length < RECORD_BODY.size or length > RECORD_BODY_BYTES_MAX:
            raise ValueError(f"record length {length} out of range")
        end = RECORD_HEADER.size + length
        if len(buf) < end:
            raise ValueError("record body cut short")
        body = memoryview(buf)[RECORD_HEADER.size : end]
        if crc32c.crc32c(body) != crc:
            raise ValueError("record crc mismatch")
        kind, ledger_id, value, key = RECORD_BODY.unpack_from(body, 0)
        try:
            kind = RecordKind(kind)
        except ValueError:
            raise ValueError(f"unknown record kind {kind}") from None
        entry = bytes(body[RECORD_BODY.size :])
        if kind not in ENTRY_KINDS and entry:
            raise ValueError("non-add record with an entry")
        if kind == RecordKind.DIRECT_ADD and len(entry) != DIRECT_DESCRIPTOR.size:
            raise ValueError(f"direct add record with a {len(entry)}-byte descriptor")
        if kind in ENTRY_KINDS and value < 0:
            raise ValueError(f"add record with entry id {value}")
        return cls(kind, ledger_id, value, key, entry), end


def encode_parts(
    kind: int, ledger_id: int, value: int, master_key: bytes, entry: bytes
) -> tuple[bytes, bytes]:
    """A record as (prefix, entry): the entry is not copied until the batch is joined."""
    body_fixed = RECORD_BODY.pack(kind, ledger_id, value, master_key)
    crc = crc32c.crc32c(entry, crc32c.crc32c(body_fixed))
    prefix = RECORD_HEADER.pack(RECORD_BODY.size + len(entry), crc) + body_fixed
    return prefix, entry


def group_commit_decision(
    batch_bytes: int,
    oldest_age_s: float,
    queue_empty: bool,
    *,
    max_wait_s: float,
    threshold_bytes: int,
    flush_when_queue_empty: bool = True,
) -> str | None:
    """Why to write and fsync the batch now, or None to keep gathering.

    - "bytes": the batch passed the buffered-writes threshold; a bigger write only delays
      the adds already waiting without saving an fsync.
    - "wait": the oldest add waited journal_max_group_wait_ms; latency bound.
    - "empty": nothing else is queued and `flush_when_queue_empty` (the default); adds
      that arrive meanwhile gather during this fsync and form the next batch, so waiting
      longer would only add latency. Without it the batch gathers for up to
      journal_max_group_wait_ms: fewer fsyncs per add at low rates, for that much more
      latency (BookKeeper's journalFlushWhenQueueEmpty=false).
    """
    if batch_bytes == 0:
        return None
    if batch_bytes >= threshold_bytes:
        return "bytes"
    if oldest_age_s >= max_wait_s:
        return "wait"
    if queue_empty and flush_when_queue_empty:
        return "empty"
    return None


def zero_ahead_start(
    written_end: int,
    zeroed_end: int,
    *,
    window_bytes: int,
    chunk_bytes: int,
    write_bytes_per_s: float,
    max_write_bytes_per_s: float,
) -> int | None:
    """Where to write the next chunk of zeros, or None to wait.

    `written_end` is the end of what the writer has written or is writing, `zeroed_end`
    the end of the zeros already on disk. The chunk starts at the first whole page past
    both (the writer rewrites its last, partial page with the next batch: never zeroed),
    and is written only if it ends within the window ahead of the writer, and only while
    the journal writes slower than the limit (faster, zeros would double the disk's
    load where batches are large enough not to need them)."""
    if write_bytes_per_s > max_write_bytes_per_s:
        return None
    start = max(zeroed_end, -(-written_end // PAGE_BYTES) * PAGE_BYTES)
    if start + chunk_bytes > written_end + window_bytes:
        return None
    return start


def file_name(journal_id: int) -> str:
    return f"{journal_id:016x}{FILE_SUFFIX}"


def list_journal_ids(directory: str) -> list[int]:
    ids = []
    for name in os.listdir(directory):
        if name.endswith(FILE_SUFFIX) and len(name) == 16 + len(FILE_SUFFIX):
            try:
                ids.append(int(name[:16], 16))
            except ValueError:
                continue
    return sorted(ids)


# What a Journal created without `file_writes` uses for its records' writes and fsyncs
# (looked up at creation; tests put a fault-injecting `FileWrites` here).
FILE_WRITES = FileWrites()


class JournalUnavailableError(Exception):
    """The journal takes no more writes: a write or fsync failed (the cause), or it is
    closing. The record was not acknowledged."""


class JournalCorruptError(RuntimeError):
    """A journal file that was complete (a later file exists) does not decode: records
    after the damage were acknowledged, so replaying past it silently would lose them."""


def replay(
    directory: str, mark: tuple[int, int]
) -> Iterator[tuple[JournalRecord, tuple[int, int]]]:
    """Records from LastLogMark on, each with the position just after it.

    Only the newest file can end in a torn write (a crash inside the last group commit,
    never acknowledged): its tail is cut off at the last whole record, fsync'd, so the
    file is clean for every later replay. Every older file was fsync'd in full before
    the next one was created, so damage there is corruption of acknowledged records:
    JournalCorruptError, and the bookie does not start.
    """
    mark_id, mark_offset = mark
    ids = [i for i in list_journal_ids(directory) if i >= mark_id]
    for n, journal_id in enumerate(ids):
        newest = n == len(ids) - 1
        path = os.path.join(directory, file_name(journal_id))
        size, data = _read_file(path)
        if size < FILE_HEADER_BYTES:
            _remove_short_file(directory, path, journal_id, size, newest)
            continue
        _check_file_header(path, data, journal_id)
        offset = mark_offset if journal_id == mark_id else FILE_HEADER_BYTES
        offset = max(offset, FILE_HEADER_BYTES)
        yield from _replay_file(path, journal_id, data, size, offset, newest)


def _read_file(path: str) -> tuple[int, bytes]:
    """(size, contents); no contents when the file is shorter than its header."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        return size, f.read() if size >= FILE_HEADER_BYTES else b""


def _remove_short_file(directory: str, path: str, journal_id: int, size: int, newest: bool) -> None:
    """A file cut short inside its header: the newest one is a torn start, removed."""
    if not newest:
        raise JournalCorruptError(
            f"journal file {path} is {size} bytes, shorter than its header, "
            "but a later journal file exists"
        )
    logger.warning(
        "journal_torn_tail journal_id=%d reason=short-header size=%d: file removed",
        journal_id,
        size,
    )
    os.unlink(path)
    fsync_directory(directory)


def _check_file_header(path: str, data: bytes, journal_id: int) -> None:
    magic, version, _, header_id = FILE_HEADER.unpack_from(data, 0)
    if magic != FILE_MAGIC or version not in FILE_VERSIONS_READ or header_id != journal_id:
        raise JournalCorruptError(
            f"journal file {path} has a bad header: {magic!r} v{version} id={header_id}"
        )


def _replay_file(
    path: str, journal_id: int, data: bytes, size: int, offset: int, newest: bool
) -> Iterator[tuple[JournalRecord, tuple[int, int]]]:
    """The records of one file from `offset` on; its tail is cut at the first bad one."""
    view = memoryview(data)
    while offset < size:
        try:
            record, used = JournalRecord.decode(view[offset:])
        except ValueError as e:
            _cut_bad_tail(path, journal_id, data, size, offset, newest, e)
            return
        offset += used
        yield record, (journal_id, offset)


def bad_tail_kind(data: bytes, size: int, offset: int, newest: bool) -> str:
    """What follows the last whole record at `offset`:

    - "zeros": what zero-ahead wrote past the last record of a newest file that was never
      finished (the bookie was killed): not a torn write;
    - "torn": the newest file's last write, torn by a crash, never acknowledged;
    - "corrupt": damage in a file that was complete when the next one was started."""
    if not newest:
        return "corrupt"
    if data.count(0, offset) == size - offset:
        return "zeros"
    return "torn"


def _cut_bad_tail(
    path: str, journal_id: int, data: bytes, size: int, offset: int, newest: bool, error: Exception
) -> None:
    """Truncate the file after its last whole record, or raise JournalCorruptError."""
    kind = bad_tail_kind(data, size, offset, newest)
    if kind == "corrupt":
        raise JournalCorruptError(
            f"journal file {path} is corrupt at offset {offset} ({error}); "
            f"{size - offset} bytes follow, and the file was complete when "
            "the next journal file was started, so acknowledged entries may "
            "be among them"
        ) from None
    if kind == "zeros":
        logger.info(
            "journal_zero_tail journal_id=%d offset=%d zero_bytes=%d: "
            "file truncated to its last record",
            journal_id,
            offset,
            size - offset,
        )
    else:
        logger.warning(
            "journal_torn_tail journal_id=%d offset=%d reason=%s ignored_bytes=%d: "
            "file truncated to its last whole record",
            journal_id,
            offset,
            error,
            size - offset,
        )
    _truncate(path, offset)


def _truncate(path: str, size: int) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.ftruncate(fd, size)
        os.fsync(fd)
    finally:
        os.close(fd)


# One queued journal write: (pieces, nbytes, apply, done, enqueued_at), where pieces are
# one or more encoded records (prefix, entry, prefix, entry, ...) written in order.
# `apply()` runs on the loop right after the fsync (before `done`), so storage state and
# the journal's synced position change together; `done(error)` answers the requests.
QueueItem = tuple[
    list[bytes], int, Callable[[], None] | None, Callable[[BaseException | None], None], float
]


class Journal:
    """One writer thread draining a bounded queue with group commit.

    The thread takes whatever is queued, writes it and fsyncs it, and hands the batch
    back to the loop (`apply`, then `done`) with one `call_soon_threadsafe`; then it
    takes the next batch at once, so under load the adds that arrived during an fsync
    are written right after it, with no turn of the loop in between and no wake-up of
    the thread (as BookKeeper's journal thread). The loop wakes the thread only when it
    waits for work."""

    def __init__(
        self,
        directory: str,
        *,
        max_group_wait_ms: float,
        buffered_writes_threshold_bytes: int,
        file_bytes_max: int,
        queue_entries_max: int,
        clock: Callable[[], float] = time.monotonic,
        remove_from_page_cache: bool = True,
        flush_when_queue_empty: bool = True,
        zero_ahead_bytes: int = 0,
        zero_ahead_max_write_bytes_per_s: float = float("inf"),
        file_writes: FileWrites | None = None,
    ) -> None:
        self.directory = directory
        self._writes = file_writes or FILE_WRITES
        self.max_group_wait_s = max_group_wait_ms / 1000.0
        self.flush_when_queue_empty = flush_when_queue_empty
        self.threshold_bytes = buffered_writes_threshold_bytes
        self.group_bytes_max = max(GROUP_COMMIT_BYTES_MAX, buffered_writes_threshold_bytes)
        self.file_bytes_max = file_bytes_max
        self.queue_entries_max = queue_entries_max
        self._clock = clock
        # Appended on the loop, taken by the writer thread (deque ends are thread-safe).
        self._queue: collections.deque[QueueItem] = collections.deque()
        self._wake = threading.Condition(threading.Lock())
        self._writer_waiting = False  # set under `_wake` before the thread looks at the queue
        self._fd = -1
        self.journal_id = 0
        self._offset = 0
        # Synced journal bytes are never read again but by a replay after a crash, which
        # reads the disk: their pages are dropped from the page cache after each fsync
        # (BookKeeper's journalRemoveFromPageCache). Kept, they grow the page cache by the
        # journal's write rate, and the kernel spends CPU on every MiB written taking
        # fresh memory for the cache.
        self.remove_from_page_cache = remove_from_page_cache
        self._cached_from = 0  # offset of the file's first page not yet dropped
        self.synced_position: tuple[int, int] = (0, 0)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._writer_exited: asyncio.Future[None] | None = None
        self._closing = False
        self.failure: JournalUnavailableError | None = None
        # Told once, on the loop, with the error that stopped the journal taking writes.
        self.write_failed: Callable[[BaseException], None] | None = None
        # Hold the writer while the write cache has no room: `needs_room()` is asked by
        # the thread before each write (cheap, racy by at most one batch), and while it
        # says so the thread waits for `wait_for_room()` run on the loop.
        self.needs_room: Callable[[], bool] | None = None
        self.wait_for_room: Callable[[], Coroutine[Any, Any, None]] | None = None
        self._init_zero_ahead(zero_ahead_bytes, zero_ahead_max_write_bytes_per_s)

    def _init_zero_ahead(
        self, zero_ahead_bytes: int, zero_ahead_max_write_bytes_per_s: float
    ) -> None:
        """Zero-ahead state (module docstring). Under `_zero`: the end of the zeros on
        disk, the end of what the writer has written or is writing, and the start of the
        chunk being zeroed (-1: none). `_written_total` counts bytes the writer wrote (the
        thread's rate measure)."""
        self.zero_ahead_bytes = zero_ahead_bytes
        self.zero_chunk_bytes = max(
            PAGE_BYTES, min(ZERO_AHEAD_CHUNK_MAX, zero_ahead_bytes // 4) // PAGE_BYTES * PAGE_BYTES
        )
        self.zero_ahead_max_write_bytes_per_s = zero_ahead_max_write_bytes_per_s
        self._zero = threading.Condition(threading.Lock())
        self._zeroed_end = 0
        self._reserved_end = 0
        self._zeroing_from = -1
        self._zero_waiting = False  # the thread waits for room (the writer wakes it)
        self._zero_paused = False  # a file is being finished and the next one opened
        self._written_total = 0
        self._zero_thread: threading.Thread | None = None

    # ------------------------------------------------------------------ files

    def open_new_file(self) -> None:
        """Start a fresh file after the highest existing one (blocking; startup/writer)."""
        if self._fd >= 0:
            # Before the next file exists: every file but the newest ends at its last record.
            self._cut_zero_tail()
        ids = list_journal_ids(self.directory)
        journal_id = (ids[-1] + 1) if ids else 1
        path = os.path.join(self.directory, file_name(journal_id))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        write_all(fd, FILE_HEADER.pack(FILE_MAGIC, FILE_VERSION, 0, journal_id))
        os.fsync(fd)
        fsync_directory(self.directory)
        with self._zero:
            if self._fd >= 0:
                os.close(self._fd)
            self._fd = fd
            self.journal_id = journal_id
            self._offset = FILE_HEADER_BYTES
            self._zeroed_end = self._reserved_end = FILE_HEADER_BYTES
            self._zero_paused = False
            self._zero.notify_all()
        self._cached_from = 0
        logger.info("journal file opened journal_id=%d", journal_id)

    def _cut_zero_tail(self) -> None:
        """Wait out a chunk being zeroed, then truncate the current file after its last
        record (and fsync) if zeros follow it."""
        with self._zero:
            while self._zeroing_from >= 0:
                self._zero.wait()
            # No zeros until the next file is open (they would land past this cut).
            self._zero_paused = True
            if self._zeroed_end > self._offset:
                os.ftruncate(self._fd, self._offset)
                os.fsync(self._fd)
                self._zeroed_end = self._offset

    def delete_files_before(self, journal_id: int) -> int:
        """Delete files wholly covered by a checkpoint (blocking). Returns the count."""
        deleted = 0
        for old in list_journal_ids(self.directory):
            if old >= journal_id or old >= self.journal_id:
                break
            os.unlink(os.path.join(self.directory, file_name(old)))
            deleted += 1
        if deleted:
            fsync_directory(self.directory)
            logger.info("journal files deleted count=%d before_journal_id=%d", deleted, journal_id)
        return deleted

    # ------------------------------------------------------------------ queue

    def start(self) -> None:
        assert self._fd >= 0, "open_new_file() first"
        # Set here, not in open_new_file: a roll inside the writer must not move the
        # position before the batch it follows has been applied on the loop.
        self.synced_position = (self.journal_id, self._offset)
        self._loop = asyncio.get_running_loop()
        self._writer_exited = self._loop.create_future()
        self._thread = threading.Thread(target=self._writer, name="journal-writer", daemon=True)
        self._thread.start()
        if self.zero_ahead_bytes > 0:
            self._zero_thread = threading.Thread(
                target=self._zero_ahead, name="journal-zero-ahead", daemon=True
            )
            self._zero_thread.start()

    def submit(
        self,
        pieces: list[bytes],
        nbytes: int,
        apply: Callable[[], None] | None,
        done: Callable[[BaseException | None], None],
    ) -> None:
        """Queue records (their encoded pieces, `nbytes` in all); `done(None)` runs once
        they are on disk (fsync'd)."""
        if self.failure is not None or self._closing:
            done(self.failure or JournalUnavailableError("journal closed"))
            return
        assert len(self._queue) < self.queue_entries_max, "journal queue bound broken"
        assert len(pieces) % 2 == 0, "pieces come as (prefix, entry) pairs, entry b'' if none"
        assert len(pieces) > 2 or nbytes == sum(len(piece) for piece in pieces), nbytes
        self._queue.append((pieces, nbytes, apply, done, self._clock()))
        if self._writer_waiting:
            self._notify_writer()

    def _notify_writer(self) -> None:
        with self._wake:
            self._wake.notify()

    async def close(self) -> None:
        """Write what is queued, then stop the writer."""
        self._closing = True
        if self._thread is not None:
            self._notify_writer()
            assert self._writer_exited is not None
            await self._writer_exited
            self._thread.join()
            self._thread = None
        if self._zero_thread is not None:
            with self._zero:
                self._zero.notify_all()
            await asyncio.to_thread(self._zero_thread.join)
            self._zero_thread = None
        if self._fd >= 0:
            if self.failure is None:
                await asyncio.to_thread(self._cut_zero_tail)
            os.close(self._fd)
            self._fd = -1

    # ------------------------------------------------------------------ writer thread

    def _writer(self) -> None:
        loop = self._loop
        assert loop is not None
        items: list[QueueItem] = []
        try:
            while (batch := self._next_batch()) is not None:
                items, pieces, batch_bytes, reason = batch
                self._hold_for_room(loop)
                started = time.monotonic()
                position = self._write_and_sync(pieces, batch_bytes)
                took = time.monotonic() - started
                loop.call_soon_threadsafe(self._synced, items, position, took, reason, batch_bytes)
                items = []
        except BaseException as e:  # noqa: BLE001 - the loop fails every add in hand
            loop.call_soon_threadsafe(self._failed, e, items)
        finally:
            loop.call_soon_threadsafe(self._exited)

    def _next_batch(self) -> tuple[list[QueueItem], list[bytes], int, str] | None:
        """Everything queued (up to the group cap), once there is something; None when
        closing with nothing left."""
        queue = self._queue
        while not queue:
            if self._closing:
                return None
            with self._wake:
                # Waiting is announced before the queue is looked at: an add queued
                # after the look finds the flag set and notifies.
                self._writer_waiting = True
                if not queue and not self._closing:
                    self._wake.wait(WRITER_IDLE_RECHECK_S)
                self._writer_waiting = False
        items: list[QueueItem] = []
        pieces: list[bytes] = []
        batch_bytes = 0
        oldest = queue[0][4]
        while True:
            # Take everything already queued (up to the group cap): adds that arrived
            # during the previous fsync share the next one.
            while queue and batch_bytes < self.group_bytes_max:
                item = queue.popleft()
                items.append(item)
                pieces.extend(item[0])
                batch_bytes += item[1]
            reason = group_commit_decision(
                batch_bytes,
                self._clock() - oldest,
                not queue,
                max_wait_s=self.max_group_wait_s,
                threshold_bytes=self.threshold_bytes,
                flush_when_queue_empty=self.flush_when_queue_empty,
            )
            if reason is not None:
                return items, pieces, batch_bytes, reason
            if self._closing:
                return items, pieces, batch_bytes, "close"
            with self._wake:
                # As above: announced, then the queue looked at again, so an add queued
                # in between is not left waiting out the group wait.
                self._writer_waiting = True
                if not queue and not self._closing:
                    self._wake.wait(max(0.0, self.max_group_wait_s - (self._clock() - oldest)))
                self._writer_waiting = False

    def _hold_for_room(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.needs_room is None or self.wait_for_room is None or not self.needs_room():
            return
        waiting = asyncio.run_coroutine_threadsafe(self.wait_for_room(), loop)
        # A journal that is closing writes what it holds at once: the bound is on memory
        # under load, and a shutdown (which stops checkpoints first) must not hang on it.
        while not self._closing:
            try:
                waiting.result(ROOM_RECHECK_S)
                return
            except TimeoutError:
                continue
        waiting.cancel()

    def _zero_ahead(self) -> None:
        """Keep the next `zero_ahead_bytes` of the current file written with zeros and
        fsync'd (module docstring), while the journal writes slowly enough to need it."""
        zeros = bytes(self.zero_chunk_bytes)
        cond = self._zero
        rate_since, rate_bytes, rate = time.monotonic(), self._written_total, 0.0
        cond.acquire()
        try:
            while not self._closing and self.failure is None:
                now = time.monotonic()
                if now - rate_since >= ZERO_AHEAD_RATE_WINDOW_S:
                    rate = (self._written_total - rate_bytes) / (now - rate_since)
                    rate_since, rate_bytes = now, self._written_total
                start = zero_ahead_start(
                    max(self._offset, self._reserved_end),
                    self._zeroed_end,
                    window_bytes=self.zero_ahead_bytes,
                    chunk_bytes=self.zero_chunk_bytes,
                    write_bytes_per_s=rate,
                    max_write_bytes_per_s=self.zero_ahead_max_write_bytes_per_s,
                )
                if start is None or self._zero_paused:
                    # Woken by the writer when it makes room; rate-limited, only by time.
                    self._zero_waiting = rate <= self.zero_ahead_max_write_bytes_per_s
                    cond.wait(ZERO_AHEAD_RECHECK_S)
                    self._zero_waiting = False
                    continue
                fd, self._zeroing_from = self._fd, start
                cond.release()
                try:
                    # The zeros stay in the page cache (the window's worth; the writer
                    # drops pages behind it): a batch ends mid-page, and writing part of
                    # a page that is not cached makes the kernel read it from disk first.
                    pwrite_all(fd, zeros, start)
                    os.fdatasync(fd)
                finally:
                    cond.acquire()
                    self._zeroing_from = -1
                    cond.notify_all()
                self._zeroed_end = start + len(zeros)
                METRICS.journal_zeroed_bytes.inc(len(zeros))
        except OSError as e:
            # The writer does not need the zeros (it then writes into new blocks, as
            # without zero-ahead): a full or failing disk shows in its own writes.
            logger.warning("journal zero-ahead stopped: %s", e)
        finally:
            cond.release()

    # ------------------------------------------------------------------ on the loop

    def _synced(
        self,
        items: list[QueueItem],
        position: tuple[int, int],
        took: float,
        reason: str,
        batch_bytes: int,
    ) -> None:
        records = sum(len(item[0]) for item in items) // 2
        batched_counter(METRICS.journal_flush_reason, reason).inc()
        FSYNC_SECONDS.observe(took)
        if took > SLOW_SYNC_S:
            logger.warning(
                "journal write+fsync slow took_ms=%.0f bytes=%d records=%d",
                took * 1e3,
                batch_bytes,
                records,
            )
        BATCH_ENTRIES.observe(records)
        BATCH_BYTES.observe(batch_bytes)
        # Apply and acknowledge in one loop turn: a checkpoint that reads
        # `synced_position` always sees exactly the records applied so far.
        self.synced_position = position
        for item in items:
            if item[2] is not None:
                try:
                    item[2]()
                except Exception as e:
                    # A bug, not a disk fault: the record is durable (replay applies
                    # it), but stop taking writes rather than serve a state we doubt.
                    logger.exception("journal apply failed: journal stops taking writes")
                    self._stop_taking_writes(e)
        for item in items:
            try:
                item[3](None)
            except Exception:
                logger.exception("journal completion callback failed")

    def _failed(self, error: BaseException, items: list[QueueItem]) -> None:
        """The writer thread stopped on `error` with `items` in hand (written in part, or
        whole but not fsync'd): they, the queued items and every later one fail."""
        logger.error(
            "journal_write_failed journal_id=%d synced_offset=%d errno=%s error=%s",
            self.journal_id,
            self._offset,
            errno.errorcode.get(getattr(error, "errno", None) or 0, None),
            error,
            exc_info=not isinstance(error, OSError),
        )
        failure = self._stop_taking_writes(error)
        for item in items:
            item[3](failure)
        while self._queue:
            self._queue.popleft()[3](failure)

    def _stop_taking_writes(self, error: BaseException) -> JournalUnavailableError:
        """Refuse every later write, and tell `write_failed` (once)."""
        if self.failure is not None:
            return self.failure
        failure = JournalUnavailableError(f"the journal takes no more writes: {error!r}")
        failure.__cause__ = error
        self.failure = failure
        if self.write_failed is not None:
            try:
                self.write_failed(error)
            except Exception:
                logger.exception("journal write_failed callback failed")
        return failure

    def _exited(self) -> None:
        if self._writer_exited is not None and not self._writer_exited.done():
            self._writer_exited.set_result(None)

    def _write_at(self, pieces: Sequence[Buffer], offset: int) -> None:
        """Write the pieces in order at `offset`, whole: a short write goes on where it
        stopped; one that makes no progress is an I/O error (module docstring)."""
        for start in range(0, len(pieces), IOVECS_MAX):
            chunk = list(pieces[start : start + IOVECS_MAX])
            while chunk:
                written = self._writes.pwritev(self._fd, chunk, offset)
                if written <= 0:
                    raise OSError(errno.EIO, f"journal write made no progress at offset {offset}")
                offset += written
                chunk = skip_bytes(chunk, written)

    def _write_and_sync(self, pieces: list[bytes], batch_bytes: int) -> tuple[int, int]:
        end = self._offset + batch_bytes
        if self._zero_thread is not None:
            with self._zero:
                # Zeros never land on what this batch writes: a chunk being zeroed that
                # starts before the batch's end is waited out (it is past the previous
                # batch, so only a batch larger than the window's lead can reach it).
                while 0 <= self._zeroing_from < end:
                    self._zero.wait()
                self._reserved_end = end
        self._write_at(pieces, self._offset)
        self._writes.fdatasync(self._fd)
        self._offset = end
        self._written_total += batch_bytes
        if (
            self._zero_waiting
            and self._zeroed_end + self.zero_chunk_bytes <= end + self.zero_ahead_bytes
        ):
            with self._zero:
                self._zero.notify_all()
        if self.remove_from_page_cache:
            # Whole pages only: the last, partial one is written again by the next batch.
            synced_pages_end = self._offset - self._offset % PAGE_BYTES
            if synced_pages_end > self._cached_from:
                drop_from_page_cache(self._fd, self._cached_from, synced_pages_end)
                self._cached_from = synced_pages_end
        if self._offset >= self.file_bytes_max:
            self.open_new_file()
        return (self.journal_id, self._offset)
