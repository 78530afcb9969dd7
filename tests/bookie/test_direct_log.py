"""The direct write path in process: its decisions (threshold, alignment and padding,
grouping, preallocation), the direct entry log's file (O_DIRECT, the buffered fallback,
scans across padding), the DIRECT_ADD journal record, and ledger storage indexing direct
adds at a checkpoint while compaction leaves their logs alone."""

from __future__ import annotations

import errno
import fcntl
import logging
import os
from pathlib import Path

import crc32c
import pytest

from blobstore.runtime.errors import UsageError
from blobstore.wire import protocol
from bookie import compactor, direct_entry_log
from bookie.config import KIB, BookieConfig
from bookie.direct_entry_log import (
    DirectEntryLog,
    group_count,
    is_direct,
    preallocation_end,
    record_span,
    records_fitting,
)
from bookie.direct_locations import DirectLocations
from bookie.disk_io import Buffer
from bookie.entry_logger import (
    BLOCK_BYTES,
    LOG_HEADER_BYTES,
    EntryLogger,
    FileWrites,
    LogPins,
    split_location,
)
from bookie.journal import (
    FILE_HEADER,
    FILE_MAGIC,
    DirectDescriptor,
    JournalRecord,
    RecordKind,
    encode_parts,
    file_name,
    replay,
)
from bookie.ledger_storage import LedgerStorage
from tests.bookie.raw_client import entry_bytes

MIB = 1 << 20
KEY = protocol.master_key(b"secret")


def entry_of(entry_id: int, size: int) -> bytes:
    return entry_bytes(1, entry_id, bytes([entry_id % 251]) * size)


# ---------------------------------------------------------------------- decisions


def test_only_payloads_at_the_threshold_or_over_are_written_directly() -> None:
    assert not is_direct(256 * KIB - 1, 256 * KIB)
    assert is_direct(256 * KIB, 256 * KIB)
    assert not is_direct(5 * MIB, 0)  # 0: never


def test_a_record_takes_whole_blocks() -> None:
    assert record_span(1) == BLOCK_BYTES
    assert record_span(BLOCK_BYTES - 4) == BLOCK_BYTES
    assert record_span(BLOCK_BYTES - 3) == 2 * BLOCK_BYTES
    assert record_span(MIB) == MIB + BLOCK_BYTES


def test_a_group_takes_what_fits_and_at_least_one() -> None:
    assert group_count([5 * MIB] * 5, 16 * MIB) == 3
    assert group_count([20 * MIB, MIB], 16 * MIB) == 1
    assert group_count([MIB] * 4, 16 * MIB) == 4
    assert group_count([], 16 * MIB) == 0


def test_records_go_to_a_log_while_they_fit_and_one_always_fits_an_empty_log() -> None:
    assert records_fitting([MIB, MIB, MIB], BLOCK_BYTES, 2 * MIB + BLOCK_BYTES) == 2
    assert records_fitting([MIB], 2 * MIB, 2 * MIB + BLOCK_BYTES) == 0
    assert records_fitting([8 * MIB], BLOCK_BYTES, 4 * MIB) == 1


def test_preallocation_runs_a_chunk_ahead_up_to_the_roll_size() -> None:
    assert preallocation_end(MIB, 64 * MIB, 1024 * MIB, 64 * MIB) is None
    assert preallocation_end(65 * MIB, 64 * MIB, 1024 * MIB, 64 * MIB) == 128 * MIB
    assert preallocation_end(1000 * MIB, 990 * MIB, 1024 * MIB, 64 * MIB) == 1024 * MIB
    assert preallocation_end(70 * MIB, 0, 66 * MIB, 64 * MIB) == 70 * MIB


def test_the_threshold_setting_is_validated() -> None:
    base = {"zk": "z", "journal_dir": "j", "ledger_dir": "l"}
    assert BookieConfig(**base).direct_write_min_bytes == 256 * KIB  # type: ignore[arg-type]
    BookieConfig(**base, direct_write_min_bytes=0).validate()  # type: ignore[arg-type]
    for bad in (1, 4 * KIB - 1, protocol.ENTRY_PAYLOAD_BYTES_MAX + 1):
        with pytest.raises(UsageError, match="direct_write_min_bytes"):
            BookieConfig(**base, direct_write_min_bytes=bad).validate()  # type: ignore[arg-type]


# ---------------------------------------------------------------------- the journal record


def test_a_direct_add_record_round_trips_and_a_bad_one_does_not_decode() -> None:
    descriptor = DirectDescriptor((7 << 32) | 4096, 300 * KIB, 0xDEADBEEF)
    record = JournalRecord(RecordKind.DIRECT_ADD, 5, 9, KEY, descriptor.encode())
    decoded, used = JournalRecord.decode(record.encode())
    assert decoded == record and used == len(record.encode())
    assert decoded.direct() == descriptor
    prefix, payload = encode_parts(RecordKind.DIRECT_ADD, 5, 9, KEY, descriptor.encode() + b"x")
    with pytest.raises(ValueError, match="17-byte descriptor"):
        JournalRecord.decode(prefix + payload)


def test_a_direct_add_record_names_its_entry_by_the_entry_s_own_digest() -> None:
    entry = entry_of(3, 300 * KIB)
    digest = protocol.entry_digest(entry)
    assert DirectDescriptor(4096, len(entry), digest).names(entry)
    # A version 2 record carries the CRC32C of all the entry's bytes instead.
    assert DirectDescriptor(4096, len(entry), crc32c.crc32c(entry)).names(entry)
    damaged = bytearray(entry)
    damaged[1000] ^= 0xFF
    assert not DirectDescriptor(4096, len(entry), digest).names(bytes(damaged))
    assert not DirectDescriptor(4096, len(entry), digest ^ 1).names(entry)
    assert not DirectDescriptor(4096, len(entry) - 1, digest).names(entry)
    other = entry_of(4, 300 * KIB)  # intact, but not the entry the record was written for
    assert not DirectDescriptor(4096, len(other), digest).names(other)


def test_journal_files_of_version_1_still_replay(tmp_path: Path) -> None:
    record = JournalRecord(RecordKind.ADD, 1, 0, KEY, entry_of(0, 100))
    (tmp_path / file_name(1)).write_bytes(FILE_HEADER.pack(FILE_MAGIC, 1, 0, 1) + record.encode())
    assert [got for got, _ in replay(str(tmp_path), (0, 0))] == [record]


# ---------------------------------------------------------------------- the log file


def o_direct_on(fd: int) -> bool:
    return bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT)


def test_entries_are_written_aligned_with_o_direct_and_read_and_scanned_as_an_entry_log(
    tmp_path: Path,
) -> None:
    logs = EntryLogger(str(tmp_path), 64 * MIB)
    log = DirectEntryLog(logs, preallocate_bytes=8 * MIB)
    entries = [entry_of(i, size) for i, size in enumerate((300 * KIB, MIB, 5000, MIB))]
    locations = log.write(entries[:2]) + log.write(entries[2:])
    assert log.direct and o_direct_on(log._fd)
    assert [split_location(loc)[1] % BLOCK_BYTES for loc in locations] == [0] * 4
    assert [logs.read(loc, 1, i) for i, loc in enumerate(locations)] == entries
    assert logs.pins.pinned() == {log.log_id}
    path = logs.path(log.log_id)
    assert os.path.getsize(path) == 8 * MIB  # preallocated: scans read the zeros as padding
    scanned = [(offset, entry) for offset, _, _, entry in logs.scan(log.log_id)]
    assert scanned == [
        (split_location(loc)[1], e) for loc, e in zip(locations, entries, strict=True)
    ]

    log.close()  # cut back to its last record
    end = split_location(locations[-1])[1] + record_span(len(entries[-1]))
    assert os.path.getsize(path) == end
    assert [entry for _, _, _, entry in logs.scan(log.log_id)] == entries
    logs.close()


def test_a_log_rolls_at_the_size_limit_and_each_location_stays_pinned(tmp_path: Path) -> None:
    logs = EntryLogger(str(tmp_path), 2 * MIB)
    log = DirectEntryLog(logs)
    first = log.write([entry_of(0, MIB)])[0]
    second = log.write([entry_of(1, MIB + 1)])[0]
    assert split_location(second)[0] == log.log_id != split_location(first)[0]
    assert logs.pins.pinned() == {split_location(first)[0], log.log_id}
    logs.pins.unpin([first >> 32, second >> 32])
    log.close()
    assert logs.pins.pinned() == frozenset()
    first_bytes = BLOCK_BYTES + record_span(MIB + protocol.ENTRY_HEADER_BYTES)
    assert os.path.getsize(logs.path(first >> 32)) == first_bytes
    logs.close()


class RefuseDirectWrites(FileWrites):
    """A file system that takes O_DIRECT opens but refuses O_DIRECT writes."""

    def pwritev(self, fd: int, buffers: list[Buffer], offset: int) -> int:
        if o_direct_on(fd):
            raise OSError(errno.EINVAL, "Invalid argument")
        return super().pwritev(fd, buffers, offset)


def test_a_refused_o_direct_write_falls_back_to_buffered_writes_warned_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(direct_entry_log, "_warned_refused", False)
    logs = EntryLogger(str(tmp_path), 64 * MIB)
    log = DirectEntryLog(logs, RefuseDirectWrites())
    entries = [entry_of(0, MIB), entry_of(1, 300 * KIB)]
    with caplog.at_level(logging.WARNING, logger="bookie.direct_entry_log"):
        locations = log.write(entries[:1]) + log.write(entries[1:])
        log.close()
        other = DirectEntryLog(logs, RefuseDirectWrites())
        locations += other.write(entries)
        other.close()
    assert not log.direct and not other.direct
    assert [logs.read(loc, 1, i % 2) for i, loc in enumerate(locations)] == entries * 2
    refused = [r for r in caplog.records if "O_DIRECT refused" in r.getMessage()]
    assert len(refused) == 1 and refused[0].levelno == logging.WARNING
    logs.close()


def test_a_refused_o_direct_open_falls_back_to_a_buffered_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_open = os.open

    def refusing_open(path: str, flags: int, mode: int = 0o777) -> int:
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, mode)

    logs = EntryLogger(str(tmp_path), 64 * MIB)
    monkeypatch.setattr(os, "open", refusing_open)
    log = DirectEntryLog(logs)
    location = log.write([entry_of(3, MIB)])[0]
    monkeypatch.undo()
    assert not log.direct and not o_direct_on(log._fd)
    assert logs.read(location, 1, 3) == entry_of(3, MIB)
    log.close()
    logs.close()


class FailingSync(FileWrites):
    def fdatasync(self, fd: int) -> None:
        if o_direct_on(fd):
            raise OSError(errno.EIO, "Input/output error")
        super().fdatasync(fd)


def test_a_failed_sync_pins_nothing_and_the_next_group_starts_a_new_log(tmp_path: Path) -> None:
    logs = EntryLogger(str(tmp_path), 64 * MIB)
    writes = FailingSync()
    log = DirectEntryLog(logs, writes)
    with pytest.raises(OSError):
        log.write([entry_of(0, MIB)])  # the new log's header sync fails
    assert logs.pins.pinned() == frozenset()
    log.direct = False  # the next log is buffered: its syncs succeed
    location = log.write([entry_of(1, MIB)])[0]
    assert logs.read(location, 1, 1) == entry_of(1, MIB)
    log.close()
    logs.close()


# ---------------------------------------------------------------------- ledger storage


def test_a_checkpoint_indexes_direct_adds_and_only_then_lets_compaction_take_their_log(
    tmp_path: Path,
) -> None:
    storage = LedgerStorage(
        str(tmp_path),
        entry_log_bytes_max=2 * MIB,
        write_cache_bytes_max=64 * MIB,
        read_cache_bytes_max=0,
    )
    log = DirectEntryLog(storage.entry_logger)
    entries = [entry_of(0, MIB), entry_of(1, MIB + 1)]  # the second rolls the log
    locations = [log.write([entry])[0] for entry in entries]
    for entry_id, (loc, entry) in enumerate(zip(locations, entries, strict=True)):
        storage.apply_direct_add(1, entry_id, KEY, loc, len(entry), entry_id - 1)
    first_log = locations[0] >> 32
    assert first_log in storage.entry_logger.pins.pinned()
    assert first_log not in compactor.live_ratios(storage)  # unindexed: left alone
    assert storage._read_from_log(1, 0) == entries[0]  # found without the index
    assert storage.index.get_location(1, 0) is None

    storage._checkpoint_sync((1, 16))
    assert [storage.index.get_location(1, e) for e in (0, 1)] == locations
    assert storage.entry_logger.pins.pinned() == {log.log_id}  # only the log being written
    live, total = compactor.live_ratios(storage)[first_log]
    assert live == 4 + len(entries[0])
    assert total == BLOCK_BYTES - LOG_HEADER_BYTES + record_span(len(entries[0]))
    assert storage.states[1].last_entry_id == 1
    log.close()
    storage.entry_logger.close()
    storage.index.close()


def test_a_file_system_without_fallocate_is_written_without_preallocation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_fallocate(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.EOPNOTSUPP, "Operation not supported")

    logs = EntryLogger(str(tmp_path), 64 * MIB)
    log = DirectEntryLog(logs)
    monkeypatch.setattr(os, "posix_fallocate", no_fallocate)
    locations = log.write([entry_of(0, MIB), entry_of(1, 5000)])
    monkeypatch.undo()
    assert log.preallocate_bytes == 0 and log.direct
    assert os.path.getsize(logs.path(log.log_id)) == BLOCK_BYTES + record_span(
        MIB + protocol.ENTRY_HEADER_BYTES
    ) + record_span(5000 + protocol.ENTRY_HEADER_BYTES)
    assert [logs.read(loc, 1, i) for i, loc in enumerate(locations)] == [
        entry_of(0, MIB),
        entry_of(1, 5000),
    ]
    log.close()
    logs.close()


def test_direct_locations_hold_their_pins_until_the_checkpoint_that_covers_them() -> None:
    pins = LogPins()
    locations = DirectLocations(pins, slice_entries=2)
    for entry_id in range(3):
        pins.pin(7)
        locations.add((1, entry_id), (7 << 32) | (entry_id + 1) * BLOCK_BYTES, 100)
    pins.pin(8)
    locations.add((2, 0), 8 << 32 | BLOCK_BYTES, 100)
    locations.swap(known_ledgers={1})  # ledger 2 was deleted: dropped, pin kept for now
    assert locations.get((1, 2)) == (7 << 32) | 3 * BLOCK_BYTES and locations.get((2, 0)) is None
    pins.pin(7)
    locations.add((1, 0), (7 << 32) | 9 * BLOCK_BYTES, 100)  # a newer copy, after the swap
    slices, added = locations.checkpoint_writes()
    assert [len(piece) for piece in slices] == [2, 1]
    assert added == {(7, 1): 3 * (4 + 100)}

    locations.unswap()  # the checkpoint failed: the older copy of (1, 0) is dropped
    assert locations.get((1, 0)) == (7 << 32) | 9 * BLOCK_BYTES
    assert pins.pinned() == {7, 8}
    locations.swap(known_ledgers={1})
    locations.indexed()
    assert pins.pinned() == frozenset()
    assert locations.get((1, 1)) is None  # the index has it now
