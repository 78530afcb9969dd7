"""`blobstore admin fsck`, `buckets` and `du` against real ZooKeeper and bookies."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path
from typing import Any

from blobstore.ledger import LedgerClient
from blobstore.runtime.zk import ZooKeeperClient
from tests.admin.workload import Expected, admin, mixed_workload, verify_all
from tests.cluster.processes import BookieProcess
from tests.conftest import BookieFactory
from tests.waiting import wait_until

SEED = int(os.environ.get("BLOBSTORE_TEST_SEED", "7"))
# Small journal files and frequent checkpoints: journal files covered by a checkpoint
# are deleted, so the entry logs and the index become the only copy of older entries.
BOOKIE_ARGS = ("--checkpoint-interval-s", "0.5", "--journal-file-bytes-max", "65536")


def test_fsck_healthy_then_reports_a_lost_entry_log(
    zk_connect: str, bookies: BookieFactory
) -> None:
    print(f"BLOBSTORE_TEST_SEED={SEED}")
    started = bookies(3, extra_args=BOOKIE_ARGS)
    expected = asyncio.run(mixed_workload(zk_connect, SEED))
    _assert_fsck_healthy(zk_connect, expected)
    _assert_unreferenced_ledger_is_garbage(zk_connect)
    _assert_fsck_of_one_bucket(zk_connect)
    _assert_du_by_bucket(zk_connect, expected)
    _assert_du_of_one_bucket(zk_connect)
    _assert_buckets_listing(zk_connect, expected)
    code, error = _admin_error(zk_connect, "du", "--bucket", "no-such-bucket")
    assert code == 2 and "no bucket named" in error, error

    victim = started[0]
    _lose_entry_logs_and_index(victim)
    damaged = _assert_under_replicated_on(zk_connect, victim)
    # Every object is still readable from the other replicas.
    asyncio.run(verify_all(zk_connect, expected))
    lost_ledger = damaged[0]["ledger_id"]
    _assert_extents_dangle_without(zk_connect, lost_ledger)
    _assert_unreadable_manifests_reported(zk_connect, expected, lost_ledger)


def _assert_fsck_healthy(zk_connect: str, expected: Expected) -> None:
    """Every entry on both replicas, every ledger closed, and the ledgers named only
    through a manifest referenced (not garbage)."""
    code, report = admin(zk_connect, "fsck")
    assert code == 0, report
    assert report["healthy"] is True
    summary = report["summary"]
    assert summary["dangling_references"] == 0
    assert summary["under_replicated_entries"] == 0
    assert summary["corrupt_copies"] == 0
    assert summary["entries_checked"] > 20
    assert summary["copies_checked"] == 2 * summary["entries_checked"]  # WQ = 2
    assert summary["object_versions"] == sum(expected.versions.values())
    assert summary["upload_parts"] == 1
    assert all(o["state"] == "CLOSED" for o in report["open_ledgers"]) is True
    assert report["open_ledgers"] == []
    assert summary["unreadable_manifests"] == 0
    manifest_named = expected.manifest_ledgers | expected.manifest_data_ledgers
    unreferenced = {u["ledger_id"] for u in report["unreferenced_ledgers"]}
    assert manifest_named and not manifest_named & unreferenced, report["unreferenced_ledgers"]


def _assert_unreferenced_ledger_is_garbage(zk_connect: str) -> None:
    """An unreferenced closed ledger is garbage: listed, not a failure unless --strict."""
    garbage = asyncio.run(_closed_ledger(zk_connect))
    code, report = admin(zk_connect, "fsck")
    assert code == 0, report
    assert garbage in [u["ledger_id"] for u in report["unreferenced_ledgers"]], report
    code, strict = admin(zk_connect, "fsck", "--strict")
    assert code == 1 and strict["healthy"] is False, strict


def _assert_fsck_of_one_bucket(zk_connect: str) -> None:
    code, only = admin(zk_connect, "fsck", "--bucket", "versioned")
    assert code == 0 and only["summary"]["buckets"] == 1, only
    assert only["summary"]["unreferenced_ledgers"] is None  # not checked for one bucket


def _assert_du_by_bucket(zk_connect: str, expected: Expected) -> None:
    """Logical bytes, stored = length x WQ, ledgers used."""
    code, du = admin(zk_connect, "du")
    assert code == 0, du
    by_bucket = {b["bucket"]: b for b in du["buckets"]}
    for bucket in ("plain", "versioned"):
        usage = by_bucket[bucket]
        assert usage["versions"] == expected.versions[bucket], usage
        assert usage["logical_bytes"] == expected.logical_bytes[bucket], usage
        manifests = expected.manifest_bytes if bucket == "plain" else 0
        assert usage["stored_bytes"] == 2 * (usage["logical_bytes"] + manifests), usage
        assert usage["upload_parts"] == expected.upload_parts[bucket], usage
        assert usage["ledgers_used"] >= 1
    current = {b for (b, _), body in expected.bodies.items()}
    assert by_bucket["versioned"]["objects"] == 1
    assert by_bucket["plain"]["objects"] == sum(1 for (b, _) in expected.bodies if b == "plain")
    assert current == {"plain", "versioned"}
    assert du["total"]["logical_bytes"] == sum(expected.logical_bytes.values())


def _assert_du_of_one_bucket(zk_connect: str) -> None:
    code, one = admin(zk_connect, "du", "--bucket", "versioned")
    assert code == 0 and [b["bucket"] for b in one["buckets"]] == ["versioned"], one
    assert {row["ledger_id"] for row in one["ledgers"]}, one
    assert all(row["write_quorum"] == 2 for row in one["ledgers"])


def _assert_buckets_listing(zk_connect: str, expected: Expected) -> None:
    code, listing = admin(zk_connect, "buckets")
    assert code == 0, listing
    names = {b["name"]: b for b in listing["buckets"]}
    assert set(names) == {"plain", "versioned"}
    assert names["versioned"]["versioning"] == "Enabled"
    assert names["plain"]["logical_bytes"] == expected.logical_bytes["plain"]


def _lose_entry_logs_and_index(victim: BookieProcess) -> None:
    """Damage one bookie behind its back: once a checkpoint has moved the older entries
    out of the journal, delete its entry logs and index, and restart it."""
    _wait_for_checkpointed_journal(victim.journal_dir)
    victim.stop()
    logs = list((victim.ledger_dir / "current").glob("*.log"))
    assert logs, "no entry log: no checkpoint happened"
    for log in logs:
        log.unlink()
    shutil.rmtree(victim.ledger_dir / "index")
    victim.start()


def _assert_under_replicated_on(zk_connect: str, victim: BookieProcess) -> list[dict[str, Any]]:
    """fsck fails: the damaged entries have one good copy, the victim's missing."""
    code, report = admin(zk_connect, "fsck")
    assert code == 1, report
    assert report["healthy"] is False
    assert report["summary"]["dangling_references"] == 0, report["dangling"]
    damaged: list[dict[str, Any]] = report["under_replicated"]
    assert damaged, report["summary"]
    for entry in damaged:
        assert entry["good_copies"] == 1, entry
        assert entry["copies"][victim.bookie_id] == "missing", entry
    return damaged


def _assert_extents_dangle_without(zk_connect: str, lost_ledger: int) -> None:
    """A ledger deleted behind the catalog's back: its objects' extents dangle."""
    asyncio.run(_delete_ledger(zk_connect, lost_ledger))
    code, report = admin(zk_connect, "fsck")
    assert code == 1, report
    dangling = report["dangling"]
    assert dangling and all(d["kind"] == "ledger_missing" for d in dangling), dangling
    assert {d["ledger_id"] for d in dangling} == {lost_ledger}
    assert all(d["bucket"] in ("plain", "versioned") and d["key"] for d in dangling)


def _assert_unreadable_manifests_reported(
    zk_connect: str, expected: Expected, lost_ledger: int
) -> None:
    """A manifest that cannot be read: reported, and no ledger is called unreferenced
    (the extents it names are unknown)."""
    for ledger_id in expected.manifest_ledgers - {lost_ledger}:
        asyncio.run(_delete_ledger(zk_connect, ledger_id))
    code, report = admin(zk_connect, "fsck")
    assert code == 1, report
    unreadable = report["unreadable_manifests"]
    assert [(m["bucket"], m["key"]) for m in unreadable] == [("plain", "manifested")], unreadable
    assert report["summary"]["unreferenced_ledgers"] is None, report["summary"]
    assert report["unreferenced_ledgers"] == []


async def _closed_ledger(zk_hosts: str) -> int:
    zk = ZooKeeperClient(zk_hosts)
    await zk.start()
    try:
        async with LedgerClient(zk) as client:
            handle = await client.create_ledger(3, 2, 2, b"", {"purpose": "objects"})
            await handle.add_entry(b"never referenced")
            await handle.close()
            return handle.ledger_id
    finally:
        await zk.stop()


async def _delete_ledger(zk_hosts: str, ledger_id: int) -> None:
    zk = ZooKeeperClient(zk_hosts)
    await zk.start()
    try:
        async with LedgerClient(zk) as client:
            await client.delete_ledger(ledger_id)
    finally:
        await zk.stop()


def _wait_for_checkpointed_journal(journal_dir: Path, timeout_s: float = 60.0) -> None:
    """Until a checkpoint has deleted the first journal file: the entries it held now
    live only in the entry logs (and the index that locates them)."""
    first = journal_dir / f"{1:016x}.txn"
    wait_until(
        lambda: not first.exists(),
        timeout_s,
        message=f"no checkpoint deleted {first}",
        interval_s=0.1,
    )


def _admin_error(zk: str, *args: str) -> tuple[int, str]:
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "blobstore.cli", "admin", "--zk", zk, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, result.stderr
