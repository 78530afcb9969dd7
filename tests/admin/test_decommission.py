"""`blobstore admin decommission`: one of four bookies is emptied while objects are read;
afterwards no ledger names it, and with it stopped every object reads back identical."""

from __future__ import annotations

import asyncio
import os
import threading
from collections import Counter

from blobstore.ledger import LedgerClient, LedgerMetadata
from blobstore.objects.store import ObjectStore
from blobstore.objects.writer_pool import LEDGER_PASSWORD
from blobstore.runtime.zk import ZooKeeperClient
from tests.admin.workload import (
    Expected,
    admin,
    mixed_workload,
    put,
    read_all,
    store_config,
    verify_all,
)
from tests.conftest import BookieFactory

SEED = int(os.environ.get("BLOBSTORE_TEST_SEED", "11"))
GONE_WRITER = "gateway-that-died"
LIVE_KEY = "live/written-during-decommission"
LIVE_BODY = bytes(range(256)) * 700


async def _ledgers(zk_hosts: str) -> dict[int, LedgerMetadata]:
    zk = ZooKeeperClient(zk_hosts)
    await zk.start()
    try:
        client = LedgerClient(zk)
        await client.start()
        try:
            return {
                ledger_id: await client.get_metadata(ledger_id)
                for ledger_id in await client.list_ledger_ids()
            }
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
        self.written = threading.Event()
        self.reads = 0
        self.problems: list[str] = []

    def run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        # Its writer ledger stays OPEN in this live writer's pool.
        store = ObjectStore(self.zk_hosts, store_config())
        await store.start()
        try:
            await put(store, "plain", LIVE_KEY, LIVE_BODY)
            self.expected.bodies[("plain", LIVE_KEY)] = LIVE_BODY
            self.written.set()
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

    reader = Reader(zk_connect, expected)
    reader.start()
    try:
        assert reader.written.wait(60)
        before = asyncio.run(_ledgers(zk_connect))
        live = [
            ledger_id
            for ledger_id, m in before.items()
            if not m.closed and m.custom.get("writer") != GONE_WRITER
        ]
        assert len(live) == 1, before
        named = Counter(b for m in before.values() for b in m.all_bookies())
        # A victim in both the orphan's and the live writer's ensembles (3 of 4 each).
        both = set(before[orphan].all_bookies()) & set(before[live[0]].all_bookies())
        victim = max(
            (b for b in started if b.bookie_id in both),
            key=lambda b: (named[b.bookie_id], b.index),
        )
        # The live writer's OPEN ledger is never edited behind it: skipped, exit 1.
        code, first = admin(zk_connect, "decommission", victim.bookie_id)
        assert code == 1 and first["safe_to_remove"] is False, first
        skipped = [o for o in first["ledgers"] if o["status"] == "skipped"]
        assert [o["ledger_id"] for o in skipped] == live, first
        assert "alive" in skipped[0]["detail"], first
        assert first["remaining_ledgers"] == live, first
        # --fence-open recovers it (the writer's next append would fail) and moves it.
        code, report = admin(
            zk_connect, "decommission", victim.bookie_id, "--fence-open", "--rate-mb-s", "500"
        )
    finally:
        reader.stop_requested.set()
        reader.join(120)
    assert not reader.is_alive()
    assert code == 0, report
    assert report["safe_to_remove"] is True
    assert report["remaining_ledgers"] == []
    first_statuses = {o["ledger_id"]: o["status"] for o in first["ledgers"]}
    assert first_statuses[orphan] == "moved", first  # recovered (writer gone), then moved
    statuses = {o["ledger_id"]: o["status"] for o in report["ledgers"]}
    assert statuses[live[0]] == "moved", report
    assert first["ledgers_moved"] + report["ledgers_moved"] == named[victim.bookie_id]
    assert report["entries_copied"] > 0 and report["bytes_copied"] > 0
    assert reader.reads > 0 and not reader.problems, reader.problems[:5]

    after = asyncio.run(_ledgers(zk_connect))
    for ledger_id, metadata in after.items():
        assert metadata.closed, metadata
        for _, ensemble in metadata.ensembles:
            assert victim.bookie_id not in ensemble, (ledger_id, metadata.ensembles)
            assert len(set(ensemble)) == len(ensemble), (ledger_id, metadata.ensembles)
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
