"""Real bookie processes: GC of deleted ledgers, compaction, read-only mode on a full disk."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from kazoo.client import KazooClient

from blobstore.wire import zk_layout
from blobstore.wire.protocol import Status
from tests.bookie.raw_client import RawBookie, http_get, metric_value, payload_for, seed
from tests.bookie.test_bookie_storage import WAIT_S, read_all, write_pipelined
from tests.conftest import BookieFactory
from tests.waiting import wait_until

FAST_GC = [
    "--gc-interval-s", "0.3",
    "--minor-compaction-interval-s", "0.5",
    "--major-compaction-interval-s", "1",
    "--checkpoint-interval-s", "0.2",
    "--entry-log-bytes-max", str(12 << 20),
    "--journal-file-bytes-max", str(256 << 10),
]  # fmt: skip


def entry_log_bytes(ledger_dir: Path) -> int:
    return sum(p.stat().st_size for p in (ledger_dir / "current").glob("*.log"))


def create_metadata(zk: KazooClient, *ledger_ids: int) -> None:
    for ledger_id in ledger_ids:
        zk.create(zk_layout.ledger_path(ledger_id), b"test metadata", makepath=True)


async def status_of(port: int, ledger_id: int, entry_id: int) -> Status:
    client = await RawBookie.connect(port)
    try:
        return (await client.read(ledger_id, entry_id))[0]
    finally:
        await client.close()


def test_gc_drops_deleted_ledgers_and_compaction_frees_space(
    bookies: BookieFactory, zk_client: KazooClient
) -> None:
    create_metadata(zk_client, 1, 2, 3)
    (bookie,) = bookies(1, FAST_GC)
    plan = []
    for entry_id in range(60):  # interleaved, so the ledgers share entry logs
        plan.append((1, entry_id, payload_for(seed(), 1, entry_id, 100_000)))
        if entry_id % 6 == 0:
            plan.append((2, entry_id // 6, payload_for(seed(), 2, entry_id, 50_000)))
            plan.append((3, entry_id // 6, payload_for(seed(), 3, entry_id, 1000)))
    asyncio.run(write_pipelined(bookie.port, plan))
    wait_until(
        lambda: (
            metric_value(http_get(bookie.http_port, "/metrics")[1], "bookie_checkpoints_total") >= 1
        ),
        WAIT_S,
        message="a checkpoint",
    )
    wait_until(
        lambda: entry_log_bytes(bookie.ledger_dir) > 6_000_000,
        WAIT_S,
        message="entries flushed to entry logs",
    )
    before = entry_log_bytes(bookie.ledger_dir)
    # ~7 MB went through 256 KiB journal files: checkpoints delete the covered ones.
    wait_until(
        lambda: len(list(bookie.journal_dir.glob("*.txn"))) <= 3,
        WAIT_S,
        message="journal files deleted",
    )

    zk_client.delete(zk_layout.ledger_path(1))
    wait_until(
        lambda: asyncio.run(status_of(bookie.port, 1, 0)) == Status.NO_SUCH_LEDGER,
        WAIT_S,
        message="ledger 1 dropped",
    )
    wait_until(
        lambda: entry_log_bytes(bookie.ledger_dir) < before / 2,
        WAIT_S,
        message="compaction freeing space",
    )
    survivors = {(ledger, entry): payload for ledger, entry, payload in plan if ledger != 1}
    asyncio.run(read_all(bookie.port, survivors))
    # The compactor (on the storage thread) counts what it freed just after deleting the
    # log, so the count may trail the smaller directory by a moment.
    wait_until(
        lambda: (
            metric_value(
                http_get(bookie.http_port, "/metrics")[1], "bookie_compaction_reclaimed_bytes_total"
            )
            > 0
        ),
        WAIT_S,
        message="reclaimed bytes counted",
    )
    metrics = http_get(bookie.http_port, "/metrics")[1]
    assert metric_value(metrics, "bookie_gc_ledgers_deleted_total") == 1
    # Compacted locations survive a restart too.
    bookie.kill()
    bookie.start()
    asyncio.run(read_all(bookie.port, survivors))
    assert asyncio.run(status_of(bookie.port, 1, 5)) == Status.NO_SUCH_LEDGER


def registration(zk: KazooClient, bookie_id: str) -> dict[str, object]:
    return dict(json.loads(zk.get(zk_layout.available_path(bookie_id))[0]))


def test_full_bookie_turns_read_only_and_compaction_brings_it_back(
    bookies: BookieFactory, zk_client: KazooClient
) -> None:
    create_metadata(zk_client, 20, 21)
    capacity = 6 << 20
    (bookie,) = bookies(
        1,
        [
            *FAST_GC,
            "--disk-capacity-bytes",
            str(capacity),
            "--disk-check-interval-s",
            "0.1",
            "--registration-refresh-s",
            "0.5",
            # The journal's 4 MiB of zeros ahead would hold most of this tiny capacity.
            "--journal-zero-ahead-bytes",
            "0",
        ],
    )
    keep = [(21, i, payload_for(seed(), 21, i, 20_000)) for i in range(10)]
    asyncio.run(write_pipelined(bookie.port, keep))

    async def fill() -> int:
        client = await RawBookie.connect(bookie.port)
        try:
            for entry_id in range(1000):
                status = await client.add(20, entry_id, payload_for(seed(), 20, entry_id, 64_000))
                if status == Status.READ_ONLY:
                    return entry_id
                assert status == Status.OK, status
                await asyncio.sleep(0.002)
            raise AssertionError("never turned read-only")
        finally:
            await client.close()

    written = asyncio.run(fill())
    assert written > 10
    wait_until(
        lambda: registration(zk_client, bookie.bookie_id)["read_only"] is True,
        WAIT_S,
        message="read-only registration",
    )
    metrics = http_get(bookie.http_port, "/metrics")[1]
    assert metric_value(metrics, "bookie_read_only") == 1
    # Reads still served; adds still refused.
    asyncio.run(
        read_all(bookie.port, {(ledger, entry): payload for ledger, entry, payload in keep})
    )
    asyncio.run(read_all(bookie.port, {(20, 0): payload_for(seed(), 20, 0, 64_000)}))

    async def refused() -> Status:
        client = await RawBookie.connect(bookie.port)
        try:
            return await client.add(21, 10, b"more")
        finally:
            await client.close()

    assert asyncio.run(refused()) == Status.READ_ONLY

    zk_client.delete(zk_layout.ledger_path(20))
    wait_until(
        lambda: registration(zk_client, bookie.bookie_id)["read_only"] is False,
        WAIT_S,
        message="writable again",
    )
    assert asyncio.run(refused()) == Status.OK
    asyncio.run(
        read_all(bookie.port, {(ledger, entry): payload for ledger, entry, payload in keep})
    )
    assert bookie.alive()
