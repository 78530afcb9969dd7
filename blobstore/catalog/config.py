"""Catalog configuration (one frozen dataclass, validated at load) and znode layout.

Znode layout under `root` (default /catalog):

    buckets/<bucket>                      BucketRecord JSON
    index/<bucket>/map                    RootMap JSON: lower key bound -> map shard id
    index/<bucket>/maps/<shard id>        PageMap JSON (one shard): lower key bound -> page id
    index/<bucket>/pages/<page id>        one leaf page of the object index
    uploads/<bucket>/<upload id>          UploadRecord JSON
    uploads/<bucket>/<upload id>/part-NNNNN   PartRecord JSON
    fences/<session>-<n>                  a commit queue's write fence (ephemeral, empty)
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

ZNODE_BYTES_MAX = 1 << 20  # ZooKeeper's default jute.maxbuffer

# Limits that must hold whatever the configuration.
PAGE_BYTES_HARD_MAX = 896 * 1024  # a page is never written above this
PAGE_MAP_BYTES_MAX = 768 * 1024  # the root map, and any map shard
MAP_SHARD_BYTES_MAX = PAGE_MAP_BYTES_MAX
# Largest record: a page split in halves of page_split_bytes holds at most half of it
# plus one key's versions (2 x record), which must stay below PAGE_BYTES_HARD_MAX.
RECORD_BYTES_HARD_MAX = 192 * 1024


@dataclass(frozen=True, slots=True)
class CatalogConfig:
    root: str = "/catalog"
    # A page whose encoding passes this is split in the same commit (one multi). Small
    # pages keep single-key operations cheap: a get transfers one page, a put rewrites
    # one; the two-level page map lets a bucket hold billions of keys in such pages.
    page_split_bytes: int = 32 * 1024
    # A page under this after a commit is merged with a neighbour when both fit in
    # page_merge_target_bytes (kept below the split size so merges never ping-pong).
    page_merge_bytes: int = 8 * 1024
    page_merge_target_bytes: int = 24 * 1024
    # Pages written by bulk_load are filled to this size.
    page_fill_bytes: int = 24 * 1024
    # One record must fit in this (all versions of one key in twice this); a page split
    # in halves of page_split_bytes then stays below PAGE_BYTES_HARD_MAX.
    record_bytes_max: int = 128 * 1024
    # A page map shard whose encoding passes this is split (about 40 bytes per page, so
    # ~1,600 pages per shard); the root map lists the shards.
    map_shard_split_bytes: int = 64 * 1024
    # Per-page commit queue: mutations waiting for their page's next write.
    commit_queue_max: int = 4096
    commit_batch_max: int = 512
    # Waiting this long before the first write of an idle page gathers concurrent writers;
    # 0 relies on natural batching only (arrivals during a write form the next batch).
    commit_group_wait_ms: float = 0.0
    # Under load, a batch that follows another write of the same page waits this long
    # before it is taken, so each write carries more mutations: fewer ZooKeeper writes
    # (each a request through four server threads and a log fsync) for the same PUTs.
    # A page's first write after it went idle is not delayed (0: off).
    commit_gather_ms: float = 1.0
    # Writes of one busy page in flight at once (1: each write waits for the previous
    # one's answer). A write sent behind another applies its batch to the page as the
    # one ahead will leave it and expects the version that one makes; a fence (an
    # ephemeral znode of the queue that every such write bumps in the same multi) makes
    # it fail whenever the one ahead failed, so it can never apply over another
    # writer's change. ZooKeeper applies one session's requests in order.
    commit_pipeline_depth: int = 2
    # Compare-and-set retry: attempt cap, deadline, jittered exponential backoff.
    cas_attempts_max: int = 50
    cas_deadline_s: float = 10.0
    cas_backoff_initial_ms: float = 1.0
    cas_backoff_max_ms: float = 50.0
    # A mutation is re-routed to another page (after a split or merge) at most this often.
    reroutes_max: int = 32
    # A commit queue reuses the page it last wrote for this long instead of reading it
    # again (a stale copy only costs one failed compare-and-set); idle queues beyond
    # commit_queues_max are dropped.
    page_cache_s: float = 0.5
    # A queue that lost a compare-and-set on its page to another writer (worker or
    # gateway) keeps the page it writes under a data watch for this long after, so the
    # other's writes drop its copy at once instead of failing its next compare-and-set.
    # A page only this queue writes is not watched: the watch costs a request per write.
    commit_watch_s: float = 10.0
    commit_queues_max: int = 4096
    # Deflate level of the page znodes (ISA-L's 1-3; 0 writes them plain). A page
    # rewritten on every commit is mostly repeated field names and keys: compressed it is
    # about a tenth the size, which is what ZooKeeper then receives, logs, snapshots,
    # holds in its heap and sends to every reader. The znode is a zlib stream whatever
    # the level; readers take it and plain pages, so 0 is only for rolling back to a
    # gateway that predates compression.
    page_compression_level: int = 1
    # Decoded pages kept for reads, each under a data watch (pages are ~16-32 KiB).
    page_read_cache_pages: int = 256
    # Decoded page map shards kept, each under a data watch (each up to ~64 KiB).
    map_shard_cache_shards: int = 1024
    list_max_keys_max: int = 100_000

    def __post_init__(self) -> None:
        problem = self._layout_problem() or self._commit_problem()
        if problem is not None:
            name, why = problem
            raise ValueError(f"catalog config {name}={getattr(self, name)!r}: {why}")

    def _layout_problem(self) -> tuple[str, str] | None:
        """The first bad setting of znodes, pages and records, with why it is bad."""
        if not self.root.startswith("/") or self.root.endswith("/"):
            return "root", "must be an absolute znode path without a trailing slash"
        if not 16 * 1024 <= self.page_split_bytes <= PAGE_BYTES_HARD_MAX // 2:
            return "page_split_bytes", f"must be in [16384, {PAGE_BYTES_HARD_MAX // 2}]"
        if not 0 <= self.page_merge_bytes < self.page_merge_target_bytes:
            return "page_merge_bytes", "must be below page_merge_target_bytes"
        if self.page_merge_target_bytes > self.page_split_bytes * 3 // 4:
            return "page_merge_target_bytes", "must be at most 3/4 of page_split_bytes"
        if not 0 < self.page_fill_bytes <= self.page_split_bytes:
            return "page_fill_bytes", "must be in (0, page_split_bytes]"
        if not 0 < self.record_bytes_max <= RECORD_BYTES_HARD_MAX:
            return "record_bytes_max", f"must be in (0, {RECORD_BYTES_HARD_MAX}]"
        if not 256 <= self.map_shard_split_bytes <= MAP_SHARD_BYTES_MAX // 2:
            return "map_shard_split_bytes", f"must be in [256, {MAP_SHARD_BYTES_MAX // 2}]"
        if not 0 <= self.page_cache_s <= 60:
            return "page_cache_s", "must be in [0, 60]"
        return None

    def _commit_problem(self) -> tuple[str, str] | None:
        """The first bad setting of commits, retries and caches, with why it is bad."""
        for name in (
            "commit_queue_max",
            "commit_batch_max",
            "cas_attempts_max",
            "reroutes_max",
            "commit_queues_max",
            "commit_pipeline_depth",
            "page_read_cache_pages",
            "map_shard_cache_shards",
        ):
            if getattr(self, name) < 1:
                return name, "must be at least 1"
        if self.cas_deadline_s <= 0:
            return "cas_deadline_s", "must be positive"
        if not 0 < self.cas_backoff_initial_ms <= self.cas_backoff_max_ms:
            return "cas_backoff_initial_ms", "must be in (0, cas_backoff_max_ms]"
        if not 0 <= self.page_compression_level <= 3:
            return "page_compression_level", "must be in [0, 3] (0: uncompressed)"
        if not 0 <= self.commit_group_wait_ms <= 100:
            return "commit_group_wait_ms", "must be in [0, 100]"
        if not 0 <= self.commit_gather_ms <= 100:
            return "commit_gather_ms", "must be in [0, 100]"
        if self.commit_watch_s < 0:
            return "commit_watch_s", "must be >= 0"
        return None

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> CatalogConfig:
        """Read BLOBSTORE_CATALOG_<FIELD> variables (e.g. BLOBSTORE_CATALOG_PAGE_SPLIT_BYTES)."""
        environ = dict(os.environ) if environ is None else environ
        values: dict[str, object] = {}
        for f in fields(cls):
            raw = environ.get(f"BLOBSTORE_CATALOG_{f.name.upper()}")
            if raw is None:
                continue
            kind = type(getattr(cls(), f.name))
            try:
                values[f.name] = kind(raw)
            except ValueError:
                raise ValueError(
                    f"BLOBSTORE_CATALOG_{f.name.upper()}={raw!r}: not a valid {kind.__name__}"
                ) from None
        return cls(**values)  # type: ignore[arg-type]


assert PAGE_BYTES_HARD_MAX < ZNODE_BYTES_MAX, "pages fit in a znode"
assert PAGE_MAP_BYTES_MAX < ZNODE_BYTES_MAX, "the page map fits in a znode"
assert (PAGE_BYTES_HARD_MAX // 2) // 2 + 2 * RECORD_BYTES_HARD_MAX <= PAGE_BYTES_HARD_MAX, (
    "a split piece (half the split size plus one key's versions) fits in a page"
)


@dataclass(frozen=True, slots=True)
class CatalogPaths:
    root: str

    @property
    def buckets(self) -> str:
        return f"{self.root}/buckets"

    @property
    def index(self) -> str:
        return f"{self.root}/index"

    @property
    def uploads(self) -> str:
        return f"{self.root}/uploads"

    @property
    def fences(self) -> str:
        return f"{self.root}/fences"

    @property
    def condemned(self) -> str:
        return f"{self.root}/condemned"

    def fence(self, name: str) -> str:
        return f"{self.root}/fences/{name}"

    def bucket(self, bucket: str) -> str:
        return f"{self.root}/buckets/{bucket}"

    def bucket_index(self, bucket: str) -> str:
        return f"{self.root}/index/{bucket}"

    def page_map(self, bucket: str) -> str:
        return f"{self.root}/index/{bucket}/map"

    def map_shards(self, bucket: str) -> str:
        return f"{self.root}/index/{bucket}/maps"

    def map_shard(self, bucket: str, shard_id: str) -> str:
        return f"{self.root}/index/{bucket}/maps/{shard_id}"

    def pages(self, bucket: str) -> str:
        return f"{self.root}/index/{bucket}/pages"

    def page(self, bucket: str, page_id: str) -> str:
        return f"{self.root}/index/{bucket}/pages/{page_id}"

    def bucket_uploads(self, bucket: str) -> str:
        return f"{self.root}/uploads/{bucket}"

    def upload(self, bucket: str, upload_id: str) -> str:
        return f"{self.root}/uploads/{bucket}/{upload_id}"

    def part(self, bucket: str, upload_id: str, part_number: int) -> str:
        return f"{self.root}/uploads/{bucket}/{upload_id}/part-{part_number:05d}"
