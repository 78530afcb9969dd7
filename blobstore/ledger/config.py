"""The ledger client's configuration: one frozen record, from BLOBSTORE_LEDGER_* variables.

Each field maps to `BLOBSTORE_LEDGER_<FIELD>` (upper case). `validate()` runs on load and
names the key and the bad value.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

from blobstore.ledger.errors import BadLedgerConfigError

ENV_PREFIX = "BLOBSTORE_LEDGER_"

# The purpose of the ledgers the gateways write objects to, and their fixed password:
# every object ledger's when the cluster has no cluster key (the weaker mode), and that
# of ledgers written before it had one. With a key, each ledger gets its own password,
# derived from the key and its id (`passwords.py`); recovery (the sweeper, the auditor,
# decommission) derives the same, as BookKeeper's autorecovery takes the clients'
# password from their shared settings.
OBJECT_LEDGER_PASSWORD = b"blobstore-objects"
OBJECT_LEDGER_PURPOSE = "objects"


@dataclass(frozen=True, slots=True)
class LedgerConfig:
    # Bookie connections (the pool is built from these unless one is passed in).
    bookie_connect_timeout_s: float = 5.0
    # An add or read without an answer for this long counts as a failed bookie: the
    # writer replaces it (ensemble change), a reader moves to the next replica.
    bookie_request_timeout_s: float = 10.0
    bookie_in_flight_max: int = 4096
    # Adds in flight per handle: `append` refuses beyond either bound.
    pending_adds_max: int = 512
    pending_add_bytes_max: int = 128 * 1024 * 1024
    # Reads: requests in flight per read call; delay before asking the next replica too.
    # 50 ms is far above a healthy loopback or LAN read of a 1 MiB entry (a few ms) yet
    # short enough that a stalled bookie barely shows in a stream's latency.
    read_window: int = 8
    speculative_read_timeout_ms: int = 50
    # Replica order for reads: "write_set" (ensemble order, stripes reads) or "random".
    read_replica_order: str = "write_set"
    # Metadata compare-and-set retries (conflicts with a concurrent recovery or change).
    metadata_cas_retries_max: int = 16
    # How long a writer keeps trying to find a replacement bookie before failing its adds.
    ensemble_change_timeout_s: float = 30.0
    ensemble_change_backoff_s: float = 0.1
    # A bookie that failed under a writer is not its replacement choice for this long
    # (a flapping bookie is not picked again at once; a restarted one is, afterwards).
    bad_bookie_quarantine_s: float = 5.0
    # Recovery: per-entry read attempts across the write set before giving up.
    recovery_read_attempts_max: int = 5
    recovery_timeout_s: float = 120.0
    # Writable bookie list cached from /ledgers/available for at most this long.
    bookie_list_cache_s: float = 1.0

    def validate(self) -> LedgerConfig:
        positive = (
            "bookie_connect_timeout_s",
            "bookie_request_timeout_s",
            "bookie_in_flight_max",
            "pending_adds_max",
            "pending_add_bytes_max",
            "read_window",
            "metadata_cas_retries_max",
            "ensemble_change_timeout_s",
            "recovery_read_attempts_max",
            "recovery_timeout_s",
        )
        for name in positive:
            value = getattr(self, name)
            if not value > 0:
                raise BadLedgerConfigError(f"{ENV_PREFIX}{name.upper()}={value!r} must be > 0")
        for name in (
            "speculative_read_timeout_ms",
            "ensemble_change_backoff_s",
            "bad_bookie_quarantine_s",
            "bookie_list_cache_s",
        ):
            value = getattr(self, name)
            if value < 0:
                raise BadLedgerConfigError(f"{ENV_PREFIX}{name.upper()}={value!r} must be >= 0")
        if self.read_replica_order not in ("write_set", "random"):
            raise BadLedgerConfigError(
                f"{ENV_PREFIX}READ_REPLICA_ORDER={self.read_replica_order!r} "
                "must be write_set or random"
            )
        return self

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **overrides: object) -> LedgerConfig:
        environ = dict(os.environ if environ is None else environ)
        values: dict[str, object] = {}
        for field in dataclasses.fields(cls):
            key = f"{ENV_PREFIX}{field.name.upper()}"
            if key not in environ:
                continue
            text = environ[key]
            kind = type(getattr(cls(), field.name))
            try:
                values[field.name] = kind(text)
            except ValueError:
                raise BadLedgerConfigError(
                    f"{key}={text!r} is not a valid {kind.__name__}"
                ) from None
        values.update(overrides)
        return cls(**values).validate()  # type: ignore[arg-type]
