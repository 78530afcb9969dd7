"""Page cache residency of a file, for tests of what the bookie keeps cached."""

from __future__ import annotations

import ctypes
import mmap
import os
from pathlib import Path

PAGE_BYTES = mmap.PAGESIZE


def resident_pages(path: Path) -> list[bool]:
    """Which pages of the file the page cache holds (mincore(2); reading to find out
    would start readahead and change the answer)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int]
    libc.mmap.argtypes += [ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    size = path.stat().st_size
    if size == 0:
        return []
    pages = -(-size // PAGE_BYTES)
    fd = os.open(path, os.O_RDONLY)
    try:
        address = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        assert address not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
        try:
            vector = ctypes.create_string_buffer(pages)
            assert libc.mincore(address, size, vector) == 0, ctypes.get_errno()
            return [bool(byte & 1) for byte in vector.raw[:pages]]
        finally:
            libc.munmap(address, size)
    finally:
        os.close(fd)
