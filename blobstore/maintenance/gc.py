"""Carrying out a GC plan (the driver's ZooKeeper writes), and the bookies' GC pass.

A ledger is deleted by deleting its metadata znode, with the version just read, and
only while it is CLOSED object data; then its condemnation becomes a tombstone. Each
bookie's garbage collector drops the local data of ledgers whose metadata is gone; the
job asks every registered bookie for a pass at once (`POST /api/v1/bookie/gc`), so the
disk space comes back within the run rather than within `gc_interval_s`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from kazoo.exceptions import BadVersionError, NoNodeError

from blobstore.catalog.condemned import Condemnation, CondemnedLedgers
from blobstore.ledger.config import OBJECT_LEDGER_PURPOSE
from blobstore.ledger.ledger_metadata import STATE_CLOSED, LedgerMetadata
from blobstore.maintenance import hooks
from blobstore.maintenance.plan import GcPlan
from blobstore.runtime.zk import ZooKeeperClient
from blobstore.wire import zk_layout

logger = logging.getLogger(__name__)

BOOKIE_GC_TIMEOUT_S = 600.0
DELETES_IN_FLIGHT_MAX = 32


@dataclass(slots=True)
class GcOutcome:
    deleted: list[int] = field(default_factory=list)
    deleted_bytes: int = 0  # payload bytes of the deleted ledgers (times WQ on disk)
    deleted_disk_bytes: int = 0
    skipped: list[int] = field(default_factory=list)  # changed since the scan


async def delete_condemned(
    zk: ZooKeeperClient, condemned: CondemnedLedgers, plan: GcPlan
) -> GcOutcome:
    outcome = GcOutcome()
    semaphore = asyncio.Semaphore(DELETES_IN_FLIGHT_MAX)

    async def one(condemnation: Condemnation) -> None:
        async with semaphore:
            metadata = await _delete_ledger(zk, condemnation.ledger_id)
            if metadata is None:
                outcome.skipped.append(condemnation.ledger_id)
                return
            await condemned.mark_deleted(condemnation, time.time())
            hooks.reached("gc_deleted")
            outcome.deleted.append(condemnation.ledger_id)
            outcome.deleted_bytes += metadata.length
            outcome.deleted_disk_bytes += metadata.length * metadata.write_quorum
            logger.info(
                "event=ledger_deleted ledger_id=%d bytes=%d", metadata.ledger_id, metadata.length
            )

    await asyncio.gather(*(one(c) for c in plan.delete))
    for condemnation in plan.tombstone:
        await condemned.mark_deleted(condemnation, time.time())
    outcome.deleted.sort()
    return outcome


async def _delete_ledger(zk: ZooKeeperClient, ledger_id: int) -> LedgerMetadata | None:
    """Delete a closed object ledger's metadata, as read just now; None when it is no
    longer one (or changed meanwhile)."""
    path = zk_layout.ledger_path(ledger_id)
    try:
        data, stat = await zk.get_with_stat(path)
    except NoNodeError:
        return None
    metadata = LedgerMetadata.decode(data)
    if metadata.state != STATE_CLOSED or metadata.custom.get("purpose") != OBJECT_LEDGER_PURPOSE:
        return None
    try:
        await zk.delete(path, stat.version)
    except (BadVersionError, NoNodeError):
        return None
    return metadata


# ------------------------------------------------------------------ bookies


@dataclass(frozen=True, slots=True)
class BookieGc:
    bookie_id: str
    answer: dict[str, Any]  # the bookie's figures, or {"error": ...}


async def bookie_addresses(zk: ZooKeeperClient) -> dict[str, str]:
    """bookie id -> its admin HTTP address, from the registrations."""
    try:
        ids = await zk.get_children(zk_layout.AVAILABLE_PATH)
    except NoNodeError:
        return {}
    found = {}
    for bookie_id in ids:
        try:
            value = await zk.get(zk_layout.available_path(bookie_id))
        except NoNodeError:
            continue
        registration = json.loads(value.value)
        if registration.get("http_port"):
            found[bookie_id] = f"{registration['host']}:{registration['http_port']}"
    return found


async def request_bookie_gc(zk: ZooKeeperClient, threshold: float) -> list[BookieGc]:
    """Ask every registered bookie for a GC pass (roll, collect, compact under
    `threshold`), all at once; a bookie that fails is reported, not retried."""
    addresses = await bookie_addresses(zk)
    answers = await asyncio.gather(
        *(asyncio.to_thread(_post_gc, address, threshold) for address in addresses.values())
    )
    return [BookieGc(b, a) for b, a in zip(addresses, answers, strict=True)]


def _post_gc(address: str, threshold: float) -> dict[str, Any]:
    url = f"http://{address}/api/v1/bookie/gc?threshold={threshold}&roll=true"
    request = urllib.request.Request(url, data=b"", method="POST")
    try:
        with urllib.request.urlopen(request, timeout=BOOKIE_GC_TIMEOUT_S) as response:
            answer: dict[str, Any] = json.loads(response.read())
            return answer
    except (urllib.error.URLError, OSError, ValueError) as e:
        return {"error": f"{type(e).__name__}: {e}"}
