"""Prometheus metrics of the catalog (names prefixed `blobstore_catalog_`)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

from blobstore.runtime.batched_metrics import BatchedCounter, BatchedHistogram

COMMITS = Counter("blobstore_catalog_commits_total", "Index page writes that succeeded", ["kind"])
MUTATIONS = BatchedCounter(
    Counter(
        "blobstore_catalog_mutations_total",
        "Object mutations committed (a commit may hold many)",
    )
)
CAS_CONFLICTS = Counter(
    "blobstore_catalog_cas_conflicts_total", "Compare-and-set failures on a znode version"
)
RETRIES = Counter("blobstore_catalog_retries_total", "Retried catalog writes", ["reason"])
BUSY = Counter(
    "blobstore_catalog_busy_total", "Writes refused: retries or a queue exhausted", ["reason"]
)
PAGE_SPLITS = Counter("blobstore_catalog_page_splits_total", "Index pages split")
PAGE_MERGES = Counter("blobstore_catalog_page_merges_total", "Index pages merged")
MAP_SHARD_SPLITS = Counter(
    "blobstore_catalog_map_shard_splits_total", "Page map shards split (the root map grew)"
)
PAGE_MAP_LOADS = Counter(
    "blobstore_catalog_page_map_loads_total", "Page maps read from ZooKeeper", ["reason"]
)
REROUTES = Counter(
    "blobstore_catalog_reroutes_total", "Mutations sent to another page after a split or merge"
)
# Fine between 5 and 50 ms, where a small PUT's latency aim (15 ms) and its tail lie.
COMMIT_BUCKETS_S = (
    0.001, 0.002, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1,
    0.2, 0.5, 1.0, 2.0, 5.0, 10.0,
)  # fmt: skip
COMMIT_SECONDS = BatchedHistogram(
    Histogram(
        "blobstore_catalog_commit_seconds",
        "Time from submitting a mutation to its commit",
        buckets=COMMIT_BUCKETS_S,
    )
)
BATCH_SIZE = BatchedHistogram(
    Histogram(
        "blobstore_catalog_commit_batch_size",
        "Mutations grouped into one page write",
        buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
    )
)
COMMIT_ATTEMPTS = BatchedHistogram(
    Histogram(
        "blobstore_catalog_commit_attempts",
        "Tries a page's batch of mutations took: 1, plus one per retry after a "
        "compare-and-set conflict, a moved page or an unknown outcome",
        buckets=(1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 50),
    )
)
PAGE_READS = Counter(
    "blobstore_catalog_page_reads_total",
    "Index page reads: transferred, or cached (kept copy, its data watch silent)",
    ["kind"],
)

# Children of the hot paths, resolved once (a labels() lookup costs as much as the inc)
# and batched (blobstore.runtime.batched_metrics), as are the updates per mutation above.
PAGE_COMMITS = BatchedCounter(COMMITS.labels("page"))
PIPELINED_WRITES = BatchedCounter(
    Counter(
        "blobstore_catalog_pipelined_writes_total",
        "Index page writes sent while another write of the same page was unanswered",
    )
)
PAGE_READS_CACHED = BatchedCounter(PAGE_READS.labels("cached"))
PAGE_READS_TRANSFERRED = BatchedCounter(PAGE_READS.labels("transferred"))
