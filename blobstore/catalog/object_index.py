"""The object index of every bucket: page map cache, page reads, routing of mutations to
per-page commit queues, page merges.

Bucket records, root maps, map shards and recently read pages are cached (`WatchedCache`),
each under a ZooKeeper data watch that drops the copy when the znode changes. After
`ZooKeeperClient.fresh_view()` (a shared `sync`) a cached copy is the newest state, so a
consistent read costs no ZooKeeper round trip of its own when the caches are warm. Without
a fresh view the copies are as current as this session's server: writes check versions in
their compare-and-set, and every page names its own key range, so a key routed with a
stale map lands on a page that is gone or does not cover it and the map is read again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, replace
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError

from blobstore.catalog import metrics
from blobstore.catalog._private import UNKNOWN_OUTCOME_ERRORS, zookeeper_errors
from blobstore.catalog.condemned import CondemnedLedgers
from blobstore.catalog.config import CatalogConfig, CatalogPaths
from blobstore.catalog.errors import CatalogBusyError, NoSuchBucketError
from blobstore.catalog.page import IndexPage, PageMap, RootMap, new_page_id, pack_page
from blobstore.catalog.page_batch import Mutation
from blobstore.catalog.page_commit_queue import PageCommitQueue
from blobstore.catalog.records import BucketRecord
from blobstore.catalog.retry import CasRetryPolicy
from blobstore.runtime.zk import WatchedCache, ZooKeeperClient

logger = logging.getLogger(__name__)

# Bucket records and root maps kept (each under a data watch); a gateway rarely serves
# more buckets.
BUCKET_CACHE_MAX = ROOT_CACHE_MAX = 100_000


def _decode_root(_path: str, data: bytes, version: int) -> RootMap | PageMap:
    if RootMap.is_single_level(data):
        return PageMap.decode(data, version)
    return RootMap.decode(data, version)


@dataclass(frozen=True, slots=True)
class _Merge:
    """Two neighbouring pages of a map shard and the page they merge into."""

    page_map: PageMap
    left_pos: int
    left: IndexPage
    right: IndexPage
    merged: IndexPage
    encoded: bytes  # `merged`, encoded


def _neighbours_agree(page_map: PageMap, left_pos: int, left: IndexPage, right: IndexPage) -> bool:
    """Whether the pages read cover exactly the ranges the shard gives them (a page
    split or merged since the shard was read does not)."""
    if left.lo != page_map.bounds[left_pos] or left.hi != right.lo:
        return False
    return right.hi == page_map.upper_bound(left_pos + 1)


class ObjectIndex:
    def __init__(self, zk: ZooKeeperClient, config: CatalogConfig, paths: CatalogPaths) -> None:
        self.zk = zk
        self.config = config
        self.paths = paths
        self._pages: WatchedCache[IndexPage] = WatchedCache(
            zk,
            lambda path, data, version: IndexPage.decode(path.rsplit("/", 1)[1], data, version),
            config.page_read_cache_pages,
            name="index_pages",
        )
        # Root maps; a map written before maps were sharded decodes as one PageMap.
        self._roots: WatchedCache[RootMap | PageMap] = WatchedCache(
            zk, _decode_root, ROOT_CACHE_MAX, name="root_maps"
        )
        self._shards: WatchedCache[PageMap] = WatchedCache(
            zk,
            lambda path, data, version: PageMap.decode(data, version, path.rsplit("/", 1)[1]),
            config.map_shard_cache_shards,
            name="map_shards",
        )
        self._buckets: WatchedCache[tuple[BucketRecord, int]] = WatchedCache(
            zk,
            lambda _path, data, version: (BucketRecord.decode(data), version),
            BUCKET_CACHE_MAX,
            name="buckets",
        )
        self.retry_policy = CasRetryPolicy(
            config.cas_attempts_max,
            config.cas_deadline_s,
            config.cas_backoff_initial_ms,
            config.cas_backoff_max_ms,
        )
        self.condemned = CondemnedLedgers(zk, paths.condemned)
        self._queues: dict[tuple[str, str], PageCommitQueue] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing = False

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()

    async def close(self, timeout_s: float = 10.0) -> None:
        self._closing = True
        if self._tasks:
            _, pending = await asyncio.wait(list(self._tasks), timeout=timeout_s)
            for task in pending:
                task.cancel()
        for queue in self._queues.values():
            queue.forget()  # no expiry timer outlives the index

    @property
    def closing(self) -> bool:
        return self._closing

    def track(self, task: asyncio.Task[Any]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ------------------------------------------------------------------ bucket state

    async def bucket_state(
        self, bucket: str, view: asyncio.Future[None] | None = None, *, fresh: bool = False
    ) -> tuple[BucketRecord, int]:
        """The bucket record and its znode version (cached under a watch; commits check
        the version). `fresh`: read it again whatever the cache holds. With `view`
        (`ZooKeeperClient.fresh_view_started()`): the newest record."""
        path = self.paths.bucket(bucket)
        try:
            return await self._buckets.get(path, view, fresh=fresh)
        except NoNodeError:
            raise NoSuchBucketError(bucket) from None

    def bucket_cached(self, bucket: str) -> bool:
        """Whether this process holds the bucket's record (under its watch)."""
        return self._buckets.peek(self.paths.bucket(bucket)) is not None

    def forget_bucket(self, bucket: str) -> None:
        self._buckets.invalidate(self.paths.bucket(bucket))
        self._roots.invalidate(self.paths.page_map(bucket))

    # ------------------------------------------------------------------ page map

    async def root_map(
        self, bucket: str, *, fresh: bool = False, view: asyncio.Future[None] | None = None
    ) -> RootMap:
        """The bucket's root map (cached under a data watch; `fresh`: read it again).
        With `view` (`ZooKeeperClient.fresh_view_started()`): the newest root map."""
        path = self.paths.page_map(bucket)
        for _ in range(3):
            if fresh or self._roots.peek(path) is None:
                metrics.PAGE_MAP_LOADS.labels("fresh" if fresh else "miss").inc()
            try:
                root = await self._roots.get(path, view, fresh=fresh)
            except NoNodeError:
                raise NoSuchBucketError(bucket) from None
            if isinstance(root, RootMap):
                return root
            await self._shard_single_level_map(bucket, root)
            fresh = True
        raise CatalogBusyError(f"bucket {bucket!r}: page map kept changing")

    async def _shard_single_level_map(self, bucket: str, single: PageMap) -> None:
        """Move a page map written before maps were sharded into one shard (one multi,
        version-checked; whoever loses the race finds the new root)."""
        single = replace(single, shard_id=new_page_id())
        root = RootMap(("",), (single.shard_id,))
        try:
            await self.zk.multi(
                [
                    ("create", (self.paths.map_shards(bucket), b"")),
                    ("create", (self.paths.map_shard(bucket, single.shard_id), single.encode())),
                    ("set", (self.paths.page_map(bucket), root.encode(), single.version)),
                ]
            )
        except (BadVersionError, NodeExistsError, NoNodeError):
            return
        logger.info("page map sharded bucket=%s pages=%d", bucket, len(single.page_ids))

    async def page_map(
        self,
        bucket: str,
        key: str = "",
        *,
        fresh: bool = False,
        view: asyncio.Future[None] | None = None,
    ) -> PageMap:
        """The page map shard whose range holds `key` (cached under data watches). A shard
        names its range, so one routed by a stale root is noticed and the root reread."""
        for _ in range(self.config.reroutes_max):
            root = await self.root_map(bucket, fresh=fresh, view=view)
            path = self.paths.map_shard(bucket, root.shard_for(key))
            try:
                shard = await self._shards.get(path, view, fresh=fresh)
            except NoNodeError:
                fresh = True
                continue
            if shard.contains(key):
                return shard
            fresh = True
        raise CatalogBusyError(f"bucket {bucket!r}: page map kept moving under key {key!r}")

    async def shards(self, bucket: str) -> list[PageMap]:
        """Every shard of the bucket's page map, in key order, read fresh."""
        return (await self.map_snapshot(bucket))[1]

    async def map_snapshot(self, bucket: str) -> tuple[RootMap, list[PageMap]]:
        """The root map and every shard it names, in key order, read fresh and agreeing
        with each other (for bucket deletion, bulk loads and checks, whose multi checks
        the versions; retried while shards split meanwhile)."""
        for _ in range(self.config.reroutes_max):
            root = await self.root_map(bucket, fresh=True)
            try:
                values = await asyncio.gather(
                    *(self.zk.get(self.paths.map_shard(bucket, s)) for s in root.shard_ids)
                )
            except NoNodeError:
                continue
            shards = [
                PageMap.decode(v.value, v.version, s)
                for s, v in zip(root.shard_ids, values, strict=True)
            ]
            if all(
                (shard.lo, shard.hi) == (root.bounds[i], root.upper_bound(i))
                for i, shard in enumerate(shards)
            ):
                return root, shards
        raise CatalogBusyError(f"bucket {bucket!r}: page map kept moving")

    async def page_ids(self, bucket: str) -> list[str]:
        """Every index page of the bucket, in key order (read fresh)."""
        return [page_id for shard in await self.shards(bucket) for page_id in shard.page_ids]

    def forget_root(self, bucket: str) -> None:
        self._roots.invalidate(self.paths.page_map(bucket))

    def forget_shard(self, bucket: str, shard_id: str) -> None:
        self._shards.invalidate(self.paths.map_shard(bucket, shard_id))

    # ------------------------------------------------------------------ pages

    async def read_page(
        self,
        bucket: str,
        page_id: str,
        view: asyncio.Future[None] | None = None,
        *,
        shared: bool = False,
        kept: bool = True,
    ) -> IndexPage | None:
        """The page (a copy: callers may change it), or None when it is gone (merged
        away). Recently read pages are kept decoded under a data watch, so a listing that
        reads the same page for consecutive requests transfers and decodes it once.
        `shared`: the kept page itself, for a caller that only reads it (a copy of a
        page's key and line lists is a visible share of a small GET). `kept=False`: a
        page not in the cache is read without a watch and not kept, for a walk that
        reads each page once (a scan): a watch set, and removed on eviction, per page
        would double its requests to the server."""
        path = self.paths.page(bucket, page_id)
        cached = self._pages.peek(path)
        if cached is not None:
            metrics.PAGE_READS_CACHED.inc()
        elif not kept and view is None:
            return await self._read_page_once(bucket, page_id)
        try:
            page = await self._pages.get(path, view)
        except NoNodeError:
            return None
        if cached is None:
            metrics.PAGE_READS_TRANSFERRED.inc()
        return page if shared else page.copy()

    async def _read_page_once(self, bucket: str, page_id: str) -> IndexPage | None:
        try:
            versioned = await self.zk.get(self.paths.page(bucket, page_id))
        except NoNodeError:
            return None
        metrics.PAGE_READS_TRANSFERRED.inc()
        return IndexPage.decode(page_id, versioned.value, versioned.version)

    async def read_page_for_commit(self, bucket: str, page_id: str) -> IndexPage | None:
        """The page for a commit to rewrite (or None when it is gone): a copy from the read
        cache when it holds one, otherwise read without a data watch and not kept there.
        The commit's own write would fire such a watch at once and drop the entry: one
        notification, one invalidation and a cache slot for nothing, on every commit of a
        page this queue has not kept. The compare-and-set checks the version anyway."""
        path = self.paths.page(bucket, page_id)
        kept = self._pages.peek(path)
        if kept is not None:
            metrics.PAGE_READS_CACHED.inc()
            return kept.copy()
        return await self._read_page_once(bucket, page_id)

    async def page_containing(
        self,
        bucket: str,
        key: str,
        view: asyncio.Future[None] | None = None,
        *,
        shared: bool = False,
        kept: bool = True,
    ) -> IndexPage:
        """The page whose range holds `key`: the newest when `view` is given (a fresh view
        started before the call), otherwise as current as this session's server.
        `shared`, `kept`: as `read_page`'s."""
        fresh = False
        for _ in range(self.config.reroutes_max):
            with zookeeper_errors("read index page"):
                page_map = await self.page_map(bucket, key, fresh=fresh, view=view)
                page_id = page_map.page_for(key)
                page = await self.read_page(bucket, page_id, view, shared=shared, kept=kept)
            if page is not None and page.contains(key):
                return page
            fresh = True
        raise CatalogBusyError(f"bucket {bucket!r}: index pages kept moving under key {key!r}")

    # ------------------------------------------------------------------ writes

    async def submit(self, mutation: Mutation) -> Any:
        """Queue a mutation on its page and wait for its commit; returns apply()'s result."""
        if self._closing:
            raise CatalogBusyError("catalog is closing")
        await self.route(mutation, fresh=False)
        try:
            return await mutation.future
        finally:
            metrics.COMMIT_SECONDS.observe(time.monotonic() - mutation.submitted)

    async def route(self, mutation: Mutation, *, fresh: bool) -> None:
        try:
            with zookeeper_errors("read page map"):
                page_map = await self.page_map(mutation.bucket, mutation.key, fresh=fresh)
        except Exception as e:  # noqa: BLE001 - delivered to the waiting caller
            mutation.fail(e)
            return
        page_id = page_map.page_for(mutation.key)
        queue = self._queues.get((mutation.bucket, page_id))
        if queue is None:
            queue = PageCommitQueue(self, mutation.bucket, page_id)
            self._queues[(mutation.bucket, page_id)] = queue
        queue.submit(mutation)

    def reroute(self, mutation: Mutation) -> None:
        """The mutation's page no longer covers its key: route it again with a fresh map."""
        mutation.reroutes += 1
        metrics.REROUTES.inc()
        if mutation.reroutes > self.config.reroutes_max:
            metrics.BUSY.labels("reroutes").inc()
            mutation.fail(CatalogBusyError(f"key {mutation.key!r}: its index page kept moving"))
            return
        self.track(asyncio.ensure_future(self.route(mutation, fresh=True)))

    def queue_idle(self, queue: PageCommitQueue) -> None:
        """Idle queues stay (with their cached page) until there are too many."""
        if len(self._queues) <= self.config.commit_queues_max:
            return
        for key, candidate in list(self._queues.items()):
            if candidate.idle:
                del self._queues[key]
                candidate.forget()

    def forget_page(self, bucket: str, page_id: str) -> None:
        queue = self._queues.get((bucket, page_id))
        if queue is not None:
            queue.forget()

    # ------------------------------------------------------------------ merge

    async def try_merge(self, bucket: str, page_id: str, key: str) -> None:
        """Merge a small page (the one holding `key`) with a neighbour in its map shard
        (one multi: both pages and the shard, version checked). Best effort: any conflict
        leaves the pages as they are."""
        try:
            merge = await self._plan_merge(bucket, page_id, key)
            if merge is None:
                return
            await self.zk.multi(self._merge_operations(bucket, merge))
        except (BadVersionError, NoNodeError, NotEmptyError, NoSuchBucketError):
            metrics.CAS_CONFLICTS.inc()
            return
        except UNKNOWN_OUTCOME_ERRORS:
            return
        metrics.PAGE_MERGES.inc()
        metrics.COMMITS.labels("merge").inc()
        self.forget_shard(bucket, merge.page_map.shard_id)
        self.forget_page(bucket, merge.left.page_id)
        self.forget_page(bucket, merge.right.page_id)
        logger.debug(
            "index pages merged bucket=%s left=%s right=%s keys=%d",
            bucket,
            merge.left.page_id,
            merge.right.page_id,
            len(merge.merged.keys),
        )

    async def _plan_merge(self, bucket: str, page_id: str, key: str) -> _Merge | None:
        """The merge of the page with its right neighbour (its left one for the shard's
        last page), when both agree with the shard and fit page_merge_target_bytes."""
        # The cached shard will do: a stale one fails the multi's version check (and its
        # watch drops it), which only abandons this attempt.
        page_map = await self.page_map(bucket, key)
        pos = page_map.position(page_id)
        if pos < 0 or len(page_map.page_ids) < 2:
            return None
        left_pos = pos if pos + 1 < len(page_map.page_ids) else pos - 1
        left, right = await asyncio.gather(
            self.read_page(bucket, page_map.page_ids[left_pos]),
            self.read_page(bucket, page_map.page_ids[left_pos + 1]),
        )
        if left is None or right is None:
            return None
        if not _neighbours_agree(page_map, left_pos, left, right):
            return None
        merged = left.merged_with(right)
        encoded = merged.encode()
        if len(encoded) > self.config.page_merge_target_bytes:
            return None
        merged.check()
        return _Merge(page_map, left_pos, left, right, merged, encoded)

    def _merge_operations(self, bucket: str, merge: _Merge) -> list[tuple[str, tuple[Any, ...]]]:
        """Set the left page to the merged one, delete the right one, set the shard."""
        page_map = merge.page_map
        new_map = page_map.replace(merge.left_pos, [merge.merged], remove=2)
        stored = pack_page(merge.encoded, self.config.page_compression_level)
        return [
            ("set", (self.paths.page(bucket, merge.left.page_id), stored, merge.left.version)),
            ("delete", (self.paths.page(bucket, merge.right.page_id), merge.right.version)),
            (
                "set",
                (
                    self.paths.map_shard(bucket, page_map.shard_id),
                    new_map.encode(),
                    page_map.version,
                ),
            ),
        ]
