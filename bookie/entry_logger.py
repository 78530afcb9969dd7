"""Entry logs: append-only files that hold entries after a checkpoint flushed them.

On-disk format
--------------
``<ledger_dir>/current/<log_id as 8 hex digits>.log``::

    header: b"BKEL" | u16 version (1) | u16 reserved | u32 log_id | u32 reserved   (16 bytes)
    record: u32 entry_length | entry bytes (as the writer built them: ledger id, entry id,
            LAC, length and CRC32C header, then the payload)
    padding: u32 0 | zeros up to the next multiple of 4096 bytes (direct entry logs only)

A direct entry log (`bookie/direct_entry_log.py`) has the same header and records, but
each record starts on a 4096-byte boundary (it is written with O_DIRECT): zeros fill the
rest of the block before it, and a scan reads a zero length as "skip to the next
boundary". Log ids are shared: both kinds live in one directory and one id sequence.

An entry's location is ``log_id << 32 | offset`` of its record; the location index maps
(ledger, entry) to it. Logs roll at ``entry_log_bytes_max``; a new log is started on every
start, so nothing is appended after a crash's partial tail.

Faults tolerated
----------------
- kill -9 during a flush: the index and LastLogMark are written only after the log's
  fsync, so a partial tail is never referenced; the journal still holds those entries.
- Short writes: every write goes to its own offset (`pwritev`, never the file position)
  and is continued where the kernel stopped; a write that makes no progress is an error.
- A failed write, writeback or fsync (ENOSPC, EIO): nothing after the log's last
  successful fsync can be trusted (after a failed fsync the kernel may have dropped the
  dirty pages). The logger abandons the current log: it forgets the buffer, cuts the
  file back to its synced end (best effort; a tail left there is unreferenced garbage)
  and starts a new log on the next append (event `entry_log_write_failed`). The caller
  gets the error and indexes nothing it wrote since that fsync, so no location ever
  names bytes the log does not hold, and no later write lands at an offset other than
  the one its location names.
- Entries keep their writer's CRC32C: a read verifies the record's ids against the index
  key, and clients verify the digest (a flipped byte is detected, never served silently
  as another entry).
- Logs are deleted only by compaction after their live entries were copied, indexed and
  fsync'd elsewhere; a reader racing a deletion retries with the fresh location.
"""

from __future__ import annotations

import bisect
import collections
import ctypes
import ctypes.util
import errno
import itertools
import logging
import os
import struct
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import cast

from blobstore.wire import protocol
from bookie.disk_io import IOVECS_MAX, Buffer, fsync_directory, skip_bytes

logger = logging.getLogger(__name__)

LOG_MAGIC = b"BKEL"
LOG_VERSION = 1
LOG_HEADER = struct.Struct(">4sHHII")
LOG_HEADER_BYTES = LOG_HEADER.size
RECORD_LENGTH = struct.Struct(">I")
WRITE_BUFFER_BYTES = 4 << 20
LOG_SUFFIX = ".log"
# Records of a direct entry log start on multiples of this (a zero length pads to it).
BLOCK_BYTES = 4096

assert LOG_HEADER_BYTES == 16


# sync_file_range(2) flag: start writeback of the range's dirty pages, do not wait.
SYNC_FILE_RANGE_WRITE = 2


def _load_sync_file_range() -> Callable[[int, int, int, int], int] | None:
    """libc's sync_file_range (Linux), or None where there is none."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        function = libc.sync_file_range
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    function.restype = ctypes.c_int
    return cast(Callable[[int, int, int, int], int], function)


_sync_file_range = _load_sync_file_range()


def start_writeback(fd: int, offset: int, length: int) -> bool:
    """Have the kernel start writing `length` bytes of `fd` from `offset` to disk,
    without waiting (ctypes releases the interpreter lock for the call). False where the
    system has no way to (the later fsync then writes everything at once)."""
    if _sync_file_range is None or length <= 0:
        return False
    if _sync_file_range(fd, offset, length, SYNC_FILE_RANGE_WRITE) != 0:
        code = ctypes.get_errno()
        if code in (errno.ENOSYS, errno.EOPNOTSUPP):
            return False
        raise OSError(code, f"sync_file_range: {os.strerror(code)}")
    return True


def next_block(offset: int) -> int:
    """The first multiple of BLOCK_BYTES at or after `offset`."""
    return -(-offset // BLOCK_BYTES) * BLOCK_BYTES


def location(log_id: int, offset: int) -> int:
    assert 0 <= offset < 1 << 32, offset
    return (log_id << 32) | offset


def split_location(loc: int) -> tuple[int, int]:
    return loc >> 32, loc & 0xFFFFFFFF


def pread_if_cached(fd: int, length: int, offset: int) -> bytes | None:
    """`length` bytes at `offset` if the page cache holds them all, else None (a short
    read: part of the range is not cached, or the file ends first; the blocking read
    tells which)."""
    buf = bytearray(length)
    try:
        got = os.preadv(fd, [buf], offset, os.RWF_NOWAIT)
    except BlockingIOError:
        return None
    except OSError as e:
        if e.errno in (errno.EOPNOTSUPP, errno.EINVAL):  # a kernel or filesystem without it
            return None
        raise
    # A bytearray serves wherever an entry goes (socket writes, caches): no second copy.
    return cast(bytes, buf) if got == length else None


class FileWrites:
    """The system calls an entry log's bytes reach the disk through. Tests put a
    subclass in `FILE_WRITES` (or pass one) to inject short writes and errors."""

    def pwritev(self, fd: int, buffers: list[Buffer], offset: int) -> int:
        return os.pwritev(fd, buffers, offset)

    def fdatasync(self, fd: int) -> None:
        os.fdatasync(fd)

    def start_writeback(self, fd: int, offset: int, length: int) -> bool:
        return start_writeback(fd, offset, length)


# What an EntryLogger created without `file_writes` uses (looked up at creation).
FILE_WRITES = FileWrites()


class LogPins:
    """Logs compaction must leave alone, counted (any thread): a direct entry log while
    it is written, and while it holds entries whose journal records a checkpoint has not
    yet covered (their locations are not in the index, so a compaction would take them
    for garbage, and a replay after a crash reads them there)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: collections.Counter[int] = collections.Counter()

    def pin(self, log_id: int, count: int = 1) -> None:
        with self._lock:
            self._counts[log_id] += count

    def unpin(self, log_ids: Iterable[int]) -> None:
        with self._lock:
            for log_id in log_ids:
                self._counts[log_id] -= 1
                assert self._counts[log_id] >= 0, log_id
                if not self._counts[log_id]:
                    del self._counts[log_id]

    def pinned(self) -> frozenset[int]:
        with self._lock:
            return frozenset(self._counts)


class EntryLogMissingError(Exception):
    """The log a location named was deleted (compaction moved the entry)."""


class EntryLogger:
    def __init__(
        self, ledger_dir: str, entry_log_bytes_max: int, file_writes: FileWrites | None = None
    ) -> None:
        self.directory = os.path.join(ledger_dir, "current")
        os.makedirs(self.directory, exist_ok=True)
        self.entry_log_bytes_max = entry_log_bytes_max
        self._writes = file_writes or FILE_WRITES
        self._read_fds: dict[int, int] = {}
        self._retired_fds: list[int] = []
        self._lock = threading.Lock()
        self._last_log_id = 0  # the highest id handed out (under `_lock`)
        self.pins = LogPins()
        self._write_fd = -1
        self.current_log_id = 0
        # Offsets in the current log, in order: synced <= written out <= flushed <= position.
        # `_position` ends the records appended (the buffer holds those past `_flushed`),
        # `_flushed` the bytes handed to the kernel, `_written_out` those whose disk writes
        # were started, `_synced` those fdatasync'd: the only ones a location may name.
        self._position = 0
        self._flushed = 0
        self._written_out = 0
        self._synced = 0
        # A write failed: the next append starts a new log (module docstring).
        self._roll_needed = False
        self._buffer = bytearray()
        for log_id in self.list_logs():
            self._open_for_read(log_id)
        self._start_new_log()

    # ------------------------------------------------------------------ files

    def path(self, log_id: int) -> str:
        return os.path.join(self.directory, f"{log_id:08x}{LOG_SUFFIX}")

    def list_logs(self) -> list[int]:
        ids = []
        for name in os.listdir(self.directory):
            if name.endswith(LOG_SUFFIX) and len(name) == 8 + len(LOG_SUFFIX):
                try:
                    ids.append(int(name[:8], 16))
                except ValueError:
                    continue
        return sorted(ids)

    def allocate_log_id(self) -> int:
        """A fresh log id, after every log on disk and every id handed out (the direct
        entry log's writer thread and the storage thread both create logs)."""
        existing = self.list_logs()
        with self._lock:
            self._last_log_id = max([*existing, self._last_log_id, self.current_log_id]) + 1
            assert self._last_log_id < 1 << 32, self._last_log_id
            return self._last_log_id

    def open_for_read(self, log_id: int) -> None:
        """Serve reads of a log another writer created (a direct entry log)."""
        self._open_for_read(log_id)

    def _open_for_read(self, log_id: int) -> None:
        fd = os.open(self.path(log_id), os.O_RDONLY)
        header = os.pread(fd, LOG_HEADER_BYTES, 0)
        if len(header) == LOG_HEADER_BYTES:
            magic, version, _, header_id, _ = LOG_HEADER.unpack(header)
            if magic != LOG_MAGIC or version != LOG_VERSION or header_id != log_id:
                os.close(fd)
                raise RuntimeError(f"entry log {self.path(log_id)} has a bad header")
        with self._lock:
            self._read_fds[log_id] = fd

    def _start_new_log(self) -> None:
        """Create the next log (header written and synced, directory synced) and make it
        current. A failure removes the half-made file and leaves the current log as it
        was (a failed log stays marked for a roll)."""
        log_id = self.allocate_log_id()
        path = self.path(log_id)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            self._write_at(fd, [LOG_HEADER.pack(LOG_MAGIC, LOG_VERSION, 0, log_id, 0)], 0)
            self._writes.fdatasync(fd)
            fsync_directory(self.directory)
        except OSError as e:
            os.close(fd)
            os.unlink(path)
            logger.error("entry log not created log_id=%d error=%s", log_id, e)
            raise
        if self._write_fd >= 0:
            os.close(self._write_fd)
        self._write_fd = fd
        self.current_log_id = log_id
        self._position = self._flushed = self._written_out = self._synced = LOG_HEADER_BYTES
        self._roll_needed = False
        self._open_for_read(log_id)
        logger.info("entry log opened log_id=%d", log_id)

    # ------------------------------------------------------------------ writing (storage thread)

    def _write_at(self, fd: int, pieces: list[Buffer], offset: int) -> None:
        """Write the pieces in order at `offset`, whole: a short write goes on where it
        stopped; a write that makes no progress is an error (ENOSPC as the kernel would
        give it on the retry)."""
        for start in range(0, len(pieces), IOVECS_MAX):
            chunk = pieces[start : start + IOVECS_MAX]
            while chunk:
                written = self._writes.pwritev(fd, chunk, offset)
                if written <= 0:
                    raise OSError(errno.ENOSPC, f"entry log write made no progress at {offset}")
                offset += written
                chunk = skip_bytes(chunk, written)

    def _abandon(self, error: OSError) -> None:
        """A write, writeback or fsync of the current log failed: forget everything after
        its last fsync and start a new log on the next append (module docstring)."""
        log_id, synced = self.current_log_id, self._synced
        logger.error(
            "entry_log_write_failed log_id=%d synced_bytes=%d lost_bytes=%d errno=%s error=%s",
            log_id,
            synced,
            self._position - synced,
            errno.errorcode.get(error.errno or 0, error.errno),
            error,
        )
        # A new buffer: the failed write's traceback may still hold a view of the old one.
        self._buffer = bytearray()
        self._position = self._flushed = self._written_out = synced
        self._roll_needed = True
        try:
            os.ftruncate(self._write_fd, synced)
        except OSError as e:  # the tail stays: unreferenced, compaction collects it
            logger.warning("entry log tail not cut log_id=%d error=%s", log_id, e)

    def append(self, entry: bytes) -> int:
        """Buffer one entry; its location is valid for reads after `sync()`."""
        return self.append_many([entry])[0][0]

    def append_many(self, entries: list[bytes]) -> tuple[list[int], dict[int, int]]:
        """Buffer entries in order. Returns their locations (valid after `sync()`) and
        the record bytes written to each log (log id -> bytes).

        Rolls to a new log when the next entry would pass `entry_log_bytes_max`; an
        entry larger than a whole log goes alone into a fresh one. The work is done a
        list at a time (a checkpoint's slice), not an entry at a time: the storage thread
        holds the interpreter lock against the event loop while it runs. An OSError
        means none of these entries (nor any since the last `sync()`) may be indexed.
        """
        try:
            if self._roll_needed:
                self._start_new_log()
            return self._append_many(entries)
        except OSError as e:
            if not self._roll_needed:
                self._abandon(e)
            raise

    def _append_many(self, entries: list[bytes]) -> tuple[list[int], dict[int, int]]:
        locations: list[int] = []
        written: dict[int, int] = {}
        start = 0
        while start < len(entries):
            ends = list(
                itertools.accumulate(
                    [RECORD_LENGTH.size + len(entry) for entry in entries[start:]],
                    initial=self._position,
                )
            )
            fit = bisect.bisect_right(ends, self.entry_log_bytes_max, lo=1) - 1
            if fit == 0:
                if self._position > LOG_HEADER_BYTES:
                    self._sync()
                    self._start_new_log()
                    continue
                fit = 1
            assert ends[fit - 1] < 1 << 32, ends[fit - 1]
            chunk = entries[start : start + fit]
            log_bits = self.current_log_id << 32
            locations += [log_bits | offset for offset in ends[:fit]]
            pieces: list[Buffer] = [
                piece for entry in chunk for piece in (RECORD_LENGTH.pack(len(entry)), entry)
            ]
            if len(self._buffer) + ends[fit] - ends[0] < WRITE_BUFFER_BYTES:
                self._buffer += b"".join(pieces)
            else:  # big: written from the entries themselves, never copied into the buffer
                self._flush_buffer()
                self._write_at(self._write_fd, pieces, self._flushed)
                self._flushed = ends[fit]
            self._position = ends[fit]
            written[self.current_log_id] = written.get(self.current_log_id, 0) + ends[fit] - ends[0]
            start += fit
        return locations, written

    def _flush_buffer(self) -> None:
        if self._buffer:
            self._write_at(self._write_fd, [self._buffer], self._flushed)
            self._flushed += len(self._buffer)
            self._buffer.clear()
        assert self._flushed == self._position, (self._flushed, self._position)

    def sync(self) -> None:
        """Write the buffer and fdatasync the current log: every location returned so far
        names bytes on disk. On an OSError none of those since the last `sync()` do."""
        if self._roll_needed:
            return  # abandoned: nothing past its synced end is kept
        try:
            self._sync()
        except OSError as e:
            self._abandon(e)
            raise

    def _sync(self) -> None:
        self._flush_buffer()
        self._writes.fdatasync(self._write_fd)
        self._written_out = self._synced = self._position

    def write_out(self) -> int:
        """Write the buffer and start the disk writes of everything appended since the
        last call, without waiting for them (a checkpoint calls this after each slice,
        so its final `sync` finds little left to write). Returns the bytes started."""
        if self._roll_needed:
            return 0
        try:
            self._flush_buffer()
            length = self._position - self._written_out
            self._writes.start_writeback(self._write_fd, self._written_out, length)
        except OSError as e:
            self._abandon(e)
            raise
        self._written_out = self._position
        return length

    def roll_if_used(self) -> None:
        """Start a new log so the current one becomes eligible for compaction."""
        if self._roll_needed:
            self._start_new_log()
        elif self._position > LOG_HEADER_BYTES:
            self.sync()
            self._start_new_log()

    def delete(self, log_id: int) -> None:
        assert log_id != self.current_log_id, log_id
        with self._lock:
            fd = self._read_fds.pop(log_id, None)
            if fd is not None:
                # A reader thread may be inside pread on it: close on the next round.
                self._retired_fds.append(fd)
        os.unlink(self.path(log_id))
        fsync_directory(self.directory)
        logger.info("entry log deleted log_id=%d", log_id)

    def close_retired(self) -> None:
        with self._lock:
            retired, self._retired_fds = self._retired_fds, []
        for fd in retired:
            os.close(fd)

    def close(self) -> None:
        """Sync and close every file. A failed sync is logged, not raised: no location
        names the bytes it would have made durable."""
        if self._write_fd >= 0:
            try:
                self.sync()
            except OSError as e:
                logger.error(
                    "entry log not synced at close log_id=%d error=%s", self.current_log_id, e
                )
            os.close(self._write_fd)
            self._write_fd = -1
        with self._lock:
            fds = list(self._read_fds.values()) + self._retired_fds
            self._read_fds.clear()
            self._retired_fds = []
        for fd in fds:
            os.close(fd)

    # ------------------------------------------------------------------ reading (any thread)

    def log_bytes(self, log_id: int) -> int:
        if log_id == self.current_log_id:
            return self._position
        try:
            return os.stat(self.path(log_id)).st_size
        except FileNotFoundError:
            return 0

    def read(self, loc: int, ledger_id: int, entry_id: int) -> bytes:
        data = self._read(loc, ledger_id, entry_id, os.pread)
        assert data is not None
        return data

    def read_if_cached(self, loc: int, ledger_id: int, entry_id: int) -> bytes | None:
        """The entry if the page cache holds all of it, else None, never waiting for the
        disk (`RWF_NOWAIT`): cheap enough to run on the event loop."""
        return self._read(loc, ledger_id, entry_id, pread_if_cached)

    def _read(
        self,
        loc: int,
        ledger_id: int,
        entry_id: int,
        pread: Callable[[int, int, int], bytes | None],
    ) -> bytes | None:
        log_id, offset = split_location(loc)
        fd = self._read_fds.get(log_id)
        if fd is None:
            raise EntryLogMissingError(log_id)
        head = pread(fd, RECORD_LENGTH.size + protocol.ENTRY_HEADER.size, offset)
        if head is None:
            return None
        if len(head) < RECORD_LENGTH.size + protocol.ENTRY_HEADER.size:
            raise OSError(f"entry log {log_id} cut short at offset {offset}")
        (length,) = RECORD_LENGTH.unpack_from(head, 0)
        stored_ledger, stored_entry, _, _ = protocol.ENTRY_HEADER.unpack_from(
            head, RECORD_LENGTH.size
        )
        if (
            stored_ledger != ledger_id
            or stored_entry != entry_id
            or length > protocol.FRAME_BYTES_MAX
        ):
            raise OSError(
                f"entry log {log_id} offset {offset} holds ledger_id={stored_ledger} "
                f"entry_id={stored_entry}, expected ledger_id={ledger_id} entry_id={entry_id}"
            )
        data = pread(fd, length, offset + RECORD_LENGTH.size)
        if data is None:
            return None
        if len(data) != length:
            raise OSError(f"entry log {log_id} cut short at offset {offset}")
        return data

    def scan(self, log_id: int) -> Iterator[tuple[int, int, int, bytes]]:
        """(offset, ledger_id, entry_id, entry bytes) of every whole record of a log."""
        with open(self.path(log_id), "rb", buffering=1 << 20) as f:
            f.seek(LOG_HEADER_BYTES)
            offset = LOG_HEADER_BYTES
            while True:
                head = f.read(RECORD_LENGTH.size)
                if len(head) < RECORD_LENGTH.size:
                    return
                (length,) = RECORD_LENGTH.unpack(head)
                if length == 0:  # padding (direct entry logs): the next record is aligned
                    offset = next_block(offset + 1)
                    f.seek(offset)
                    continue
                if length < protocol.ENTRY_HEADER_BYTES or length > protocol.FRAME_BYTES_MAX:
                    logger.warning(
                        "entry log scan stopped log_id=%d offset=%d length=%d",
                        log_id,
                        offset,
                        length,
                    )
                    return
                entry = f.read(length)
                if len(entry) < length:
                    return
                ledger_id, entry_id, _, _ = protocol.ENTRY_HEADER.unpack_from(entry, 0)
                yield offset, ledger_id, entry_id, entry
                offset += RECORD_LENGTH.size + length
