"""Catalog operations against a real ZooKeeper: buckets, objects, versions, multipart."""

from __future__ import annotations

import asyncio
import functools
from dataclasses import replace
from typing import Any

import pytest

from blobstore.catalog import Catalog
from blobstore.catalog.errors import (
    BucketAlreadyExistsError,
    BucketNotEmptyError,
    DeleteMarkerError,
    InvalidBucketNameError,
    InvalidPartError,
    NoSuchBucketError,
    NoSuchKeyError,
    NoSuchUploadError,
    NoSuchVersionError,
    PreconditionFailedError,
)
from blobstore.catalog.page_commit_queue import PageCommitQueue
from blobstore.catalog.records import (
    NULL_VERSION_ID,
    BucketRecord,
    PartInfo,
    PartRecord,
    UploadRecord,
)
from tests.catalog.helpers import object_record, open_catalog, run_with_catalog
from tests.waiting import wait_until_async

EVENT_WAIT_S = 10.0  # an event delivered by ZooKeeper, a timer


def _count_and_sum(histogram: Any) -> tuple[float, float]:
    """A batched catalog histogram's (count, sum), published first."""
    from blobstore.runtime.batched_metrics import publish_all

    publish_all()
    (family,) = histogram._child.collect()
    values = {sample.name: sample.value for sample in family.samples}
    return values[f"{family.name}_count"], values[f"{family.name}_sum"]


def test_bucket_lifecycle(zk_connect: str) -> None:
    async def body(catalog: Catalog) -> None:
        created = await catalog.create_bucket("alpha", "alice")
        assert created.owner == "alice"
        with pytest.raises(BucketAlreadyExistsError) as info:
            await catalog.create_bucket("alpha", "bob")
        assert info.value.existing_owner == "alice"
        with pytest.raises(InvalidBucketNameError):
            await catalog.create_bucket("Bad_Name", "alice")
        await catalog.create_bucket("beta", "bob")
        assert [b.name for b in await catalog.list_buckets()] == ["alpha", "beta"]

        def tag(record: BucketRecord) -> BucketRecord:
            return replace(record, tags={"team": "storage"}, versioning="Enabled")

        updated = await catalog.update_bucket("alpha", tag)
        assert (await catalog.get_bucket("alpha")) == updated
        await catalog.put_object(object_record("alpha", "k"))
        with pytest.raises(BucketNotEmptyError):
            await catalog.delete_bucket("alpha")
        await catalog.delete_bucket("beta")
        with pytest.raises(NoSuchBucketError):
            await catalog.get_bucket("beta")
        with pytest.raises(NoSuchBucketError):
            await catalog.put_object(object_record("beta", "k"))
        with pytest.raises(NoSuchBucketError):
            await catalog.list_objects("beta")
        with pytest.raises(NoSuchBucketError):
            await catalog.get_object("no/such", "k")
        # A deleted name can be created again, fresh.
        await catalog.create_bucket("beta", "carol")
        assert (await catalog.list_objects("beta")).contents == []

    run_with_catalog(zk_connect, body)


def test_unversioned_put_get_delete(zk_connect: str) -> None:
    async def body(catalog: Catalog) -> None:
        await catalog.create_bucket("plain", "alice")
        first = await catalog.put_object(object_record("plain", "a/b", 1))
        assert first.record.version_id == NULL_VERSION_ID
        assert first.garbage == []
        second = await catalog.put_object(object_record("plain", "a/b", 2))
        assert [g.etag for g in second.garbage] == [first.record.etag]
        got = await catalog.get_object("plain", "a/b")
        assert got.etag == second.record.etag and got.is_latest
        with pytest.raises(PreconditionFailedError):
            await catalog.put_object(object_record("plain", "a/b", 3), if_none_match="*")
        with pytest.raises(PreconditionFailedError):
            await catalog.put_object(object_record("plain", "a/b", 3), if_match="ffff")
        third = await catalog.put_object(object_record("plain", "a/b", 3), if_match=got.etag)
        assert third.record.etag == object_record("plain", "a/b", 3).etag
        with pytest.raises(NoSuchKeyError):  # If-Match on a key with no version: as S3
            await catalog.put_object(object_record("plain", "new", 3), if_match="*")
        await catalog.put_object(object_record("plain", "new", 3), if_none_match="*")
        deleted = await catalog.delete_object("plain", "a/b")
        assert deleted.delete_marker is False and len(deleted.garbage) == 1
        with pytest.raises(NoSuchKeyError):
            await catalog.get_object("plain", "a/b")
        assert (await catalog.delete_object("plain", "a/b")).garbage == []
        listed = await catalog.list_objects("plain")
        assert [r.key for r in listed.contents] == ["new"]

    run_with_catalog(zk_connect, body)


def test_versioning_enabled_and_suspended(zk_connect: str) -> None:
    async def body(catalog: Catalog) -> None:
        await catalog.create_bucket("vers", "alice")
        base = await catalog.put_object(object_record("vers", "k", 0))  # null version
        await catalog.update_bucket("vers", lambda r: replace(r, versioning="Enabled"))
        v1 = (await catalog.put_object(object_record("vers", "k", 1))).record
        v2 = (await catalog.put_object(object_record("vers", "k", 2))).record
        assert v1.version_id != v2.version_id
        assert v2.version_id < v1.version_id  # sortable newest first
        assert (await catalog.get_object("vers", "k")).version_id == v2.version_id
        assert (await catalog.get_object("vers", "k", NULL_VERSION_ID)).etag == base.record.etag
        marker = await catalog.delete_object("vers", "k")
        assert marker.delete_marker and marker.version_id not in (None, "null")
        with pytest.raises(DeleteMarkerError) as info:
            await catalog.get_object("vers", "k")
        assert info.value.record.version_id == marker.version_id
        with pytest.raises(NoSuchVersionError):
            await catalog.get_object("vers", "k", "00000000000000aaaaaaaaaa")
        assert (await catalog.list_objects("vers")).contents == []
        versions = await catalog.list_object_versions("vers")
        assert [v.version_id for v in versions.versions] == [
            marker.version_id,
            v2.version_id,
            v1.version_id,
            NULL_VERSION_ID,
        ]
        assert [v.is_latest for v in versions.versions] == [True, False, False, False]
        # Removing the marker by id brings v2 back.
        removed = await catalog.delete_object("vers", "k", marker.version_id)
        assert removed.delete_marker and removed.garbage == []
        assert (await catalog.get_object("vers", "k")).version_id == v2.version_id
        # Suspended: PUT replaces the null version, DELETE adds a null marker.
        await catalog.update_bucket("vers", lambda r: replace(r, versioning="Suspended"))
        put = await catalog.put_object(object_record("vers", "k", 5))
        assert put.record.version_id == NULL_VERSION_ID
        assert [g.etag for g in put.garbage] == [base.record.etag]
        null_marker = await catalog.delete_object("vers", "k")
        assert null_marker.version_id == NULL_VERSION_ID and null_marker.delete_marker
        assert [g.etag for g in null_marker.garbage] == [put.record.etag]
        ids = [v.version_id for v in (await catalog.list_object_versions("vers")).versions]
        assert ids == [NULL_VERSION_ID, v2.version_id, v1.version_id]
        gone = await catalog.delete_object("vers", "k", v1.version_id)
        assert [g.etag for g in gone.garbage] == [v1.etag]
        swapped = replace(v2, storage_class="GLACIER", tier_location="file:///t/1")
        assert await catalog.swap_object(v2, swapped)
        assert not await catalog.swap_object(v2, swapped.__class__(**{**_fields(v2), "size": 1}))
        assert (await catalog.get_object("vers", "k", v2.version_id)).tier_location == "file:///t/1"

    run_with_catalog(zk_connect, body)


def _page_dropped(queue: PageCommitQueue) -> bool:
    return queue.page is None


def _fields(record: object) -> dict[str, Any]:
    return {name: getattr(record, name) for name in record.__slots__}  # type: ignore[attr-defined]


def test_listing_prefix_delimiter_markers(zk_connect: str) -> None:
    keys = ["a", "a/1", "a/2", "b/x/1", "b/y", "c", "é", "z/"]

    async def body(catalog: Catalog) -> None:
        await catalog.create_bucket("lists", "alice")
        for n, key in enumerate(keys):
            await catalog.put_object(object_record("lists", key, n))
        result = await catalog.list_objects("lists", delimiter="/")
        assert [r.key for r in result.contents] == ["a", "c", "é"]
        assert result.common_prefixes == ["a/", "b/", "z/"]
        page = await catalog.list_objects("lists", delimiter="/", max_keys=2)
        assert page.is_truncated and page.next_start_after == "a/"
        rest = await catalog.list_objects("lists", delimiter="/", start_after="a/")
        assert [r.key for r in rest.contents] == ["c", "é"]
        assert rest.common_prefixes == ["b/", "z/"]
        under_b = await catalog.list_objects("lists", prefix="b/", delimiter="/")
        assert [r.key for r in under_b.contents] == ["b/y"]
        assert under_b.common_prefixes == ["b/x/"]
        assert [
            r.key for r in (await catalog.list_objects("lists", start_after="b/y")).contents
        ] == [
            "c",
            "z/",
            "é",
        ]

    run_with_catalog(zk_connect, body)


def test_multipart_upload(zk_connect: str) -> None:
    async def body(catalog: Catalog) -> None:
        await catalog.create_bucket("mpu", "alice")
        upload = await catalog.create_upload(UploadRecord("mpu", "big", owner="alice"))
        assert (await catalog.get_upload("mpu", upload.upload_id)).key == "big"
        other = await catalog.create_upload(UploadRecord("mpu", "other/x"))
        parts = [PartRecord(n, 5, f"{n:032x}") for n in (1, 2, 3)]
        for part in parts:
            assert await catalog.put_part("mpu", upload.upload_id, part) is None
        replaced = await catalog.put_part("mpu", upload.upload_id, PartRecord(2, 6, "e" * 32))
        assert replaced == parts[1]
        listed = await catalog.list_parts("mpu", upload.upload_id, max_parts=2)
        assert [p.part_number for p in listed.parts] == [1, 2] and listed.is_truncated
        uploads = await catalog.list_uploads("mpu", delimiter="/")
        assert [u.upload_id for u in uploads.uploads] == [upload.upload_id]
        assert uploads.common_prefixes == ["other/"]
        record = object_record("mpu", "big", 9)
        with pytest.raises(InvalidPartError):
            await catalog.complete_upload(
                "mpu", upload.upload_id, replace(record, parts=(PartInfo(2, 5, f"{2:032x}"),))
            )
        done = await catalog.complete_upload(
            "mpu", upload.upload_id, replace(record, parts=(PartInfo(1, 5, f"{1:032x}"),))
        )
        assert {g.size for g in done.garbage} == {5, 6}  # unused parts 2 and 3
        assert (await catalog.get_object("mpu", "big")).etag == record.etag
        # The part's ETag was checked, and is not kept in the object's record.
        assert (await catalog.get_object("mpu", "big")).parts == (PartInfo(1, 5, ""),)
        assert done.record.parts == (PartInfo(1, 5, ""),)
        with pytest.raises(NoSuchUploadError):
            await catalog.get_upload("mpu", upload.upload_id)
        aborted = await catalog.abort_upload("mpu", other.upload_id)
        assert aborted == []
        with pytest.raises(NoSuchUploadError):
            await catalog.put_part("mpu", other.upload_id, parts[0])
        await catalog.delete_object("mpu", "big")
        await catalog.delete_bucket("mpu")

    run_with_catalog(zk_connect, body)


def test_delete_bucket_aborts_its_uploads(zk_connect: str) -> None:
    """S3 deletes a bucket with uploads in progress (they go with it); one holding
    objects is refused, and keeps its uploads."""

    async def body(catalog: Catalog) -> None:
        await catalog.create_bucket("gone", "alice")
        upload = await catalog.create_upload(UploadRecord("gone", "big", owner="alice"))
        await catalog.put_part("gone", upload.upload_id, PartRecord(1, 5, "1" * 32))
        await catalog.create_upload(UploadRecord("gone", "other", owner="alice"))
        await catalog.create_bucket("full", "alice")
        kept = await catalog.create_upload(UploadRecord("full", "big", owner="alice"))
        await catalog.put_object(object_record("full", "k"))
        with pytest.raises(BucketNotEmptyError):
            await catalog.delete_bucket("full")
        assert (await catalog.get_upload("full", kept.upload_id)).key == "big"
        await catalog.delete_bucket("gone")
        with pytest.raises(NoSuchBucketError):
            await catalog.get_bucket("gone")
        await catalog.create_bucket("gone", "alice")
        assert (await catalog.list_uploads("gone")).uploads == []
        with pytest.raises(NoSuchUploadError):
            await catalog.get_upload("gone", upload.upload_id)

    run_with_catalog(zk_connect, body)


def test_full_commit_queue_refuses_work(zk_connect: str) -> None:
    """A bounded queue: work beyond it is refused (SlowDown), never buffered; what was
    accepted is committed."""
    from blobstore.catalog import CatalogConfig
    from blobstore.catalog.errors import CatalogBusyError

    async def body(catalog: Catalog) -> None:
        await catalog.create_bucket("busy-bucket", "alice")
        results = await asyncio.gather(
            *(catalog.put_object(object_record("busy-bucket", f"k{n}", n)) for n in range(20)),
            return_exceptions=True,
        )
        refused = [r for r in results if isinstance(r, CatalogBusyError)]
        committed = sorted(r.record.key for r in results if not isinstance(r, BaseException))
        assert refused and committed
        assert len(refused) + len(committed) == 20
        listed = await catalog.list_objects("busy-bucket")
        assert sorted(r.key for r in listed.contents) == committed

    run_with_catalog(zk_connect, body, CatalogConfig(commit_queue_max=2))


def test_record_too_large_is_refused(zk_connect: str) -> None:
    from blobstore.catalog.errors import RecordTooLargeError

    async def body(catalog: Catalog) -> None:
        await catalog.create_bucket("large-bucket", "alice")
        huge = replace(object_record("large-bucket", "k", 1), metadata={"m": "x" * 200_000})
        with pytest.raises(RecordTooLargeError):
            await catalog.put_object(huge)
        small = await catalog.put_object(object_record("large-bucket", "k", 2))
        assert (await catalog.get_object("large-bucket", "k")).etag == small.record.etag

    run_with_catalog(zk_connect, body)


def test_bucket_deleted_and_created_again_by_another_session(zk_connect: str) -> None:
    """Caches of one session (page map, bucket record) never apply to a new incarnation
    of a bucket created by another session."""
    from tests.catalog.helpers import open_catalog

    async def main() -> None:
        async with open_catalog(zk_connect) as one, open_catalog(zk_connect) as two:
            await one.create_bucket("again", "alice")
            await one.update_bucket("again", lambda r: replace(r, versioning="Enabled"))
            first = await one.put_object(object_record("again", "k", 1))
            assert first.record.version_id != NULL_VERSION_ID
            await one.delete_object("again", "k", first.record.version_id)
            await two.delete_bucket("again")
            await two.create_bucket("again", "bob")
            # Same znode version as the record `one` cached (1), different content.
            await two.update_bucket("again", lambda r: replace(r, tags={"new": "yes"}))
            second = await one.put_object(object_record("again", "k", 2))
            assert second.record.version_id == NULL_VERSION_ID  # the new bucket is unversioned
            assert [r.key for r in (await two.list_objects("again")).contents] == ["k"]

    asyncio.run(asyncio.wait_for(main(), 60))


def test_decisions_without_a_write_see_other_sessions_writes(zk_connect: str) -> None:
    """A commit queue reuses the page it last wrote; a mutation that writes nothing (a
    delete that finds no key, a refused If-None-Match) must still see what another
    session wrote to that page since."""
    from blobstore.catalog import CatalogConfig
    from tests.catalog.helpers import open_catalog

    config = CatalogConfig(page_cache_s=60)

    async def deletes() -> None:
        async with (
            open_catalog(zk_connect, config) as one,
            open_catalog(zk_connect, config) as two,
        ):
            await one.create_bucket("shared2", "alice")
            await one.put_object(object_record("shared2", "a", 1))
            await two.put_object(object_record("shared2", "b", 2))
            await one.delete_object("shared2", "b")
            with pytest.raises(NoSuchKeyError):
                await two.get_object("shared2", "b")
            with pytest.raises(NoSuchKeyError):
                await one.get_object("shared2", "b")

    async def refusals() -> None:
        async with (
            open_catalog(zk_connect, config) as one,
            open_catalog(zk_connect, config) as two,
        ):
            await one.create_bucket("shared3", "alice")
            await one.put_object(object_record("shared3", "b", 1))
            await two.delete_object("shared3", "b")
            # one's cached page still holds "b": the refusal waits for a fresh read.
            await one.put_object(object_record("shared3", "b", 3), if_none_match="*")
            with pytest.raises(PreconditionFailedError):
                await two.put_object(object_record("shared3", "b", 4), if_none_match="*")

    asyncio.run(asyncio.wait_for(deletes(), 60))
    asyncio.run(asyncio.wait_for(refusals(), 60))


def test_compressed_and_plain_pages_interoperate(zk_connect: str) -> None:
    """A gateway writing plain pages (page_compression_level 0: a rollback, or one that
    predates compression) and one compressing them share a bucket: each reads and
    rewrites what the other wrote, through splits, and nothing is lost. The znodes hold
    what the last writer chose, compressed ones at a fraction of the plain size."""
    from blobstore.catalog import CatalogConfig
    from blobstore.catalog.page import IndexPage

    small: dict[str, Any] = {"page_split_bytes": 16 * 1024, "page_fill_bytes": 12 * 1024}
    small |= {"page_merge_target_bytes": 10 * 1024, "page_merge_bytes": 2 * 1024}
    plain_config = CatalogConfig(page_compression_level=0, **small)
    packed_config = CatalogConfig(**small)

    async def stored_pages(catalog: Catalog) -> list[bytes]:
        ids = await catalog.index.page_ids("mixed")
        return [(await catalog.zk.get(catalog.paths.page("mixed", i))).value for i in ids]

    async def body(_catalog: Catalog) -> None:
        async with (
            open_catalog(zk_connect, plain_config) as plain,
            open_catalog(zk_connect, packed_config) as packed,
        ):
            await plain.create_bucket("mixed", "alice")
            for n in range(0, 400, 2):
                await plain.put_object(object_record("mixed", f"k{n:04d}", n))
            pages = await stored_pages(plain)
            assert len(pages) > 1 and all(p[:1] == b"{" for p in pages)
            for n in range(1, 400, 2):
                await packed.put_object(object_record("mixed", f"k{n:04d}", n))
            pages = await stored_pages(packed)
            assert len(pages) > 1 and all(p[:1] != b"{" for p in pages)
            plain_sizes = [len(IndexPage.decode("x", p, 0).encode()) for p in pages]
            assert sum(map(len, pages)) * 3 < sum(plain_sizes)
            for n in range(0, 400, 3):  # plain again: rewrites compressed pages as plain
                await plain.put_object(object_record("mixed", f"k{n:04d}", n + 1000))
            for reader in (plain, packed):
                listed = await reader.list_objects("mixed", max_keys=1000)
                assert [r.key for r in listed.contents] == [f"k{n:04d}" for n in range(400)]
                for n in (0, 1, 3, 399):
                    record = await reader.get_object("mixed", f"k{n:04d}")
                    assert record.etag == f"{n + 1000 if n % 3 == 0 else n:032x}"

    run_with_catalog(zk_connect, body)


def test_single_level_page_map_is_sharded_on_first_use(zk_connect: str) -> None:
    """A bucket whose page map is one znode listing every page (the layout before maps
    were sharded) is moved to a root and one shard the first time it is routed through,
    and keeps every object."""
    from blobstore.catalog.page import PageMap, RootMap

    async def body(catalog: Catalog) -> None:
        await catalog.create_bucket("legacy", "alice")
        for n in range(20):
            await catalog.put_object(object_record("legacy", f"k{n:02d}", n))
        paths = catalog.paths
        [shard] = await catalog.index.shards("legacy")
        single = PageMap(shard.bounds, shard.page_ids)
        root = await catalog.zk.get(paths.page_map("legacy"))
        await catalog.zk.multi(
            [
                ("set", (paths.page_map("legacy"), single.encode(), root.version)),
                ("delete", (paths.map_shard("legacy", shard.shard_id), shard.version)),
                ("delete", (paths.map_shards("legacy"), -1)),
            ]
        )
        assert RootMap.is_single_level((await catalog.zk.get(paths.page_map("legacy"))).value)

    run_with_catalog(zk_connect, body)

    async def reopened(catalog: Catalog) -> None:
        listed = await catalog.list_objects("legacy")
        assert [r.key for r in listed.contents] == [f"k{n:02d}" for n in range(20)]
        await catalog.put_object(object_record("legacy", "k99", 99))
        assert (await catalog.get_object("legacy", "k99")).key == "k99"
        value = await catalog.zk.get(catalog.paths.page_map("legacy"))
        assert not RootMap.is_single_level(value.value)
        assert len(await catalog.index.page_ids("legacy")) >= 1
        for n in range(20):
            await catalog.delete_object("legacy", f"k{n:02d}")
        await catalog.delete_object("legacy", "k99")
        await catalog.delete_bucket("legacy")

    run_with_catalog(zk_connect, reopened)


def test_commit_checks_the_owner_it_names(zk_connect: str) -> None:
    """A put naming an owner commits only while the bucket belongs to it, decided on the
    bucket record its multi checks: a gateway that authorized on a cached record of a
    bucket since deleted and created again by someone else gets AccessDenied, and
    nothing is written."""
    from blobstore.catalog.errors import BucketOwnerChangedError
    from tests.catalog.helpers import open_catalog

    async def main() -> None:
        async with open_catalog(zk_connect) as gateway, open_catalog(zk_connect) as other:
            await gateway.create_bucket("owned", "alice")
            cached = await gateway.get_bucket("owned", cached=True)
            assert cached.owner == "alice"
            await other.delete_bucket("owned")
            await other.create_bucket("owned", "bob")
            await other.update_bucket("owned", lambda r: replace(r, versioning="Enabled"))
            with pytest.raises(BucketOwnerChangedError):
                await gateway.put_object(object_record("owned", "k", 1), owner="alice")
            assert (await other.list_objects("owned")).contents == []
            result = await gateway.put_object(object_record("owned", "k", 2), owner="bob")
            assert result.versioning == "Enabled" and result.record.version_id != "null"

    asyncio.run(asyncio.wait_for(main(), 120))


def test_bulk_load_keeps_its_multis_under_the_request_limit(
    zk_connect: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Against servers with a small jute.maxbuffer (the client told so through
    BLOBSTORE_ZK_REQUEST_BYTES_MAX), a bulk load sends smaller multis, not one the
    client must refuse."""
    from blobstore.catalog import CatalogConfig

    monkeypatch.setenv("BLOBSTORE_ZK_REQUEST_BYTES_MAX", str(128 * 1024))

    async def body(catalog: Catalog) -> None:
        assert catalog.zk.request_bytes_max == 128 * 1024
        await catalog.create_bucket("bulk", "alice")
        records = [object_record("bulk", f"key-{n:05d}", n) for n in range(6000)]
        pages = await catalog.bulk_load("bulk", records)
        assert pages >= 10, pages
        listed = await catalog.list_objects("bulk", max_keys=10_000)
        assert [r.key for r in listed.contents] == [r.key for r in records]

    # Plain pages: ~1 MB of them, compressed they would fit one multi anyway.
    run_with_catalog(zk_connect, body, CatalogConfig(page_compression_level=0))


def test_truncated_listing_leaves_its_read_ahead_in_the_page_cache(zk_connect: str) -> None:
    """A listing cut at max-keys does not cancel the pages it is reading ahead: they land
    in the page cache, where its continuation starts."""
    from blobstore.catalog import listing

    async def body(writer: Catalog) -> None:
        await writer.create_bucket("paged", "alice")
        records = [object_record("paged", f"key-{n:05d}", n) for n in range(5000)]
        await writer.bulk_load("paged", records)
        async with open_catalog(zk_connect) as reader:
            ids = await reader.index.page_ids("paged")
            assert len(ids) >= 6, len(ids)
            first = await reader.list_objects("paged", max_keys=1000)
            assert first.is_truncated
            await asyncio.gather(*list(listing._DETACHED_READS))
            page = await reader.index.page_containing("paged", first.next_start_after)
            after = ids[ids.index(page.page_id) + 1]
            assert reader.index._pages.peek(reader.paths.page("paged", after)) is not None
            rest = await reader.list_objects(
                "paged", start_after=first.next_start_after, max_keys=5000
            )
            assert [r.key for r in first.contents + rest.contents] == [r.key for r in records]

    run_with_catalog(zk_connect, body)


def test_listing_uploads_reads_only_what_it_has_not_seen_and_its_page(zk_connect: str) -> None:
    """Upload records never change, so a gateway remembers each upload's key: a listing
    reads the records of uploads it has not seen and of the page it returns, not every
    upload of the bucket; uploads created or finished through another gateway still show
    (or vanish) at once."""

    async def main() -> None:
        async with open_catalog(zk_connect) as writer, open_catalog(zk_connect) as reader:
            await writer.create_bucket("many", "alice")
            created = [
                await writer.create_upload(UploadRecord("many", f"k/{i:03d}")) for i in range(40)
            ]
            reads: list[str] = []
            real_get = reader.zk.get

            async def counting_get(path: str, *args: Any, **kwargs: Any) -> Any:
                if "/uploads/" in path:
                    reads.append(path)
                return await real_get(path, *args, **kwargs)

            reader.zk.get = counting_get  # type: ignore[method-assign]
            first = await reader.list_uploads("many", max_uploads=5)
            assert [u.key for u in first.uploads] == [f"k/{i:03d}" for i in range(5)]
            assert first.is_truncated and len(reads) == 40  # every upload, once
            reads.clear()
            second = await reader.list_uploads(
                "many",
                max_uploads=5,
                key_marker=first.next_key_marker,
                upload_id_marker=first.next_upload_id_marker,
            )
            assert [u.key for u in second.uploads] == [f"k/{i:03d}" for i in range(5, 10)]
            assert len(reads) == 5, reads  # the page only
            await writer.abort_upload("many", created[5].upload_id)
            late = await writer.create_upload(UploadRecord("many", "k/005-late"))
            reads.clear()
            third = await reader.list_uploads(
                "many", max_uploads=3, key_marker=first.next_key_marker
            )
            assert [u.upload_id for u in third.uploads] == [
                late.upload_id,
                created[6].upload_id,
                created[7].upload_id,
            ]
            assert len(reads) == 3, reads  # the new upload, then the two others of the page
            everything = await reader.list_uploads("many")
            assert len(everything.uploads) == 40 and not everything.is_truncated

    asyncio.run(asyncio.wait_for(main(), 60))


def test_listing_more_uploads_than_remembered_lists_them_all(
    zk_connect: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the bound on remembered keys a listing reads again what it forgot, and
    still lists every upload."""
    from blobstore.catalog import uploads

    monkeypatch.setattr(uploads, "UPLOAD_KEYS_REMEMBERED_MAX", 7)

    async def body(catalog: Catalog) -> None:
        await catalog.create_bucket("lots", "alice")
        for i in range(25):
            await catalog.create_upload(UploadRecord("lots", f"u/{i:02d}"))
        for _ in range(2):
            listed = await catalog.list_uploads("lots")
            assert [u.key for u in listed.uploads] == [f"u/{i:02d}" for i in range(25)]

    run_with_catalog(zk_connect, body)


def test_a_page_written_elsewhere_is_read_again_before_the_next_commit(zk_connect: str) -> None:
    """A page one queue alone writes is not watched (a watch costs a request per write):
    another session's write is found by one failed compare-and-set. From then on (for
    commit_watch_s) the queue keeps the page it wrote under a data watch: once the other
    session (another worker or gateway) writes that page, the watch drops the copy and
    the next commit reads the page instead of failing a compare-and-set on the stale
    copy. A queue discarded while idle takes its watch with it."""
    from blobstore.catalog import CatalogConfig
    from blobstore.catalog import metrics as catalog_metrics

    config = CatalogConfig(page_cache_s=60, commit_queues_max=1)

    def conflicts() -> float:
        return float(catalog_metrics.CAS_CONFLICTS._value.get())

    async def main() -> None:
        async with (
            open_catalog(zk_connect, config) as one,
            open_catalog(zk_connect, config) as two,
        ):
            await one.create_bucket("watched", "alice")
            session = one.index.zk._session
            # One writer: the page is written again within page_cache_s, not watched.
            await one.put_object(object_record("watched", "a", 1))
            await one.put_object(object_record("watched", "a2", 1))
            (queue,) = one.index._queues.values()
            path = session.chrooted(one.index.paths.page("watched", queue.page_id))
            await one.index.zk.fresh_view()
            assert queue._page_changed not in session._data_watches.get(path, set())
            before = conflicts()
            await two.put_object(object_record("watched", "b", 2))
            await two.put_object(object_record("watched", "b2", 2))
            assert queue.page is not None, "unwatched: the stale copy is kept"
            await one.put_object(object_record("watched", "a3", 1))  # fails once, retried
            assert conflicts() == before + 1
            await wait_until_async(
                lambda: queue._page_changed in session._data_watches.get(path, set()),
                EVENT_WAIT_S,
                message="no watch armed after losing a compare-and-set",
                interval_s=0.01,
            )
            await two.put_object(object_record("watched", "b3", 2))  # two loses once too
            assert conflicts() == before + 2
            # The watch event of two's write.
            await wait_until_async(
                lambda: queue.page is None,
                EVENT_WAIT_S,
                message="the page written elsewhere was kept",
                interval_s=0.01,
            )
            before = conflicts()
            for n in range(3, 9):
                writer = one if n % 2 else two
                await writer.put_object(object_record("watched", f"k{n}", n))
                other = two if writer is one else one
                (other_queue,) = other.index._queues.values()
                await wait_until_async(
                    functools.partial(_page_dropped, other_queue),
                    EVENT_WAIT_S,
                    message="the page written elsewhere was kept",
                    interval_s=0.01,
                )
            assert conflicts() == before
            listed = [r.key for r in (await two.list_objects("watched")).contents]
            assert listed == ["a", "a2", "a3", "b", "b2", "b3"] + [f"k{n}" for n in range(3, 9)]
            assert conflicts() == before

            # A second bucket's queue pushes the idle one out (commit_queues_max=1): its
            # watch goes, so the session keeps no callback of a discarded queue.
            await one.put_object(object_record("watched", "k9", 9))
            assert queue.page is not None
            await wait_until_async(
                lambda: queue._page_changed in session._data_watches.get(path, set()),
                EVENT_WAIT_S,
                message="no watch armed on the page written",
                interval_s=0.01,
            )
            await one.create_bucket("other", "alice")
            await one.put_object(object_record("other", "x", 1))
            # (The new queue goes idle, and pushes the other out, as its drain ends: in
            # the loop iteration after the commit's answer woke the caller.)
            await wait_until_async(
                lambda: ("watched", queue.page_id) not in one.index._queues,
                EVENT_WAIT_S,
                message="the idle queue was kept",
                interval_s=0.01,
            )
            assert queue._page_changed not in session._data_watches.get(path, set())

    asyncio.run(asyncio.wait_for(main(), 60))


def test_commit_attempts_count_the_retry_after_a_stale_copy(zk_connect: str) -> None:
    """`blobstore_catalog_commit_attempts` observes each batch's tries: 1 for a commit
    that went through, 2 for one whose kept copy of the page was stale (another session
    wrote the page after this queue's single write, which keeps no watch)."""
    from blobstore.catalog import CatalogConfig
    from blobstore.catalog import metrics as catalog_metrics

    config = CatalogConfig(page_cache_s=60)

    def observed() -> tuple[float, float]:
        return _count_and_sum(catalog_metrics.COMMIT_ATTEMPTS)

    async def main() -> None:
        async with (
            open_catalog(zk_connect, config) as one,
            open_catalog(zk_connect, config) as two,
        ):
            await one.create_bucket("attempts", "alice")
            count, total = observed()
            await one.put_object(object_record("attempts", "a", 1))
            await two.put_object(object_record("attempts", "b", 2))
            # (A batch's attempts are observed as its commit task ends: in the loop
            # iteration after the one that answered its callers.)
            await wait_until_async(
                lambda: observed() == (count + 2, total + 2),
                EVENT_WAIT_S,
                message="two single tries",
                interval_s=0.01,
            )
            conflicts = catalog_metrics.CAS_CONFLICTS._value.get()
            await one.put_object(object_record("attempts", "c", 3))  # from the stale copy
            assert catalog_metrics.CAS_CONFLICTS._value.get() == conflicts + 1
            await wait_until_async(
                lambda: observed() == (count + 3, total + 4),
                EVENT_WAIT_S,
                message="c tried twice",
                interval_s=0.01,
            )
            listed = [r.key for r in (await two.list_objects("attempts")).contents]
            assert listed == ["a", "b", "c"]

    asyncio.run(asyncio.wait_for(main(), 60))


def test_an_idle_queue_lets_its_page_and_watch_go_after_page_cache_s(zk_connect: str) -> None:
    """Idle commit queues hold their copy, and the server their watch, for at most
    page_cache_s: memory and watches follow the recent writes, not every page written.
    Only a page the queue writes again within page_cache_s, and lost a compare-and-set
    on, is watched at all."""
    from blobstore.catalog import CatalogConfig

    config = CatalogConfig(page_cache_s=2.0, commit_watch_s=60)

    async def main() -> None:
        async with open_catalog(zk_connect, config) as one, open_catalog(zk_connect) as two:
            await one.create_bucket("expiring", "alice")
            await one.put_object(object_record("expiring", "a", 1))
            (queue,) = one.index._queues.values()
            session = one.index.zk._session
            path = session.chrooted(one.index.paths.page("expiring", queue.page_id))
            await one.index.zk.fresh_view()  # any exists sent has its reply by now
            assert queue.page is not None
            # Written once in a while: no watch (it would cost two requests a commit).
            assert queue._page_changed not in session._data_watches.get(path, set())
            await two.put_object(object_record("expiring", "b0", 1))
            await one.put_object(object_record("expiring", "a2", 1))  # lost once: watched
            await wait_until_async(
                lambda: queue._page_changed in session._data_watches.get(path, set()),
                EVENT_WAIT_S,
                message="no watch armed on the page written",
                interval_s=0.01,
            )
            assert queue.page is not None
            await wait_until_async(
                lambda: queue.page is None,
                EVENT_WAIT_S,
                message="an idle queue kept its page",
                interval_s=0.01,
            )
            assert queue._page_changed not in session._data_watches.get(path, set())
            # Forgotten while its exists is unanswered: the reply's watch is undone.
            await one.put_object(object_record("expiring", "a3", 1))
            await one.put_object(object_record("expiring", "a4", 1))
            # (Its commit task ends, sending the exists, one loop iteration after the
            # PUT was answered; a queue is only discarded once idle.)
            await wait_until_async(
                lambda: queue.idle, EVENT_WAIT_S, message="the queue went idle", interval_s=0.01
            )
            queue.forget()
            await one.index.zk.fresh_view()
            await asyncio.sleep(0)  # the exists reply's callbacks have run
            assert queue._page_changed not in session._data_watches.get(path, set())
            await one.put_object(object_record("expiring", "b", 2))  # still works
            keys = [r.key for r in (await one.list_objects("expiring")).contents]
            assert keys == ["a", "a2", "a3", "a4", "b", "b0"]

    asyncio.run(asyncio.wait_for(main(), 60))


def test_a_watch_left_without_a_page_copy_still_expires(zk_connect: str) -> None:
    """A queue whose copy was dropped by a commit that wrote nothing (a delete of a
    missing key is decided on a fresh read) still removes its watch once idle."""
    from blobstore.catalog import CatalogConfig

    config = CatalogConfig(page_cache_s=1.0, commit_watch_s=60)

    async def main() -> None:
        async with open_catalog(zk_connect, config) as one, open_catalog(zk_connect) as two:
            await one.create_bucket("unwatched", "alice")
            await one.put_object(object_record("unwatched", "a", 1))
            await two.put_object(object_record("unwatched", "a0", 1))
            await one.put_object(object_record("unwatched", "b", 1))  # lost once: watched
            (queue,) = one.index._queues.values()
            session = one.index.zk._session
            path = session.chrooted(one.index.paths.page("unwatched", queue.page_id))
            # Its commit task keeps the copy and arms the watch after the PUT's answer.
            await wait_until_async(
                lambda: queue._page_changed in session._data_watches.get(path, set()),
                EVENT_WAIT_S,
                message="the page written by two writers was not watched",
                interval_s=0.01,
            )
            await one.delete_object("unwatched", "missing")
            assert queue.page is None  # dropped to decide on a fresh read
            await wait_until_async(
                lambda: queue._page_changed not in session._data_watches.get(path, set()),
                EVENT_WAIT_S,
                message="an idle queue kept its watch",
                interval_s=0.01,
            )

    asyncio.run(asyncio.wait_for(main(), 60))


@pytest.mark.parametrize(
    "later",
    [[], [f"warm-{n:04d}" for n in range(60)]],
    ids=["at-the-bucket-end", "before-other-keys"],
)
def test_commits_queued_across_a_split_stay_on_their_page(
    zk_connect: str, later: list[str]
) -> None:
    """Sequential names with many PUTs in flight, at the bucket's end (append splits)
    or under a prefix that sorts before the bucket's other keys (inserted at one point
    inside a page first): the page taking them splits again and again, and the piece
    that keeps its id is the one the next names go to, so no commit queued meanwhile is
    routed again (each re-route costs a fresh page map read and another commit)."""
    from blobstore.catalog import CatalogConfig, metrics

    config = CatalogConfig(
        page_split_bytes=16 * 1024,
        page_fill_bytes=12 * 1024,
        page_merge_target_bytes=10 * 1024,
        page_merge_bytes=2 * 1024,
    )

    async def body(catalog: Catalog) -> None:
        await catalog.create_bucket("seq", "alice")
        for n, key in enumerate(later):
            await catalog.put_object(object_record("seq", key, n))
        splits, reroutes = metrics.PAGE_SPLITS._value.get(), metrics.REROUTES._value.get()
        names = iter(range(800))

        async def writer() -> None:  # one of many PUTs in flight, names in order
            for n in names:
                await catalog.put_object(object_record("seq", f"logs-{n:06d}", n))

        await asyncio.gather(*(writer() for _ in range(40)))
        assert metrics.PAGE_SPLITS._value.get() - splits >= 5, "the page split"
        assert metrics.REROUTES._value.get() == reroutes
        listed = await catalog.list_objects("seq", max_keys=1000)
        assert [r.key for r in listed.contents] == [
            *(f"logs-{n:06d}" for n in range(800)),
            *later,
        ]

    run_with_catalog(zk_connect, body, config)


async def _pipelined_behind_a_stale_write(zk_connect: str, fence: bool) -> tuple[list[str], float]:
    """One session's queue holds a stale copy of its page (another session wrote it
    since) and sends two writes of it back to back: the first, on the stale copy, fails
    its compare-and-set; the second expects exactly the version the other session's
    write made. The first write's answer is held back (not its request) until the
    second has left, so the second is always prepared before the failure is known.
    Returns the keys listed afterwards and the failed attempts retried."""
    from blobstore.catalog import CatalogConfig
    from blobstore.catalog import metrics as catalog_metrics

    config = CatalogConfig(page_cache_s=60, commit_gather_ms=0)
    async with (
        open_catalog(zk_connect, config) as one,
        open_catalog(zk_connect, config) as two,
    ):
        await one.create_bucket("fenced", "alice")
        await one.put_object(object_record("fenced", "a", 1))  # one caches the page
        (queue,) = one.index._queues.values()
        if not fence:
            # The experiment the fence exists for: the same writes without it.
            def no_fence(operations: Any, batch: Any, followed: bool) -> bool:
                return True

            queue._fence_operation = no_fence  # type: ignore[method-assign]
        await two.put_object(object_record("fenced", "x", 2))  # one's copy is stale now
        assert queue.page is not None, "one still holds its (stale) copy"
        zk = one.index.zk
        real_multi = zk.multi
        calls = 0
        second_sent = asyncio.Event()

        async def gated_multi(operations: Any, on_success: Any = None) -> Any:
            nonlocal calls
            calls += 1
            call = calls
            sent = asyncio.ensure_future(real_multi(operations, on_success))
            if call == 1:  # p's write: its answer waits until q's write has left
                await second_sent.wait()
            elif call == 2:  # q's write
                await asyncio.sleep(0)  # its request is submitted
                second_sent.set()
            return await sent

        def retries() -> float:  # failed attempts: version conflicts, missing znodes
            return sum(
                float(catalog_metrics.RETRIES.labels(reason)._value.get())
                for reason in ("conflict", "moved", "unavailable")
            )

        zk.multi = gated_multi  # type: ignore[method-assign]
        pipelined = catalog_metrics.PIPELINED_WRITES._total
        retried = retries()
        p = asyncio.ensure_future(one.put_object(object_record("fenced", "p", 3)))

        def p_sent() -> bool:  # p's write has left and is not answered yet
            return queue._chain and any(not t.done() for t in queue._inflight)

        for _ in range(10_000):
            if p_sent():
                break
            await asyncio.sleep(0)
        assert p_sent(), "p's write is in flight"
        q = asyncio.ensure_future(one.put_object(object_record("fenced", "q", 4)))
        await asyncio.gather(p, q)
        assert catalog_metrics.PIPELINED_WRITES._total > pipelined, "q was sent behind p"
        listed = await two.list_objects("fenced")
        return [r.key for r in listed.contents], retries() - retried


def test_a_write_sent_behind_a_failed_one_fails_too(zk_connect: str) -> None:
    """Writes of a busy page are pipelined; the fence makes a write sent behind one that
    fails its compare-and-set fail as well, though its own version check would pass
    (the other session's write made that version), so neither overwrites the other
    session's key; both retry in order and every key is there."""
    keys, failed = asyncio.run(
        asyncio.wait_for(_pipelined_behind_a_stale_write(zk_connect, True), 60)
    )
    assert keys == ["a", "p", "q", "x"]
    # p failed its version check, q its fence (a set of the fence p's write would have
    # made: no such znode)
    assert failed >= 2, failed


def test_without_the_fence_the_write_behind_would_lose_another_writers_key(
    zk_connect: str,
) -> None:
    """The scenario above is the race the fence is for: with the fence taken out, the
    write sent behind the failed one succeeds on its version check and the other
    session's key is gone."""
    keys, failed = asyncio.run(
        asyncio.wait_for(_pipelined_behind_a_stale_write(zk_connect, False), 60)
    )
    assert failed == 1, failed  # only p
    assert "x" not in keys, keys
    assert {"a", "p", "q"} <= set(keys)


def test_a_write_that_follows_another_gathers_first(zk_connect: str) -> None:
    """Under load (a page's next batch waiting when its write ends) the queue waits
    commit_gather_ms before taking that batch, so mutations arriving meanwhile share its
    write: here c (queued during b's write) and d (queued after b was acknowledged) go
    in one ZooKeeper write. A page's first write after it went idle takes what is there
    at once (a and b: one write each)."""
    from blobstore.catalog import CatalogConfig
    from blobstore.catalog import metrics as catalog_metrics

    def batches() -> tuple[float, float]:
        return _count_and_sum(catalog_metrics.BATCH_SIZE)

    async def main() -> None:
        config = CatalogConfig(commit_gather_ms=100)
        async with open_catalog(zk_connect, config) as one:
            await one.create_bucket("gathering", "alice")
            count, total = batches()
            await one.put_object(object_record("gathering", "a", 1))  # idle page: at once
            # (observed as the commit task ends, an iteration after the PUT's answer)
            await wait_until_async(
                lambda: batches() == (count + 1, total + 1),
                EVENT_WAIT_S,
                message="a's write",
                interval_s=0.01,
            )
            (queue,) = one.index._queues.values()
            b = asyncio.ensure_future(one.put_object(object_record("gathering", "b", 2)))

            def b_is_being_written() -> bool:
                return any(not t.done() for t in queue._inflight) and not queue._waiting

            for _ in range(10_000):  # loop turns, not time: b's write takes a few ms
                if b_is_being_written():
                    break
                await asyncio.sleep(0)
            assert b_is_being_written(), "b is being written"
            c = asyncio.ensure_future(one.put_object(object_record("gathering", "c", 3)))
            await b
            assert not c.done() and len(queue._waiting) == 1, "c gathers, not yet written"
            d = asyncio.ensure_future(one.put_object(object_record("gathering", "d", 4)))
            await asyncio.gather(c, d)
            await wait_until_async(
                lambda: batches() == (count + 3, total + 4),
                EVENT_WAIT_S,
                message="a, b, then c and d in one write",
                interval_s=0.01,
            )
            keys = [r.key for r in (await one.list_objects("gathering")).contents]
            assert keys == ["a", "b", "c", "d"]

    asyncio.run(asyncio.wait_for(main(), 60))


def test_a_hot_keys_record_is_decoded_once_and_never_outlives_its_page(zk_connect: str) -> None:
    """GETs of one key share the record decoded from the cached page; a write by another
    session (a new page version) is seen at once, and a delete marker is still one."""

    async def main() -> None:
        async with open_catalog(zk_connect) as reader, open_catalog(zk_connect) as writer:
            await writer.create_bucket("memo", "alice")
            await writer.put_object(object_record("memo", "k", 1))
            first = await reader.get_object("memo", "k")
            assert await reader.get_object("memo", "k") is first
            await writer.put_object(object_record("memo", "k", 2))
            second = await reader.get_object("memo", "k")
            assert second is not first and second.etag == f"{2:032x}"
            await writer.update_bucket("memo", lambda r: replace(r, versioning="Enabled"))
            await writer.delete_object("memo", "k")
            for _ in range(2):  # decoded, then from the memo
                with pytest.raises(DeleteMarkerError):
                    await reader.get_object("memo", "k")
            # Older versions are still found by id.
            assert (await reader.get_object("memo", "k", NULL_VERSION_ID)).etag == second.etag

    asyncio.run(asyncio.wait_for(main(), 60))


def test_key_runs_walk_exactly_their_range_and_keep_no_page(zk_connect: str) -> None:
    """A scan's walk (`iter_key_runs`) yields every key of [lo, hi) once, in order, a
    page's run at a time, from bounds inside pages or on them, and keeps none of the
    pages it read in the page cache (each is read once, without a watch)."""

    async def body(writer: Catalog) -> None:
        await writer.create_bucket("runs", "alice")
        records = [object_record("runs", f"key-{n:05d}", n) for n in range(3000)]
        await writer.bulk_load("runs", records)
        keys = [r.key for r in records]
        async with open_catalog(zk_connect) as reader:
            bounds = [b for b, _hi in await reader.key_ranges("runs", 1)]
            assert len(bounds) >= 4, bounds
            cases = [("", None), ("key-00500", "key-02500"), (bounds[2], bounds[3])]
            cases += [("key-01234x", None), ("", "key-00000"), ("key-9", None)]
            for lo, hi in cases:
                runs = [run async for run in reader.iter_key_runs("runs", lo, hi)]
                walked = [key for run in runs for key, _versions in run]
                assert walked == [k for k in keys if k >= lo and (hi is None or k < hi)]
                assert all(v[0].version_id for run in runs for _k, v in run)
                assert len(runs) <= len(bounds)
            assert all(
                reader.index._pages.peek(reader.paths.page("runs", i)) is None
                for i in await reader.index.page_ids("runs")
            )

    run_with_catalog(zk_connect, body)
