"""The scan: what references which ledger, read straight from ZooKeeper by Spark tasks.

The driver cuts the work into tasks (`plan_tasks`), none of which holds more than a range
of index pages, a slice of one bucket's uploads, or one leaf directory of ledger
metadata; the driver itself keeps only the bounds. Each task opens its own ZooKeeper
session, sends a `sync` (its reads then see every write acknowledged before the task
began), and yields rows:

- an **extent row** per extent of every object version, upload part and manifest, naming
  its holder (bucket, key, version or upload and part) and its `role`: `object` (may be
  compacted), `part`, `manifest` and `named` (a ledger named inside a manifest): these
  pin their ledger; `unresolved` (ledger -1): a manifest that could not be read, so no
  ledger may be called unreferenced in this run;
- an **action row** per lifecycle action due on a key or upload (`lifecycle.py`);
- a **ledger row** per ledger's metadata;
- a **count row** per task (records scanned).

A task walks its key range page by page as listings do: each page read is checked
against its own range and the walk continues at the page's upper bound, so splits and
merges during the scan never make it skip a key.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import NoNodeError

from blobstore.catalog import Catalog
from blobstore.catalog.config import CatalogConfig
from blobstore.catalog.errors import NoSuchUploadError
from blobstore.catalog.records import Extent, ObjectRecord
from blobstore.ledger import LedgerClient
from blobstore.ledger.config import OBJECT_LEDGER_PURPOSE
from blobstore.ledger.errors import LedgerError
from blobstore.ledger.ledger_metadata import LedgerMetadata
from blobstore.maintenance import hooks, lifecycle
from blobstore.objects.config import READ_WINDOW_ENTRIES_MAX
from blobstore.objects.manifest import ManifestError, ManifestReader
from blobstore.objects.read_object_op import ReadHandleCache, ShortEntryError
from blobstore.runtime.zk import ZooKeeperClient
from blobstore.wire import zk_layout

ROLE_OBJECT = "object"
ROLE_PART = "part"
ROLE_MANIFEST = "manifest"
ROLE_NAMED = "named"
ROLE_UNRESOLVED = "unresolved"
PINNING_ROLES = (ROLE_PART, ROLE_MANIFEST, ROLE_NAMED)
TAG_EXTENT, TAG_ACTION, TAG_LEDGER, TAG_COUNT = "e", "a", "l", "n"
ABORT_UPLOAD = "abort_upload"
UPLOADS_PER_TASK = 500
READS_IN_FLIGHT_MAX = 32
MANIFEST_HANDLES_MAX = 16
MANIFEST_READ_ERRORS = (ManifestError, LedgerError, ShortEntryError, TimeoutError)

EXTENT_COLUMNS = (
    "ledger_id first_entry last_entry length entry_size role bucket key version_id "
    "upload_id part_number"
).split()
ACTION_COLUMNS = "action bucket key version_id mtime rule_id reason".split()
LEDGER_COLUMNS = "ledger_id state purpose length write_quorum ctime mtime writer".split()


@dataclass(frozen=True, slots=True)
class Session:
    """What every task needs to reach the cluster."""

    zk: str
    catalog_root: str
    now: float


@dataclass(frozen=True, slots=True)
class RangeTask:
    bucket: str
    lo: str
    hi: str | None
    versioning: str
    rules: tuple[Any, ...]  # the bucket's lifecycle rules as stored ((): none)


@dataclass(frozen=True, slots=True)
class UploadsTask:
    bucket: str
    upload_ids: tuple[str, ...]
    rules: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class LedgersTask:
    directory: str  # a leaf directory of the ledger metadata tree


Task = RangeTask | UploadsTask | LedgersTask


# ------------------------------------------------------------------ rows (pure)


def extent_row(
    extent: Extent, role: str, holder: tuple[str, str, str, str, int]
) -> tuple[Any, ...]:
    return (
        TAG_EXTENT,
        extent.ledger_id,
        extent.first_entry,
        extent.last_entry,
        extent.length,
        extent.entry_size,
        role,
        *holder,
    )


def record_rows(record: ObjectRecord) -> Iterator[tuple[Any, ...]]:
    """The extent rows of one version (a resolved manifest's extents pin their ledgers)."""
    holder = (record.bucket, record.key, record.version_id, "", 0)
    if record.manifest:
        for extent in record.manifest:
            yield extent_row(extent, ROLE_MANIFEST, holder)
        for extent in record.extents:
            yield extent_row(extent, ROLE_NAMED, holder)
        for ledger_id in record.manifest_ledgers:
            yield (TAG_EXTENT, ledger_id, 0, 0, 0, 1, ROLE_NAMED, *holder)
        return
    for extent in record.extents:
        yield extent_row(extent, ROLE_OBJECT, holder)


def unresolved_row(record: ObjectRecord) -> tuple[Any, ...]:
    holder = (record.bucket, record.key, record.version_id, "", 0)
    return (TAG_EXTENT, -1, 0, 0, 0, 1, ROLE_UNRESOLVED, *holder)


def action_row(bucket: str, action: lifecycle.Action, mtime: float) -> tuple[Any, ...]:
    """An action on a version, with the time that version was written (the execution
    acts only if it still was: `Catalog.delete_object(expected_mtime=...)`)."""
    return (
        TAG_ACTION,
        str(action.kind),
        bucket,
        action.key,
        action.version_id,
        mtime,
        action.rule_id,
        action.reason,
    )


def abort_row(bucket: str, abort: lifecycle.AbortUpload) -> tuple[Any, ...]:
    """An upload to abort: its id stands in the version column."""
    return (
        TAG_ACTION,
        ABORT_UPLOAD,
        bucket,
        abort.key,
        abort.upload_id,
        0.0,
        abort.rule_id,
        abort.reason,
    )


def ledger_row(metadata: LedgerMetadata, mtime_s: float) -> tuple[Any, ...]:
    return (
        TAG_LEDGER,
        metadata.ledger_id,
        metadata.state,
        metadata.custom.get("purpose", ""),
        metadata.length,
        metadata.write_quorum,
        metadata.ctime,
        mtime_s,
        metadata.custom.get("writer", ""),
    )


def key_lifecycle(
    records: list[ObjectRecord], rules: list[lifecycle.Rule], versioning: str, now: float
) -> Iterator[tuple[Any, ...]]:
    """The action rows due on one key (records newest first)."""
    if not rules or not records:
        return
    versions = [
        lifecycle.Version(r.version_id, r.last_modified, r.size, r.is_delete_marker, r.tags)
        for r in records
    ]
    mtimes = {r.version_id: r.last_modified for r in records}
    for action in lifecycle.key_actions(records[0].key, versions, rules, versioning, now):
        yield action_row(records[0].bucket, action, mtimes.get(action.version_id, 0.0))


# ------------------------------------------------------------------ tasks (I/O)


def run_partition(session: Session, tasks: Iterable[Task]) -> Iterator[tuple[Any, ...]]:
    """A Spark partition: its tasks' rows (the entry point `mapPartitions` calls)."""
    tasks = list(tasks)
    if not tasks:
        return iter(())
    return iter(asyncio.run(_run_tasks(session, tasks)))


async def _run_tasks(session: Session, tasks: list[Task]) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = []
    async with _connected(session) as (zk, catalog, manifests):
        await zk.fresh_view()
        hooks.reached("scan_task")
        for task in tasks:
            if isinstance(task, RangeTask):
                await _scan_range(catalog, manifests, task, session.now, rows)
            elif isinstance(task, UploadsTask):
                await _scan_uploads(catalog, task, session.now, rows)
            else:
                await _scan_ledgers(zk, task, rows)
    return rows


@contextlib.asynccontextmanager
async def _connected(
    session: Session,
) -> AsyncIterator[tuple[ZooKeeperClient, Catalog, ManifestReader]]:
    zk = ZooKeeperClient(session.zk)
    await zk.start()
    client = LedgerClient(zk)
    try:
        await client.start()
        catalog = Catalog(zk, CatalogConfig(root=session.catalog_root))
        catalog.index.start()
        handles = ReadHandleCache(client, MANIFEST_HANDLES_MAX)
        yield zk, catalog, ManifestReader(handles, READ_WINDOW_ENTRIES_MAX)
    finally:
        await client.close()
        await zk.stop()


async def _scan_range(
    catalog: Catalog,
    manifests: ManifestReader,
    task: RangeTask,
    now: float,
    rows: list[tuple[Any, ...]],
) -> None:
    rules = lifecycle.parse_rules(list(task.rules)) if task.rules else []
    scanned = 0
    async for records in catalog.iter_key_range(task.bucket, task.lo, task.hi):
        scanned += len(records)
        for record in records:
            if record.manifest and not record.manifest_ledgers:
                record = await _resolved(manifests, record, rows)
            rows.extend(record_rows(record))
        rows.extend(key_lifecycle(records, rules, task.versioning, now))
    rows.append((TAG_COUNT, scanned))


async def _resolved(
    manifests: ManifestReader, record: ObjectRecord, rows: list[tuple[Any, ...]]
) -> ObjectRecord:
    """A record written before records named their manifest's ledgers: its manifest
    read. When it cannot be read, an `unresolved` row stops this run's deletions."""
    try:
        return await manifests.resolve(record)
    except MANIFEST_READ_ERRORS:
        rows.append(unresolved_row(record))
        return record


async def _scan_uploads(
    catalog: Catalog, task: UploadsTask, now: float, rows: list[tuple[Any, ...]]
) -> None:
    rules = lifecycle.parse_rules(list(task.rules)) if task.rules else []
    for upload_id in task.upload_ids:
        try:
            upload = await catalog.get_upload(task.bucket, upload_id)
            parts = await catalog.get_parts(task.bucket, upload_id)
        except NoSuchUploadError:
            continue  # completed or aborted since it was listed
        for part in parts:
            holder = (task.bucket, upload.key, "", upload_id, part.part_number)
            rows.extend(extent_row(e, ROLE_PART, holder) for e in part.extents)
        due = lifecycle.upload_action(
            lifecycle.Upload(upload_id, upload.key, upload.initiated), rules, now
        )
        if due is not None:
            rows.append(abort_row(task.bucket, due))


async def _scan_ledgers(
    zk: ZooKeeperClient, task: LedgersTask, rows: list[tuple[Any, ...]]
) -> None:
    names = await _children(zk, task.directory)
    semaphore = asyncio.Semaphore(READS_IN_FLIGHT_MAX)

    async def read(name: str) -> tuple[Any, ...] | None:
        async with semaphore:
            try:
                data, stat = await zk.get_with_stat(f"{task.directory}/{name}")
            except NoNodeError:  # deleted since it was listed
                return None
        return ledger_row(LedgerMetadata.decode(data), stat.mtime / 1000.0)

    found = await asyncio.gather(*(read(n) for n in names if n.startswith("L")))
    rows.extend(row for row in found if row is not None)


# ------------------------------------------------------------------ the driver's plan


async def plan_tasks(zk: ZooKeeperClient, catalog: Catalog, pages_per_task: int) -> list[Task]:
    """Every task of a scan: key ranges of at most `pages_per_task` pages per bucket,
    slices of each bucket's uploads, and the leaf directories of ledger metadata."""
    tasks: list[Task] = []
    for bucket in await catalog.list_buckets():
        rules = tuple(bucket.lifecycle or ())
        for lo, hi in await catalog.key_ranges(bucket.name, pages_per_task):
            tasks.append(RangeTask(bucket.name, lo, hi, bucket.versioning, rules))
        upload_ids = await catalog.upload_ids(bucket.name)
        for start in range(0, len(upload_ids), UPLOADS_PER_TASK):
            chunk = tuple(upload_ids[start : start + UPLOADS_PER_TASK])
            tasks.append(UploadsTask(bucket.name, chunk, rules))
    tasks.extend(LedgersTask(d) for d in await ledger_directories(zk))
    return tasks


async def ledger_directories(zk: ZooKeeperClient) -> list[str]:
    """The leaf directories of the ledger metadata tree (directories only: no ledger is
    read here)."""
    paths = [zk_layout.LEDGER_META_ROOT]
    for _ in range(4):
        lists = await asyncio.gather(*(_children(zk, p) for p in paths))
        paths = [
            f"{p}/{c}" for p, names in zip(paths, lists, strict=True) for c in names if c.isdigit()
        ]
    return paths


async def _children(zk: ZooKeeperClient, path: str) -> list[str]:
    try:
        return await zk.get_children(path)
    except NoNodeError:
        return []


def is_object_ledger(purpose: str) -> bool:
    return purpose == OBJECT_LEDGER_PURPOSE
