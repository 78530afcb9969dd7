"""Replica repair on live bookies, against real ZooKeeper and bookie processes.

- Bytes flipped in an entry log of a running bookie: GETs (object layer reads) that
  meet the bad copy are served by the other replica and queue the repair; `admin fsck` reports the
  copy; `admin scrub` finds it on the bookie, the replication worker copies the good
  replica back, and `admin fsck` is clean; every object reads back byte-identical.
- An entry's index record deleted on a stopped bookie (restarted after): a read queues
  the missing copy, the auditor's replica check finds it, its repair makes fsck clean.
"""

from __future__ import annotations

import asyncio
import random
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import rocksdict

from blobstore.ledger import LedgerClient
from blobstore.ledger.config import OBJECT_LEDGER_PASSWORD
from blobstore.ledger.distribution_schedule import write_set_bookies
from blobstore.ledger.replicas import OK, read_verified
from blobstore.objects.store import ObjectStore
from blobstore.recovery.auditor import BookieAuditor
from blobstore.recovery.replica_verifier import ReplicaCheckSettings
from blobstore.runtime.zk import ZooKeeperClient
from blobstore.wire import protocol
from bookie.entry_location_index import entry_key
from tests.admin.workload import admin, put, read_all, store_config
from tests.bookie.raw_client import http_get, metric_value
from tests.cluster.processes import BookieProcess
from tests.conftest import BookieFactory
from tests.waiting import wait_until

BOOKIE_ARGS = (
    "--checkpoint-interval-s", "0.5",
    "--journal-file-bytes-max", "65536",
    "--scrub-interval-s", "0",
)  # fmt: skip
OBJECT_BYTES = 300_000  # five 64 KiB entries
CHECKPOINT_WAIT_S = 30.0
Bodies = dict[str, bytes]


async def _started_zk(zk_connect: str) -> ZooKeeperClient:
    zk = ZooKeeperClient(zk_connect)
    await zk.start()
    return zk


async def _write_objects(zk_connect: str, rng: random.Random) -> Bodies:
    store = ObjectStore(zk_connect, store_config(audit_interval_s=0))
    await store.start()
    try:
        await store.catalog.create_bucket("repair", "tester")
        bodies = {f"k{i}": rng.randbytes(OBJECT_BYTES + i) for i in range(4)}
        for key, body in bodies.items():
            await put(store, "repair", key, body)
        return bodies
    finally:
        await store.close()  # closes the writer ledgers


async def _read_back(zk_connect: str, bodies: Bodies) -> list[str]:
    """Keys whose body does not read back byte-identical (a fresh store: no cache)."""
    store = ObjectStore(zk_connect, store_config(audit_interval_s=0))
    await store.start()
    try:
        return [k for k, body in bodies.items() if await read_all(store, "repair", k) != body]
    finally:
        await store.close()


async def _first_replica_entry(zk_connect: str, victim: str) -> tuple[int, int]:
    """A full entry of a closed ledger whose write set starts with `victim`: a read in
    write-set order asks the victim first."""
    zk = await _started_zk(zk_connect)
    try:
        async with LedgerClient(zk) as client:
            for ledger_id in sorted(await client.list_ledger_ids()):
                metadata = await client.get_metadata(ledger_id)
                assert metadata.closed, metadata
                for entry_id in range(metadata.last_entry_id):
                    ensemble = metadata.ensemble_for(entry_id)
                    if write_set_bookies(entry_id, ensemble, metadata.write_quorum)[0] == victim:
                        return ledger_id, entry_id
    finally:
        await zk.stop()
    raise AssertionError(f"no entry has {victim} first in its write set")


async def _read_entry(zk_connect: str, ledger_id: int, entry_id: int, victim: str) -> bytes:
    """The entry read through a ledger handle (the GET path), and the good replica's
    payload it must equal."""
    zk = await _started_zk(zk_connect)
    try:
        async with LedgerClient(zk) as client:
            handle = await client.open_ledger(ledger_id, OBJECT_LEDGER_PASSWORD, recovery=False)
            (payload,) = await handle.read_entries(entry_id, entry_id)
            metadata = handle.metadata
            others = [
                b
                for b in write_set_bookies(
                    entry_id, metadata.ensemble_for(entry_id), metadata.write_quorum
                )
                if b != victim
            ]
            outcome, good = await read_verified(client.pool, others[0], ledger_id, entry_id)
            assert outcome == OK and good is not None
            assert payload == protocol.Entry.decode(good).payload
        return bytes(payload)  # leaving the client wrote the read-repair notes
    finally:
        await zk.stop()


def _record_offset(bookie: BookieProcess, ledger_id: int, entry_id: int) -> tuple[Path, int]:
    """Where the bookie's entry logs hold the entry (its header's first byte)."""
    prefix = struct.pack(">QQ", ledger_id, entry_id)
    for path in sorted((bookie.ledger_dir / "current").glob("*.log")):
        offset = path.read_bytes().find(prefix)
        if offset >= 0:
            return path, offset
    raise LookupError


def _checkpointed(bookie: BookieProcess, ledger_id: int, entry_id: int) -> tuple[Path, int]:
    """Where the entry is in an entry log, once the checkpoint that wrote it there has
    ended: its bytes reach the log while that checkpoint still serves reads of the entry
    from its write cache (a read then would not meet bytes flipped in the log). The
    write cache gauge is set when a checkpoint takes the cache and when it ends."""

    def found() -> tuple[Path, int] | None:
        try:
            return _record_offset(bookie, ledger_id, entry_id)
        except LookupError:
            return None

    where = wait_until(
        found, CHECKPOINT_WAIT_S, message="the entry never reached an entry log", interval_s=0.1
    )
    wait_until(
        lambda: _write_cache_bytes(bookie) == 0,
        CHECKPOINT_WAIT_S,
        message="the checkpoint that wrote the entry never ended",
        interval_s=0.1,
    )
    return where


def _write_cache_bytes(bookie: BookieProcess) -> float:
    status, text = http_get(bookie.http_port, "/metrics")
    assert status == 200, text
    return metric_value(text, "bookie_write_cache_bytes")


def _flip_payload_byte(path: Path, header_offset: int) -> None:
    with open(path, "r+b") as f:
        at = header_offset + protocol.ENTRY_HEADER_BYTES + 1000
        f.seek(at)
        original = f.read(1)
        f.seek(at)
        f.write(bytes([original[0] ^ 0x20]))


def _listed(zk_connect: str) -> list[dict[str, Any]]:
    _, document = admin(zk_connect, "underreplicated")
    listed: list[dict[str, Any]] = document["underreplicated"]
    return listed


def _copies(listed: list[dict[str, Any]]) -> set[tuple[int, str, int, str]]:
    return {
        (d["ledger_id"], bookie, entry_id, reason)
        for d in listed
        for bookie, ranges in d["bookies"].items()
        for first, last in ranges
        for entry_id in range(first, last + 1)
        for reason in d["reasons"]
    }


def _assert_fsck(zk_connect: str, healthy: bool) -> dict[str, Any]:
    code, report = admin(zk_connect, "fsck")
    assert (code == 0) is healthy and report["healthy"] is healthy, report
    return report


def test_scrub_repairs_flipped_bytes_on_a_running_bookie(
    zk_connect: str, bookies: BookieFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The reads below must meet the victim's bad copy: on a loaded machine its answer may
    # take longer than the 50 ms after which a read asks the next replica too, and that
    # replica's good answer would end the read before the bad one is seen.
    monkeypatch.setenv("BLOBSTORE_LEDGER_SPECULATIVE_READ_TIMEOUT_MS", "10000")
    started = bookies(3, extra_args=BOOKIE_ARGS)
    bodies = asyncio.run(_write_objects(zk_connect, random.Random(37)))
    victim = started[0]
    ledger_id, entry_id = asyncio.run(_first_replica_entry(zk_connect, victim.bookie_id))
    path, offset = _checkpointed(victim, ledger_id, entry_id)
    _flip_payload_byte(path, offset)

    # GETs meet the bad copy first (it leads its write set): each object reads back
    # byte-identical from the other replica, and the repair is queued.
    assert asyncio.run(_read_back(zk_connect, bodies)) == []
    expected = (ledger_id, victim.bookie_id, entry_id, "digest_mismatch")
    assert _copies(_listed(zk_connect)) == {expected}
    # fsck sees it (and leaves the bad bytes in the victim's read cache).
    report = _assert_fsck(zk_connect, healthy=False)
    assert report["summary"]["corrupt_copies"] == 1, report["summary"]

    code, scrub = admin(zk_connect, "scrub", "--rate-mb-s", "0")
    assert code == 0 and scrub["healthy"] is True, scrub
    passes = {b["bookie_id"]: b["pass"] for b in scrub["bookies"]}
    assert passes[victim.bookie_id]["errors"] == 1, passes
    (finding,) = passes[victim.bookie_id]["findings"]
    assert (finding["ledger_id"], finding["entry_id"], finding["reason"]) == (
        ledger_id,
        entry_id,
        "digest_mismatch",
    )
    others = [p for bookie_id, p in passes.items() if bookie_id != victim.bookie_id]
    assert all(p["errors"] == 0 and p["entries_verified"] > 0 for p in others), passes
    assert scrub["repair"]["entries_repaired"] == 1, scrub["repair"]
    assert scrub["repair"]["bytes_repaired"] > 64 * 1024
    assert scrub["underreplicated_left"] == []

    report = _assert_fsck(zk_connect, healthy=True)
    assert report["summary"]["corrupt_copies"] == 0
    assert asyncio.run(_read_back(zk_connect, bodies)) == []
    for command in (("scrub", "--rate-mb-s", "0"), ("underreplicated",)):
        printed = _admin_table(zk_connect, *command)
        assert printed.returncode == 0 and "Traceback" not in printed.stderr, printed
    assert "0 under-replicated ledger(s)" in printed.stdout, printed.stdout
    metrics = _metrics(victim)
    assert metric_value(metrics, "bookie_scrub_errors_total") == 1
    assert metric_value(metrics, "bookie_scrub_bytes_verified_total") > len(bodies) * 100_000


def _admin_table(zk_connect: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "blobstore.cli", "admin", "--zk", zk_connect, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _metrics(bookie: BookieProcess) -> str:
    import urllib.request

    with urllib.request.urlopen(bookie.metrics_url(), timeout=10) as response:
        return str(response.read().decode())


def _delete_index_record(bookie: BookieProcess, ledger_id: int, entry_id: int) -> None:
    """Drop one entry's location from a stopped bookie's index."""
    path = bookie.ledger_dir / "index"
    options = rocksdict.Options(raw_mode=True)
    db = rocksdict.Rdict(str(path), options)
    try:
        key = entry_key(ledger_id, entry_id)
        assert db.get(key) is not None
        db.delete(key)
        db.flush_wal(True)
    finally:
        db.close()


async def _audit(zk_connect: str) -> tuple[Any, Any]:
    """The auditor's replica check (due: its record says the last ran long ago) at
    100 %, then its repair pass."""
    zk = await _started_zk(zk_connect)
    try:
        auditor = BookieAuditor(
            zk, "test-auditor", 60.0, 1800.0, replica_check=ReplicaCheckSettings(1.0, 100.0)
        )
        assert await auditor.check_replicas_if_due(now=1000.0) is None  # the first: noted
        check = await auditor.check_replicas_if_due(now=1002.0)
        repair = await auditor.repair_underreplicated()
        return check, repair
    finally:
        await zk.stop()


def test_auditor_finds_and_repairs_a_lost_index_record(
    zk_connect: str, bookies: BookieFactory
) -> None:
    started = bookies(3, extra_args=BOOKIE_ARGS)
    bodies = asyncio.run(_write_objects(zk_connect, random.Random(38)))
    victim = started[1]
    ledger_id, entry_id = asyncio.run(_first_replica_entry(zk_connect, victim.bookie_id))
    _checkpointed(victim, ledger_id, entry_id)
    victim.stop()  # a clean stop checkpoints: nothing is replayed at the next start
    _delete_index_record(victim, ledger_id, entry_id)
    victim.start()

    asyncio.run(_read_entry(zk_connect, ledger_id, entry_id, victim.bookie_id))
    missing = (ledger_id, victim.bookie_id, entry_id, "missing")
    assert _copies(_listed(zk_connect)) == {missing}
    code, report = admin(zk_connect, "fsck", "--queue-repairs")
    assert code == 1 and report["repairs_queued"] == 1, report
    (damaged,) = report["under_replicated"]
    assert damaged["copies"][victim.bookie_id] == "missing", damaged
    assert _copies(_listed(zk_connect)) == {missing}  # the same copy: merged

    check, repair = asyncio.run(_audit(zk_connect))
    assert [(b.ledger_id, b.entry_id, b.bookie, b.reason) for b in check.bad_copies] == [
        (ledger_id, entry_id, victim.bookie_id, "missing")
    ]
    assert check.copies_checked == 2 * check.entries_checked
    assert repair.entries_repaired == 1, repair.to_json()
    assert repair.entries_left == 0
    assert _listed(zk_connect) == []
    _assert_fsck(zk_connect, healthy=True)
    assert asyncio.run(_read_back(zk_connect, bodies)) == []
