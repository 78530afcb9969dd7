"""Metrics of recovery: the sweeper, the auditor and decommission."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

SWEEP_ROUNDS = Counter(
    "blobstore_sweep_rounds_total",
    "This process's sweeper turns: swept, or skipped (a pass finished recently, or another "
    "process is sweeping)",
    ["outcome"],
)

AUDIT_PASSES = Counter(
    "blobstore_audit_passes_total",
    "Bookie auditor passes of this process: nothing_due, recovered (a bookie gone past "
    "lost_bookie_delay_s was re-replicated), too_few_bookies, busy (another process holds "
    "the lock), failed",
    ["result"],
)

AUDIT_RECOVERIES = Counter(
    "blobstore_audit_recoveries_total",
    "Re-replications of a lost bookie run by this process: done (no ledger names it any "
    "more) or partial (some ledgers left for a later pass)",
    ["outcome"],
)

REREPLICATED_BYTES = Counter(
    "blobstore_rereplicated_bytes_total",
    "Entry bytes copied to a replacement bookie by decommissions run in this process "
    "(the auditor's re-replication of lost bookies; its progress against "
    "recovery_rate_mb_s)",
)

BOOKIES_MISSING = Gauge(
    "blobstore_bookies_missing",
    "Bookies with a cookie but no registration, as the last audit pass saw them",
    multiprocess_mode="mostrecent",
)

SWEPT_LEDGERS = Counter(
    "blobstore_swept_ledgers_total",
    "OPEN ledgers of a gone writer that this process recovered and closed",
)

UNDERREPLICATED_LEDGERS = Gauge(
    "blobstore_underreplicated_ledgers",
    "Ledgers named by the under-replicated set (/ledgers/underreplicated), as this "
    "process last counted them",
    multiprocess_mode="mostrecent",
)

REPLICA_REPAIRS = Counter(
    "blobstore_replica_repairs_total",
    "Copies named by the under-replicated set that the replication worker of this "
    "process handled, by verdict: repaired, good (verified already), stale (the report no "
    "longer applies), bookie_down, no_good_copy, failed",
    ["verdict"],
)

REPLICA_REPAIRED_BYTES = Counter(
    "blobstore_replica_repaired_bytes_total",
    "Entry bytes the replication worker of this process copied back to a live bookie",
)

REPLICA_VERIFICATIONS = Counter(
    "blobstore_replica_verifications_total",
    "Copies of entries of closed ledgers the auditor of this process read and verified, "
    "by outcome: ok, missing, corrupt, unavailable, error",
    ["outcome"],
)
