"""`blobstore admin decommission`: one of four bookies is emptied while objects are read;
afterwards no ledger names it, and with it stopped every object reads back identical."""

from __future__ import annotations

import asyncio
import os
import threading
from collections import Counter

from blobstore.ledger import LedgerClient
from blobstore.objects.store import ObjectStore
from blobstore.objects.writer_pool import LEDGER_PASSWORD
from blobstore.zk import ZooKeeperClient
from tests.admin.workload import (
    Expected,
    admin,
    mixed_workload,
    read_all,
    store_config,
    verify_all,
)
from tests.conftest import BookieFactory

SEED = int(os.environ.get("BLOBSTORE_TEST_SEED", "11"))
GONE_WRITER = "gateway-that-died"


async def _ensembles(zk_hosts: str) -> dict[int, list[tuple[str, ...]]]:
    zk = ZooKeeperClient(zk_hosts)
    await zk.start()
    try:
        client = LedgerClient(zk)
        await client.start()
        try:
            result = {}
            for ledger_id in await client.list_ledger_ids():
                metadata = await client.get_metadata(ledger_id)
                result[ledger_id] = [bookies for _, bookies in metadata.ensembles]
            return result
        finally:
            await client.close()
    finally:
        await zk.stop()


async def _abandoned_open_ledger(zk_hosts: str) -> int:
    """An OPEN object ledger (E3 W2 A2) whose writer is gone."""
    zk = ZooKeeperClient(zk_hosts)
    await zk.start()
    try:
        client = LedgerClient(zk)
        await client.start()
        try:
            handle = await client.create_ledger(
                3, 2, 2, LEDGER_PASSWORD, {"writer": GONE_WRITER, "purpose": "objects"}
            )
            for index in range(6):
                await handle.add_entry(b"orphan-%d" % index)
            return handle.ledger_id
        finally:
            await client.close()
    finally:
        await zk.stop()


class Reader(threading.Thread):
    """Reads every object again and again until stopped (its own loop and store)."""

    def __init__(self, zk_hosts: str, expected: Expected) -> None:
        super().__init__(daemon=True)
        self.zk_hosts = zk_hosts
        self.expected = expected
        self.stop_requested = threading.Event()
        self.reads = 0
        self.problems: list[str] = []

    def run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        store = ObjectStore(self.zk_hosts, store_config())
        await store.start()
        try:
            while not self.stop_requested.is_set():
                for (bucket, key), body in sorted(self.expected.bodies.items()):
                    try:
                        got = await asyncio.wait_for(read_all(store, bucket, key), 60)
                    except Exception as e:  # noqa: BLE001 - recorded, asserted on later
                        self.problems.append(f"{bucket}/{key}: {e!r}")
                        continue
                    if got != body:
                        self.problems.append(f"{bucket}/{key}: different bytes")
                    self.reads += 1
        finally:
            await store.close()


def test_decommission_during_reads(zk_connect: str, bookies: BookieFactory) -> None:
    print(f"BLOBSTORE_TEST_SEED={SEED}")
    started = bookies(4)
    expected = asyncio.run(mixed_workload(zk_connect, SEED))
    orphan = asyncio.run(_abandoned_open_ledger(zk_connect))

    before = asyncio.run(_ensembles(zk_connect))
    named = Counter(b for ensembles in before.values() for ens in ensembles for b in set(ens))
    in_orphan = set(before[orphan][0])
    victim = max(
        (b for b in started if b.bookie_id in in_orphan),
        key=lambda b: (named[b.bookie_id], b.index),
    )
    assert named[victim.bookie_id] >= 2, named  # the orphan and at least one object ledger

    reader = Reader(zk_connect, expected)
    reader.start()
    try:
        code, report = admin(zk_connect, "decommission", victim.bookie_id)
    finally:
        reader.stop_requested.set()
        reader.join(120)
    assert not reader.is_alive()
    assert code == 0, report
    assert report["safe_to_remove"] is True
    assert report["remaining_ledgers"] == []
    statuses = {o["ledger_id"]: o["status"] for o in report["ledgers"]}
    assert statuses[orphan] == "moved", report  # recovered (writer gone), then moved
    assert report["ledgers_moved"] == named[victim.bookie_id]
    assert report["entries_copied"] > 0
    assert reader.reads > 0 and not reader.problems, reader.problems[:5]

    after = asyncio.run(_ensembles(zk_connect))
    for ledger_id, ensembles in after.items():
        for ensemble in ensembles:
            assert victim.bookie_id not in ensemble, (ledger_id, ensembles)
            assert len(set(ensemble)) == len(ensemble), (ledger_id, ensembles)
    assert set(after) == set(before)

    victim.stop()
    asyncio.run(verify_all(zk_connect, expected))
    code, fsck = admin(zk_connect, "fsck")
    assert code == 0, fsck  # every entry has WQ good copies without the victim
    assert fsck["summary"]["under_replicated_entries"] == 0

    # Idempotent: a second run finds nothing to move and confirms.
    code, again = admin(zk_connect, "decommission", victim.bookie_id)
    assert code == 0 and again["safe_to_remove"] is True, again
    assert again["ledgers_moved"] == 0, again
