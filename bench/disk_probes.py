"""What the disk under a benchmark can do, measured in the same run as the benchmark: the
bounds its figures are read against. Each probe writes a scratch file in `directory`
(the disk the bookies use) and removes it.

- `fsync_rate_4k`: 4 KiB writes, each followed by fdatasync (what one fsync per add
  would give; group commit is measured against it).
- `sequential_mb_per_s`: 4 MiB buffered writes, each followed by fdatasync (how the
  journal and the checkpointed entry logs write).
- `direct_mib_per_s`: O_DIRECT writes of aligned blocks into a preallocated file (how a
  bookie writes large adds to its direct entry logs).
"""

from __future__ import annotations

import mmap
import os
import time
from dataclasses import dataclass
from pathlib import Path

MIB = 1 << 20
ZEROED_PROBE_BYTES = 256 * MIB
DIRECT_PROBE_BYTES_MAX = 4 << 30


def fsync_rate_4k(directory: Path, seconds: float, over_zeros: bool = False) -> float:
    """4 KiB writes each followed by fdatasync: appended (each write allocates), or over
    zeros written and fsync'd first (as the bookies' journal zero-ahead makes them)."""
    path = directory / "fsync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    block = os.urandom(4096)
    count = 0
    limit = ZEROED_PROBE_BYTES // len(block) if over_zeros else 1 << 62
    try:
        if over_zeros:
            zeros = bytes(4 * MIB)
            for _ in range(ZEROED_PROBE_BYTES // len(zeros)):
                os.write(fd, zeros)
            os.fsync(fd)
        started = time.monotonic()
        while time.monotonic() - started < seconds and count < limit:
            os.pwrite(fd, block, count * len(block))
            os.fdatasync(fd)
            count += 1
    finally:
        os.close(fd)
        path.unlink()
    return count / (time.monotonic() - started)


def sequential_mb_per_s(directory: Path, seconds: float, chunk_bytes: int = 4 * MIB) -> float:
    """MB/s (10^6) of buffered appends of `chunk_bytes`, each followed by fdatasync."""
    path = directory / "bandwidth-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    block = os.urandom(chunk_bytes)
    written = 0
    started = time.monotonic()
    try:
        while time.monotonic() - started < seconds:
            os.write(fd, block)
            os.fdatasync(fd)
            written += chunk_bytes
    finally:
        os.close(fd)
        path.unlink()
    return written / (time.monotonic() - started) / 1e6


def direct_mib_per_s(directory: Path, seconds: float, block_bytes: int) -> float | None:
    """MiB/s of sequential O_DIRECT writes of page-aligned `block_bytes` blocks into a
    file preallocated for them, one fdatasync at the end (inside the time): None where
    the filesystem refuses O_DIRECT."""
    path = directory / "direct-probe"
    blocks_max = max(1, DIRECT_PROBE_BYTES_MAX // block_bytes)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
    except OSError:
        return None
    buffer = mmap.mmap(-1, block_bytes)  # anonymous mappings are page-aligned
    buffer.write(os.urandom(block_bytes))
    written = 0
    try:
        os.posix_fallocate(fd, 0, blocks_max * block_bytes)
        started = time.monotonic()
        while time.monotonic() - started < seconds and written < blocks_max * block_bytes:
            written += os.pwrite(fd, buffer, written)
        os.fdatasync(fd)
        elapsed = time.monotonic() - started
    except OSError:
        return None
    finally:
        os.close(fd)
        path.unlink()
        buffer.close()
    return written / MIB / elapsed


@dataclass(frozen=True)
class DiskLimits:
    """The disk's bounds for a bookie's writes, measured in one run."""

    fsync_rate: float  # 4 KiB write+fdatasync per second
    buffered_mb_per_s: float  # 4 MiB write+fdatasync: journals, checkpointed entry logs
    direct_mb_per_s: float | None  # O_DIRECT, 1 MiB blocks: direct entry logs (None: refused)

    def bound_mb_per_s(self, entry_bytes: int, direct_min_bytes: int) -> float:
        """The bandwidth an add of `entry_bytes` is made durable with before its ack (a
        bookie writes adds of `direct_min_bytes` or more to its direct entry logs)."""
        if direct_min_bytes and entry_bytes >= direct_min_bytes and self.direct_mb_per_s:
            return self.direct_mb_per_s
        return self.buffered_mb_per_s

    def direct_text(self) -> str:
        return f"{self.direct_mb_per_s:,.0f} MB/s" if self.direct_mb_per_s else "refused"


def measure_disk(directory: Path, seconds: float) -> DiskLimits:
    direct = direct_mib_per_s(directory, seconds, MIB)
    return DiskLimits(
        fsync_rate_4k(directory, seconds),
        sequential_mb_per_s(directory, seconds),
        direct * MIB / 1e6 if direct is not None else None,
    )
