"""Configuration and limits of the object layer.

One frozen dataclass, loaded from `BLOBSTORE_*` environment variables (the gateway also
accepts some as command-line options) and validated when it is built: an error names the
variable and the bad value.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields

from blobstore.recovery.replica_verifier import ReplicaCheckSettings
from blobstore.runtime.errors import UsageError
from blobstore.wire.protocol import ENTRY_PAYLOAD_BYTES_MAX

logger = logging.getLogger(__name__)

REPLICA_CHECK_DEFAULT = ReplicaCheckSettings()

MIB = 1 << 20
GIB = 1 << 30

# S3 limits (the API reference states them; clients rely on them).
OBJECT_BYTES_MAX = 5 * 1024 * GIB  # the largest object, multipart included
SINGLE_PUT_BYTES_MAX = 5 * GIB
PART_NUMBER_MAX = 10_000
PART_BYTES_MAX = 5 * GIB
PART_BYTES_MIN_DEFAULT = 5 * MIB
# Entry counts bounding the byte windows when entries are small; appends stay well under
# the ledger handle's own bound of adds in flight (LedgerConfig.pending_adds_max, 512).
APPEND_WINDOW_ENTRIES_MAX = 256
READ_WINDOW_ENTRIES_MAX = 64
# Entries larger than this are never kept in the entry cache: a large object's stream
# would displace thousands of small objects for a saving that is small beside its bytes.
ENTRY_CACHE_PAYLOAD_BYTES_MAX = 256 * 1024

assert PART_NUMBER_MAX * PART_BYTES_MAX >= OBJECT_BYTES_MAX, "the largest object fits in parts"
assert SINGLE_PUT_BYTES_MAX <= OBJECT_BYTES_MAX, (SINGLE_PUT_BYTES_MAX, OBJECT_BYTES_MAX)


@dataclass(frozen=True, slots=True)
class ObjectStoreConfig:
    """Settings of one process's object layer. Env var = BLOBSTORE_ + upper-cased name."""

    entry_size_bytes: int = MIB
    # Quorums of new writer ledgers. With fewer writable bookies than ensemble_size (one
    # of three down), a new ledger gets E, then WQ, then AQ cut to the bookies left, AQ
    # never below 2: below that, writes are refused (503) ...
    ensemble_size: int = 3
    write_quorum: int = 2
    ack_quorum: int = 2
    # ... unless this is 1: writes acknowledged by one copy only (ack_quorum 1, or a ledger
    # cut down to one bookie) are allowed, with a WARNING at start and per such ledger.
    allow_single_copy: int = 0
    # A writer ledger is closed (and a new one opened) once it holds this many bytes...
    ledger_bytes_max: int = 256 * MIB
    # ... or once it has been open this long: closed ledgers become compactable.
    ledger_age_s_max: float = 600.0
    # Open writer ledgers per process; a PUT waits for one when all are busy.
    writer_ledgers_max: int = 16
    # Bytes of one PUT appended but not yet acknowledged (bounded memory per PUT).
    append_window_bytes: int = 8 * MIB
    # Whole entries of one PUT appended together, once this many bytes of them are
    # buffered (or the body ended): their frames leave in one write, and a bookie writes
    # the ones it gets with one fdatasync and journals their records with one fsync. Cut
    # to the append window; below an entry's size, each entry goes as it fills.
    append_batch_bytes: int = 4 * MIB
    # Bytes one GET reads ahead of its consumer.
    read_window_bytes: int = 4 * MIB
    # Read handles kept open (LRU).
    read_handles_max: int = 256
    # Payload bytes of small entries (up to ENTRY_CACHE_PAYLOAD_BYTES_MAX each) kept after
    # a read, per process (LRU; 0: none): hot small objects skip the bookie round trip.
    entry_cache_bytes: int = 64 * MIB
    # How often every gateway looks for OPEN ledgers whose writer is gone.
    sweep_interval_s: float = 60.0
    # How often the cluster's bookie auditor looks for bookies gone (one pass per
    # interval for all gateways; 0 turns the auditor off in this process) ...
    audit_interval_s: float = 60.0
    # ... and how long a bookie may be gone before what it held is re-replicated.
    lost_bookie_delay_s: float = 1800.0
    # Most entry bytes per second the auditor copies while re-replicating a lost bookie
    # (in the gateway process that holds its lock; 0: no limit).
    recovery_rate_mb_s: float = 50.0
    # How often the auditor checks that the copies of closed ledgers on live bookies are
    # there and good (one check per interval for the cluster; 0: never) ...
    audit_verify_interval_s: float = REPLICA_CHECK_DEFAULT.verify_interval_s
    # ... the percent of each segment's entries read (0: its first and last entry only)
    audit_verify_percent: float = REPLICA_CHECK_DEFAULT.verify_percent
    # ... and whether each auditor pass repairs the copies found missing or bad (1) or
    # only lists them as under-replicated (0).
    replica_repair: int = int(REPLICA_CHECK_DEFAULT.repair)
    # Smallest part of a multipart upload, the last one excepted.
    part_bytes_min: int = PART_BYTES_MIN_DEFAULT
    # A completed multipart object whose part list (extents and parts) encodes to more
    # than this keeps it in a manifest (ledger entries) instead of its index record
    # (blobstore.objects.manifest); at most half the catalog's record_bytes_max is used.
    manifest_bytes_min: int = 16 * 1024
    # Time limit of one wait for a writer ledger from the pool.
    writer_wait_s_max: float = 30.0
    # ZooKeeper session timeout: how soon other gateways notice this one died.
    zk_session_timeout_s: float = 15.0

    def __post_init__(self) -> None:
        problem = self._ledger_problem() or self._service_problem()
        if problem is not None:
            name, why = problem
            raise UsageError(f"BLOBSTORE_{name.upper()}={getattr(self, name)!r}: {why}")
        if self.allow_single_copy:
            logger.warning(
                "event=single_copy_allowed ack_quorum=%d: BLOBSTORE_ALLOW_SINGLE_COPY=1, "
                "writes may be acknowledged with one copy when bookies are missing; "
                "one more fault loses them",
                self.ack_quorum,
            )

    def _ledger_problem(self) -> tuple[str, str] | None:
        """The first bad setting of entries, ledgers and windows, with why it is bad."""
        if not 1 <= self.entry_size_bytes <= ENTRY_PAYLOAD_BYTES_MAX:
            return "entry_size_bytes", f"must be 1..{ENTRY_PAYLOAD_BYTES_MAX}"
        if not self.ensemble_size >= self.write_quorum >= self.ack_quorum >= 1:
            return "ack_quorum", "need ensemble_size >= write_quorum >= ack_quorum >= 1"
        if self.allow_single_copy not in (0, 1):
            return "allow_single_copy", "must be 0 or 1"
        if self.ack_quorum < 2 and not self.allow_single_copy:
            return "ack_quorum", "one acknowledged copy needs BLOBSTORE_ALLOW_SINGLE_COPY=1"
        if self.ledger_bytes_max < self.entry_size_bytes:
            return "ledger_bytes_max", "must hold at least one entry"
        for name in (
            "ledger_age_s_max",
            "sweep_interval_s",
            "writer_wait_s_max",
            "zk_session_timeout_s",
        ):
            if not getattr(self, name) > 0:
                return name, "must be > 0"
        for name in (
            "writer_ledgers_max",
            "read_handles_max",
        ):
            if not 1 <= getattr(self, name) <= 100_000:
                return name, "must be 1..100000"
        for name in ("append_window_bytes", "read_window_bytes"):
            if not self.entry_size_bytes <= getattr(self, name) <= 1 << 30:
                return name, "must be between the entry size and 1 GiB"
        if not 0 <= self.append_batch_bytes <= 1 << 30:
            return "append_batch_bytes", "must be 0..1 GiB (below an entry: one by one)"
        return None

    def _service_problem(self) -> tuple[str, str] | None:
        """The first bad setting of caches, recovery and multipart, with why it is bad."""
        if not 0 <= self.entry_cache_bytes <= 1 << 40:
            return "entry_cache_bytes", "must be 0..1 TiB (0: no entry cache)"
        if self.audit_interval_s < 0:
            return "audit_interval_s", "must be >= 0 (0: no auditor in this process)"
        if self.lost_bookie_delay_s < 0:
            return "lost_bookie_delay_s", "must be >= 0"
        if not 0 <= self.recovery_rate_mb_s < 1e6:  # NaN and inf fail too
            return "recovery_rate_mb_s", "must be a number of MB/s in [0, 1000000) (0: no limit)"
        if not 0 <= self.audit_verify_interval_s < 1e12:  # NaN and inf fail too
            return "audit_verify_interval_s", "must be >= 0 (0: no replica check)"
        if not 0 <= self.audit_verify_percent <= 100:
            return "audit_verify_percent", "must be in [0, 100]"
        if self.replica_repair not in (0, 1):
            return "replica_repair", "must be 0 or 1"
        if not 0 <= self.manifest_bytes_min <= 1 << 20:
            return "manifest_bytes_min", "must be 0..1048576 (0: every multipart object)"
        if not 1 <= self.part_bytes_min <= PART_BYTES_MAX:
            return "part_bytes_min", f"must be 1..{PART_BYTES_MAX}"
        return None

    @property
    def ack_quorum_min(self) -> int:
        """The fewest acknowledged copies a new writer ledger may be cut down to."""
        return 1 if self.allow_single_copy else 2

    @property
    def replica_check(self) -> ReplicaCheckSettings:
        """The auditor's replica check, as these settings ask for it."""
        return ReplicaCheckSettings(
            self.audit_verify_interval_s, self.audit_verify_percent, bool(self.replica_repair)
        )

    @property
    def append_window_entries(self) -> int:
        """Entries one PUT keeps in flight (below the ledger handle's own bound)."""
        return max(
            1, min(APPEND_WINDOW_ENTRIES_MAX, self.append_window_bytes // self.entry_size_bytes)
        )

    @property
    def append_batch_entries(self) -> int:
        """Whole entries one PUT buffers before appending them together."""
        return max(
            1, min(self.append_window_entries, self.append_batch_bytes // self.entry_size_bytes)
        )

    @property
    def read_window_entries(self) -> int:
        return max(1, min(READ_WINDOW_ENTRIES_MAX, self.read_window_bytes // self.entry_size_bytes))

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, **overrides: object
    ) -> ObjectStoreConfig:
        """Defaults, then BLOBSTORE_* variables, then explicit overrides (not None)."""
        environ = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for field in fields(cls):
            variable = f"BLOBSTORE_{field.name.upper()}"
            raw = environ.get(variable)
            if raw is None:
                continue
            kind = float if field.type in ("float", float) else int
            try:
                values[field.name] = kind(raw)
            except ValueError:
                raise UsageError(f"{variable}={raw!r}: not a number") from None
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)  # type: ignore[arg-type]
