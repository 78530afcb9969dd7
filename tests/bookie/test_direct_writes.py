"""Large adds written once, to a direct entry log, in real bookie processes: kill -9 and
replay, a crash between the data write and the journal record, a torn data log tail, a
damaged entry, and small adds that never wait for a large one (bookie/direct_adds.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from blobstore.wire import protocol
from blobstore.wire.protocol import Status
from bookie import hooks
from bookie.entry_logger import BLOCK_BYTES, RECORD_LENGTH, next_block
from tests.bookie.raw_client import (
    RawBookie,
    entry_bytes,
    http_get,
    metric_value,
    payload_for,
    seed,
)
from tests.bookie.test_forced_gc import force_gc
from tests.bookie.test_garbage_collection import create_metadata
from tests.cluster.processes import BookieProcess
from tests.conftest import BookieFactory
from tests.waiting import wait_until

WAIT_S = 30.0
LARGE_BYTES = 300 << 10  # over the default direct_write_min_bytes (256 KiB)
SMALL_BYTES = 1 << 10
# No checkpoint while a test runs: a restart must rebuild everything from the journal.
NO_CHECKPOINT_ARGS = ("--checkpoint-interval-s", "3600", "--gc-interval-s", "3600")
Plan = list[tuple[int, int, bytes]]


def plan_for(ledger_id: int, entries: range, sizes: tuple[int, ...]) -> Plan:
    """Entries of the ledger, sizes taken in turn."""
    return [
        (ledger_id, e, payload_for(seed(), ledger_id, e, sizes[e % len(sizes)])) for e in entries
    ]


async def add_all(port: int, plan: Plan) -> list[Status]:
    client = await RawBookie.connect(port)
    try:
        return list(
            await asyncio.gather(*(client.add(ledger, entry, data) for ledger, entry, data in plan))
        )
    finally:
        await client.close()


async def read_all(port: int, plan: Plan) -> list[bytes | None]:
    client = await RawBookie.connect(port)
    try:
        return list(
            await asyncio.gather(*(client.read_payload(ledger, entry) for ledger, entry, _ in plan))
        )
    finally:
        await client.close()


def payloads(plan: Plan) -> list[bytes | None]:
    return [data for _, _, data in plan]


def log_files(bookie: BookieProcess) -> list[Path]:
    return sorted((bookie.ledger_dir / "current").glob("*.log"))


def log_holding(bookie: BookieProcess, data: bytes) -> tuple[Path, int] | None:
    """The entry log holding these bytes and where, if any does."""
    for path in log_files(bookie):
        offset = path.read_bytes().find(data)
        if offset >= 0:
            return path, offset
    return None


def journal_contents(bookie: BookieProcess) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(bookie.journal_dir.glob("*.txn")))


def log_text(bookie: BookieProcess) -> str:
    return (bookie.root / "bookie.log").read_text(errors="replace")


def test_large_and_small_adds_survive_kill_9_and_large_ones_are_written_once(
    bookies: BookieFactory,
) -> None:
    (bookie,) = bookies(1, NO_CHECKPOINT_ARGS)
    plan = plan_for(1, range(0, 24), (LARGE_BYTES, SMALL_BYTES, 1 << 20, SMALL_BYTES))
    assert asyncio.run(add_all(bookie.port, plan)) == [Status.OK] * len(plan)
    large = [data for _, _, data in plan if len(data) >= LARGE_BYTES]

    # Once: every large payload is in an entry log (on a 4096-byte boundary after its
    # record header), none in the journal, which holds the small adds and small records.
    for data in large:
        found = log_holding(bookie, data)
        assert found is not None
        assert (found[1] - RECORD_LENGTH.size - protocol.ENTRY_HEADER_BYTES) % BLOCK_BYTES == 0
    journal = journal_contents(bookie)
    assert not [data for data in large if data in journal]
    assert [data for _, _, data in plan if len(data) == SMALL_BYTES and data in journal]
    status, metrics = http_get(bookie.http_port, "/metrics")
    assert status == 200
    written = metric_value(metrics, 'bookie_direct_write_bytes_total{mode="o_direct"}')
    assert written >= sum(len(data) for data in large)

    bookie.kill()
    bookie.start()
    assert asyncio.run(read_all(bookie.port, plan)) == payloads(plan)
    # The replay indexed them (its checkpoint moved the mark): a second crash reads the
    # index, not the journal records.
    more = plan_for(2, range(0, 6), (LARGE_BYTES, SMALL_BYTES))
    assert asyncio.run(add_all(bookie.port, more)) == [Status.OK] * len(more)
    bookie.kill()
    bookie.start()
    assert asyncio.run(read_all(bookie.port, plan + more)) == payloads(plan + more)
    assert bookie.stop() == 0


def test_a_crash_between_the_data_write_and_the_journal_record_leaves_only_garbage(
    bookies: BookieFactory, zk_client: KazooClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(hooks.HOOKS_ENV, "direct_written=kill:2")
    (bookie,) = bookies(1, NO_CHECKPOINT_ARGS)
    first = plan_for(1, range(0, 2), (SMALL_BYTES, LARGE_BYTES))
    for item in first:  # one at a time: each large add is a group of its own
        assert asyncio.run(add_all(bookie.port, [item])) == [Status.OK]
    orphan = plan_for(1, range(2, 3), (LARGE_BYTES,))
    with pytest.raises(ConnectionError):  # killed before the add was journaled
        asyncio.run(add_all(bookie.port, orphan))
    assert bookie.managed is not None and bookie.managed.process is not None
    assert bookie.managed.process.wait(WAIT_S) == -9
    assert log_holding(bookie, orphan[0][2]) is not None, "the entry reached the log"

    monkeypatch.delenv(hooks.HOOKS_ENV)
    bookie.start()
    assert asyncio.run(read_all(bookie.port, first + orphan)) == [*payloads(first), None]
    later = plan_for(1, range(3, 5), (LARGE_BYTES, SMALL_BYTES))
    assert asyncio.run(add_all(bookie.port, later)) == [Status.OK] * len(later)

    # The orphan is garbage: compaction of every log with any garbage drops it and keeps
    # everything acknowledged.
    create_metadata(zk_client, 1)
    force_gc(bookie.http_port, "?threshold=1")
    assert log_holding(bookie, orphan[0][2]) is None
    assert asyncio.run(read_all(bookie.port, first + later)) == payloads(first + later)
    assert bookie.stop() == 0


def test_a_torn_data_log_tail_does_not_stop_replay_nor_compaction(
    bookies: BookieFactory, zk_client: KazooClient
) -> None:
    (bookie,) = bookies(1, NO_CHECKPOINT_ARGS)
    plan = plan_for(1, range(0, 6), (LARGE_BYTES, SMALL_BYTES))
    assert asyncio.run(add_all(bookie.port, plan)) == [Status.OK] * len(plan)
    bookie.kill()
    found = log_holding(bookie, plan[-2][2])  # the last large entry
    assert found is not None
    path, offset = found
    # What a crash inside the next group's write leaves after the last record, on the
    # next boundary (in the preallocated zeros): a record cut short.
    torn = RECORD_LENGTH.pack(LARGE_BYTES + protocol.ENTRY_HEADER_BYTES) + entry_bytes(
        1, 6, b"x" * 5000
    )
    with open(path, "r+b") as f:
        f.seek(next_block(offset + LARGE_BYTES))
        f.write(torn)

    bookie.start()
    assert asyncio.run(read_all(bookie.port, plan)) == payloads(plan)
    assert asyncio.run(read_all(bookie.port, plan_for(1, range(6, 7), (1,)))) == [None]
    later = plan_for(1, range(6, 8), (LARGE_BYTES,))
    assert asyncio.run(add_all(bookie.port, later)) == [Status.OK] * len(later)
    bookie.kill()
    bookie.start()
    assert asyncio.run(read_all(bookie.port, plan + later)) == payloads(plan + later)
    # Compaction scans the torn log (records, padding, the torn record) and moves what
    # it holds that is live.
    create_metadata(zk_client, 1)
    assert force_gc(bookie.http_port, "?threshold=1")["entry_logs_deleted"] >= 1
    assert not path.exists()
    assert asyncio.run(read_all(bookie.port, plan + later)) == payloads(plan + later)
    assert bookie.stop() == 0


def test_a_damaged_direct_entry_stops_replay_with_exit_code_4(bookies: BookieFactory) -> None:
    (bookie,) = bookies(1, NO_CHECKPOINT_ARGS)
    plan = plan_for(1, range(0, 4), (LARGE_BYTES, SMALL_BYTES))
    assert asyncio.run(add_all(bookie.port, plan)) == [Status.OK] * len(plan)
    bookie.kill()
    found = log_holding(bookie, plan[2][2])
    assert found is not None
    path, offset = found
    with open(path, "r+b") as f:
        f.seek(offset + 1000)
        byte = f.read(1)
        f.seek(offset + 1000)
        f.write(bytes([byte[0] ^ 0xFF]))

    with pytest.raises(RuntimeError):
        bookie.start()
    assert bookie.managed is not None and bookie.managed.process is not None
    assert bookie.managed.process.wait(WAIT_S) == 4
    text = log_text(bookie)
    assert "direct add of ledger_id=1 entry_id=2" in text, text[-2000:]
    assert "digest does not match" in text


def test_small_adds_are_acknowledged_while_a_large_one_waits_for_its_write(
    bookies: BookieFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    monkeypatch.setenv(hooks.HOOKS_ENV, f"direct_writing=pause:{gate}")
    (bookie,) = bookies(1)
    large = plan_for(1, range(0, 1), (LARGE_BYTES,))
    small = plan_for(2, range(0, 20), (SMALL_BYTES,))

    async def scenario() -> None:
        client = await RawBookie.connect(bookie.port)
        try:
            (ledger, entry, data) = large[0]
            pending = client.add_future(ledger, entry, entry_bytes(ledger, entry, data))
            await asyncio.to_thread(
                wait_until,
                lambda: Path(f"{gate}.reached").exists(),
                WAIT_S,
                message="the direct writer holds the large add",
            )
            statuses = await asyncio.gather(*(client.add(*item) for item in small))
            assert statuses == [Status.OK] * len(small)
            assert not pending.done(), "the large add was answered before its write"
            gate.touch()
            frame = await asyncio.wait_for(pending, WAIT_S)
            assert Status(frame.flags_or_status) == Status.OK
        finally:
            await client.close()

    asyncio.run(scenario())
    assert asyncio.run(read_all(bookie.port, large + small)) == payloads(large + small)
    assert bookie.stop() == 0
