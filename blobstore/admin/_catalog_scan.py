"""One walk over the catalog for admin commands: every stored object version and every
part of every multipart upload in progress, with the extents that hold their bytes.

The walk reads through the public `Catalog` API only (pages in key order, uploads and
their parts), so it sees what a gateway sees. A record whose part list lives in a
manifest (blobstore.objects.manifest) is resolved: its extents are the manifest's own
entries and every extent the manifest names. A manifest that cannot be read is reported
(`Found.manifest_error`), never skipped: its extents are then unknown, so no ledger may be
called unreferenced. It is not a snapshot: objects written or
deleted during the walk may or may not be seen; callers that report a problem confirm it
by reading the record again (`still_references`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from blobstore.catalog import Catalog
from blobstore.catalog.errors import (
    DeleteMarkerError,
    NoSuchBucketError,
    NoSuchKeyError,
    NoSuchUploadError,
    NoSuchVersionError,
)
from blobstore.catalog.records import Extent, ObjectRecord
from blobstore.ledger import LedgerClient, LedgerError
from blobstore.objects.config import READ_WINDOW_ENTRIES_MAX
from blobstore.objects.manifest import ManifestError, ManifestReader
from blobstore.objects.read_object_op import ReadHandleCache, ShortEntryError
from blobstore.runtime.errors import UsageError
from blobstore.runtime.zk import ZooKeeperClient

UPLOADS_PAGE_MAX = 1000
MANIFEST_HANDLES_MAX = 64
# What reading a manifest may fail with (besides the bookies' own errors).
MANIFEST_READ_ERRORS = (ManifestError, LedgerError, ShortEntryError, TimeoutError)


@dataclass(frozen=True, slots=True)
class Holder:
    """What references some bytes: an object version, or a part of an upload."""

    bucket: str
    key: str
    version_id: str = ""  # object versions
    upload_id: str = ""  # parts of uploads in progress
    part_number: int = 0

    def describe(self) -> str:
        if self.upload_id:
            return f"{self.bucket}/{self.key} upload {self.upload_id} part {self.part_number}"
        return f"{self.bucket}/{self.key} version {self.version_id}"

    def to_json(self) -> dict[str, object]:
        value: dict[str, object] = {"bucket": self.bucket, "key": self.key}
        if self.upload_id:
            value.update(upload_id=self.upload_id, part_number=self.part_number)
        else:
            value["version_id"] = self.version_id
        return value


@dataclass(frozen=True, slots=True)
class Found:
    """One item of the walk: an object version (record set) or a part (record None)."""

    holder: Holder
    size: int
    extents: tuple[Extent, ...]
    record: ObjectRecord | None = None
    is_current: bool = False  # the newest version of its key and not a delete marker
    manifest_error: str = ""  # the record's manifest could not be read: extents partial


@contextlib.asynccontextmanager
async def manifest_reader(zk: ZooKeeperClient) -> AsyncIterator[ManifestReader]:
    """A reader of manifests through a ledger client of this session (read-only)."""
    client = LedgerClient(zk)
    await client.start()
    try:
        yield ManifestReader(ReadHandleCache(client, MANIFEST_HANDLES_MAX), READ_WINDOW_ENTRIES_MAX)
    finally:
        await client.close()


async def _resolved(manifests: ManifestReader, record: ObjectRecord) -> tuple[ObjectRecord, str]:
    try:
        return await manifests.resolve(record), ""
    except MANIFEST_READ_ERRORS as e:
        return record, f"{type(e).__name__}: {e}"


async def _resolved_or_gone(
    catalog: Catalog, manifests: ManifestReader, record: ObjectRecord
) -> tuple[ObjectRecord, str] | None:
    """The record resolved; when its manifest cannot be read, the record is read again
    (None: that version is gone, or now names another manifest: deleted or rewritten
    during the walk) and the manifest once more before the failure is reported."""
    resolved, error = await _resolved(manifests, record)
    if not error:
        return resolved, ""
    try:
        again = await catalog.get_object(record.bucket, record.key, record.version_id)
    except (DeleteMarkerError, NoSuchKeyError, NoSuchVersionError, NoSuchBucketError):
        return None
    if again.manifest != record.manifest:
        return None
    return await _resolved(manifests, again)


async def bucket_names(catalog: Catalog, only: str | None) -> list[str]:
    if only is not None:
        try:
            await catalog.get_bucket(only)
        except NoSuchBucketError:
            raise UsageError(f"no bucket named {only!r}") from None
        return [only]
    return sorted(b.name for b in await catalog.list_buckets())


async def walk_bucket(
    catalog: Catalog, manifests: ManifestReader, bucket: str
) -> AsyncIterator[Found]:
    """Every object version (newest first per key) then every part of every upload."""
    previous_key: str | None = None
    try:
        async for record in catalog.iter_objects(bucket, all_versions=True):
            newest = record.key != previous_key
            previous_key = record.key
            outcome = await _resolved_or_gone(catalog, manifests, record)
            if outcome is None:
                continue
            record, error = outcome
            yield Found(
                holder=Holder(bucket, record.key, version_id=record.version_id),
                size=record.size,
                extents=(*record.manifest, *record.extents),
                record=record,
                is_current=newest and not record.is_delete_marker,
                manifest_error=error,
            )
        key_marker, upload_id_marker = "", ""
        while True:
            page = await catalog.list_uploads(
                bucket,
                key_marker=key_marker,
                upload_id_marker=upload_id_marker,
                max_uploads=UPLOADS_PAGE_MAX,
            )
            for upload in page.uploads:
                try:
                    parts = await catalog.get_parts(bucket, upload.upload_id)
                except NoSuchUploadError:
                    continue  # completed or aborted meanwhile
                for part in parts:
                    yield Found(
                        holder=Holder(
                            bucket,
                            upload.key,
                            upload_id=upload.upload_id,
                            part_number=part.part_number,
                        ),
                        size=part.size,
                        extents=tuple(part.extents),
                    )
            if not page.is_truncated:
                break
            key_marker, upload_id_marker = page.next_key_marker, page.next_upload_id_marker
    except NoSuchBucketError:
        return  # deleted while we walked


async def still_references(
    catalog: Catalog, manifests: ManifestReader, holder: Holder, extent: Extent
) -> bool:
    """Whether the holder still exists and still names this extent (read again now; a
    holder whose manifest cannot be read is taken to name it)."""
    if holder.upload_id:
        try:
            parts = await catalog.get_parts(holder.bucket, holder.upload_id)
        except (NoSuchUploadError, NoSuchBucketError):
            return False
        return any(p.part_number == holder.part_number and extent in p.extents for p in parts)
    try:
        record = await catalog.get_object(holder.bucket, holder.key, holder.version_id)
    except DeleteMarkerError:
        return False
    except (NoSuchKeyError, NoSuchVersionError, NoSuchBucketError):
        return False
    if extent in record.manifest:
        return True
    record, error = await _resolved(manifests, record)
    return bool(error) or extent in record.extents
