"""The catalog: what exists (buckets, object versions, multipart uploads) and where the
bytes of each object live. Kept in ZooKeeper; see docs/catalog.md for the znode layout,
page format, split/merge protocol and the consistency argument.

Writes go through per-page commit queues (page_commit_queue.py) as compare-and-set of one
index page. Reads that must see the newest state (`consistent=True`, every listing) wait
for `fresh_view()` first, a ZooKeeper `sync` shared by concurrent readers: the server this
session reads from then has applied every write acknowledged before the read started, by
any gateway, and every watch those writes fired has been handled, so the watched caches
of bucket records, page maps and pages can answer without another round trip.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import replace
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError

from blobstore.catalog import listing, versioning
from blobstore.catalog._private import zookeeper_errors
from blobstore.catalog.config import CatalogConfig, CatalogPaths
from blobstore.catalog.errors import (
    BucketAlreadyExistsError,
    BucketNotEmptyError,
    BucketOwnerChangedError,
    CatalogBusyError,
    CatalogError,
    DeleteMarkerError,
    InvalidBucketNameError,
    InvalidPartError,
    NoSuchBucketError,
    NoSuchKeyError,
    NoSuchUploadError,
    NoSuchVersionError,
    PreconditionFailedError,
)
from blobstore.catalog.naming import shortest_separator, validate_bucket_name, validate_key
from blobstore.catalog.object_index import ObjectIndex
from blobstore.catalog.page import (
    IndexPage,
    PageMap,
    RootMap,
    encode_versions,
    new_page_id,
    pack_page,
)
from blobstore.catalog.page_batch import ApplyFunction, Mutation
from blobstore.catalog.page_commit_queue import ExtraOperationsFailedError
from blobstore.catalog.records import (
    NULL_VERSION_ID,
    VERSIONING_ENABLED,
    BucketRecord,
    CommitResult,
    DeleteResult,
    ListResult,
    ObjectRecord,
    PartListResult,
    PartRecord,
    UploadListResult,
    UploadRecord,
    VersionListResult,
    VersionRefs,
)
from blobstore.catalog.uploads import MultipartUploads, VersionedPart
from blobstore.runtime.zk import ZooKeeperClient

logger = logging.getLogger(__name__)

# Newest records kept decoded per cached index page (`IndexPage.memo`): ~0.6 KB each for
# a small object, so about 20 MiB over the 256 pages the read cache holds by default.
LATEST_MEMO_MAX = 128
_BULK_MULTI_BYTES_MAX = 2 << 20  # and at most half the client's request limit


def _delete_target_gone(
    versions: versioning.VersionList, version_id: str | None, bucket_versioning: str
) -> bool:
    """Whether what a delete removes for good is absent: the version it names, or, in a
    bucket never versioned, the key. (Deletes that leave a marker find their own.)"""
    if version_id is not None:
        return all(d["v"] != version_id for d in versions)
    return not bucket_versioning and not versions


def _removed_for_good(
    versions: versioning.VersionList,
    bucket: str,
    key: str,
    version_id: str | None,
    bucket_versioning: str,
) -> list[ObjectRecord]:
    """The versions (not delete markers) a delete removes for good: the one named by
    id, or the null version a plain delete replaces where versioning is not Enabled."""
    if version_id is None and bucket_versioning == VERSIONING_ENABLED:
        return []
    wanted = NULL_VERSION_ID if version_id is None else version_id
    return [
        ObjectRecord.from_dict(bucket, key, d)
        for d in versions
        if d["v"] == wanted and not d.get("dm", False)
    ]


def _existing_bucket_name(name: str) -> str:
    """Names that break the rules cannot exist (and must never reach a znode path)."""
    try:
        validate_bucket_name(name)
    except InvalidBucketNameError:
        raise NoSuchBucketError(name) from None
    return name


def _unused_parts(
    upload_id: str, record: ObjectRecord, parts: dict[int, VersionedPart]
) -> list[ObjectRecord]:
    """The stored parts `record` does not use, as records holding their extents (garbage
    once the object is complete). InvalidPartError when a part it names is missing or
    has another ETag."""
    used = set()
    for info in record.parts:
        stored = parts.get(info.part_number)
        if stored is None:
            raise InvalidPartError(upload_id, info.part_number, "no such part")
        if stored[0].etag.strip('"') != info.etag.strip('"'):
            raise InvalidPartError(upload_id, info.part_number, "ETag differs")
        used.add(info.part_number)
    return [
        ObjectRecord(record.bucket, record.key, size=p.size, extents=p.extents)
        for n, (p, _) in sorted(parts.items())
        if n not in used
    ]


def _completion(
    candidate: ObjectRecord,
    candidate_dict: dict[str, Any],
    unused: list[ObjectRecord],
    conditions: tuple[str | None, str | None],
    completed: Callable[[BucketRecord, ObjectRecord], ObjectRecord] | None,
) -> ApplyFunction:
    """The mutation that puts a completed upload's object: its result holds the
    versions it replaced and the unused parts as garbage. `conditions`: If-Match and
    If-None-Match."""
    if_match, if_none_match = conditions

    def apply(versions: versioning.VersionList, bucket_record: BucketRecord) -> tuple[Any, Any]:
        put, put_dict = candidate, candidate_dict
        if completed is not None:
            put = completed(bucket_record, candidate)
            put_dict = candidate_dict if put is candidate else put.to_dict()
        outcome = versioning.apply_put(
            versions,
            put,
            bucket_record.versioning,
            if_match=if_match,
            if_none_match=if_none_match,
            record_dict=put_dict,
        )
        assert outcome.record is not None
        return (
            outcome.versions if outcome.changed else None,
            CommitResult(outcome.record, [*outcome.garbage, *unused]),
        )

    return apply


class Catalog:
    def __init__(self, zk: ZooKeeperClient, config: CatalogConfig | None = None) -> None:
        self.zk = zk
        self.config = config or CatalogConfig.from_env()
        self.paths = CatalogPaths(self.config.root)
        self.index = ObjectIndex(zk, self.config, self.paths)
        self.uploads = MultipartUploads(zk, self.config, self.paths, self.index.condemned)

    async def start(self) -> None:
        self.index.start()
        with zookeeper_errors("create catalog root"):
            for path in (
                self.paths.buckets,
                self.paths.index,
                self.paths.uploads,
                self.paths.fences,
                self.paths.condemned,
            ):
                await self.zk.ensure_path(path)

    async def close(self) -> None:
        await self.index.close()

    # ================================================================== buckets

    async def create_bucket(
        self,
        name: str,
        owner: str,
        region: str = "us-east-1",
        *,
        object_lock: dict[str, Any] | None = None,
    ) -> BucketRecord:
        """A new, empty bucket; with `object_lock` (its Object Lock configuration) one
        whose versioning is Enabled from the start."""
        validate_bucket_name(name)
        record = BucketRecord(
            name=name,
            owner=owner,
            created=time.time(),
            region=region,
            versioning=VERSIONING_ENABLED if object_lock is not None else "",
            object_lock=object_lock,
        )
        page = IndexPage(new_page_id(), "", None, [], [])
        shard = PageMap(("",), (page.page_id,), shard_id=new_page_id())
        root = RootMap(("",), (shard.shard_id,))
        with zookeeper_errors("create bucket"):
            for _ in range(3):
                try:
                    await self.zk.multi(
                        [
                            ("create", (self.paths.bucket(name), record.encode())),
                            ("create", (self.paths.bucket_index(name), b"")),
                            ("create", (self.paths.pages(name), b"")),
                            (
                                "create",
                                (
                                    self.paths.page(name, page.page_id),
                                    pack_page(page.encode(), self.config.page_compression_level),
                                ),
                            ),
                            ("create", (self.paths.map_shards(name), b"")),
                            (
                                "create",
                                (self.paths.map_shard(name, shard.shard_id), shard.encode()),
                            ),
                            ("create", (self.paths.page_map(name), root.encode())),
                            ("create", (self.paths.bucket_uploads(name), b"")),
                        ]
                    )
                except NodeExistsError:
                    try:
                        existing = await self.get_bucket(name)
                    except NoSuchBucketError:
                        continue  # deleted meanwhile
                    raise BucketAlreadyExistsError(name, existing.owner) from None
                self.index.forget_bucket(name)
                logger.info("bucket created bucket=%s owner=%s", name, owner)
                return record
        raise CatalogBusyError(f"bucket {name!r} kept changing")

    def bucket_cached(self, name: str) -> bool:
        """Whether this process holds the bucket's record (kept under a watch): a
        `get_bucket` after a view completes then costs no round trip."""
        return self.index.bucket_cached(name)

    async def get_bucket(
        self, name: str, view: asyncio.Future[None] | None = None, *, cached: bool = False
    ) -> BucketRecord:
        """The bucket's record as of `view` (`ZooKeeperClient.fresh_view_started()`;
        by default a view started now: every write acknowledged before the call).
        `cached`: this process's copy under its data watch (or a plain read), as current
        as this session's server, for callers whose commit checks it again."""
        _existing_bucket_name(name)
        with zookeeper_errors("read bucket"):
            if cached:
                record, _ = await self.index.bucket_state(name)
            else:
                record, _ = await self.index.bucket_state(
                    name, view or self.zk.fresh_view_started()
                )
        return record

    async def list_buckets(self) -> list[BucketRecord]:
        with zookeeper_errors("list buckets"):
            await self.zk.fresh_view()
            names = await self.zk.get_children(self.paths.buckets)
            records: list[BucketRecord] = []
            for chunk_start in range(0, len(names), 256):
                chunk = names[chunk_start : chunk_start + 256]
                values = await asyncio.gather(
                    *(self.zk.get(self.paths.bucket(n)) for n in chunk), return_exceptions=True
                )
                for value in values:
                    if isinstance(value, NoNodeError):
                        continue
                    if isinstance(value, BaseException):
                        raise value
                    records.append(BucketRecord.decode(value.value))
        return sorted(records, key=lambda r: r.name)

    async def update_bucket(
        self, name: str, mutate: Callable[[BucketRecord], BucketRecord]
    ) -> BucketRecord:
        """Compare-and-set of the bucket record; `mutate` may run more than once."""
        _existing_bucket_name(name)
        retry = self.index.retry_policy.start()
        with zookeeper_errors("update bucket"):
            while True:
                record, version = await self.index.bucket_state(name, fresh=True)
                new = mutate(record)
                assert new.name == record.name, (new.name, record.name)
                assert not (record.versioning and not new.versioning), "versioning cannot be unset"
                try:
                    await self.zk.set(self.paths.bucket(name), new.encode(), version)
                except NoNodeError:
                    raise NoSuchBucketError(name) from None
                except BadVersionError:
                    if not await retry.backoff("bucket"):
                        raise CatalogBusyError(f"bucket {name!r} kept changing") from None
                    continue
                self.index.forget_bucket(name)
                return new

    async def delete_bucket(self, name: str) -> None:
        """Delete a bucket without objects: its multipart uploads in progress are aborted
        (as S3 does: they go with the bucket), then one multi removes the record, the
        (empty) index pages and the uploads directory, each version-checked, so a
        concurrent write makes it fail rather than vanish, and an upload created meanwhile
        makes it abort again."""
        _existing_bucket_name(name)
        retry = self.index.retry_policy.start()
        with zookeeper_errors("delete bucket"):
            while True:
                await self.zk.fresh_view()
                _, bucket_version = await self.index.bucket_state(name, fresh=True)
                root, shards = await self.index.map_snapshot(name)
                page_ids = [page_id for shard in shards for page_id in shard.page_ids]
                pages = []
                for page_id in page_ids:  # stops at the first page holding keys
                    page = await self.index.read_page(name, page_id)
                    if page is not None and page.keys:
                        raise BucketNotEmptyError(name, "objects")
                    pages.append(page)
                await self._abort_uploads(name)
                operations: list[tuple[str, tuple[Any, ...]]] = []
                for page_id, page in zip(page_ids, pages, strict=True):
                    version = page.version if page is not None else 0
                    operations.append(("delete", (self.paths.page(name, page_id), version)))
                for shard in shards:
                    operations.append(
                        ("delete", (self.paths.map_shard(name, shard.shard_id), shard.version))
                    )
                operations += [
                    ("delete", (self.paths.pages(name), -1)),
                    ("delete", (self.paths.map_shards(name), -1)),
                    ("delete", (self.paths.page_map(name), root.version)),
                    ("delete", (self.paths.bucket_index(name), -1)),
                    ("delete", (self.paths.bucket_uploads(name), -1)),
                    ("delete", (self.paths.bucket(name), bucket_version)),
                ]
                try:
                    await self.zk.multi(operations)
                except (BadVersionError, NoNodeError, NotEmptyError):
                    self.index.forget_bucket(name)
                    if not await retry.backoff("bucket"):
                        raise CatalogBusyError(f"bucket {name!r} kept changing") from None
                    continue
                self.index.forget_bucket(name)
                logger.info("bucket deleted bucket=%s", name)
                return

    async def _abort_uploads(self, bucket: str) -> None:
        """Abort each upload in progress as AbortMultipartUpload does: its part records
        go, and the extents they held are garbage for maintenance (no record names them)."""
        for upload_id in await self.uploads.upload_ids(bucket):
            try:
                await self.uploads.abort(bucket, upload_id)
            except NoSuchUploadError:
                continue  # completed or aborted meanwhile
            logger.info("upload aborted with its bucket bucket=%s upload=%s", bucket, upload_id)

    # ================================================================== objects

    async def get_object(
        self,
        bucket: str,
        key: str,
        version_id: str | None = None,
        *,
        consistent: bool = True,
        view: asyncio.Future[None] | None = None,
    ) -> ObjectRecord:
        """The record as of `view` (see `get_bucket`); `consistent=False`: as current as
        this session's server, without a sync."""
        _existing_bucket_name(bucket)
        validate_key(key)
        with zookeeper_errors("read object"):
            # A consistent read sends its sync and any reads its caches miss back to back.
            if view is None and consistent:
                view = self.zk.fresh_view_started()
            page = await self.index.page_containing(bucket, key, view, shared=True)
        if version_id is None:
            # Records are frozen and shared by the requests that read them.
            latest: ObjectRecord | None = page.memo.get(key)
            if latest is None:
                versions = page.versions(key)
                if not versions:
                    raise NoSuchKeyError(bucket, key)
                latest = ObjectRecord.from_dict(bucket, key, versions[0], is_latest=True)
                if len(page.memo) < LATEST_MEMO_MAX:
                    page.memo[key] = latest
            if latest.is_delete_marker:
                raise DeleteMarkerError(latest)
            return latest
        versions = page.versions(key)
        for n, d in enumerate(versions):
            if d["v"] == version_id:
                record = ObjectRecord.from_dict(bucket, key, d, is_latest=(n == 0))
                if record.is_delete_marker:
                    raise DeleteMarkerError(record)
                return record
        raise NoSuchVersionError(bucket, key, version_id)

    async def put_object(
        self,
        record: ObjectRecord,
        *,
        if_match: str | None = None,
        if_none_match: str | None = None,
        owner: str | None = None,
        completed: Callable[[BucketRecord, ObjectRecord], ObjectRecord] | None = None,
    ) -> CommitResult:
        """Commit `record` as the key's newest version. With `owner`, only while the
        bucket belongs to that owner (BucketOwnerChangedError otherwise), checked against
        the bucket record whose version the commit's multi holds: a caller may then
        authorize on a cached bucket record, without a sync. `completed` gives the record
        as the bucket's record at the commit completes it (its default Object Lock
        retention), in each attempt; it must answer the same for the same bucket."""
        _existing_bucket_name(record.bucket)
        validate_key(record.key)
        candidate = replace(
            record,
            version_id=versioning.new_version_id(),
            is_latest=False,
            last_modified=record.last_modified or time.time(),
        )
        candidate_dict = candidate.to_dict()

        def apply(versions: versioning.VersionList, bucket: BucketRecord) -> tuple[Any, Any]:
            if owner is not None and bucket.owner != owner:
                raise BucketOwnerChangedError(f"bucket {bucket.name!r} has another owner")
            put, put_dict = candidate, candidate_dict
            if completed is not None:
                put = completed(bucket, candidate)
                put_dict = candidate_dict if put is candidate else put.to_dict()
            outcome = versioning.apply_put(
                versions,
                put,
                bucket.versioning,
                if_match=if_match,
                if_none_match=if_none_match,
                record_dict=put_dict,
            )
            assert outcome.record is not None
            return (
                outcome.versions if outcome.changed else None,
                CommitResult(outcome.record, outcome.garbage, bucket.versioning),
            )

        result: CommitResult = await self.index.submit(Mutation(record.bucket, record.key, apply))
        return result

    async def delete_object(
        self,
        bucket: str,
        key: str,
        version_id: str | None = None,
        *,
        owner: str = "",
        if_match: str | None = None,
        expected_mtime: float | None = None,
        guard: Callable[[ObjectRecord], None] | None = None,
    ) -> DeleteResult:
        """Delete one version, or the key (a delete marker where versioning keeps them,
        owned by `owner`: the requester, as ListObjectVersions shows it). With `if_match`
        (an ETag or "*") only if the key's current version matches it, checked in the
        same compare-and-set as the delete: PreconditionFailedError, or NoSuchKeyError
        when the key has no current version. With `expected_mtime` (lifecycle), only if
        the version named (or the current one) was written at that time: a version
        rewritten since it was judged is left alone (PreconditionFailedError). `guard`
        (Object Lock) is called with each version the delete would remove for good, as
        committed, inside the same compare-and-set: whatever it raises (a CatalogError)
        refuses the delete, so a change of that version between a caller's check and
        this commit cannot slip past it."""
        _existing_bucket_name(bucket)
        validate_key(key)
        marker_version_id = versioning.new_version_id()
        marker_time = time.time()
        # What an attempt that passed `if_match` answered. A delete whose target is gone
        # for good (a version by id, an unversioned key) leaves no trace of its own, so a
        # retry after an attempt of unknown outcome cannot tell its own effect from
        # another writer's by the state: the target being gone then counts as that
        # attempt's success, not as a failed condition (a client told 412 or NoSuchKey
        # for a delete that happened may delete again on a fresh read).
        held: list[DeleteResult] = []

        def apply(versions: versioning.VersionList, bucket_record: BucketRecord) -> tuple[Any, Any]:
            if (
                held
                and mutation.outcome_unknown
                and _delete_target_gone(versions, version_id, bucket_record.versioning)
            ):
                return (None, held[-1])
            if expected_mtime is not None:
                _check_written_at(versions, key, version_id, expected_mtime)
            if guard is not None:
                for removed in _removed_for_good(
                    versions, bucket, key, version_id, bucket_record.versioning
                ):
                    guard(removed)
            outcome = versioning.apply_delete(
                versions,
                bucket,
                key,
                version_id,
                bucket_record.versioning,
                marker_version_id,
                marker_time,
                owner,
                if_match,
            )
            if outcome.record is not None:
                result = DeleteResult(outcome.record.version_id, True, outcome.garbage)
            elif version_id is not None:
                result = DeleteResult(version_id, outcome.removed_delete_marker, outcome.garbage)
            else:
                result = DeleteResult(None, False, outcome.garbage)
            if if_match is not None:
                held.append(result)
            return (outcome.versions if outcome.changed else None, result)

        mutation = Mutation(bucket, key, apply)
        result: DeleteResult = await self.index.submit(mutation)
        return result

    async def swap_object(self, expected: ObjectRecord, new: ObjectRecord) -> bool:
        """Replace one version's record if it is unchanged (compaction, tiering)."""
        _existing_bucket_name(expected.bucket)
        assert (expected.bucket, expected.key, expected.version_id) == (
            new.bucket,
            new.key,
            new.version_id,
        ), "swap_object replaces one version with a record of the same version"
        if (
            new.manifest
            and new.manifest == expected.manifest
            and (
                new.extents != expected.extents
                or new.parts != expected.parts
                or new.tier_location != expected.tier_location
            )
        ):
            # The record stores the manifest, not the part list: such a swap would
            # "succeed" and change nothing (and a caller would delete what it still names).
            raise ValueError(
                "a record naming a manifest changes where its bytes live only with a new "
                "manifest (or none)"
            )

        def apply(versions: versioning.VersionList, _bucket: BucketRecord) -> tuple[Any, Any]:
            result, swapped = versioning.apply_swap(versions, expected, new)
            return (result if result is not versions else None, swapped)

        swapped: bool = await self.index.submit(Mutation(expected.bucket, expected.key, apply))
        return swapped

    async def list_objects(
        self,
        bucket: str,
        *,
        prefix: str = "",
        delimiter: str = "",
        start_after: str = "",
        max_keys: int = 1000,
        view: asyncio.Future[None] | None = None,
    ) -> ListResult:
        _existing_bucket_name(bucket)
        with zookeeper_errors("list objects"):
            return await listing.list_objects(
                self.index,
                bucket,
                prefix=prefix,
                delimiter=delimiter,
                start_after=start_after,
                max_keys=min(max_keys, self.config.list_max_keys_max),
                view=view or self.zk.fresh_view_started(),
            )

    async def list_object_versions(
        self,
        bucket: str,
        *,
        prefix: str = "",
        delimiter: str = "",
        key_marker: str = "",
        version_id_marker: str = "",
        max_keys: int = 1000,
        view: asyncio.Future[None] | None = None,
    ) -> VersionListResult:
        _existing_bucket_name(bucket)
        with zookeeper_errors("list object versions"):
            return await listing.list_object_versions(
                self.index,
                bucket,
                prefix=prefix,
                delimiter=delimiter,
                key_marker=key_marker,
                version_id_marker=version_id_marker,
                max_keys=min(max_keys, self.config.list_max_keys_max),
                view=view or self.zk.fresh_view_started(),
            )

    async def iter_objects(
        self, bucket: str, *, all_versions: bool = True
    ) -> AsyncIterator[ObjectRecord]:
        _existing_bucket_name(bucket)
        with zookeeper_errors("iterate objects"):
            await self.zk.fresh_view()
            async for record in listing.iter_records(self.index, bucket, all_versions=all_versions):
                yield record

    async def iter_key_runs(
        self, bucket: str, lo: str, hi: str | None
    ) -> AsyncIterator[list[tuple[str, list[VersionRefs]]]]:
        """Every key in [lo, hi) with what its versions reference (newest first), a page's
        run of keys at a time, read after a sync: what a maintenance scan walks."""
        _existing_bucket_name(bucket)
        with zookeeper_errors("iterate a key range"):
            await self.zk.fresh_view()
            async for run in listing.iter_key_runs(self.index, bucket, lo, hi):
                yield run

    async def key_ranges(self, bucket: str, pages_per_range: int) -> list[tuple[str, str | None]]:
        """The bucket's key space cut into ranges of about `pages_per_range` index pages,
        from its page map as it is now (a range stays correct when pages later split or
        merge: it is walked by key)."""
        _existing_bucket_name(bucket)
        with zookeeper_errors("read the page map"):
            _root, shards = await self.index.map_snapshot(bucket)
        bounds = [b for shard in shards for b in shard.bounds]
        starts = bounds[::pages_per_range] or [""]
        starts[0] = ""
        return [(lo, starts[i + 1] if i + 1 < len(starts) else None) for i, lo in enumerate(starts)]

    async def upload_ids(self, bucket: str) -> list[str]:
        """The ids of the bucket's uploads in progress (no record is read)."""
        _existing_bucket_name(bucket)
        return await self.uploads.upload_ids(bucket)

    async def bulk_load(self, bucket: str, records: Iterable[ObjectRecord]) -> int:
        """Load an empty bucket's index from records sorted by key (one version each, or
        several per key, newest first). New pages are created first, invisible, then one
        multi swaps the page map (version-checked) and deletes the old empty page.
        For restores, imports and benchmarks; returns the number of pages written."""
        _existing_bucket_name(bucket)
        with zookeeper_errors("bulk load"):
            root, shards = await self.index.map_snapshot(bucket)
            if len(shards) != 1 or len(shards[0].page_ids) != 1:
                raise BucketNotEmptyError(bucket, "objects")
            old_shard = shards[0]
            old = await self.index.read_page(bucket, old_shard.page_ids[0])
            if old is None or old.keys:
                raise BucketNotEmptyError(bucket, "objects")
            bounds: list[str] = []
            page_ids: list[str] = []
            batch: list[tuple[str, tuple[Any, ...]]] = []
            batch_bytes = 0

            async def add(operation: tuple[str, tuple[Any, ...]], size: int) -> None:
                nonlocal batch, batch_bytes
                batch.append(operation)
                batch_bytes += size
                if batch_bytes >= min(_BULK_MULTI_BYTES_MAX, self.zk.request_bytes_max) // 2:
                    await self.zk.multi(batch)
                    batch, batch_bytes = [], 0

            for page in _build_pages(bucket, records, self.config.page_fill_bytes):
                stored = pack_page(page.encode(), self.config.page_compression_level)
                bounds.append(page.lo)
                page_ids.append(page.page_id)
                await add(("create", (self.paths.page(bucket, page.page_id), stored)), len(stored))
            # Shards filled to half their split size (about 40 bytes per page entry).
            whole = PageMap(tuple(bounds), tuple(page_ids), shard_id=new_page_id())
            per_shard = max(1, self.config.map_shard_split_bytes // 2 // 48)
            new_shards = whole.split(max(1, -(-len(page_ids) // per_shard)))
            for shard in new_shards:
                encoded = shard.encode()
                await add(
                    ("create", (self.paths.map_shard(bucket, shard.shard_id), encoded)),
                    len(encoded),
                )
            if batch:
                await self.zk.multi(batch)
            new_root = RootMap(
                tuple(s.lo for s in new_shards), tuple(s.shard_id for s in new_shards)
            )
            await self.zk.multi(
                [
                    ("set", (self.paths.page_map(bucket), new_root.encode(), root.version)),
                    (
                        "delete",
                        (self.paths.map_shard(bucket, old_shard.shard_id), old_shard.version),
                    ),
                    ("delete", (self.paths.page(bucket, old.page_id), old.version)),
                ]
            )
            self.index.forget_bucket(bucket)
            self.index.forget_page(bucket, old.page_id)
        return len(page_ids)

    # ================================================================== multipart

    async def create_upload(self, record: UploadRecord) -> UploadRecord:
        _existing_bucket_name(record.bucket)
        return await self.uploads.create(record)

    async def get_upload(self, bucket: str, upload_id: str) -> UploadRecord:
        _existing_bucket_name(bucket)
        record, _ = await self.uploads.get(bucket, upload_id)
        return record

    async def put_part(self, bucket: str, upload_id: str, part: PartRecord) -> PartRecord | None:
        _existing_bucket_name(bucket)
        return await self.uploads.put_part(bucket, upload_id, part)

    async def list_parts(
        self, bucket: str, upload_id: str, *, part_number_marker: int = 0, max_parts: int = 1000
    ) -> PartListResult:
        _existing_bucket_name(bucket)
        return await self.uploads.list_parts(bucket, upload_id, part_number_marker, max_parts)

    async def get_parts(self, bucket: str, upload_id: str) -> list[PartRecord]:
        _existing_bucket_name(bucket)
        parts = await self.uploads.parts(bucket, upload_id)
        return [part for _, (part, _) in sorted(parts.items())]

    async def list_uploads(
        self,
        bucket: str,
        *,
        prefix: str = "",
        delimiter: str = "",
        key_marker: str = "",
        upload_id_marker: str = "",
        max_uploads: int = 1000,
    ) -> UploadListResult:
        _existing_bucket_name(bucket)
        return await self.uploads.list_uploads(
            bucket,
            prefix=prefix,
            delimiter=delimiter,
            key_marker=key_marker,
            upload_id_marker=upload_id_marker,
            max_uploads=max_uploads,
        )

    async def abort_upload(self, bucket: str, upload_id: str) -> list[PartRecord]:
        _existing_bucket_name(bucket)
        return await self.uploads.abort(bucket, upload_id)

    async def complete_upload(
        self,
        bucket: str,
        upload_id: str,
        record: ObjectRecord,
        *,
        if_match: str | None = None,
        if_none_match: str | None = None,
        completed: Callable[[BucketRecord, ObjectRecord], ObjectRecord] | None = None,
    ) -> CommitResult:
        """Commit the object and remove the upload and its parts in one multi
        (`completed` as for `put_object`).

        `record.parts` names the parts used; their ETags must match the stored parts.
        Parts uploaded but not used come back in `garbage` (as records holding their
        extents). Retrying after an unknown outcome finds the object already committed.
        The parts' ETags are checked, not kept: nothing reads them once the object is
        complete, and they are a large share of a part's bytes. (A record naming a
        manifest keeps no part list at all: the object layer writes it to ledger entries
        beforehand.)
        """
        _existing_bucket_name(bucket)
        assert record.bucket == bucket, (record.bucket, bucket)
        validate_key(record.key)
        if not record.last_modified:
            record = replace(record, last_modified=time.time())
        candidate = replace(
            record.without_part_etags(), version_id=versioning.new_version_id(), is_latest=False
        )
        candidate_dict = candidate.to_dict()
        retry = self.index.retry_policy.start()
        attempted = False
        while True:
            try:
                upload, upload_version = await self.uploads.get(bucket, upload_id)
            except NoSuchUploadError:
                done = await self._committed_version(candidate) if attempted else None
                if done is None:
                    raise
                return CommitResult(done, [])
            if upload.key != record.key:
                raise InvalidPartError(upload_id, 0, f"upload is for key {upload.key!r}")
            parts = await self.uploads.parts(bucket, upload_id)
            unused = _unused_parts(upload_id, record, parts)
            operations = tuple(
                self.uploads.cleanup_operations(bucket, upload_id, upload_version, parts)
            )
            apply = _completion(
                candidate, candidate_dict, unused, (if_match, if_none_match), completed
            )
            attempted = True
            try:
                result: CommitResult = await self.index.submit(
                    Mutation(bucket, record.key, apply, extra_operations=operations)
                )
            except ExtraOperationsFailedError:
                if not await retry.backoff("upload"):
                    raise CatalogBusyError(f"upload {upload_id!r} kept changing") from None
                continue
            return result

    async def _committed_version(self, candidate: ObjectRecord) -> ObjectRecord | None:
        """The version `candidate` became, if it was committed (after an unknown outcome)."""
        try:
            page = await self.index.page_containing(candidate.bucket, candidate.key)
        except CatalogError:
            return None
        token = candidate.version_id[-10:]
        null = replace(candidate, version_id=NULL_VERSION_ID).to_dict()
        for d in page.versions(candidate.key):
            if (d["v"] != NULL_VERSION_ID and d["v"].endswith(token)) or d == null:
                return ObjectRecord.from_dict(candidate.bucket, candidate.key, d)
        return None


def _check_written_at(
    versions: versioning.VersionList, key: str, version_id: str | None, mtime: float
) -> None:
    """The version named (or the current one, not a delete marker) was written at `mtime`."""
    if version_id is None:
        found = versions[:1] if versions and not versions[0].get("dm") else []
    else:
        found = [d for d in versions if d["v"] == version_id]
    if not found or found[0].get("mtime") != mtime:
        raise PreconditionFailedError(f"{key!r} changed since it was judged")


def _build_pages(
    bucket: str, records: Iterable[ObjectRecord], fill_bytes: int
) -> Iterator[IndexPage]:
    """Pages of about fill_bytes from key-sorted records; bounds are shortest separators."""
    pending: IndexPage | None = None  # held back until the next page's first key is known
    keys: list[str] = []
    lines: list[bytes] = []
    group: list[dict[str, Any]] = []
    group_key: str | None = None
    size = 0

    def flush_group() -> None:
        nonlocal size
        assert group_key is not None
        line = encode_versions(group)
        keys.append(group_key)
        lines.append(line)
        size += len(line) + len(group_key.encode("utf-8")) + 4

    for record in records:
        assert record.bucket == bucket, (record.bucket, bucket)
        if record.key != group_key:
            if group_key is not None:
                assert group_key < record.key, (
                    "records must be sorted by key",
                    group_key,
                    record.key,
                )
                flush_group()
                if size >= fill_bytes:
                    page = IndexPage(new_page_id(), "", None, keys, lines)
                    if pending is not None:
                        _link(pending, page)
                        yield pending
                    pending = page
                    keys, lines, size = [], [], 0
            validate_key(record.key)
            group_key = record.key
            group = []
        group.append(record.to_dict())
    if group_key is not None:
        flush_group()
    if keys or pending is None:
        page = IndexPage(new_page_id(), "", None, keys, lines)
        if pending is not None:
            _link(pending, page)
            yield pending
        pending = page
    pending.check()
    yield pending


def _link(left: IndexPage, right: IndexPage) -> None:
    separator = shortest_separator(left.keys[-1], right.keys[0])
    left.hi = separator
    right.lo = separator
    left.check()
