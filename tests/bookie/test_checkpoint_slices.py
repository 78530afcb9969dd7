"""A checkpoint in slices: order, bounds, entry-log rolls, pacing and what a reopened
storage reads.

Real entry logs and a real RocksDB index in a temporary directory; no bookie process.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from blobstore.wire import protocol
from bookie import entry_logger as entry_logger_module
from bookie.entry_logger import LOG_HEADER_BYTES, RECORD_LENGTH, EntryLogger, split_location
from bookie.ledger_storage import LedgerStorage, checkpoint_pause, flush_slices

MASTER_KEY = b"k" * 20


def entry(ledger_id: int, entry_id: int, size: int) -> bytes:
    payload = random.Random(ledger_id * 1_000_003 + entry_id).randbytes(size)
    return protocol.Entry(
        ledger_id, entry_id, entry_id - 1, size * (entry_id + 1), payload
    ).encode()


def test_slices_keep_ledger_and_entry_order_and_their_bound() -> None:
    rng = random.Random(7)
    cache: dict[int, dict[int, bytes]] = {}
    for ledger_id in rng.sample(range(1, 10_000), 40):
        ids = list(range(rng.randrange(1, 700)))
        if rng.random() < 0.3:
            rng.shuffle(ids)  # re-adds and resends arrive out of order
        cache[ledger_id] = {e: b"%d/%d" % (ledger_id, e) for e in ids}
    slices = list(flush_slices(cache, slice_entries=100))
    flat = [
        (ledger_id, e, data)
        for piece in slices
        for ledger_id, ids, datas in piece
        for e, data in zip(ids, datas, strict=True)
    ]
    assert [(lid, e) for lid, e, _ in flat] == sorted((lid, e) for lid in cache for e in cache[lid])
    assert all(data == cache[lid][e] for lid, e, data in flat)
    sizes = [sum(len(ids) for _, ids, _ in piece) for piece in slices]
    assert all(size == 100 for size in sizes[:-1]) and 0 < sizes[-1] <= 100
    assert list(flush_slices({})) == []


def test_slices_are_bounded_in_bytes_too() -> None:
    cache = {
        3: {e: b"x" * 300_000 for e in range(10)},
        4: {0: b"y" * 5_000_000, 1: b"z" * 10},  # one entry bigger than a slice
    }
    slices = list(flush_slices(cache, slice_entries=512, slice_bytes=1_000_000))
    sizes = [sum(len(d) for _, _, datas in piece for d in datas) for piece in slices]
    assert sizes == [900_000, 900_000, 900_000, 300_000, 5_000_000, 10]
    order = [(lid, e) for piece in slices for lid, ids, _ in piece for e in ids]
    assert order == [(3, e) for e in range(10)] + [(4, 0), (4, 1)]


def test_append_many_rolls_exactly_like_append(tmp_path: Path) -> None:
    """Same entries, one at a time or as lists: same logs, same locations, same bytes."""
    rng = random.Random(3)
    entries = [rng.randbytes(rng.choice([10, 300, 1500, 5000])) for _ in range(400)]
    log_max = 16 * 1024
    one = EntryLogger(str(tmp_path / "one"), log_max)
    many = EntryLogger(str(tmp_path / "many"), log_max)
    singly = [one.append(e) for e in entries]
    listed: list[int] = []
    start = 0
    while start < len(entries):
        n = rng.randrange(1, 60)
        locations, per_log = many.append_many(entries[start : start + n])
        listed += locations
        assert sum(per_log.values()) == sum(
            RECORD_LENGTH.size + len(e) for e in entries[start : start + n]
        )
        start += n
    assert singly == listed
    one.sync()
    many.sync()
    assert len({split_location(loc)[0] for loc in listed}) > 10  # it did roll, many times
    for log_id in one.list_logs():
        assert (tmp_path / "one" / "current" / f"{log_id:08x}.log").read_bytes() == (
            tmp_path / "many" / "current" / f"{log_id:08x}.log"
        ).read_bytes()
    for _log_id, offset in (split_location(loc) for loc in listed):
        assert offset == LOG_HEADER_BYTES or offset < log_max
    # An entry larger than a whole log goes alone into a fresh log.
    big = rng.randbytes(log_max * 2)
    (loc,), _ = many.append_many([big])
    assert split_location(loc)[1] == LOG_HEADER_BYTES
    (after,), _ = many.append_many([b"x" * 10])
    assert split_location(after) == (split_location(loc)[0] + 1, LOG_HEADER_BYTES)
    one.close()
    many.close()


def test_sliced_checkpoint_reads_back_after_reopen(tmp_path: Path) -> None:
    rng = random.Random(11)
    storage = LedgerStorage(
        str(tmp_path),
        entry_log_bytes_max=256 * 1024,
        write_cache_bytes_max=64 << 20,
        read_cache_bytes_max=1 << 20,
    )
    expected: dict[tuple[int, int], bytes] = {}
    # Adds of several ledgers interleaved, as the journal applies them.
    plan = [(ledger_id, e) for ledger_id in (5, 9, 12, 40) for e in range(1500)]
    rng.shuffle(plan)
    for ledger_id, e in plan:
        data = entry(ledger_id, e, rng.choice([100, 1000, 3000]))
        storage.apply_add(ledger_id, e, MASTER_KEY, data)
        expected[(ledger_id, e)] = data
    storage._checkpoint_sync((1, 1234))
    logs = storage.entry_logger.list_logs()
    assert len(logs) > 5  # 6,000 entries over 256 KiB logs: the slices rolled logs
    counted = {
        ledger_id: sum(per_log.get(ledger_id, 0) for per_log in storage.log_ledger_bytes.values())
        for ledger_id in (5, 9, 12, 40)
    }
    for ledger_id, total in counted.items():
        assert total == sum(
            RECORD_LENGTH.size + len(d) for (lid, _), d in expected.items() if lid == ledger_id
        )
    asyncio.run(storage.close())

    reopened = LedgerStorage(
        str(tmp_path),
        entry_log_bytes_max=256 * 1024,
        write_cache_bytes_max=64 << 20,
        read_cache_bytes_max=1 << 20,
    )
    assert reopened.mark == (1, 1234)
    assert reopened.log_ledger_bytes == storage.log_ledger_bytes
    for (ledger_id, e), data in expected.items():
        assert reopened._read_from_log(ledger_id, e) == data
    assert reopened.states[40].last_entry_id == 1499
    asyncio.run(reopened.close())


def test_write_out_starts_each_byte_once_and_leaves_nothing_buffered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint starts its slices' disk writes as it goes: every byte of a log after
    its header is started exactly once (or fsync'd by a roll), in order, and nothing is
    left in the process's buffer."""
    started: list[tuple[int, int, int]] = []
    real = entry_logger_module.start_writeback

    def recorded(fd: int, offset: int, length: int) -> bool:
        started.append((fd, offset, length))
        return real(fd, offset, length)

    monkeypatch.setattr(entry_logger_module, "start_writeback", recorded)
    rng = random.Random(5)
    logger = EntryLogger(str(tmp_path), 64 * 1024)
    fds = {logger.current_log_id: logger._write_fd}
    for _ in range(60):
        logger.append_many([rng.randbytes(rng.choice([50, 700, 4000])) for _ in range(8)])
        fds[logger.current_log_id] = logger._write_fd
        logger.write_out()
        path = tmp_path / "current" / f"{logger.current_log_id:08x}.log"
        assert path.stat().st_size == logger._position  # written, not buffered
    assert len(fds) > 3  # it rolled
    for log_id, fd in fds.items():
        ranges = [(offset, length) for f, offset, length in started if f == fd]
        size = (tmp_path / "current" / f"{log_id:08x}.log").stat().st_size
        end = LOG_HEADER_BYTES
        for offset, length in ranges:
            assert offset == end and length > 0, (log_id, ranges)
            end += length
        if log_id == logger.current_log_id:
            assert end == size
        else:
            assert end <= size  # the rest was fsync'd when the log rolled
    assert real(logger._write_fd, 0, logger._position)  # the call works on this system
    logger.close()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        # The write cache has no room: adds wait, so no pause at all.
        ((0.001, 512 << 10, 10 << 20, 0, 5e6, 32e6), 0.0),
        # Not paced by bytes: as long as the slice took (about half a core).
        ((0.002, 512 << 10, 10 << 20, 1 << 20, 5e6, 0.0), 0.002),
        # Paced by bytes: 512 KiB at 32 MB/s, less the slice's own time.
        ((0.001, 512 << 10, 10 << 20, 32 << 20, 0.0, 32e6), (512 << 10) / 32e6 - 0.001),
        # Adds would fill the room (4 MiB at 8 MiB/s) before 32 MiB left are written at
        # 32 MB/s: the rate rises so the rest is done in half that time (0.25 s).
        ((0.001, 512 << 10, 32 << 20, 4 << 20, float(8 << 20), 32e6), 1 / 256 - 0.001),
        # Adds arriving at half the pacing rate or more: not paced by bytes.
        ((0.001, 512 << 10, 32 << 20, 32 << 20, 16e6, 32e6), 0.001),
        # A slow slice of few bytes: the CPU rule is the longer wait.
        ((0.02, 4096, 1 << 20, 32 << 20, 1e6, 32e6), 0.02),
    ],
)
def test_checkpoint_pause(args: tuple[float, int, int, int, float, float], expected: float) -> None:
    assert checkpoint_pause(*args) == pytest.approx(expected)
