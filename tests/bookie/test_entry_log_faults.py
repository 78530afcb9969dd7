"""The entry logger's write path under short writes, ENOSPC and EIO.

Faults come from `FaultyWrites` (tests/bookie/faulty_file_writes.py), a stand-in for the
entry logger's system calls: in-process against a real `LedgerStorage` (entry logs and
RocksDB index in a temporary directory), and in real bookie processes started through
its launcher. The invariants: a failed flush never indexes bytes the log does not hold,
before or after later checkpoints; its entries stay readable and are written by a later
checkpoint or replayed from the journal; every acknowledged entry reads back
byte-identical, after a kill -9 and restart too; the bookie is read-only while its
checkpoints fail and stops with exit code 5 when a disk error persists.
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from blobstore.wire import protocol
from blobstore.wire.protocol import Status
from bookie.entry_location_index import EntryLocationIndex
from bookie.entry_logger import LOG_HEADER_BYTES, LOG_SUFFIX, RECORD_LENGTH, split_location
from bookie.ledger_dirs_monitor import STORAGE_FAILURES_BEFORE_STOP, storage_error_action
from bookie.ledger_storage import LedgerStorage
from tests.bookie.faulty_file_writes import Fault, FaultyWrites, write_control_file
from tests.bookie.raw_client import RawBookie, entry_bytes, http_get, payload_for, seed
from tests.cluster.processes import BookieProcess
from tests.conftest import BookieFactory
from tests.waiting import wait_until

MASTER_KEY = b"k" * 20
WAIT_S = 30.0
Expected = dict[tuple[int, int], bytes]


class StubJournal:
    """What a checkpoint asks of the journal: its synced position; files it may delete."""

    def __init__(self) -> None:
        self.synced_position = (1, 0)
        self.deleted_before: list[int] = []

    def delete_files_before(self, journal_id: int) -> None:
        self.deleted_before.append(journal_id)


def open_storage(path: Path, writes: FaultyWrites | None = None) -> LedgerStorage:
    storage = LedgerStorage(
        str(path),
        entry_log_bytes_max=12 << 20,
        write_cache_bytes_max=64 << 20,
        read_cache_bytes_max=1 << 20,
        file_writes=writes,
    )
    storage.journal = StubJournal()  # type: ignore[assignment]
    return storage


def add_entries(
    storage: LedgerStorage, rng: random.Random, ledgers: list[int], count: int, expected: Expected
) -> list[tuple[int, int]]:
    """`count` adds spread over `ledgers` (sizes up to 4.5 MB: some pass the logger's
    buffer and are written from the entries themselves); their keys."""
    keys = []
    for _ in range(count):
        ledger_id = rng.choice(ledgers)
        entry_id = 1 + max((e for (lid, e) in expected if lid == ledger_id), default=-1)
        size = rng.choice([0, 1, 700, 4096, 65_000, 300_000] + [4_500_000] * (rng.random() < 0.05))
        data = protocol.Entry(ledger_id, entry_id, entry_id - 1, size, rng.randbytes(size)).encode()
        storage.apply_add(ledger_id, entry_id, MASTER_KEY, data)
        expected[(ledger_id, entry_id)] = data
        keys.append((ledger_id, entry_id))
    return keys


def checkpoint(storage: LedgerStorage, position: int) -> None:
    assert storage.journal is not None
    storage.journal.synced_position = (1, position)
    asyncio.run(storage.checkpoint(paced=False))


def index_problems(ledger_dir: Path, expected: Expected) -> Iterator[str]:
    """Every index location that does not name a whole record holding that very entry
    (with the expected bytes, when known), read from the files alone."""
    index = EntryLocationIndex(str(ledger_dir))
    try:
        for ledger_id, entry_id, loc in index.locations():
            log_id, offset = split_location(loc)
            path = ledger_dir / "current" / f"{log_id:08x}{LOG_SUFFIX}"
            if not path.exists():
                yield f"{(ledger_id, entry_id)} names missing log {log_id}"
                continue
            blob = path.read_bytes()
            if offset < LOG_HEADER_BYTES or offset + RECORD_LENGTH.size > len(blob):
                yield f"{(ledger_id, entry_id)} names offset {offset} past log {log_id}'s end"
                continue
            (length,) = RECORD_LENGTH.unpack_from(blob, offset)
            data = blob[offset + RECORD_LENGTH.size : offset + RECORD_LENGTH.size + length]
            if len(data) != length or len(data) < protocol.ENTRY_HEADER.size:
                yield f"{(ledger_id, entry_id)} names a cut record at {log_id}:{offset}"
                continue
            held = protocol.ENTRY_HEADER.unpack_from(data, 0)[:2]
            if held != (ledger_id, entry_id):
                yield f"{(ledger_id, entry_id)} names {log_id}:{offset}, which holds {held}"
            elif (ledger_id, entry_id) in expected and data != expected[(ledger_id, entry_id)]:
                yield f"{(ledger_id, entry_id)} at {log_id}:{offset} differs"
    finally:
        index.close()


def assert_reads_back(ledger_dir: Path, expected: Expected) -> None:
    """A fresh storage on the directory (a restart without replay) reads every entry
    from its entry log, byte-identical, and the index names only real records."""
    assert list(index_problems(ledger_dir, expected)) == []
    storage = open_storage(ledger_dir)
    try:
        for (ledger_id, entry_id), data in expected.items():
            got = storage._read_from_log(ledger_id, entry_id)
            assert got == data, f"entry {(ledger_id, entry_id)} differs or is missing"
        for ledger_id in {lid for lid, _ in expected}:
            counted = sum(per.get(ledger_id, 0) for per in storage.log_ledger_bytes.values())
            assert counted == sum(
                RECORD_LENGTH.size + len(d) for (lid, _), d in expected.items() if lid == ledger_id
            ), f"ledger {ledger_id}: byte counts include bytes never written"
    finally:
        asyncio.run(storage.close())


# ---------------------------------------------------------------------- in-process


@pytest.mark.parametrize("short_bytes", [7, 777, 100_000])
def test_short_writes_are_completed_never_skipped(tmp_path: Path, short_bytes: int) -> None:
    rng = random.Random(seed() + short_bytes)
    writes = FaultyWrites([Fault("pwritev", short_bytes=short_bytes)])
    storage = open_storage(tmp_path, writes)
    expected: Expected = {}
    count = 30 if short_bytes < 100 else 150
    add_entries(storage, rng, [3, 8, 2**40], count, expected)
    checkpoint(storage, 100)
    assert writes.calls["pwritev"] > count // 50, writes.calls  # it did cut the writes
    asyncio.run(storage.close())
    assert_reads_back(tmp_path, expected)


FAULTS = {
    "enospc-at-the-first-write": [Fault("pwritev", "ENOSPC")],
    "enospc-mid-checkpoint": [Fault("pwritev", "ENOSPC", skip=1)],
    "disk-fills-short-write-then-enospc": [Fault("pwritev", "ENOSPC", budget_bytes=1_500_000)],
    "eio-on-fdatasync": [Fault("fdatasync", "EIO")],
    "eio-on-writeback": [Fault("start_writeback", "EIO", skip=1)],
    "write-makes-no-progress": [Fault("pwritev", budget_bytes=0)],
}


@pytest.mark.parametrize("faults", list(FAULTS.values()), ids=list(FAULTS))
def test_failed_flush_indexes_nothing_and_a_later_checkpoint_writes_it(
    tmp_path: Path, faults: list[Fault]
) -> None:
    rng = random.Random(seed())
    writes = FaultyWrites()
    storage = open_storage(tmp_path, writes)
    expected: Expected = {}
    add_entries(storage, rng, [5, 6, 7], 40, expected)
    checkpoint(storage, 100)  # clean: these are in an entry log
    failed = add_entries(storage, rng, [5, 6, 9], 150, expected)
    failed_log = storage.entry_logger.current_log_id

    writes.set_faults(faults)
    with pytest.raises(OSError):
        checkpoint(storage, 200)
    assert storage.mark == (1, 100) == storage.index.load_mark(), "the mark moved"
    assert [key for key in failed if storage.index.get_location(*key) is not None] == []
    for key in failed:  # still readable, from the write cache
        assert storage.read_now(*key) == expected[key]
    assert storage.active_bytes == sum(len(expected[key]) for key in failed)
    assert list(index_problems_open(storage, expected)) == []

    # The next checkpoint (the fault gone) writes them into a new log at the offsets
    # their locations name, with more entries after them.
    writes.set_faults([])
    add_entries(storage, rng, [5, 10], 30, expected)
    checkpoint(storage, 300)
    assert storage.entry_logger.current_log_id > failed_log
    assert storage.mark == (1, 300)
    asyncio.run(storage.close())
    assert_reads_back(tmp_path, expected)


def index_problems_open(storage: LedgerStorage, expected: Expected) -> Iterator[str]:
    """`index_problems` for a storage still open (its index read through it)."""
    for ledger_id, entry_id, loc in storage.index.locations():
        try:
            data = storage.entry_logger.read(loc, ledger_id, entry_id)
        except OSError as e:
            yield f"{(ledger_id, entry_id)}: {e}"
            continue
        if data != expected.get((ledger_id, entry_id), data):
            yield f"{(ledger_id, entry_id)} differs"


def test_failed_log_is_cut_to_its_synced_end_and_never_appended_again(tmp_path: Path) -> None:
    rng = random.Random(seed())
    writes = FaultyWrites()
    storage = open_storage(tmp_path, writes)
    expected: Expected = {}
    add_entries(storage, rng, [1], 20, expected)
    checkpoint(storage, 10)
    failed_log = storage.entry_logger.current_log_id
    synced_end = storage.entry_logger.log_bytes(failed_log)
    add_entries(storage, rng, [1], 20, expected)
    writes.set_faults([Fault("fdatasync", "EIO")])  # the bytes reached the file, not the disk
    with pytest.raises(OSError):
        checkpoint(storage, 20)
    path = Path(storage.entry_logger.path(failed_log))
    assert path.stat().st_size == synced_end
    writes.set_faults([])
    checkpoint(storage, 30)
    assert path.stat().st_size == synced_end, "a failed log was appended to"
    asyncio.run(storage.close())
    assert_reads_back(tmp_path, expected)


def test_a_new_log_that_cannot_be_created_leaves_no_file(tmp_path: Path) -> None:
    rng = random.Random(seed())
    writes = FaultyWrites()
    storage = open_storage(tmp_path, writes)
    expected: Expected = {}
    add_entries(storage, rng, [1], 10, expected)
    writes.set_faults([Fault("pwritev", "ENOSPC")])
    with pytest.raises(OSError):
        checkpoint(storage, 10)
    logs = storage.entry_logger.list_logs()
    with pytest.raises(OSError):  # the retry's new log fails at its header
        checkpoint(storage, 20)
    assert storage.entry_logger.list_logs() == logs
    writes.set_faults([])
    checkpoint(storage, 30)
    asyncio.run(storage.close())
    assert_reads_back(tmp_path, expected)


def test_failed_compaction_leaves_index_and_counts_alone(tmp_path: Path) -> None:
    from bookie.compactor import compact_log

    rng = random.Random(seed())
    writes = FaultyWrites()
    storage = open_storage(tmp_path, writes)
    expected: Expected = {}
    add_entries(storage, rng, [1, 2], 40, expected)
    checkpoint(storage, 10)
    old_log = storage.entry_logger.current_log_id
    storage.entry_logger.roll_if_used()
    counts = {log: dict(per) for log, per in storage.log_ledger_bytes.items()}
    locations = list(storage.index.locations())
    writes.set_faults([Fault("pwritev", "ENOSPC", budget_bytes=200_000)])
    with pytest.raises(OSError):
        compact_log(storage, old_log, "forced")
    assert list(storage.index.locations()) == locations
    assert storage.log_ledger_bytes == counts
    assert old_log in storage.entry_logger.list_logs()
    writes.set_faults([])
    compact_log(storage, old_log, "forced")
    assert old_log not in storage.entry_logger.list_logs()
    asyncio.run(storage.close())
    assert_reads_back(tmp_path, expected)


@pytest.mark.parametrize(
    ("error", "failures", "action"),
    [
        ("ENOSPC", 1, "read_only"),
        ("ENOSPC", 1000, "read_only"),  # a full disk never stops it: GC may free space
        ("EDQUOT", 50, "read_only"),
        ("EIO", 1, "read_only"),
        ("EIO", STORAGE_FAILURES_BEFORE_STOP - 1, "read_only"),
        ("EIO", STORAGE_FAILURES_BEFORE_STOP, "stop"),
        (None, STORAGE_FAILURES_BEFORE_STOP, "stop"),  # not an OSError: the index, a bug
    ],
)
def test_failed_checkpoint_turns_read_only_and_a_persistent_disk_error_stops(
    error: str | None, failures: int, action: str
) -> None:
    import errno

    number = getattr(errno, error) if error else None
    assert storage_error_action(number, failures) == action


# ---------------------------------------------------------------------- bookie processes


@pytest.fixture
def faulty_bookies(bookies: BookieFactory, monkeypatch: pytest.MonkeyPatch) -> BookieFactory:
    """`bookies`, started through the fault-injecting launcher (faults off until a
    test writes the control file, `write_control_file(bookie.root, ...)`)."""
    monkeypatch.setattr(
        "tests.cluster.processes.blobstore_command",
        lambda *args: [sys.executable, "-m", "tests.bookie.faulty_file_writes", *args],
    )
    return bookies


async def add_all(port: int, plan: list[tuple[int, int, bytes]]) -> list[Status]:
    client = await RawBookie.connect(port)
    try:
        return list(
            await asyncio.gather(
                *(client.add(ledger, entry, payload) for ledger, entry, payload in plan)
            )
        )
    finally:
        await client.close()


async def read_back(port: int, plan: list[tuple[int, int, bytes]]) -> list[tuple[int, int]]:
    """The (ledger, entry) keys of the plan that do not read back identical."""
    client = await RawBookie.connect(port)
    try:
        got = await asyncio.gather(
            *(client.read_payload(ledger, entry) for ledger, entry, _ in plan)
        )
    finally:
        await client.close()
    return [
        (ledger, entry)
        for (ledger, entry, payload), data in zip(plan, got, strict=True)
        if data != payload
    ]


def plan_for(ledgers: list[int], entries: range, size: int) -> list[tuple[int, int, bytes]]:
    return [
        (ledger, entry, payload_for(seed(), ledger, entry, size))
        for ledger in ledgers
        for entry in entries
    ]


def bookie_info(http_port: int) -> dict[str, object]:
    status, body = http_get(http_port, "/info")
    assert status == 200, body
    return dict(json.loads(body))


def log_text(bookie: BookieProcess) -> str:
    return (bookie.root / "bookie.log").read_text(errors="replace")


CHECKPOINT_ARGS = ["--checkpoint-interval-s", "0.3", "--disk-check-interval-s", "0.3"]


def test_kill_9_after_a_failed_flush_loses_no_acknowledged_entry(
    faulty_bookies: BookieFactory,
) -> None:
    (bookie,) = faulty_bookies(1, CHECKPOINT_ARGS)
    before = plan_for([11, 12], range(0, 40), 20_000)
    assert asyncio.run(add_all(bookie.port, before)) == [Status.OK] * len(before)
    wait_until(
        lambda: bookie_info(bookie.http_port)["write_cache_bytes"] == 0,
        WAIT_S,
        message="a clean checkpoint",
    )
    # The disk fills in the middle of the next checkpoint's writes.
    write_control_file(bookie.root, [Fault("pwritev", "ENOSPC", budget_bytes=300_000)])
    failed = plan_for([11, 13], range(40, 100), 20_000)
    assert asyncio.run(add_all(bookie.port, failed)) == [Status.OK] * len(failed)
    wait_until(
        lambda: bookie_info(bookie.http_port)["read_only"],
        WAIT_S,
        message="read-only after the failed checkpoint",
    )
    text = log_text(bookie)
    assert "entry_log_write_failed" in text and "checkpoint_failed" in text, text[-3000:]
    refused = asyncio.run(add_all(bookie.port, plan_for([14], range(1), 10)))
    assert refused == [Status.READ_ONLY]
    assert asyncio.run(read_back(bookie.port, before + failed)) == []

    bookie.kill()
    write_control_file(bookie.root, [])
    bookie.start()
    assert asyncio.run(read_back(bookie.port, before + failed)) == []
    assert not bookie_info(bookie.http_port)["read_only"]
    after = plan_for([13, 15], range(100, 130), 5_000)
    assert asyncio.run(add_all(bookie.port, after)) == [Status.OK] * len(after)
    assert bookie.stop() == 0
    expected = {
        (lid, e): entry_bytes(lid, e, payload) for lid, e, payload in before + failed + after
    }
    assert_reads_back(bookie.ledger_dir, expected)


def test_a_full_disk_turns_read_only_until_a_checkpoint_succeeds(
    faulty_bookies: BookieFactory,
) -> None:
    (bookie,) = faulty_bookies(1, CHECKPOINT_ARGS)
    write_control_file(bookie.root, [Fault("pwritev", "ENOSPC", budget_bytes=100_000)])
    first = plan_for([21, 22], range(0, 30), 10_000)
    assert asyncio.run(add_all(bookie.port, first)) == [Status.OK] * len(first)
    wait_until(lambda: bookie_info(bookie.http_port)["read_only"], WAIT_S, message="read-only")
    write_control_file(bookie.root, [])  # space freed
    wait_until(
        lambda: not bookie_info(bookie.http_port)["read_only"],
        WAIT_S,
        message="writable once a checkpoint succeeded",
    )
    assert "checkpoint_recovered" in log_text(bookie)
    second = plan_for([21, 23], range(30, 50), 10_000)
    assert asyncio.run(add_all(bookie.port, second)) == [Status.OK] * len(second)
    assert asyncio.run(read_back(bookie.port, first + second)) == []
    assert bookie.stop() == 0
    expected = {(lid, e): entry_bytes(lid, e, payload) for lid, e, payload in first + second}
    assert_reads_back(bookie.ledger_dir, expected)


def test_a_persistent_disk_error_stops_the_bookie_and_a_restart_replays(
    faulty_bookies: BookieFactory,
) -> None:
    (bookie,) = faulty_bookies(1, CHECKPOINT_ARGS)
    write_control_file(bookie.root, [Fault("fdatasync", "EIO")])
    plan = plan_for([31, 32], range(0, 25), 30_000)
    assert asyncio.run(add_all(bookie.port, plan)) == [Status.OK] * len(plan)
    assert bookie.managed is not None and bookie.managed.process is not None
    code = bookie.managed.process.wait(timeout=WAIT_S)
    assert code == 5, log_text(bookie)[-3000:]
    assert "bookie_stopping_on_storage_errors" in log_text(bookie)

    # Still failing (a new log is made, the replayed entries cannot be synced): the
    # start refuses, in one line, and the journal keeps them.
    write_control_file(bookie.root, [Fault("fdatasync", "EIO", skip=1)])
    with pytest.raises(RuntimeError, match="exited with 5"):
        bookie.start(timeout_s=WAIT_S)
    assert "the journal's entries cannot be written" in log_text(bookie)
    assert "The bookie does not start" in log_text(bookie)

    write_control_file(bookie.root, [])  # the disk replaced
    bookie.start()
    assert asyncio.run(read_back(bookie.port, plan)) == []
    bookie.managed.process.send_signal(signal.SIGTERM)
    assert bookie.managed.process.wait(timeout=WAIT_S) == 0
    expected = {(lid, e): entry_bytes(lid, e, payload) for lid, e, payload in plan}
    assert_reads_back(bookie.ledger_dir, expected)
