"""The auditor's replica check: every entry of every closed ledger has WQ good copies
(BookKeeper's periodic ledger check with `auditorLedgerVerificationPercentage`).

For each closed ledger, segment by segment, the entries checked are the segment's first
and last, and `percent` % of the others drawn at random (100: all of them; 0: only the
first and last, BookKeeper's default). Each is read from every bookie of its write set
and verified (CRC32C, ledger and entry ids). A copy that is missing or corrupt on a
registered bookie is added to the under-replicated set, where the replication worker
repairs it. A bookie that does not answer is not reported: a bookie gone is the lost
bookie check's concern (`lost_bookie_delay_s`).

Reads are paced at `rate_bytes_per_s` (entry bytes read; 0: no limit).

Settings (env, read by the auditor in every process that runs it; the gateway also
checks them at start as ObjectStoreConfig's audit_verify_interval_s, audit_verify_percent
and replica_repair, whose defaults are this class's):
  BLOBSTORE_AUDIT_VERIFY_INTERVAL_S   seconds between checks for the cluster (default
                                      86400; 0: never)
  BLOBSTORE_AUDIT_VERIFY_PERCENT      percent of each segment's entries checked (0-100,
                                      default 0: first and last entry of each segment)
  BLOBSTORE_REPLICA_REPAIR            1 (default): the auditor's pass runs the replication
                                      worker over the under-replicated set; 0: it does not
"""

from __future__ import annotations

import logging
import math
import os
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiolimiter import AsyncLimiter

from blobstore.ledger import LedgerClient
from blobstore.ledger.distribution_schedule import write_set_bookies
from blobstore.ledger.errors import NoSuchLedgerError
from blobstore.ledger.ledger_metadata import LedgerMetadata, MetadataFormatError
from blobstore.ledger.replicas import CORRUPT, MISSING, read_verified
from blobstore.recovery import underreplication
from blobstore.recovery.metrics import REPLICA_VERIFICATIONS
from blobstore.runtime.aio import for_each
from blobstore.runtime.errors import UsageError
from blobstore.runtime.zk import ZooKeeperClient
from blobstore.wire import underreplicated as urs

logger = logging.getLogger(__name__)

LEDGER_CONCURRENCY = 4
READ_WINDOW_ENTRIES = 16
REASON_OF = {MISSING: urs.MISSING, CORRUPT: urs.DIGEST_MISMATCH}


@dataclass(frozen=True, slots=True)
class ReplicaCheckSettings:
    verify_interval_s: float = 86400.0
    verify_percent: float = 0.0
    repair: bool = True

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ReplicaCheckSettings:
        env = os.environ if environ is None else environ
        try:
            settings = cls(
                float(env.get("BLOBSTORE_AUDIT_VERIFY_INTERVAL_S", "86400")),
                float(env.get("BLOBSTORE_AUDIT_VERIFY_PERCENT", "0")),
                env.get("BLOBSTORE_REPLICA_REPAIR", "1").strip().lower() not in ("0", "false"),
            )
        except ValueError as e:
            raise UsageError(f"bad replica check setting: {e}") from None
        if not 0 <= settings.verify_interval_s < math.inf:
            raise UsageError(
                f"BLOBSTORE_AUDIT_VERIFY_INTERVAL_S={settings.verify_interval_s!r}: must be >= 0"
            )
        if not 0 <= settings.verify_percent <= 100:
            raise UsageError(
                f"BLOBSTORE_AUDIT_VERIFY_PERCENT={settings.verify_percent!r}: must be in [0, 100]"
            )
        return settings


def sample_entries(first: int, last: int, percent: float, rng: random.Random) -> list[int]:
    """The entries of first..last to check: the first, the last, and `percent` % of the
    others at random (all of them at 100), in order."""
    if last < first:
        return []
    inner = range(first + 1, last)
    if percent >= 100:
        chosen = list(inner)
    else:
        count = math.ceil(len(inner) * percent / 100)
        chosen = rng.sample(inner, count) if count else []
    return sorted({first, last, *chosen})


def segment_ranges(metadata: LedgerMetadata) -> list[tuple[int, int, tuple[str, ...]]]:
    """(first entry, last entry, ensemble) of each segment of a closed ledger that holds
    entries."""
    segments = []
    for index, (first, ensemble) in enumerate(metadata.ensembles):
        if index + 1 < len(metadata.ensembles):
            last = metadata.ensembles[index + 1][0] - 1
        else:
            last = metadata.last_entry_id
        last = min(last, metadata.last_entry_id)
        if first <= last:
            segments.append((first, last, ensemble))
    return segments


@dataclass(frozen=True, slots=True)
class BadCopy:
    ledger_id: int
    entry_id: int
    bookie: str
    reason: str  # urs.MISSING or urs.DIGEST_MISMATCH

    def to_json(self) -> dict[str, Any]:
        return {
            "ledger_id": self.ledger_id,
            "entry_id": self.entry_id,
            "bookie": self.bookie,
            "reason": self.reason,
        }


@dataclass(slots=True)
class VerificationPass:
    percent: float
    ledgers_checked: int = 0
    entries_checked: int = 0
    copies_checked: int = 0
    bytes_read: int = 0
    bad_copies: list[BadCopy] = field(default_factory=list)
    reports_written: int = 0
    duration_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "percent": self.percent,
            "ledgers_checked": self.ledgers_checked,
            "entries_checked": self.entries_checked,
            "copies_checked": self.copies_checked,
            "bytes_read": self.bytes_read,
            "bad_copies": [b.to_json() for b in self.bad_copies],
            "reports_written": self.reports_written,
            "duration_s": round(self.duration_s, 3),
        }


class ReplicaVerifier:
    def __init__(
        self,
        zk: ZooKeeperClient,
        *,
        verifier_id: str,
        percent: float,
        rate_bytes_per_s: float = 0.0,
        rng: random.Random | None = None,
    ) -> None:
        self._zk = zk
        self._verifier_id = verifier_id
        self._percent = percent
        self._limiter = AsyncLimiter(rate_bytes_per_s, 1.0) if rate_bytes_per_s > 0 else None
        self._rng = rng or random.Random()
        self._live: set[str] = set()

    async def ledger_ids(self) -> list[int]:
        async with LedgerClient(self._zk) as client:
            return await client.list_ledger_ids()

    async def run_once(
        self,
        ledger_ids: list[int] | None = None,
        advance: Callable[[int], None] | None = None,
    ) -> VerificationPass:
        """Check the closed ledgers (all, or `ledger_ids`); report the bad copies.
        `advance(n)`: n more ledgers checked (a progress bar)."""
        started = time.monotonic()
        result = VerificationPass(self._percent)
        async with LedgerClient(self._zk) as client:
            if ledger_ids is None:
                ledger_ids = await client.list_ledger_ids()
            self._live = {b.bookie_id for b in await client.manager.bookies(refresh=True)}

            async def one(ledger_id: int) -> None:
                await self._check_ledger(client, ledger_id, result)

            await for_each(ledger_ids, one, LEDGER_CONCURRENCY, advance)
        await self._report(result)
        result.duration_s = time.monotonic() - started
        logger.log(
            logging.WARNING if result.bad_copies else logging.INFO,
            "event=replica_check_done ledgers=%d entries=%d copies=%d bad_copies=%d "
            "percent=%g duration_s=%.3f",
            result.ledgers_checked,
            result.entries_checked,
            result.copies_checked,
            len(result.bad_copies),
            self._percent,
            result.duration_s,
        )
        return result

    async def _check_ledger(
        self, client: LedgerClient, ledger_id: int, result: VerificationPass
    ) -> None:
        try:
            metadata = await client.get_metadata(ledger_id)
        except (NoSuchLedgerError, MetadataFormatError):
            return  # deleted meanwhile; bad metadata is fsck's to report
        if not metadata.closed:
            return
        result.ledgers_checked += 1
        work = [
            (entry_id, ensemble)
            for first, last, ensemble in segment_ranges(metadata)
            for entry_id in sample_entries(first, last, self._percent, self._rng)
        ]

        async def one(item: tuple[int, tuple[str, ...]]) -> None:
            entry_id, ensemble = item
            result.entries_checked += 1
            for bookie in write_set_bookies(entry_id, ensemble, metadata.write_quorum):
                await self._check_copy(client, ledger_id, entry_id, bookie, result)

        await for_each(work, one, READ_WINDOW_ENTRIES)

    async def _check_copy(
        self,
        client: LedgerClient,
        ledger_id: int,
        entry_id: int,
        bookie: str,
        result: VerificationPass,
    ) -> None:
        if bookie not in self._live:
            REPLICA_VERIFICATIONS.labels("unavailable").inc()
            return
        outcome, data = await read_verified(client.pool, bookie, ledger_id, entry_id)
        REPLICA_VERIFICATIONS.labels(outcome).inc()
        result.copies_checked += 1
        if data is not None:
            result.bytes_read += len(data)
            if self._limiter is not None:
                await self._limiter.acquire(min(len(data), self._limiter.max_rate))
        if outcome in REASON_OF:
            result.bad_copies.append(BadCopy(ledger_id, entry_id, bookie, REASON_OF[outcome]))

    async def _report(self, result: VerificationPass) -> None:
        grouped: dict[tuple[int, str, str], list[int]] = {}
        for bad in result.bad_copies:
            grouped.setdefault((bad.ledger_id, bad.bookie, bad.reason), []).append(bad.entry_id)
        now = time.time()
        for (ledger_id, bookie, reason), entry_ids in sorted(grouped.items()):
            by = f"auditor {self._verifier_id}"
            for report in urs.split_reports(ledger_id, bookie, entry_ids, reason, by, now):
                await underreplication.add(self._zk, report)
                result.reports_written += 1
        result.bad_copies.sort(key=lambda b: (b.ledger_id, b.entry_id, b.bookie))
