"""Prometheus metrics of the ledger client (names prefixed `blobstore_ledger_`).

Those updated per entry (adds, reads) are batched (`blobstore.runtime.batched_metrics`): two
prometheus_client updates per add cost more than a tenth of the client's CPU."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from blobstore.runtime.batched_metrics import BatchedCounter, BatchedHistogram
from blobstore.runtime.sampled_gauge import SampledGauge

# Fine between 5 and 50 ms, where the add latency aim (p99 10 ms) and its tail lie.
LATENCY_BUCKETS_S = (
    0.0005, 0.001, 0.002, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.1, 0.25, 0.5,
    1, 2.5, 5, 10,
)  # fmt: skip

ADDS = Counter("blobstore_ledger_adds_total", "Adds by outcome", ["outcome"])
ADD_BYTES = BatchedCounter(
    Counter("blobstore_ledger_add_bytes_total", "Payload bytes of acknowledged adds")
)
ADD_SECONDS = BatchedHistogram(
    Histogram(
        "blobstore_ledger_add_seconds",
        "From append to ack-quorum completion",
        buckets=LATENCY_BUCKETS_S,
    )
)
PENDING_ADDS = SampledGauge(
    Gauge("blobstore_ledger_pending_adds", "Adds in flight over all handles")
)
ENSEMBLE_CHANGES = Counter(
    "blobstore_ledger_ensemble_changes_total", "Bookies replaced in a ledger's ensemble"
)
READS = Counter("blobstore_ledger_reads_total", "Entry reads by outcome", ["outcome"])
READ_SECONDS = BatchedHistogram(
    Histogram(
        "blobstore_ledger_read_seconds", "Latency of one entry read", buckets=LATENCY_BUCKETS_S
    )
)
SPECULATIVE_READS = Counter(
    "blobstore_ledger_speculative_reads_total",
    "Reads also sent to the next replica because the previous one was slow",
)
DIGEST_MISMATCHES = Counter(
    "blobstore_ledger_digest_mismatches_total", "Entries read whose digest did not verify"
)
RECOVERIES = Counter(
    "blobstore_ledger_recoveries_total", "Ledger recoveries by outcome", ["outcome"]
)
RECOVERED_ENTRIES = Counter(
    "blobstore_ledger_recovered_entries_total", "Entries re-replicated by recoveries"
)

# Children bound once: label lookups on the per-entry paths cost more than the increment.
ADDS_OK = BatchedCounter(ADDS.labels("ok"))
ADDS_UNKNOWN = ADDS.labels("unknown")
READS_OK = BatchedCounter(READS.labels("ok"))
READS_NOT_FOUND = READS.labels("not_found")
READS_FAILED = READS.labels("failed")
