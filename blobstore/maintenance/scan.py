"""The scan: what references which ledger, read straight from ZooKeeper by Spark tasks.

The driver cuts the work into tasks (`plan_tasks`), none of which holds more than a range
of index pages, a slice of one bucket's uploads, or one leaf directory of ledger
metadata; the driver itself keeps only the bounds. Each task opens its own ZooKeeper
session, sends a `sync` (its reads then see every write acknowledged before the task
began), and yields rows:

- **packed object rows**: a task's extents of plain object versions (role `object`: they
  may be compacted), one row per ledger (`ObjectExtents`): `length` their bytes,
  `holders` the versions holding them, `detail` the extents with their keys and versions
  as JSON. A scan of a million objects hands Spark a few thousand rows, not a million:
  a row's way into the JVM (unpickled, converted, cached) cost three times the walk;
- an **extent row** per extent of every upload part and manifest, naming its holder
  (bucket, key, version or upload and part) and its `role`: `part`, `manifest` and
  `named` (a ledger named inside a manifest): these pin their ledger; `unresolved`
  (ledger -1): a manifest that could not be read, so no ledger may be called
  unreferenced in this run;
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

import orjson
from kazoo.exceptions import NoNodeError

from blobstore.catalog import Catalog
from blobstore.catalog.config import CatalogConfig
from blobstore.catalog.errors import NoSuchUploadError
from blobstore.catalog.records import ObjectRecord, VersionRefs
from blobstore.ledger import LedgerClient
from blobstore.ledger.config import OBJECT_LEDGER_PURPOSE
from blobstore.ledger.errors import LedgerError
from blobstore.ledger.ledger_metadata import LedgerMetadata
from blobstore.maintenance import hooks, lifecycle
from blobstore.objects.config import READ_WINDOW_ENTRIES_MAX
from blobstore.objects.manifest import ManifestError, ManifestReader
from blobstore.objects.read_object_op import ReadHandleCache, ShortEntryError
from blobstore.objects.restore import restored_until
from blobstore.runtime.zk import ZooKeeperClient
from blobstore.wire import zk_layout

ROLE_OBJECT = "object"
ROLE_PART = "part"
ROLE_MANIFEST = "manifest"
ROLE_NAMED = "named"
ROLE_UNRESOLVED = "unresolved"
PINNING_ROLES = (ROLE_PART, ROLE_MANIFEST, ROLE_NAMED)
TAG_EXTENT, TAG_ACTION, TAG_LEDGER, TAG_COUNT, TAG_TIERED = "e", "a", "l", "n", "t"
ABORT_UPLOAD = "abort_upload"
# A restored copy of a tiered version whose days are over: dropped from the bookies.
RESTORE_EXPIRED = "restore_expired"
UPLOADS_PER_TASK = 500
READS_IN_FLIGHT_MAX = 32
MANIFEST_HANDLES_MAX = 16
MANIFEST_READ_ERRORS = (ManifestError, LedgerError, ShortEntryError, TimeoutError)

# Every row has the same columns (one DataFrame is made of them all, in one pass): the
# extent's, then `mtime` and `detail` (JSON: the rest of an action or a ledger row).
EXTENT_COLUMNS = (
    "ledger_id first_entry last_entry length entry_size role bucket key version_id "
    "upload_id part_number holders"
).split()
ROW_COLUMNS = ["tag", *EXTENT_COLUMNS, "mtime", "detail"]
_NO_EXTENT = (None, None, None, None, None)
_NO_UPLOAD = (None, None, None)  # upload_id, part_number, holders
# Extents per packed row (a ledger holding more of a task's extents gets more rows).
PACKED_EXTENTS_MAX = 4096


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
Row = tuple[Any, ...]


# ------------------------------------------------------------------ rows (pure)


def extent_row(extent: list[int], role: str, holder: tuple[str, str, str, str, int]) -> Row:
    """`extent` as `Extent.to_list` gives it: ledger, first and last entry, length,
    entry size."""
    return (TAG_EXTENT, *extent, role, *holder, 1, None, None)


class ObjectExtents:
    """A task's extents of plain object versions, by ledger, until they are packed into
    rows (`rows`). A ledger's are kept flat, EXTENT_FIELDS values each (one list per
    ledger, not one per extent: a list per extent cost more than the walk, most of it
    the garbage collector going over them)."""

    __slots__ = ("by_ledger", "holders")

    def __init__(self) -> None:
        self.by_ledger: dict[int, list[Any]] = {}
        self.holders: dict[int, int] = {}  # the distinct versions on each ledger

    def add(self, key: str, version_id: str, extents: list[list[int]]) -> None:
        by_ledger = self.by_ledger
        for extent in extents:
            ledger_id = extent[0]
            held = by_ledger.get(ledger_id)
            if held is None:
                held = by_ledger[ledger_id] = []
            # A version's extents come together: a new holder unless the last was its.
            if not held or held[-EXTENT_FIELDS] != key or held[1 - EXTENT_FIELDS] != version_id:
                self.holders[ledger_id] = self.holders.get(ledger_id, 0) + 1
            held += (key, version_id, extent[1], extent[2], extent[3], extent[4])

    def rows(self, bucket: str) -> Iterator[Row]:
        for ledger_id, flat in self.by_ledger.items():
            yield from packed_rows(bucket, ledger_id, flat, self.holders[ledger_id])


# A packed extent: key, version_id, first entry, last entry, length, entry size.
EXTENT_FIELDS = 6
_LENGTH = 4


def packed_rows(bucket: str, ledger_id: int, flat: list[Any], holders: int) -> Iterator[Row]:
    """A task's object extents on one ledger (flat, EXTENT_FIELDS values each), in rows
    of at most PACKED_EXTENTS_MAX: `length` their bytes, `holders` the distinct versions
    holding them (all on the first row: a version's extents are all in one task),
    `detail` the extents as one flat JSON array."""
    step = PACKED_EXTENTS_MAX * EXTENT_FIELDS
    for start in range(0, len(flat), step):
        chunk = flat[start : start + step]
        length = sum(chunk[_LENGTH::EXTENT_FIELDS])
        count = holders if start == 0 else 0
        head = (TAG_EXTENT, ledger_id, None, None, length, None, ROLE_OBJECT, bucket)
        yield (*head, None, None, "", 0, count, None, orjson.dumps(chunk).decode())


def unpacked(detail: str) -> list[tuple[Any, ...]]:
    """A packed row's extents: `(key, version_id, first, last, length, entry_size)`."""
    flat = orjson.loads(detail)
    return list(zip(*[iter(flat)] * EXTENT_FIELDS, strict=True))


def extent_rows_of(row: Any) -> Iterator[Row]:
    """A packed row (ledger_id, bucket, detail) as a row per extent: ledger_id, first and
    last entry, length, entry size, bucket, key, version_id."""
    ledger_id, bucket, detail = row
    for key, version_id, first, last, length, entry_size in unpacked(detail):
        yield ledger_id, first, last, length, entry_size, bucket, key, version_id


class ReleasedVersions:
    """Object versions this run released (deleted or moved off a ledger), to be found in
    packed rows. Each is (ledger_id, bucket, key, version_id, upload_id ""): ledger_id -1
    for every ledger of the version."""

    def __init__(self, released: Iterable[tuple[int, str, str, str, str]]) -> None:
        self.anywhere: set[tuple[str, str, str]] = set()
        self.on_ledger: set[tuple[int, str, str, str]] = set()
        for ledger_id, bucket, key, version_id, _upload in released:
            if ledger_id < 0:
                self.anywhere.add((bucket, key, version_id))
            else:
                self.on_ledger.add((ledger_id, bucket, key, version_id))

    def found_in(self, rows: Iterable[Any]) -> Iterator[tuple[int, str, str, str]]:
        """(ledger_id, bucket, key, version_id) of each released version in `rows`
        (ledger_id, bucket, detail), the same one possibly more than once."""
        for ledger_id, bucket, detail in rows:
            for key, version_id, *_entries in unpacked(detail):
                if (bucket, key, version_id) in self.anywhere or (
                    (ledger_id, bucket, key, version_id) in self.on_ledger
                ):
                    yield ledger_id, bucket, key, version_id


def version_rows(
    bucket: str, key: str, version: VersionRefs, objects: ObjectExtents
) -> Iterator[Row]:
    """The extent rows of one version that pins its ledgers (a resolved manifest's);
    a plain version's extents go to `objects`."""
    manifest = version.manifest
    if not manifest:
        objects.add(key, version.version_id, version.extents)
        return
    holder = (bucket, key, version.version_id, "", 0)
    for extent in manifest:
        yield extent_row(extent, ROLE_MANIFEST, holder)
    for extent in version.extents:
        yield extent_row(extent, ROLE_NAMED, holder)
    for ledger_id in version.manifest_ledgers:
        yield extent_row([ledger_id, 0, 0, 0, 1], ROLE_NAMED, holder)


def record_rows(record: ObjectRecord, objects: ObjectExtents) -> Iterator[Row]:
    """`version_rows` of a whole record (a manifest's, once resolved)."""
    d = record.to_dict()
    d["v"] = record.version_id
    return version_rows(record.bucket, record.key, VersionRefs(d), objects)


def unresolved_row(bucket: str, key: str, version_id: str) -> Row:
    return extent_row([-1, 0, 0, 0, 1], ROLE_UNRESOLVED, (bucket, key, version_id, "", 0))


def _detail(**fields: Any) -> str:
    return orjson.dumps(fields).decode()


def tiered_row(bucket: str, key: str, version: VersionRefs, location: str) -> Row:
    """A version whose bytes are on a tier: its tier location (in `detail`), size (in
    `length`) and time, so that the run knows which segments are referenced, how much
    of each is live, and what to move when it rewrites one."""
    holder = (bucket, key, version.version_id, None, None, None)
    mtime = version.last_modified
    return (TAG_TIERED, None, None, None, version.size, None, None, *holder, mtime, location)


def restore_rows(bucket: str, key: str, version: VersionRefs, now: float) -> Iterator[Row]:
    """The action dropping a tiered version's restored copy, once its days are over."""
    until = restored_until(version.system_metadata)
    if version.extents and until is not None and until <= now:
        holder = (bucket, key, version.version_id)
        detail = _detail(rule_id="", reason=f"restored copy expired at {until:.0f}")
        extent = (None, None, None, version.size, None)
        row = (TAG_ACTION, *extent, RESTORE_EXPIRED, *holder, *_NO_UPLOAD)
        yield (*row, version.last_modified, detail)


def action_row(bucket: str, action: lifecycle.Action, mtime: float, size: int = 0) -> Row:
    """An action on a version, with the time that version was written (the execution
    acts only if it still was: `Catalog.delete_object(expected_mtime=...)`)."""
    detail = _detail(
        rule_id=action.rule_id, reason=action.reason, storage_class=action.storage_class
    )
    holder = (bucket, action.key, action.version_id)
    extent = (None, None, None, size, None)  # the version's size, in `length`
    return (TAG_ACTION, *extent, str(action.kind), *holder, *_NO_UPLOAD, mtime, detail)


def abort_row(bucket: str, abort: lifecycle.AbortUpload) -> Row:
    """An upload to abort: its id stands in the version column."""
    detail = _detail(rule_id=abort.rule_id, reason=abort.reason)
    holder = (bucket, abort.key, abort.upload_id)
    return (TAG_ACTION, *_NO_EXTENT, ABORT_UPLOAD, *holder, *_NO_UPLOAD, 0.0, detail)


def ledger_row(metadata: LedgerMetadata, mtime_s: float) -> Row:
    detail = _detail(
        state=metadata.state,
        purpose=metadata.custom.get("purpose", ""),
        write_quorum=metadata.write_quorum,
        ctime=metadata.ctime,
        writer=metadata.custom.get("writer", ""),
    )
    row = [TAG_LEDGER, metadata.ledger_id, None, None, metadata.length, None]
    return (*row, None, None, None, None, None, None, None, mtime_s, detail)


def count_row(records: int) -> Row:
    """The records a task scanned (in the `length` column)."""
    return (TAG_COUNT, None, None, None, records, *([None] * 10))


def key_lifecycle(
    bucket: str,
    key: str,
    versions: list[VersionRefs],
    rules: list[lifecycle.Rule],
    versioning: str,
    now: float,
) -> Iterator[Row]:
    """The action rows due on one key (versions newest first)."""
    if not rules or not versions:
        return
    judged = [
        lifecycle.Version(
            v.version_id,
            v.last_modified,
            v.size,
            v.is_delete_marker,
            v.tags,
            tiered=v.tier_location is not None,
            retain_until=v.lock_until if v.lock_mode else 0.0,
            legal_hold=v.legal_hold,
        )
        for v in versions
    ]
    by_id = {v.version_id: v for v in versions}
    for action in lifecycle.key_actions(key, judged, rules, versioning, now):
        version = by_id[action.version_id]
        yield action_row(bucket, action, version.last_modified, version.size)


# ------------------------------------------------------------------ tasks (I/O)


def run_partition(session: Session, tasks: Iterable[Task]) -> Iterator[Row]:
    """A Spark partition: its tasks' rows (the entry point `mapPartitions` calls)."""
    tasks = merged(list(tasks))
    if not tasks:
        return iter(())
    return iter(asyncio.run(_run_tasks(session, tasks)))


async def _run_tasks(session: Session, tasks: list[Task]) -> list[Row]:
    rows: list[Row] = []
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
    rows: list[Row],
) -> None:
    rules = lifecycle.parse_rules(list(task.rules)) if task.rules else []
    bucket = task.bucket
    scanned = 0
    objects = ObjectExtents()
    async for run in catalog.iter_key_runs(bucket, task.lo, task.hi):
        for key, versions in run:
            scanned += len(versions)
            for version in versions:
                location = version.tier_location
                if location is not None:
                    rows.append(tiered_row(bucket, key, version, location))
                    rows.extend(restore_rows(bucket, key, version, now))
                if version.manifest and not version.manifest_ledgers:
                    rows.extend(await _resolved_rows(manifests, bucket, key, version, objects))
                else:
                    rows.extend(version_rows(bucket, key, version, objects))
            if rules:
                rows.extend(key_lifecycle(bucket, key, versions, rules, task.versioning, now))
    rows.extend(objects.rows(bucket))
    rows.append(count_row(scanned))


async def _resolved_rows(
    manifests: ManifestReader,
    bucket: str,
    key: str,
    version: VersionRefs,
    objects: ObjectExtents,
) -> list[Row]:
    """A version written before records named their manifest's ledgers: its manifest
    read. When it cannot be read, an `unresolved` row stops this run's deletions."""
    record = version.record(bucket, key)
    try:
        return list(record_rows(await manifests.resolve(record), objects))
    except MANIFEST_READ_ERRORS:
        rows = list(version_rows(bucket, key, version, objects))
        return [*rows, unresolved_row(bucket, key, record.version_id)]


async def _scan_uploads(catalog: Catalog, task: UploadsTask, now: float, rows: list[Row]) -> None:
    rules = lifecycle.parse_rules(list(task.rules)) if task.rules else []
    for upload_id in task.upload_ids:
        try:
            upload = await catalog.get_upload(task.bucket, upload_id)
            parts = await catalog.get_parts(task.bucket, upload_id)
        except NoSuchUploadError:
            continue  # completed or aborted since it was listed
        for part in parts:
            holder = (task.bucket, upload.key, "", upload_id, part.part_number)
            rows.extend(extent_row(e.to_list(), ROLE_PART, holder) for e in part.extents)
        due = lifecycle.upload_action(
            lifecycle.Upload(upload_id, upload.key, upload.initiated), rules, now
        )
        if due is not None:
            rows.append(abort_row(task.bucket, due))


async def _scan_ledgers(zk: ZooKeeperClient, task: LedgersTask, rows: list[Row]) -> None:
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


def deal(tasks: list[Task], partitions: int) -> list[list[Task]]:
    """The tasks in at most `partitions` groups: the key ranges cut into contiguous runs
    of near-equal length (a group walks its run as one range: `merged`), the small
    ledger and upload tasks dealt round-robin over the groups."""
    if not tasks:
        return []
    count = max(1, min(len(tasks), partitions))
    ranges = [t for t in tasks if isinstance(t, RangeTask)]
    others = [t for t in tasks if not isinstance(t, RangeTask)]
    groups: list[list[Task]] = []
    start = 0
    for i in range(count):
        end = start + len(ranges) // count + (1 if i < len(ranges) % count else 0)
        groups.append(list(ranges[start:end]))
        start = end
    for i, task in enumerate(others):
        groups[i % count].append(task)
    return [g for g in groups if g]


def merged(tasks: list[Task]) -> list[Task]:
    """Neighbouring key ranges of one bucket joined into one (one walk, whose read-ahead
    deepens as it goes, instead of a walk, a sync and a cold start per range)."""
    result: list[Task] = []
    for task in tasks:
        last = result[-1] if result else None
        if (
            isinstance(task, RangeTask)
            and isinstance(last, RangeTask)
            and (last.bucket, last.hi) == (task.bucket, task.lo)
        ):
            result[-1] = RangeTask(task.bucket, last.lo, task.hi, task.versioning, task.rules)
        else:
            result.append(task)
    return result


def is_object_ledger(purpose: str) -> bool:
    return purpose == OBJECT_LEDGER_PURPOSE
