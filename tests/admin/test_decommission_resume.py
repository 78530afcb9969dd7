"""An interrupted decommission resumes with the replacement it had chosen."""

from __future__ import annotations

import asyncio
import json

from kazoo.client import KazooClient

from blobstore.ledger import LedgerClient, LedgerMetadata
from blobstore.runtime.zk import ZooKeeperClient
from blobstore.wire import zk_layout
from blobstore.wire.zk_layout import decommissioned_path, decommissioning_path
from tests.admin.workload import admin, mixed_workload, verify_all
from tests.conftest import BookieFactory


async def _metadata(zk_hosts: str) -> dict[int, LedgerMetadata]:
    zk = ZooKeeperClient(zk_hosts)
    await zk.start()
    try:
        async with LedgerClient(zk) as client:
            return {i: await client.get_metadata(i) for i in await client.list_ledger_ids()}
    finally:
        await zk.stop()


def test_rerun_reuses_the_saved_replacement(
    zk_connect: str, zk_client: KazooClient, bookies: BookieFactory
) -> None:
    started = bookies(4)
    expected = asyncio.run(mixed_workload(zk_connect, 5))
    before = asyncio.run(_metadata(zk_connect))
    ledger_id, metadata = min(before.items())
    ensemble = metadata.ensembles[0][1]
    victim = ensemble[0]
    planned = next(b.bookie_id for b in started if b.bookie_id not in ensemble)
    # What an interrupted run leaves: the in-progress mark and the saved choice for one
    # segment (its copies may have been made in part; copying again is harmless).
    zk_client.create(decommissioning_path(victim), b"{}", makepath=True)
    zk_client.create(
        f"{decommissioning_path(victim)}/{ledger_id}", json.dumps({"0": planned}).encode()
    )

    code, report = admin(zk_connect, "decommission", victim)
    assert code == 0 and report["safe_to_remove"] is True, report
    outcome = next(o for o in report["ledgers"] if o["ledger_id"] == ledger_id)
    assert outcome["replacements"] == [planned], outcome
    after = asyncio.run(_metadata(zk_connect))
    assert after[ledger_id].ensembles[0][1] == tuple(
        planned if b == victim else b for b in ensemble
    )
    assert zk_client.exists(decommissioning_path(victim)) is None  # plans cleaned up
    assert json.loads(zk_client.get(decommissioned_path(victim))[0])["ledgers_moved"] >= 1
    assert zk_client.exists(zk_layout.cookie_path(victim)) is not None  # untouched

    next(b for b in started if b.bookie_id == victim).stop()
    asyncio.run(verify_all(zk_connect, expected))
