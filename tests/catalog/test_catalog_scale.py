"""100,000 keys in one bucket: complete paginated listings (with and without a delimiter)
equal the sorted key set; no page znode passes the split size; pages split and merge
correctly under concurrent writers on two ZooKeeper sessions."""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace

from blobstore.catalog import Catalog, CatalogConfig
from blobstore.catalog.records import ObjectRecord
from tests.catalog.helpers import object_record, open_catalog, run_with_catalog, seed
from tests.cluster.tls import kazoo_client

KEY_COUNT = 100_000


def _keys() -> list[str]:
    # 100 top-level "directories", nested names, some non-ASCII (UTF-8 byte order matters).
    keys = [f"dir{i % 100:03d}/sub{i % 7}/file-{i:06d}" for i in range(KEY_COUNT - 1000)]
    keys += [f"top-{i:04d}" for i in range(500)]
    keys += [f"\u00e9t\u00e9/{i:04d}" for i in range(250)] + [f"\u65e5/{i:04d}" for i in range(250)]
    return sorted(keys, key=lambda k: k.encode("utf-8"))


async def _list_all(
    catalog: Catalog, bucket: str, prefix: str = "", delimiter: str = ""
) -> tuple[list[str], list[str]]:
    keys: list[str] = []
    prefixes: list[str] = []
    start_after = ""
    for _ in range(KEY_COUNT):
        page = await catalog.list_objects(
            bucket, prefix=prefix, delimiter=delimiter, start_after=start_after, max_keys=1000
        )
        keys += [r.key for r in page.contents]
        prefixes += page.common_prefixes
        if not page.is_truncated:
            return keys, prefixes
        start_after = page.next_start_after
    raise AssertionError("listing did not end")


def test_hundred_thousand_keys(zk_connect: str) -> None:
    keys = _keys()
    config = CatalogConfig(map_shard_split_bytes=4096)  # ~100 pages per map shard

    async def body(catalog: Catalog) -> None:
        await catalog.create_bucket("big-bucket", "owner")
        pages = await catalog.bulk_load(
            "big-bucket", [object_record("big-bucket", k, n) for n, k in enumerate(keys)]
        )
        assert pages > 10
        # Concurrent writes on top: new keys land in full pages and split them.
        rng = random.Random(seed())
        extra = [
            f"dir{rng.randrange(100):03d}/sub{rng.randrange(7)}/new-{n:05d}" for n in range(1000)
        ]
        extra += [f"dir042/sub3/new-{n:05d}" for n in range(2000)]  # one region: splits
        rng.shuffle(extra)
        semaphore = asyncio.Semaphore(64)

        async def put(key: str) -> None:
            async with semaphore:
                await catalog.put_object(object_record("big-bucket", key, 1))

        await asyncio.gather(*(put(k) for k in extra))
        everything = sorted(set(keys) | set(extra), key=lambda k: k.encode("utf-8"))
        listed, prefixes = await _list_all(catalog, "big-bucket")
        assert prefixes == []
        assert listed == everything
        listed, prefixes = await _list_all(catalog, "big-bucket", delimiter="/")
        assert listed == [k for k in everything if "/" not in k]
        assert prefixes == sorted(
            {k.split("/")[0] + "/" for k in everything if "/" in k}, key=lambda p: p.encode()
        )
        listed, prefixes = await _list_all(catalog, "big-bucket", prefix="dir042/", delimiter="/")
        assert listed == [] and prefixes == [f"dir042/sub{i}/" for i in range(7)]
        listed, _ = await _list_all(catalog, "big-bucket", prefix="dir042/sub3/")
        assert listed == [k for k in everything if k.startswith("dir042/sub3/")]
        assert len(await catalog.index.page_ids("big-bucket")) > pages, "writes split pages"
        shards = await catalog.index.shards("big-bucket")
        assert len(shards) > 1, "the page map was sharded"
        assert [s.lo for s in shards] == list((await catalog.index.root_map("big-bucket")).bounds)

    run_with_catalog(zk_connect, body, config, timeout_s=200)
    # No page znode is over the split size.
    client = kazoo_client(zk_connect, 15)
    client.start(timeout=15)
    try:
        root = "/catalog/index/big-bucket/pages"
        for page_id in client.get_children(root):
            data, _ = client.get(f"{root}/{page_id}")
            assert len(data) <= config.page_split_bytes, (page_id, len(data))
    finally:
        client.stop()
        client.close()


SMALL_PAGES = CatalogConfig(
    page_split_bytes=16 * 1024,
    page_merge_bytes=6 * 1024,
    page_merge_target_bytes=12 * 1024,
    page_fill_bytes=8 * 1024,
    record_bytes_max=8 * 1024,
    map_shard_split_bytes=512,
)


def counter(name: str) -> float:
    """A catalog counter's value in this process (0 before its first increment)."""
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value(name) or 0.0


def test_split_and_merge_under_concurrent_writers(zk_connect: str) -> None:
    """Two catalogs (two sessions) grow the index by concurrent puts, then shrink it by
    concurrent deletes; reads through either always agree with what was acknowledged."""
    splits_before = counter("blobstore_catalog_page_splits_total")
    merges_before = counter("blobstore_catalog_page_merges_total")
    shard_splits_before = counter("blobstore_catalog_map_shard_splits_total")

    async def main() -> None:
        async with (
            open_catalog(zk_connect, SMALL_PAGES) as one,
            open_catalog(zk_connect, SMALL_PAGES) as two,
        ):
            await one.create_bucket("churn", "owner")
            rng = random.Random(seed())
            keys = [f"k{n:04d}" for n in range(600)]
            rng.shuffle(keys)
            semaphore = asyncio.Semaphore(32)

            async def put(catalog: Catalog, key: str) -> ObjectRecord:
                async with semaphore:
                    record = replace(object_record("churn", key, 1), metadata={"pad": "m" * 300})
                    return (await catalog.put_object(record)).record

            done = await asyncio.gather(
                *(put(one if i % 2 else two, k) for i, k in enumerate(keys))
            )
            assert {r.key for r in done} == set(keys)
            grown = len(await two.index.page_ids("churn"))
            assert grown > 10
            assert len(await one.index.shards("churn")) > 1, "the page map was sharded"
            for catalog in (one, two):
                listed = await catalog.list_objects("churn", max_keys=1000)
                assert [r.key for r in listed.contents] == sorted(keys)
            doomed = set(keys[:560])

            async def delete(catalog: Catalog, key: str) -> None:
                async with semaphore:
                    await catalog.delete_object("churn", key)

            await asyncio.gather(
                *(delete(one if i % 2 else two, k) for i, k in enumerate(sorted(doomed)))
            )
            survivors = sorted(set(keys) - doomed)
            for catalog in (one, two):
                listed = await catalog.list_objects("churn", max_keys=1000)
                assert [r.key for r in listed.contents] == survivors
                for key in survivors:
                    assert (await catalog.get_object("churn", key)).key == key
            shrunk = len(await one.index.page_ids("churn"))
            assert shrunk < grown

    asyncio.run(asyncio.wait_for(main(), 120))
    assert counter("blobstore_catalog_page_splits_total") > splits_before
    assert counter("blobstore_catalog_page_merges_total") > merges_before
    assert counter("blobstore_catalog_map_shard_splits_total") > shard_splits_before


def test_sequential_appends_split_and_never_merge(zk_connect: str) -> None:
    """Two catalogs append sequential names (timestamps, counters): the last page splits
    again and again and starts small each time, which is no reason to merge it (only a
    page that shrank may merge). Before, it was merged back and split again."""
    splits_before = counter("blobstore_catalog_page_splits_total")
    merges_before = counter("blobstore_catalog_page_merges_total")

    async def main() -> None:
        async with (
            open_catalog(zk_connect, SMALL_PAGES) as one,
            open_catalog(zk_connect, SMALL_PAGES) as two,
        ):
            await one.create_bucket("appends", "owner")
            semaphore = asyncio.Semaphore(16)

            async def put(catalog: Catalog, key: str) -> None:
                async with semaphore:
                    record = replace(object_record("appends", key, 1), metadata={"pad": "m" * 300})
                    await catalog.put_object(record)

            keys = [f"2026-11-24T15:{n // 60:02d}:{n % 60:02d}.{n:06d}" for n in range(400)]
            for start in range(0, len(keys), 40):  # in waves, as a clock moves on
                wave = keys[start : start + 40]
                await asyncio.gather(*(put(one if i % 2 else two, k) for i, k in enumerate(wave)))
            listed = await two.list_objects("appends", max_keys=1000)
            assert [r.key for r in listed.contents] == keys
            assert len(await one.index.page_ids("appends")) > 5

    asyncio.run(asyncio.wait_for(main(), 120))
    assert counter("blobstore_catalog_page_splits_total") > splits_before
    assert counter("blobstore_catalog_page_merges_total") == merges_before
