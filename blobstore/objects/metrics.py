"""Prometheus metrics of the object layer."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from blobstore.runtime.batched_metrics import BatchedCounter, BatchedHistogram
from blobstore.runtime.sampled_gauge import SampledGauge

WRITER_LEDGERS_OPEN = Gauge(
    "blobstore_writer_ledgers_open",
    "Writer ledgers this process holds open",
    multiprocess_mode="livesum",
)
WRITER_LEDGERS_RETIRED = Counter(
    "blobstore_writer_ledgers_retired_total",
    "Writer ledgers closed, by reason (full, age, failed, shutdown)",
    ["reason"],
)
# Updated per request or per entry: batched (blobstore.runtime.batched_metrics).
OBJECT_BYTES_WRITTEN = BatchedCounter(
    Counter("blobstore_object_bytes_written_total", "Payload bytes appended to ledgers for objects")
)
OBJECT_BYTES_READ = BatchedCounter(
    Counter("blobstore_object_bytes_read_total", "Object bytes read from ledgers")
)
_ENTRY_CACHE_LOOKUPS = Counter(
    "blobstore_entry_cache_lookups_total",
    "Small-object entry reads looked up in this process's entry cache, by result (hit, miss)",
    ["result"],
)
# Indexed by hit (True) or miss (False).
ENTRY_CACHE_LOOKUPS = {
    True: BatchedCounter(_ENTRY_CACHE_LOOKUPS.labels(result="hit")),
    False: BatchedCounter(_ENTRY_CACHE_LOOKUPS.labels(result="miss")),
}
ENTRY_CACHE_BYTES = SampledGauge(
    Gauge(
        "blobstore_entry_cache_bytes",
        "Bytes held in the entry cache of small objects (payloads and ~330 B of bookkeeping each)",
        multiprocess_mode="livesum",
    )
)
COMMITS = Counter(
    "blobstore_object_commits_total", "Catalog commits by kind (put, copy, complete)", ["kind"]
)
PUT_COMMITS = BatchedCounter(COMMITS.labels(kind="put"))
COPY_COMMITS = BatchedCounter(COMMITS.labels(kind="copy"))
COMPLETE_COMMITS = BatchedCounter(COMMITS.labels(kind="complete"))
MANIFEST_OPS = Counter(
    "blobstore_object_manifests_total",
    "Part lists kept out of an index record: written (a multipart completion) and read "
    "(read from ledger entries, not from this process's cache)",
    ["op"],
)
ABANDONED_WRITES = Counter(
    "blobstore_object_writes_abandoned_total",
    "Object writes that appended entries but committed nothing (the entries are garbage)",
)
READ_RETRIES = Counter(
    "blobstore_object_read_retries_total",
    "Reads restarted from a re-read record or a reopened ledger, by reason",
    ["reason"],
)
# Fine below 50 ms (one small object's append) and on up to a large part's.
WRITE_BUCKETS_S = (
    0.001, 0.002, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.1, 0.25, 0.5,
    1, 2.5, 5, 10, 30, 60,
)  # fmt: skip
ENTRY_APPEND_SECONDS = BatchedHistogram(
    Histogram(
        "blobstore_object_write_seconds",
        "Time to append all entries of one object or part",
        buckets=WRITE_BUCKETS_S,
    )
)
PART_COPIES = Counter(
    "blobstore_part_copies_total",
    "UploadPartCopy parts: shared (entries referenced again) or copied (bytes rewritten)",
    ["mode"],
)
