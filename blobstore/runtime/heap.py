"""The C heap of the long-running processes: memory freed by one large buffer is kept
for the next one.

A gateway reading a large object receives each entry's answer into a buffer of its own
(`blobstore.wire.receive_buffer`), from 256 KiB to several MiB, freed once that part of
the body is sent; a bookie does the same with the large entries it is sent. glibc's
malloc hands such memory back to the kernel when the top of its heap holds more free
bytes than its trim threshold (or maps a block on its own, over its mmap threshold, and
unmaps it when it is freed); its thresholds adapt to the blocks it sees, and a burst
that outgrows them makes the next buffers take a page fault, and a zeroed page, on
every 4 KiB. Measured on a gateway serving 16 MiB GETs while another test suite ran on
the machine: page faults and zeroing were about a tenth of its CPU. On a quiet machine
the adapted thresholds already kept the memory (no fault per GET, with or without
this), so this is a bound on the bad case, not a speed-up of the usual one.

`keep_freed_memory()` sets both thresholds (`mallopt`), once, before serving: blocks up
to `MMAP_THRESHOLD_BYTES` come from the heap, and up to `TRIM_THRESHOLD_BYTES` of free
heap stay with the process. What a process holds at its peak is bounded by its own
limits on requests and reads in flight; with this it keeps that peak, at most
`TRIM_THRESHOLD_BYTES` more than it uses. Elsewhere than glibc this does nothing.
"""

from __future__ import annotations

import ctypes
import logging

logger = logging.getLogger(__name__)

# mallopt's parameters (glibc's malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3

# glibc's largest mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX): a block larger
# than this is still mapped on its own.
MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
TRIM_THRESHOLD_BYTES = 256 * 1024 * 1024


def keep_freed_memory() -> bool:
    """Keep freed heap memory for the next buffers; False where malloc is not glibc's
    (nothing changed)."""
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is None:
        logger.debug("event=heap_not_tuned reason=no_mallopt")
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    tuned = bool(
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
        and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )
    logger.debug("event=heap_tuned ok=%s", tuned)
    return tuned
