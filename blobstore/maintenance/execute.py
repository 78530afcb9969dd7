"""What Spark tasks change: compaction copies and swaps, lifecycle actions.

**Compaction** of one ledger: each distinct extent that object versions hold in it (a
copy made by CopyObject shares its source's extent: copied once, stays shared) is read
and appended, entry by entry, to a new ledger of the same quorums, at a bounded rate;
the new ledger is closed; then each holder's record is read again and swapped by
compare-and-set (`Catalog.swap_object`) when it still names the old extent. A record
that changed meanwhile (overwritten, deleted, its tags rewritten) is skipped: its
copy is garbage in the new ledger for a later run. Nothing is deleted here: the old
ledger goes the way of every unreferenced ledger (condemned, looked at again, deleted).

The task registers itself like a gateway (`GatewayRegistration`), as the writer of its
new ledgers: killed, its session ends, and the sweeper of any gateway closes what it
left open.

**Lifecycle** actions are conditional: a version is deleted, or a delete marker put on
top of it, only if it is still the version judged (`expected_mtime`), and never while
Object Lock keeps what the delete would remove: the lock is checked again inside the
delete's compare-and-set (`Catalog.delete_object(guard=...)`), so a retention or legal
hold set after the scan is honoured. An action the scan found locked already
(SKIP_LOCKED) opens no session: it is reported skipped, "locked", as a refused one is.
Compaction and tiering swap a record for the same record with its bytes elsewhere
(`dataclasses.replace`): its Object Lock fields go with it.

Each task yields one result row per holder swapped or skipped, per action done or
skipped, and per ledger copied.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from blobstore.catalog import Catalog
from blobstore.catalog.config import CatalogConfig
from blobstore.catalog.errors import (
    CatalogError,
    DeleteMarkerError,
    NoSuchKeyError,
    NoSuchUploadError,
    NoSuchVersionError,
    PreconditionFailedError,
)
from blobstore.catalog.records import Extent, ObjectRecord
from blobstore.ledger import LedgerClient, LedgerHandle
from blobstore.ledger.config import OBJECT_LEDGER_PURPOSE
from blobstore.ledger.errors import LedgerError, NotEnoughBookiesError
from blobstore.ledger.passwords import LedgerPasswords
from blobstore.maintenance import hooks
from blobstore.maintenance.lifecycle import ActionKind
from blobstore.maintenance.scan import ABORT_UPLOAD, RESTORE_EXPIRED, Session
from blobstore.objects.lock import ObjectLockedError, check_removal
from blobstore.objects.read_object_op import ShortEntryError
from blobstore.objects.restore import unrestored
from blobstore.recovery.sweeper import GatewayRegistration
from blobstore.runtime.zk import ZooKeeperClient

logger = logging.getLogger(__name__)

READ_WINDOW_ENTRIES = 8
RESULT_SWAPPED, RESULT_SKIPPED, RESULT_COPIED = "swapped", "skipped", "copied"
RESULT_DONE = "done"
RESULT_FAILED = "failed"
RESULT_DEFERRED = "deferred"
RESULT_COLUMNS = "result ledger_id bucket key version_id bytes detail".split()
LOCKED = "locked"  # the detail of a lifecycle action Object Lock refused


@dataclass(frozen=True, slots=True)
class Holder:
    bucket: str
    key: str
    version_id: str
    extent: Extent


@dataclass(frozen=True, slots=True)
class CompactTask:
    ledger_id: int
    holders: tuple[Holder, ...]


class RateLimit:
    """At most `bytes_per_s` on average, with a burst of one second's worth."""

    def __init__(self, bytes_per_s: float, clock: Any = time.monotonic) -> None:
        self.rate = bytes_per_s
        self.clock = clock
        self.allowance = bytes_per_s
        self.last = clock()

    def delay_for(self, size: int) -> float:
        """Take `size` bytes; how long to wait before going on (pure but for the clock)."""
        now = self.clock()
        self.allowance = min(self.rate, self.allowance + (now - self.last) * self.rate)
        self.last = now
        self.allowance -= size
        return max(0.0, -self.allowance / self.rate)

    async def take(self, size: int) -> None:
        delay = self.delay_for(size)
        if delay > 0:
            await asyncio.sleep(delay)


def remapped(record: ObjectRecord, moved: dict[Extent, Extent]) -> ObjectRecord | None:
    """The record with its moved extents replaced; None when it names none of them."""
    if not any(extent in moved for extent in record.extents):
        return None
    return replace(record, extents=tuple(moved.get(e, e) for e in record.extents))


# ------------------------------------------------------------------ compaction


def compact_partition(
    session: Session, tasks: Iterable[CompactTask], bytes_per_s: float
) -> Iterator[tuple[Any, ...]]:
    tasks = list(tasks)
    if not tasks:
        return iter(())
    return iter(asyncio.run(_compact_all(session, tasks, bytes_per_s)))


@contextlib.asynccontextmanager
async def writer_session(session: Session) -> AsyncIterator[tuple[Catalog, LedgerClient, str]]:
    zk = ZooKeeperClient(session.zk)
    await zk.start()
    writer_id = f"maintenance-{uuid.uuid4().hex[:12]}"
    registration = GatewayRegistration(zk, writer_id)
    client = LedgerClient(zk)
    try:
        await registration.start()
        await client.start()
        catalog = Catalog(zk, CatalogConfig(root=session.catalog_root))
        catalog.index.start()
        yield catalog, client, writer_id
        await catalog.close()
    finally:
        await client.close()
        await registration.close()
        await zk.stop()


async def _compact_all(
    session: Session, tasks: list[CompactTask], bytes_per_s: float
) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = []
    limit = RateLimit(bytes_per_s)
    passwords = LedgerPasswords.from_env()  # the executor's cluster key, as the gateways'
    async with writer_session(session) as (catalog, client, writer_id):
        for task in tasks:
            try:
                rows.extend(await _compact_one(catalog, client, writer_id, task, limit, passwords))
            except NotEnoughBookiesError as e:
                # No room to copy into (every bookie read-only, e.g. full): the ledger is
                # compacted by a later run, once GC has freed the disks.
                rows.append((RESULT_DEFERRED, task.ledger_id, "", "", "", 0, str(e)))
            except (LedgerError, ShortEntryError, TimeoutError) as e:
                # Unreadable or unwritable now (bookies down, full): the ledger stays as
                # it is, for a later run; what was copied is garbage in the new ledger.
                logger.warning("event=compaction_failed ledger_id=%d error=%r", task.ledger_id, e)
                rows.append(
                    (RESULT_FAILED, task.ledger_id, "", "", "", 0, f"{type(e).__name__}: {e}")
                )
    return rows


async def _compact_one(
    catalog: Catalog,
    client: LedgerClient,
    writer_id: str,
    task: CompactTask,
    limit: RateLimit,
    passwords: LedgerPasswords,
) -> list[tuple[Any, ...]]:
    old = await client.open_ledger(task.ledger_id, passwords, recovery=False)
    meta = old.metadata
    new = await client.create_ledger(
        meta.ensemble_size,
        meta.write_quorum,
        meta.ack_quorum,
        passwords,
        metadata={
            "purpose": OBJECT_LEDGER_PURPOSE,
            "writer": writer_id,
            "compacted": str(task.ledger_id),
        },
    )
    moved: dict[Extent, Extent] = {}
    copied = 0
    try:
        for extent in sorted({h.extent for h in task.holders}, key=lambda e: e.first_entry):
            moved[extent] = await _copy_extent(old, new, extent, limit)
            copied += extent.length
    finally:
        await new.close()
    hooks.reached("compact_copied")
    rows: list[tuple[Any, ...]] = [
        (RESULT_COPIED, task.ledger_id, "", "", "", copied, str(new.ledger_id))
    ]
    for holder in task.holders:
        rows.append(await _swap(catalog, holder, moved, task.ledger_id))
        hooks.reached("compact_swapped")
    return rows


async def _copy_extent(
    old: LedgerHandle, new: LedgerHandle, extent: Extent, limit: RateLimit
) -> Extent:
    """Append the extent's entries to `new` (pipelined, bounded by the handle's adds in
    flight): the same bytes, in new entries."""
    added: list[asyncio.Future[int]] = []
    async for payload in old.iter_entries(
        extent.first_entry, extent.last_entry, window=READ_WINDOW_ENTRIES
    ):
        await limit.take(len(payload))
        await new.wait_for_capacity()
        added.append(new.append(payload))
    ids = await asyncio.gather(*added)
    return Extent(new.ledger_id, ids[0], ids[-1], extent.length, extent.entry_size)


async def _swap(
    catalog: Catalog, holder: Holder, moved: dict[Extent, Extent], old_ledger: int
) -> tuple[Any, ...]:
    where = (holder.bucket, holder.key, holder.version_id)
    try:
        record = await catalog.get_object(*where)
    except (NoSuchKeyError, NoSuchVersionError, DeleteMarkerError):
        return (RESULT_SKIPPED, old_ledger, *where, 0, "gone")
    new_record = remapped(record, moved)
    if new_record is None or record.manifest:
        return (RESULT_SKIPPED, old_ledger, *where, 0, "changed")
    try:
        swapped = await catalog.swap_object(record, new_record)
    except CatalogError as e:
        return (RESULT_SKIPPED, old_ledger, *where, 0, type(e).__name__)
    if not swapped:
        return (RESULT_SKIPPED, old_ledger, *where, 0, "changed")
    return (RESULT_SWAPPED, old_ledger, *where, record.size, "")


# ------------------------------------------------------------------ lifecycle


async def _drop_restored_copy(
    catalog: Catalog, bucket: str, key: str, version_id: str, mtime: float
) -> bool:
    """Swap a restored version back to its tier alone (False: it changed since)."""
    record = await catalog.get_object(bucket, key, version_id)
    if record.last_modified != mtime or not record.extents or record.tier_location is None:
        return False
    return await catalog.swap_object(record, unrestored(record))


def lifecycle_partition(
    session: Session, actions: Iterable[tuple[Any, ...]]
) -> Iterator[tuple[Any, ...]]:
    actions = list(actions)
    locked = [a for a in actions if a[0] == ActionKind.SKIP_LOCKED]
    rows = [(RESULT_SKIPPED, -1, *a[1:4], 0, LOCKED) for a in locked]
    acting = [a for a in actions if a[0] != ActionKind.SKIP_LOCKED]
    if acting:
        rows += asyncio.run(_act_all(session, acting))
    return iter(rows)


def _unlocked(record: ObjectRecord) -> None:
    """The guard of lifecycle's deletes: nothing bypasses Object Lock."""
    check_removal(record, time.time(), bypass_governance=False)


async def _act_all(session: Session, actions: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    rows = []
    async with writer_session(session) as (catalog, _client, _writer_id):
        for action in actions:
            rows.append(await _act(catalog, *action))
            hooks.reached("lifecycle_action")
    return rows


async def _act(
    catalog: Catalog,
    kind: str,
    bucket: str,
    key: str,
    version_id: str,
    mtime: float,
    rule_id: str,
    _reason: str,
) -> tuple[Any, ...]:
    where = (bucket, key, version_id)
    try:
        if kind == ABORT_UPLOAD:
            await catalog.abort_upload(bucket, version_id)
        elif kind == ActionKind.DELETE_VERSION:
            await catalog.delete_object(
                bucket, key, version_id, expected_mtime=mtime, guard=_unlocked
            )
        elif kind == ActionKind.ADD_DELETE_MARKER:
            await catalog.delete_object(bucket, key, expected_mtime=mtime, guard=_unlocked)
        elif kind == RESTORE_EXPIRED:
            if not await _drop_restored_copy(catalog, bucket, key, version_id, mtime):
                return (RESULT_SKIPPED, -1, *where, 0, "changed")
        else:
            return (RESULT_SKIPPED, -1, *where, 0, f"unknown action {kind}")
    except (PreconditionFailedError, NoSuchKeyError, NoSuchVersionError, NoSuchUploadError):
        return (RESULT_SKIPPED, -1, *where, 0, "changed")
    except ObjectLockedError:
        return (RESULT_SKIPPED, -1, *where, 0, LOCKED)
    except CatalogError as e:
        return (RESULT_SKIPPED, -1, *where, 0, type(e).__name__)
    return (RESULT_DONE, -1, *where, 0, f"{kind} {rule_id}")
