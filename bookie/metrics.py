"""Prometheus metrics of one bookie process (all named `bookie_*`), in one registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from blobstore.runtime.batched_metrics import publish_on_collect
from blobstore.runtime.loop_lag import LAG_BUCKETS_S

LATENCY_BUCKETS_S = (
    0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
)  # fmt: skip
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)
JOURNAL_BATCH_BUCKETS_BYTES = (
    1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 19, 1 << 20, 1 << 22, 1 << 23,
)  # fmt: skip


class BookieMetrics:
    """The metrics, defined by concern: requests and connections, the journal, the
    caches, then the process: its background work (checkpoints, compaction, GC), its
    event loop and its disk."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        # First: a scrape publishes the batched updates of the add and read paths
        # (blobstore.runtime.batched_metrics) before these metrics are collected.
        publish_on_collect(self.registry)
        self._define_request_metrics(self.registry)
        self._define_journal_metrics(self.registry)
        self._define_cache_metrics(self.registry)
        self._define_process_metrics(self.registry)

    def _define_request_metrics(self, r: CollectorRegistry) -> None:
        self.adds = Counter("bookie_adds", "ADD_ENTRY requests by status", ["status"], registry=r)
        self.add_seconds = Histogram(
            "bookie_add_latency_seconds",
            "ADD_ENTRY receipt to response",
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.add_bytes = Counter("bookie_add_bytes", "entry bytes acknowledged", registry=r)
        self.reads = Counter(
            "bookie_reads", "READ_ENTRY requests by status", ["status"], registry=r
        )
        self.read_seconds = Histogram(
            "bookie_read_latency_seconds",
            "READ_ENTRY receipt to response",
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.requests = Counter(
            "bookie_requests", "requests by op and status", ["op", "status"], registry=r
        )
        self.bad_frames = Counter(
            "bookie_bad_frames", "malformed frames (connection closed)", registry=r
        )
        self.connections = Gauge("bookie_connections", "open client connections", registry=r)
        self.stalled_connections = Counter(
            "bookie_stalled_connections",
            "connections closed after holding part of a frame for frame_stall_timeout_s",
            registry=r,
        )
        self.read_waits = Counter(
            "bookie_read_waits",
            "times a connection's next read waited because all connections together had "
            "reads_in_flight_max reads in flight",
            registry=r,
        )

    def _define_journal_metrics(self, r: CollectorRegistry) -> None:
        self.journal_fsync_seconds = Histogram(
            "bookie_journal_fsync_latency_seconds",
            "journal write + fsync of one batch",
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.journal_batch_entries = Histogram(
            "bookie_journal_batch_size_entries",
            "records per group commit",
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.journal_batch_bytes = Histogram(
            "bookie_journal_batch_bytes",
            "bytes per group commit",
            buckets=JOURNAL_BATCH_BUCKETS_BYTES,
            registry=r,
        )
        self.journal_zeroed_bytes = Counter(
            "bookie_journal_zeroed_bytes",
            "zeros written and fsync'd ahead of the journal's writes (journal_zero_ahead_bytes)",
            registry=r,
        )
        self.journal_flush_reason = Counter(
            "bookie_journal_flushes",
            "group commits by the condition that ended them",
            ["reason"],
            registry=r,
        )
        self.direct_write_seconds = Histogram(
            "bookie_direct_write_latency_seconds",
            "direct entry log write + fdatasync of one group of large entries",
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.direct_write_bytes = Counter(
            "bookie_direct_write_bytes",
            "record bytes (padding included) written to direct entry logs, by I/O mode",
            ["mode"],
            registry=r,
        )

    def _define_cache_metrics(self, r: CollectorRegistry) -> None:
        self.write_cache = Counter(
            "bookie_write_cache_lookups", "write cache lookups", ["result"], registry=r
        )
        self.read_cache = Counter(
            "bookie_read_cache_lookups", "read cache lookups", ["result"], registry=r
        )
        self.log_reads = Counter(
            "bookie_entry_log_reads",
            "entry log reads by where they ran: inline (on the event loop, the bytes in the "
            "page cache) or pool (a read thread, waiting for the disk)",
            ["path"],
            registry=r,
        )
        # Children of the read path's labelled counters, resolved once: the read path
        # does not pay for a labels() lookup per read.
        self.write_cache_hit = self.write_cache.labels("hit")
        self.write_cache_miss = self.write_cache.labels("miss")
        self.read_cache_hit = self.read_cache.labels("hit")
        self.read_cache_miss = self.read_cache.labels("miss")
        self.log_reads_inline = self.log_reads.labels("inline")
        self.log_reads_pool = self.log_reads.labels("pool")
        self.write_cache_bytes = Gauge(
            "bookie_write_cache_bytes", "bytes in the write cache", registry=r
        )

    def _define_process_metrics(self, r: CollectorRegistry) -> None:
        self.checkpoints = Counter("bookie_checkpoints", "checkpoints completed", registry=r)
        self.event_loop_lag_seconds = Histogram(
            "bookie_event_loop_lag_seconds",
            "how late the event loop ran a timer due every 50 ms (blobstore.runtime.loop_lag): "
            "what every request waited then",
            buckets=LAG_BUCKETS_S,
            registry=r,
        )
        self.checkpoint_seconds = Histogram(
            "bookie_checkpoint_latency_seconds",
            "checkpoint duration",
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.compaction_bytes = Counter(
            "bookie_compaction_bytes", "live bytes copied by compaction", ["kind"], registry=r
        )
        self.compaction_reclaimed_bytes = Counter(
            "bookie_compaction_reclaimed_bytes",
            "entry log bytes freed by compaction",
            ["kind"],
            registry=r,
        )
        self.entry_logs_deleted = Counter(
            "bookie_entry_logs_deleted", "entry logs removed", registry=r
        )
        self.gc_ledgers_deleted = Counter(
            "bookie_gc_ledgers_deleted", "ledgers dropped by GC", registry=r
        )
        self.gc_runs = Counter(
            "bookie_gc_runs", "garbage collection cycles", ["result"], registry=r
        )
        self.disk_usage_ratio = Gauge(
            "bookie_disk_usage_ratio", "bytes used / capacity", registry=r
        )
        self.read_only = Gauge("bookie_read_only", "1 while the bookie refuses adds", registry=r)
        self.ledgers = Gauge("bookie_ledgers", "ledgers with local state", registry=r)
        self._define_scrub_metrics(r)

    def _define_scrub_metrics(self, r: CollectorRegistry) -> None:
        self.scrub_bytes_verified = Counter(
            "bookie_scrub_bytes_verified",
            "entry bytes the scrubber read back and verified (bookie/scrubber.py)",
            registry=r,
        )
        self.scrub_entries_verified = Counter(
            "bookie_scrub_entries_verified", "entries the scrubber verified", registry=r
        )
        self.scrub_errors = Counter(
            "bookie_scrub_errors",
            "bad entries the scrubber found, by reason: digest_mismatch, unreadable",
            ["reason"],
            registry=r,
        )
        self.scrub_passes = Counter(
            "bookie_scrub_passes",
            "scrub passes finished, by result: ok, error",
            ["result"],
            registry=r,
        )


METRICS = BookieMetrics()
