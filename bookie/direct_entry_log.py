"""Direct entry logs: large entries written once, with O_DIRECT, before their journal record.

An add whose payload is at least `direct_write_min_bytes` is not journaled whole: its
entry is written to a direct entry log and fdatasync'd, and only then is a small
DIRECT_ADD record (location, length, CRC32C of the entry) queued to the journal
(`bookie/direct_adds.py`). The entry reaches the disk once instead of twice (journal,
then an entry log at the checkpoint).

On-disk format
--------------
An entry log (`entry_logger.py`: same header, same records, same id sequence and
directory), written with O_DIRECT: every write starts and ends on a 4096-byte boundary
from a page-aligned buffer, so each record starts on a boundary and zeros pad the block
it ends in (the header's block too); a scan reads a zero length as padding. Reads,
scans, compaction, GC and the scrubber treat it as any entry log. The file is
preallocated ahead of the writer (`posix_fallocate`, `PREALLOCATE_BYTES` at a time), so
a write does not grow it; at a roll and at close it is cut back to its last record. A log
rolls when the next record would pass `entry_log_bytes_max`; a new one is started on the
first write after every start, so nothing is written after a crash's torn tail.

Faults tolerated
----------------
- kill -9 after a group's fdatasync and before its journal records: those adds were
  never acknowledged; their bytes are in no journal record and no index entry, garbage
  that compaction drops (the log's live byte count never included them).
- kill -9 inside a group's write: a torn tail past every location a journal record
  names; the next start writes a new log, and nothing reads that tail.
- O_DIRECT refused (EINVAL on open or on a write: some file systems do): the log is
  written through the page cache, each group followed by fdatasync all the same; logged
  once per process at WARNING.
- A failed write, preallocation or fdatasync (ENOSPC, EIO): the caller gets the error and
  indexes nothing of the group (its adds are never acknowledged); the log is closed and
  the next group starts a new one, so no later write lands past a failed one.
- Compaction never takes a log while it is written, nor while it holds entries a
  checkpoint has not indexed yet (`entry_logger.LogPins`): each location returned is
  pinned until the checkpoint that indexes it (or until its add failed).
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
from collections.abc import Sequence

from bookie import entry_logger
from bookie.disk_io import fsync_directory
from bookie.entry_logger import (
    BLOCK_BYTES,
    LOG_HEADER,
    LOG_MAGIC,
    LOG_VERSION,
    RECORD_LENGTH,
    EntryLogger,
    FileWrites,
    next_block,
)

logger = logging.getLogger(__name__)

O_DIRECT = getattr(os, "O_DIRECT", 0)
# The file is preallocated this far ahead of the writer (at most to the roll size).
PREALLOCATE_BYTES = 64 << 20
# One write + fdatasync carries at most this many bytes of records (one bigger entry alone).
GROUP_BYTES_MAX = 16 << 20
_ZEROS = bytes(BLOCK_BYTES)

assert GROUP_BYTES_MAX % BLOCK_BYTES == 0
assert LOG_HEADER.size + RECORD_LENGTH.size <= BLOCK_BYTES


def is_direct(payload_bytes: int, min_bytes: int) -> bool:
    """Whether an add of `payload_bytes` is written to a direct entry log (0: never)."""
    return min_bytes > 0 and payload_bytes >= min_bytes


def record_span(entry_bytes: int) -> int:
    """Bytes a record takes in a direct entry log: length, entry, zeros to a boundary."""
    return next_block(RECORD_LENGTH.size + entry_bytes)


def group_count(spans: Sequence[int], bytes_max: int = GROUP_BYTES_MAX) -> int:
    """How many of the queued items (their record bytes, in order) share one write and
    fdatasync: as many as fit in `bytes_max`, and at least one."""
    total = 0
    for count, span in enumerate(spans):
        total += span
        if total > bytes_max and count > 0:
            return count
    return len(spans)


def records_fitting(spans: Sequence[int], end: int, log_bytes_max: int) -> int:
    """How many records (their spans, in order) fit in a log whose records end at `end`
    before it passes `log_bytes_max`; at least one in a log that holds no record yet."""
    count = 0
    for span in spans:
        if end + span > log_bytes_max:
            break
        end += span
        count += 1
    if count == 0 and end == BLOCK_BYTES:
        return 1
    return count


def preallocation_end(end: int, allocated: int, log_bytes_max: int, chunk: int) -> int | None:
    """Where to preallocate the file to before writing up to `end`, or None when what is
    allocated covers it: `chunk` past what is allocated, but not past the roll size
    (unless the write itself goes past it)."""
    if end <= allocated:
        return None
    return max(end, min(allocated + chunk, log_bytes_max))


class DirectEntryLog:
    """The direct entry log being written (writer thread only; `close` after it stops)."""

    def __init__(
        self,
        entry_logs: EntryLogger,
        file_writes: FileWrites | None = None,
        preallocate_bytes: int = PREALLOCATE_BYTES,
        *,
        o_direct: bool = True,
    ) -> None:
        self._entry_logs = entry_logs
        self.log_bytes_max = entry_logs.entry_log_bytes_max
        self._writes = file_writes or entry_logger.FILE_WRITES
        self.preallocate_bytes = preallocate_bytes
        self.log_id = 0
        self._fd = -1
        self._end = 0  # end of the records written (a block boundary)
        self._allocated = 0
        # False when not asked for, or once refused: buffered writes + fdatasync then.
        self.direct = o_direct and O_DIRECT != 0
        self._buffer: mmap.mmap | None = None

    # ------------------------------------------------------------------ writing

    def write(self, entries: Sequence[bytes]) -> list[int]:
        """Write a group of entries and fdatasync: each location returned names durable
        bytes (and is pinned). On an OSError none of them may be used (nor are pinned)."""
        locations: list[int] = []
        spans = [record_span(len(entry)) for entry in entries]
        try:
            start = 0
            while start < len(entries):
                count = 0
                if self._fd >= 0:
                    count = records_fitting(spans[start:], self._end, self.log_bytes_max)
                if count == 0:
                    self._roll()
                    continue
                chunk = entries[start : start + count]
                locations += self._write_records(chunk, sum(spans[start : start + count]))
                start += count
            self._writes.fdatasync(self._fd)
        except OSError as e:
            self._entry_logs.pins.unpin(loc >> 32 for loc in locations)
            self._abandon(e)
            raise
        return locations

    def _write_records(self, entries: Sequence[bytes], total: int) -> list[int]:
        """Entries as records at the end of the current log (not synced); pinned."""
        view = self._block_buffer(total)
        locations = []
        position = 0
        log_bits = self.log_id << 32
        for entry in entries:
            length = len(entry)
            end = position + RECORD_LENGTH.size + length
            RECORD_LENGTH.pack_into(view, position, length)
            view[position + RECORD_LENGTH.size : end] = entry
            padded = next_block(end)
            view[end:padded] = _ZEROS[: padded - end]
            locations.append(log_bits | (self._end + position))
            position = padded
        assert position == total, (position, total)
        self._preallocate(self._end + total)
        self._entry_logs.pins.pin(self.log_id, len(locations))
        try:
            self._write_at(view[:total], self._end)
        except OSError:
            self._entry_logs.pins.unpin([self.log_id] * len(locations))
            raise
        finally:
            view.release()
        self._end += total
        return locations

    def _preallocate(self, end: int) -> None:
        """Allocate the file ahead of a write up to `end` (`preallocation_end`). A file
        system without fallocate (EOPNOTSUPP; C libraries that emulate it fail with
        EINVAL on an O_DIRECT file) is written without: writes then extend the file."""
        grow_to = preallocation_end(
            end, self._allocated, self.log_bytes_max, self.preallocate_bytes
        )
        if grow_to is None or self.preallocate_bytes <= 0:
            return
        try:
            os.posix_fallocate(self._fd, self._allocated, grow_to - self._allocated)
        except OSError as e:
            if e.errno not in (errno.EINVAL, errno.EOPNOTSUPP, errno.ENOSYS):
                raise
            logger.warning("direct entry logs are not preallocated: %s", e)
            self.preallocate_bytes = 0
            return
        self._allocated = grow_to

    def _block_buffer(self, size: int) -> memoryview:
        """A page-aligned buffer of at least `size` bytes (O_DIRECT needs the alignment)."""
        if self._buffer is None or len(self._buffer) < size:
            # The old map is unmapped once no view of it is left (not closed here: a
            # failed write's traceback may still hold one).
            self._buffer = mmap.mmap(-1, max(size, 1 << 20))
        return memoryview(self._buffer)

    def _write_at(self, data: memoryview, offset: int) -> None:
        """Write `data` whole at `offset`; an O_DIRECT write refused (EINVAL) is done
        again through the page cache."""
        while data:
            try:
                written = self._writes.pwritev(self._fd, [data], offset)
            except OSError as e:
                if e.errno != errno.EINVAL or not self.direct:
                    raise
                self._refused(e)
                self._reopen_buffered()
                continue
            if written <= 0:
                raise OSError(errno.ENOSPC, f"direct entry log write made no progress at {offset}")
            data, offset = data[written:], offset + written

    # ------------------------------------------------------------------ files

    def _open(self, path: str, flags: int) -> int:
        """Open with O_DIRECT while it is allowed; a refusal (EINVAL) opens buffered."""
        if self.direct:
            try:
                return os.open(path, flags | O_DIRECT, 0o644)
            except OSError as e:
                if e.errno != errno.EINVAL:
                    raise
                self._refused(e)
        # The refused open may have created the file already: no O_EXCL the second time.
        return os.open(path, flags & ~os.O_EXCL, 0o644)

    def _refused(self, error: OSError) -> None:
        self.direct = False
        _warn_refused(self._entry_logs.directory, error)

    def _reopen_buffered(self) -> None:
        fd = self._open(self._entry_logs.path(self.log_id), os.O_WRONLY)
        os.close(self._fd)
        self._fd = fd

    def _roll(self) -> None:
        """Finish the current log (cut back to its last record, synced) and start the
        next one: header block written and synced, directory synced, open for reads."""
        self._finish()
        log_id = self._entry_logs.allocate_log_id()
        self._entry_logs.pins.pin(log_id)  # before the file exists: compaction lists files
        path = self._entry_logs.path(log_id)
        try:
            fd = self._open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        except OSError:
            self._entry_logs.pins.unpin([log_id])
            raise
        self._fd, self.log_id, self._end, self._allocated = fd, log_id, 0, 0
        view = self._block_buffer(BLOCK_BYTES)
        try:
            view[:BLOCK_BYTES] = _ZEROS
            LOG_HEADER.pack_into(view, 0, LOG_MAGIC, LOG_VERSION, 0, log_id, 0)
            self._write_at(view[:BLOCK_BYTES], 0)
        finally:
            view.release()
        self._end = BLOCK_BYTES
        self._writes.fdatasync(self._fd)  # not `fd`: a refused O_DIRECT write reopened it
        fsync_directory(self._entry_logs.directory)
        self._entry_logs.open_for_read(log_id)
        logger.info("direct entry log opened log_id=%d o_direct=%s", log_id, self.direct)

    def _finish(self) -> None:
        """Cut the current log's preallocated tail off, sync and close it."""
        if self._fd < 0:
            return
        fd, self._fd = self._fd, -1
        try:
            if self._allocated > self._end:
                os.ftruncate(fd, self._end)
            os.fsync(fd)
        finally:
            os.close(fd)
            self._entry_logs.pins.unpin([self.log_id])

    def _abandon(self, error: OSError) -> None:
        """A write, preallocation or sync failed: nothing of this log is written again;
        the next group starts a new log (module docstring)."""
        logger.error(
            "direct_entry_log_write_failed log_id=%d end=%d errno=%s error=%s",
            self.log_id,
            self._end,
            errno.errorcode.get(error.errno or 0, error.errno),
            error,
        )
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
            self._entry_logs.pins.unpin([self.log_id])

    def close(self) -> None:
        """Finish the current log (after the writer thread stopped). A failure is logged:
        every location handed out was synced by its group already."""
        try:
            self._finish()
        except OSError as e:
            logger.error("direct entry log not finished log_id=%d error=%s", self.log_id, e)
        self._buffer = None


_warned_refused = False


def _warn_refused(directory: str, error: OSError) -> None:
    global _warned_refused
    if not _warned_refused:
        _warned_refused = True
        logger.warning(
            "direct entry logs in %s are written through the page cache: O_DIRECT refused (%s)",
            directory,
            error,
        )
