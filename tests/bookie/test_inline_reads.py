"""Entry log reads on the event loop when the page cache holds the bytes, on the read
pool when it does not: same bytes either way, and each counted where it ran.

Real entry logs and a real RocksDB index in a temporary directory; no bookie process.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from pathlib import Path

from blobstore.wire import protocol
from bookie import ledger_storage as ledger_storage_module
from bookie.entry_logger import EntryLogger, pread_if_cached, split_location
from bookie.ledger_storage import LedgerStorage
from bookie.metrics import METRICS
from tests.bookie.page_cache import resident_pages

MASTER_KEY = b"k" * 20
DROP_ATTEMPTS = 20


def entry(ledger_id: int, entry_id: int, size: int) -> bytes:
    payload = random.Random(ledger_id * 7919 + entry_id).randbytes(size)
    return protocol.Entry(ledger_id, entry_id, entry_id - 1, size, payload).encode()


def drop_page_cache(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def drop_until_gone(path: Path) -> None:
    """Drop the file's pages and look (mincore) that none stayed: a drop may miss pages
    for a moment (the kernel skips pages it holds in per-CPU lists)."""
    for _ in range(DROP_ATTEMPTS):
        drop_page_cache(path)
        if not any(resident_pages(path)):
            return
        time.sleep(0.01)
    raise AssertionError(f"{path} still in the page cache after {DROP_ATTEMPTS} drops")


def log_reads(path: str) -> float:
    return float(METRICS.log_reads.labels(path)._value.get())


def test_read_if_cached_serves_cached_bytes_and_refuses_the_rest(tmp_path: Path) -> None:
    logger = EntryLogger(str(tmp_path), 1 << 30)
    data = [entry(3, e, 1000 + 700 * e) for e in range(40)]
    locations, _ = logger.append_many(data)
    logger.sync()
    for e, loc in enumerate(locations):
        assert logger.read_if_cached(loc, 3, e) == data[e] == logger.read(loc, 3, e)
    (log_id,) = {split_location(loc)[0] for loc in locations}
    # Dropped again before each look: a refused RWF_NOWAIT read still starts the kernel's
    # readahead, which may bring the next entries' pages back before they are looked at.
    # And a drop may miss pages for a moment (the kernel skips pages it holds in per-CPU
    # lists; a busy machine showed it once): a page found cached is dropped again, a few
    # times at most, before the refusal is required.
    for e, loc in enumerate(locations):
        for _ in range(DROP_ATTEMPTS):
            drop_page_cache(Path(logger.path(log_id)))
            if logger.read_if_cached(loc, 3, e) is None:
                break
            time.sleep(0.01)
        else:
            raise AssertionError(f"entry {e} still read from the page cache after dropping it")
    # The blocking read brings the pages back, after which the cached read finds them.
    assert logger.read(locations[5], 3, 5) == data[5]
    assert logger.read_if_cached(locations[5], 3, 5) == data[5]
    logger.close()


def test_pread_if_cached_reports_a_short_file_as_not_cached(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert pread_if_cached(fd, 100, 0) == b"x" * 100
        assert pread_if_cached(fd, 200, 0) is None  # past the end: the blocking read decides
    finally:
        os.close(fd)


def test_storage_reads_inline_when_cached_and_on_the_pool_when_not(tmp_path: Path) -> None:
    storage = LedgerStorage(
        str(tmp_path),
        entry_log_bytes_max=1 << 30,
        write_cache_bytes_max=64 << 20,
        read_cache_bytes_max=0,  # every read goes to the entry log
    )
    expected = {}
    for e in range(200):
        expected[e] = entry(9, e, 4096)
        storage.apply_add(9, e, MASTER_KEY, expected[e])
    storage._checkpoint_sync((1, 100))

    async def read_all() -> dict[int, bytes | None]:
        return {e: await storage.read(9, e) for e in expected}

    # The checkpoint's pages may have been evicted already on a machine short of memory:
    # read the logs once so the first pass finds them all cached.
    for log_id in storage.entry_logger.list_logs():
        Path(storage.entry_logger.path(log_id)).read_bytes()
    inline, pool = log_reads("inline"), log_reads("pool")
    assert asyncio.run(read_all()) == expected
    assert (log_reads("inline") - inline, log_reads("pool") - pool) == (200, 0)

    for log_id in storage.entry_logger.list_logs():
        drop_until_gone(Path(storage.entry_logger.path(log_id)))
    inline, pool = log_reads("inline"), log_reads("pool")
    assert asyncio.run(read_all()) == expected
    assert log_reads("pool") - pool >= 1  # the first read of each page waited for the disk
    assert log_reads("inline") + log_reads("pool") - inline - pool == 200

    # An entry never stored: None, without a trip to the pool.
    pool = log_reads("pool")
    assert asyncio.run(storage.read(9, 10_000)) is None
    assert log_reads("pool") == pool
    asyncio.run(storage.close())


def test_a_slow_index_lookup_sends_reads_to_the_pool_for_a_while(
    tmp_path: Path, monkeypatch: object
) -> None:
    storage = LedgerStorage(
        str(tmp_path),
        entry_log_bytes_max=1 << 30,
        write_cache_bytes_max=64 << 20,
        read_cache_bytes_max=0,
    )
    data = entry(4, 0, 512)
    storage.apply_add(4, 0, MASTER_KEY, data)
    storage._checkpoint_sync((1, 100))
    lookup = storage.index.get_location
    clock = [1000.0]

    def slow_lookup(ledger_id: int, entry_id: int) -> int | None:
        clock[0] += ledger_storage_module.INLINE_INDEX_SLOW_S * 2  # as if it read the disk
        return lookup(ledger_id, entry_id)

    storage.index.get_location = slow_lookup  # type: ignore[method-assign]
    monkeypatch.setattr(ledger_storage_module.time, "monotonic", lambda: clock[0])  # type: ignore[attr-defined]
    inline, pool = log_reads("inline"), log_reads("pool")
    assert asyncio.run(storage.read(4, 0)) == data  # inline, but slow: the backoff starts
    assert asyncio.run(storage.read(4, 0)) == data  # on the pool
    assert (log_reads("inline") - inline, log_reads("pool") - pool) == (1, 1)
    clock[0] += ledger_storage_module.INLINE_INDEX_BACKOFF_S
    storage.index.get_location = lookup  # type: ignore[method-assign]
    assert asyncio.run(storage.read(4, 0)) == data  # inline again
    assert (log_reads("inline") - inline, log_reads("pool") - pool) == (2, 1)
    asyncio.run(storage.close())


class _JournalPosition:
    """The two things a checkpoint asks of the journal (pure logic: no journal files)."""

    synced_position = (1, 100)

    def delete_files_before(self, journal_id: int) -> int:
        return 0


class _CacheAlwaysFull(LedgerStorage):
    def write_cache_full(self) -> bool:
        return True


def test_checkpoint_pauses_between_slices_unless_the_write_cache_is_full(
    tmp_path: Path, monkeypatch: object
) -> None:
    pauses: list[float] = []
    real_sleep = asyncio.sleep

    async def recorded_sleep(delay: float) -> None:
        pauses.append(delay)
        await real_sleep(0)

    monkeypatch.setattr(ledger_storage_module.asyncio, "sleep", recorded_sleep)  # type: ignore[attr-defined]
    slices = 3
    entries = slices * ledger_storage_module.FLUSH_SLICE_ENTRIES

    def checkpoint_pauses(storage: LedgerStorage, paced: bool = True) -> list[float]:
        storage.journal = _JournalPosition()  # type: ignore[assignment]
        for e in range(entries):
            storage.apply_add(6, e, MASTER_KEY, entry(6, e, 100))
        pauses.clear()
        asyncio.run(storage.checkpoint(paced=paced))
        assert all(storage._read_from_log(6, e) is not None for e in range(entries))
        asyncio.run(storage.close())
        return list(pauses)

    log_max, cache_max = 1 << 30, 64 << 20
    paused = checkpoint_pauses(
        LedgerStorage(
            str(tmp_path / "a"),
            entry_log_bytes_max=log_max,
            write_cache_bytes_max=cache_max,
            read_cache_bytes_max=0,
        )
    )
    assert len(paused) == slices and all(p >= 0 for p in paused)
    # Adds waiting for room in the write cache: the checkpoint runs at full speed.
    full = _CacheAlwaysFull(
        str(tmp_path / "b"),
        entry_log_bytes_max=log_max,
        write_cache_bytes_max=cache_max,
        read_cache_bytes_max=0,
    )
    assert checkpoint_pauses(full) == []
    # Paced in bytes: each slice (512 entries of ~150 bytes) waits about its bytes at
    # 1 MB/s (the CPU rule alone waits about a millisecond).
    paced = LedgerStorage(
        str(tmp_path / "c"),
        entry_log_bytes_max=log_max,
        write_cache_bytes_max=cache_max,
        read_cache_bytes_max=0,
        checkpoint_write_bytes_per_s=1e6,
    )
    paced._swapped_at -= 3600  # the adds came in slowly (an hour since the last swap)
    slice_bytes = ledger_storage_module.FLUSH_SLICE_ENTRIES * len(entry(6, 0, 100))
    paused = checkpoint_pauses(paced)
    assert len(paused) == slices and all(p > 0.5 * slice_bytes / 1e6 for p in paused), paused
    # The same adds arriving fast (all of them just now): the journal writes at the disk's
    # pace, and the checkpoint is not held to the byte rate.
    fast = LedgerStorage(
        str(tmp_path / "d"),
        entry_log_bytes_max=log_max,
        write_cache_bytes_max=cache_max,
        read_cache_bytes_max=0,
        checkpoint_write_bytes_per_s=1e5,
    )
    fast._swapped_at = time.monotonic()  # ~230 kB from now to the checkpoint: >> 50 kB/s
    paused = checkpoint_pauses(fast)
    assert len(paused) == slices and all(p < 0.25 * slice_bytes / 1e5 for p in paused), paused
    # At shutdown: no pauses at all.
    closing = LedgerStorage(
        str(tmp_path / "e"),
        entry_log_bytes_max=log_max,
        write_cache_bytes_max=cache_max,
        read_cache_bytes_max=0,
        checkpoint_write_bytes_per_s=1e6,
    )
    closing._swapped_at -= 3600
    assert checkpoint_pauses(closing, paced=False) == []
