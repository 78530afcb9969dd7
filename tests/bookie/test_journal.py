"""Unit tests: journal record codec, torn-tail replay, group commit decision."""

from __future__ import annotations

import asyncio
import logging
import os
import random
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from blobstore.wire import protocol
from bookie.disk_io import FOLIO_BYTES_MAX
from bookie.journal import (
    FILE_HEADER_BYTES,
    Journal,
    JournalCorruptError,
    JournalRecord,
    JournalUnavailableError,
    RecordKind,
    file_name,
    group_commit_decision,
    list_journal_ids,
    replay,
    zero_ahead_start,
)
from tests.bookie.page_cache import resident_pages
from tests.waiting import wait_until_async

KEY = protocol.master_key(b"pw")


def entry(ledger_id: int, entry_id: int, payload: bytes) -> bytes:
    return protocol.Entry(ledger_id, entry_id, entry_id - 1, 1 << 30, payload).encode()


@pytest.mark.parametrize(
    "record",
    [
        JournalRecord(RecordKind.ADD, 7, 3, KEY, entry(7, 3, b"hello")),
        JournalRecord(RecordKind.ADD, 2**63, 0, KEY, entry(2**63, 0, b"")),
        JournalRecord(RecordKind.FENCE, 9, -1, KEY),
        JournalRecord(RecordKind.LAC, 9, 41, KEY),
    ],
)
def test_record_round_trip(record: JournalRecord) -> None:
    encoded = record.encode()
    decoded, used = JournalRecord.decode(encoded + b"trailing")
    assert decoded == record
    assert used == len(encoded)


def test_record_rejects_corruption() -> None:
    encoded = bytearray(JournalRecord(RecordKind.ADD, 1, 0, KEY, entry(1, 0, b"x" * 100)).encode())
    for cut in (0, 3, 8, 20, len(encoded) - 1):
        with pytest.raises(ValueError):
            JournalRecord.decode(bytes(encoded[:cut]))
    encoded[50] ^= 0x01
    with pytest.raises(ValueError, match="crc"):
        JournalRecord.decode(bytes(encoded))
    with pytest.raises(ValueError, match="length"):
        JournalRecord.decode(b"\xff\xff\xff\xff" + bytes(60))


@pytest.mark.parametrize(
    ("batch_bytes", "age_s", "queue_empty", "expected"),
    [
        (0, 1.0, True, None),  # nothing to write
        (600 * 1024, 0.0, False, "bytes"),  # threshold passed
        (1024, 0.003, False, "wait"),  # oldest waited long enough
        (1024, 0.0, True, "empty"),  # nothing else queued: write now
        (1024, 0.0005, False, None),  # more queued, young batch: keep gathering
    ],
)
def test_group_commit_decision(
    batch_bytes: int, age_s: float, queue_empty: bool, expected: str | None
) -> None:
    reason = group_commit_decision(
        batch_bytes, age_s, queue_empty, max_wait_s=0.002, threshold_bytes=512 * 1024
    )
    assert reason == expected


@pytest.mark.parametrize(
    ("batch_bytes", "age_s", "expected"),
    [
        (1024, 0.0, None),  # nothing else queued, young: gather for the group wait
        (1024, 0.0019, None),
        (1024, 0.002, "wait"),
        (600 * 1024, 0.0, "bytes"),
    ],
)
def test_group_commit_decision_gathering_on_an_empty_queue(
    batch_bytes: int, age_s: float, expected: str | None
) -> None:
    reason = group_commit_decision(
        batch_bytes,
        age_s,
        True,
        max_wait_s=0.002,
        threshold_bytes=512 * 1024,
        flush_when_queue_empty=False,
    )
    assert reason == expected


def run_journal(
    directory: Path,
    records: list[JournalRecord],
    file_bytes_max: int = 1 << 20,
    remove_from_page_cache: bool = True,
    zero_ahead_bytes: int = 0,
) -> tuple[int, int]:
    async def main() -> tuple[int, int]:
        journal = Journal(
            str(directory),
            max_group_wait_ms=2,
            buffered_writes_threshold_bytes=64 * 1024,
            file_bytes_max=file_bytes_max,
            queue_entries_max=100_000,
            remove_from_page_cache=remove_from_page_cache,
            zero_ahead_bytes=zero_ahead_bytes,
        )
        journal.open_new_file()
        journal.start()
        futures = []
        for record in records:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

            def done(error: BaseException | None, future: asyncio.Future[None] = future) -> None:
                future.set_result(None) if error is None else future.set_exception(error)

            encoded = record.encode()
            journal.submit([encoded, b""], len(encoded), None, done)
            futures.append(future)
            if len(futures) % 10 == 0:
                await future  # several group commits, so files roll between them
        await asyncio.gather(*futures)
        position = journal.synced_position
        await journal.close()
        return position

    return asyncio.run(main())


def test_replay_from_mark_and_rolls(tmp_path: Path) -> None:
    records = [
        JournalRecord(RecordKind.ADD, 5, i, KEY, entry(5, i, os.urandom(3000))) for i in range(100)
    ]
    run_journal(tmp_path, records, file_bytes_max=64 * 1024)
    assert len(list_journal_ids(str(tmp_path))) > 2, "small files roll"
    replayed = [r for r, _ in replay(str(tmp_path), (0, 0))]
    assert replayed == records
    # From a mark in the middle: only what follows it.
    positions = [p for _, p in replay(str(tmp_path), (0, 0))]
    middle = positions[49]
    assert [r for r, _ in replay(str(tmp_path), middle)] == records[50:]


def test_torn_tail_is_ignored(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    records = [JournalRecord(RecordKind.ADD, 1, i, KEY, entry(1, i, b"p" * 500)) for i in range(10)]
    records.append(JournalRecord(RecordKind.FENCE, 1, -1, KEY))
    run_journal(tmp_path, records)
    path = tmp_path / file_name(list_journal_ids(str(tmp_path))[-1])
    whole = path.read_bytes()
    last = len(records[-1].encode())
    # Tear the last record (a crash mid-write) and append garbage after a cut one.
    path.write_bytes(whole[: len(whole) - last + 5])
    assert [r for r, _ in replay(str(tmp_path), (0, 0))] == records[:-1]
    assert "journal_torn_tail" in caplog.text
    path.write_bytes(whole[: len(whole) - 3] + os.urandom(2000))
    assert [r for r, _ in replay(str(tmp_path), (0, 0))] == records[:-1]
    # A flipped bit inside a middle record stops replay there, never yields corrupt data.
    corrupt = bytearray(whole)
    corrupt[FILE_HEADER_BYTES + 100] ^= 0x40
    path.write_bytes(bytes(corrupt))
    assert [r for r, _ in replay(str(tmp_path), (0, 0))] == []


def test_torn_tail_is_cut_so_a_later_file_stays_clean(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """After a crash the bookie starts a new journal file, so the torn file is no longer
    the newest: replay cuts its torn tail off the first time, and later replays (after
    another crash) find a clean older file instead of reporting corruption."""
    records = [JournalRecord(RecordKind.ADD, 2, i, KEY, entry(2, i, b"q" * 700)) for i in range(8)]
    run_journal(tmp_path, records)
    path = tmp_path / file_name(list_journal_ids(str(tmp_path))[-1])
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) - 300])  # the last record torn
    assert [r for r, _ in replay(str(tmp_path), (0, 0))] == records[:-1]
    assert "journal_torn_tail" in caplog.text
    assert path.stat().st_size < len(whole) - 300, "the torn bytes are gone"
    later = [JournalRecord(RecordKind.ADD, 3, i, KEY, entry(3, i, b"r" * 100)) for i in range(3)]
    run_journal(tmp_path, later)  # the restarted bookie's new file
    caplog.clear()
    assert [r for r, _ in replay(str(tmp_path), (0, 0))] == records[:-1] + later
    assert "journal_torn_tail" not in caplog.text


def test_damage_in_a_completed_file_stops_replay(tmp_path: Path) -> None:
    """A file with a later file after it was fsync'd whole: a bad record there is lost
    acknowledged data, never a torn tail, and replay refuses to go past it."""
    records = [JournalRecord(RecordKind.ADD, 4, i, KEY, entry(4, i, b"s" * 900)) for i in range(6)]
    run_journal(tmp_path, records)
    run_journal(tmp_path, [JournalRecord(RecordKind.FENCE, 4, -1, KEY)])
    first = tmp_path / file_name(list_journal_ids(str(tmp_path))[0])
    damaged = bytearray(first.read_bytes())
    damaged[FILE_HEADER_BYTES + 50] ^= 0x01
    first.write_bytes(bytes(damaged))
    with pytest.raises(JournalCorruptError, match="corrupt at offset"):
        list(replay(str(tmp_path), (0, 0)))
    assert first.read_bytes() == bytes(damaged), "nothing is cut from a completed file"


@pytest.mark.parametrize("remove", [True, False])
def test_synced_pages_leave_the_page_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, remove: bool
) -> None:
    """After each fsync the journal drops the whole pages it has synced from the page
    cache, file by file; with the setting off it drops nothing."""
    dropped: dict[int, list[tuple[int, int]]] = {}
    real = os.posix_fadvise

    def spy(fd: int, offset: int, length: int, advice: int) -> None:
        assert advice == os.POSIX_FADV_DONTNEED
        dropped.setdefault(os.fstat(fd).st_ino, []).append((offset, length))
        real(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", spy)
    records = [
        JournalRecord(RecordKind.ADD, 7, i, KEY, entry(7, i, os.urandom(5000))) for i in range(60)
    ]
    run_journal(tmp_path, records, file_bytes_max=96 * 1024, remove_from_page_cache=remove)
    # The synced pages left the cache: at most each file's last, partial page stays.
    resident = {path: sum(resident_pages(path)) for path in tmp_path.iterdir()}
    assert [r for r, _ in replay(str(tmp_path), (0, 0))] == records
    if not remove:
        assert dropped == {}
        assert any(pages > 1 for pages in resident.values()), "the kernel kept them"
        return
    assert len(dropped) >= 2, "files rolled, each dropped on its own"
    sizes = {os.stat(path).st_ino: os.stat(path).st_size for path in tmp_path.iterdir()}
    for inode, ranges in dropped.items():
        assert ranges[0][0] == 0
        for (offset, length), (next_offset, _) in zip(ranges, ranges[1:], strict=False):
            # Each range goes on from the previous one's end, restarting at the largest
            # folio boundary below it: a large folio is dropped only when covered whole.
            assert next_offset == (offset + length) // FOLIO_BYTES_MAX * FOLIO_BYTES_MAX
        end = ranges[-1][0] + ranges[-1][1]
        assert all(o % 4096 == 0 and n % 4096 == 0 for o, n in ranges)
        assert end == sizes[inode] - sizes[inode] % 4096, "every whole synced page"
    assert all(pages <= 1 for pages in resident.values()), resident


def test_synced_pages_leave_the_page_cache_behind_zero_ahead(tmp_path: Path) -> None:
    """Zero-ahead writes the file ahead of the writer in 1 MiB chunks, which the page
    cache holds in large folios; the writer's small synced ranges never cover one whole,
    so each drop reaches back to the largest folio boundary below its start. Every page
    more than a folio behind the synced end leaves the cache."""
    records = [
        JournalRecord(RecordKind.ADD, 7, i, KEY, entry(7, i, os.urandom(5000))) for i in range(1000)
    ]
    _, synced_end = run_journal(
        tmp_path, records, file_bytes_max=64 << 20, zero_ahead_bytes=4 << 20
    )
    (path,) = tmp_path.iterdir()
    resident = resident_pages(path)
    behind = (synced_end - FOLIO_BYTES_MAX) // 4096
    assert behind > 256, "the test writes several folios' worth"
    assert sum(resident[:behind]) == 0, f"{sum(resident[:behind])} of {behind} pages still cached"


def test_a_slow_group_commit_is_logged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A write + fsync over SLOW_SYNC_S (a stalling disk) says so, with its size."""
    from bookie import journal as journal_module

    real = os.fdatasync

    def slow(fd: int) -> None:
        time.sleep(0.05)
        real(fd)

    monkeypatch.setattr(journal_module, "SLOW_SYNC_S", 0.01)
    monkeypatch.setattr(os, "fdatasync", slow)
    records = [JournalRecord(RecordKind.ADD, 3, i, KEY, entry(3, i, b"x" * 100)) for i in range(5)]
    with caplog.at_level(logging.WARNING, logger="bookie.journal"):
        run_journal(tmp_path, records)
    slow_lines = [r.getMessage() for r in caplog.records if "write+fsync slow" in r.getMessage()]
    assert slow_lines and all("took_ms=" in line and "bytes=" in line for line in slow_lines)
    assert [r for r, _ in replay(str(tmp_path), (0, 0))] == records


def _journal(directory: Path, **settings: Any) -> Journal:
    journal = Journal(
        str(directory),
        **{
            "max_group_wait_ms": 2,
            "buffered_writes_threshold_bytes": 64 * 1024,
            "file_bytes_max": 1 << 20,
            "queue_entries_max": 100_000,
            **settings,
        },
    )
    journal.open_new_file()
    return journal


def _submit(journal: Journal, record: JournalRecord) -> asyncio.Future[None]:
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def done(error: BaseException | None) -> None:
        future.set_result(None) if error is None else future.set_exception(error)

    encoded = record.encode()
    journal.submit([encoded, b""], len(encoded), None, done)
    return future


def test_adds_queued_during_an_fsync_share_the_next_and_nothing_is_acked_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer thread takes what queued up during an fsync as one batch, and an add
    is acknowledged only after the fsync of the write that holds it."""
    synced: list[int] = []  # bytes on disk at each fsync
    release = threading.Event()
    real = os.fdatasync

    def gated(fd: int) -> None:
        release.wait(10)
        real(fd)
        synced.append(os.fstat(fd).st_size)

    monkeypatch.setattr(os, "fdatasync", gated)

    async def main() -> None:
        journal = _journal(tmp_path)
        journal.start()
        records = [
            JournalRecord(RecordKind.ADD, 9, i, KEY, entry(9, i, b"y" * 200)) for i in range(21)
        ]
        first = _submit(journal, records[0])
        await asyncio.sleep(0.1)  # the writer is inside the first fsync, held
        rest = [_submit(journal, r) for r in records[1:]]
        await asyncio.sleep(0.1)
        assert not first.done() and not any(f.done() for f in rest)
        release.set()
        await asyncio.gather(first, *rest)
        await journal.close()

    asyncio.run(main())
    assert len(synced) == 2, synced  # one fsync for the first add, one for the 20 behind it
    assert [r.value for r, _ in replay(str(tmp_path), (0, 0))] == list(range(21))


def test_a_failed_write_fails_its_batch_and_the_queue_and_stops_the_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = 0
    real = os.fdatasync

    def failing(fd: int) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise OSError(5, "Input/output error")
        real(fd)

    monkeypatch.setattr(os, "fdatasync", failing)

    async def main() -> None:
        journal = _journal(tmp_path)
        journal.start()
        record = JournalRecord(RecordKind.ADD, 4, 0, KEY, entry(4, 0, b"z"))
        await _submit(journal, record)
        with pytest.raises(JournalUnavailableError, match="Input/output"):
            await _submit(journal, record)
        assert isinstance(journal.failure, JournalUnavailableError)
        assert isinstance(journal.failure.__cause__, OSError)
        with pytest.raises(JournalUnavailableError):
            await _submit(journal, record)  # refused at once, not queued
        await asyncio.wait_for(journal.close(), 10)

    asyncio.run(main())


def test_the_writer_waits_for_room_in_the_write_cache(tmp_path: Path) -> None:
    """While the storage says its write cache is full, nothing more is written (so nothing
    more is acknowledged); once the loop's wait for room ends, writing goes on."""

    async def main() -> None:
        journal = _journal(tmp_path)
        full = True
        room = asyncio.Event()
        journal.needs_room = lambda: full

        async def wait_for_room() -> None:
            await room.wait()

        journal.wait_for_room = wait_for_room
        journal.start()
        pending = _submit(journal, JournalRecord(RecordKind.FENCE, 6, -1, KEY))
        await asyncio.sleep(0.2)
        assert not pending.done()
        full = False
        room.set()
        await asyncio.wait_for(pending, 10)
        await journal.close()

    asyncio.run(main())


def test_a_journal_closing_writes_what_it_holds_even_without_room(tmp_path: Path) -> None:
    """Shutdown stops checkpoints before the journal: a writer held for room must not
    hang the close. It writes what it holds (acknowledged after its fsync) and stops."""

    async def main() -> None:
        journal = _journal(tmp_path)
        journal.needs_room = lambda: True
        never = asyncio.Event()

        async def wait_for_room() -> None:
            await never.wait()

        journal.wait_for_room = wait_for_room
        journal.start()
        pending = _submit(journal, JournalRecord(RecordKind.FENCE, 8, -1, KEY))
        await asyncio.sleep(0.3)
        assert not pending.done()
        await asyncio.wait_for(journal.close(), 10)
        await asyncio.wait_for(pending, 1)  # written and fsync'd, not failed

    asyncio.run(main())
    assert [r.ledger_id for r, _ in replay(str(tmp_path), (0, 0))] == [8]


def test_without_flush_on_an_empty_queue_adds_gather_for_the_group_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """journal_flush_when_queue_empty=false: an add alone in the queue waits up to
    journal_max_group_wait_ms for others, and adds arriving within it share its fsync.
    With the default, each add arriving at an idle journal has an fsync of its own."""
    real = os.fdatasync

    def count_fsyncs(flush_when_queue_empty: bool, directory: Path) -> int:
        synced: list[int] = []

        def counted(fd: int) -> None:
            real(fd)
            synced.append(fd)

        monkeypatch.setattr(os, "fdatasync", counted)

        async def main() -> None:
            journal = _journal(
                directory,
                max_group_wait_ms=500,
                flush_when_queue_empty=flush_when_queue_empty,
            )
            journal.start()
            added = []
            for i in range(4):
                record = JournalRecord(RecordKind.ADD, 9, i, KEY, entry(9, i, b"z" * 100))
                added.append(_submit(journal, record))
                await asyncio.sleep(0.05)  # far apart for a journal, well within the wait
            await asyncio.gather(*added)
            await journal.close()

        asyncio.run(main())
        assert [r.value for r, _ in replay(str(directory), (0, 0))] == [0, 1, 2, 3]
        return len(synced)

    (tmp_path / "gather").mkdir()
    (tmp_path / "flush").mkdir()
    assert count_fsyncs(False, tmp_path / "gather") == 1
    assert count_fsyncs(True, tmp_path / "flush") == 4


def test_zero_ahead_start_decision() -> None:
    settings: dict[str, Any] = {
        "window_bytes": 64 * 1024,
        "chunk_bytes": 16 * 1024,
        "write_bytes_per_s": 0.0,
        "max_write_bytes_per_s": 1e6,
    }
    # The first whole page past the writer: its partial last page is written again.
    assert zero_ahead_start(100, 0, **settings) == 4096
    assert zero_ahead_start(4096, 0, **settings) == 4096
    # After the zeros already on disk, while the chunk ends within the window.
    assert zero_ahead_start(100, 20480, **settings) == 20480
    assert zero_ahead_start(100, 49152, **settings) == 49152
    assert zero_ahead_start(100, 53248, **settings) is None
    # A writer past the zeros (it outran them): from its end again.
    assert zero_ahead_start(90_000, 53248, **settings) == 90_112
    # A journal writing faster than the limit gets no zeros.
    assert zero_ahead_start(100, 0, **{**settings, "write_bytes_per_s": 2e6}) is None


def _record_ends(directory: Path) -> dict[int, int]:
    """Each journal file's offset just after its last record (just after its header when
    it holds none: a batch that filled the previous file exactly opens the next one)."""
    ends = dict.fromkeys(list_journal_ids(str(directory)), FILE_HEADER_BYTES)
    for _, (journal_id, offset) in replay(str(directory), (0, 0)):
        ends[journal_id] = offset
    return ends


def test_zero_ahead_never_lands_on_records_and_files_end_at_their_last_record(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Batches of every size, some larger than the window (the writer then waits out a
    chunk being zeroed), files rolling under zero-ahead: every record replays. While the
    journal runs its file holds zeros past the last record; each finished file ends
    exactly at its last record; a copy taken while it runs (what a bookie killed with -9
    leaves) replays the same records and its zero tail is cut off."""
    rng = random.Random(20261125)
    records = [
        JournalRecord(
            RecordKind.ADD,
            4,
            i,
            KEY,
            entry(4, i, rng.randbytes(rng.choice([100, 3000, 40_000, 300_000]))),
        )
        for i in range(240)
    ]
    running = tmp_path / "running"
    killed = tmp_path / "killed"
    running.mkdir()

    async def main() -> None:
        journal = _journal(running, file_bytes_max=2 << 20, zero_ahead_bytes=256 * 1024)
        journal.start()
        futures = []
        for i, record in enumerate(records):
            futures.append(_submit(journal, record))
            if i % 7 == 0:
                await futures[-1]  # batches of one record and of many
        await asyncio.gather(*futures)
        await wait_until_async(
            lambda: journal._zeroed_end > journal._offset,
            10,
            message="no zeros ahead of the writer",
            interval_s=0.01,
        )
        current = running / file_name(journal.journal_id)
        assert current.stat().st_size > journal._offset
        shutil.copytree(running, killed)
        await journal.close()

    asyncio.run(main())
    ids = list_journal_ids(str(running))
    assert len(ids) > 3, "files rolled"
    ends = _record_ends(running)
    assert [r for r, _ in replay(str(running), (0, 0))] == records
    for journal_id in ids:
        assert (running / file_name(journal_id)).stat().st_size == ends[journal_id]
    # The copy: older files were cut when the next one was opened, the newest was not.
    copied_ids = list_journal_ids(str(killed))
    newest = killed / file_name(copied_ids[-1])
    assert newest.stat().st_size > ends[copied_ids[-1]]
    with caplog.at_level(logging.INFO, logger="bookie.journal"):
        assert [r for r, _ in replay(str(killed), (0, 0))] == records
    assert "journal_zero_tail" in caplog.text and "journal_torn_tail" not in caplog.text
    assert newest.stat().st_size == ends[copied_ids[-1]]
