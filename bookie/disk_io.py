"""Disk writes every bookie file needs: whole gathered writes that survive short writes
(a write that makes no progress is an error, never a loop),
directory fsync (a new or renamed file's entry is durable only then), and dropping a
file's synced pages from the page cache."""

from __future__ import annotations

import errno
import os

Buffer = bytes | bytearray | memoryview
IOVECS_MAX = 512  # below every platform's IOV_MAX (1024 on Linux)
# The largest folio the page cache may hold a file's pages in (a PMD: 2 MiB on x86-64
# and arm64 with 4 KiB pages; ext4 and XFS use large folios for buffered writes).
FOLIO_BYTES_MAX = 2 << 20


def fsync_directory(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def drop_from_page_cache(fd: int, dropped_end: int, end: int) -> None:
    """Drop the (clean, synced) cached pages of a file below `end`, the pages below
    `dropped_end` having been dropped by the previous call. The kernel drops a large
    folio only when the range covers it whole: a folio holding the previous call's end
    was left, so the range starts that folio's largest size earlier."""
    start = dropped_end - dropped_end % FOLIO_BYTES_MAX
    os.posix_fadvise(fd, start, end - start, os.POSIX_FADV_DONTNEED)


def pwritev_all(fd: int, pieces: list[bytes], offset: int) -> None:
    """Write the pieces in order at `offset` without joining them (IOV_MAX-sized)."""
    for start in range(0, len(pieces), IOVECS_MAX):
        chunk = pieces[start : start + IOVECS_MAX]
        expected = sum(len(piece) for piece in chunk)
        written = os.pwritev(fd, chunk, offset)
        if written < expected:  # a short write: finish the rest plainly
            pwrite_all(fd, memoryview(b"".join(chunk))[written:], offset + written)
        offset += expected


def pwrite_all(fd: int, data: bytes | memoryview, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        if written <= 0:
            raise OSError(errno.ENOSPC, f"write made no progress at offset {offset}")
        view, offset = view[written:], offset + written


def skip_bytes(pieces: list[Buffer], count: int) -> list[Buffer]:
    """The pieces less their first `count` bytes (what a short write left to write)."""
    for index, piece in enumerate(pieces):
        if count < len(piece):
            return [memoryview(piece)[count:], *pieces[index + 1 :]]
        count -= len(piece)
    assert count == 0, count
    return []


def write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(errno.ENOSPC, "write made no progress")
        view = view[written:]
