"""The replication worker: repairs what the under-replicated set names, on live bookies
(BookKeeper's ReplicationWorker, for a bad or missing copy rather than a lost bookie).

For each ledger the set names, with the reports about it merged (bookie -> entries):

  1. the ledger deleted: its reports are dropped; OPEN or IN_RECOVERY: kept for a later
     pass (its writer, or the sweeper, closes it first);
  2. for each (bookie, entry): a report that no longer applies is dropped (the entry is
     past the ledger's end, or the bookie is no longer in its write set: a decommission
     or an ensemble change moved it); the bookie's copy is read again and verified
     (repaired meanwhile, or a false alarm: nothing to do);
  3. a good copy is read from another bookie of the write set (digest and ids
     verified), stored on the bookie with a RECOVERY_ADD under the ledger's master key
     (fsync'd before it answers), and read back from it and verified;
  4. the reports handled are deleted; what could not be repaired now (the bookie is
     down or refused the copy, no good copy was found) goes back as one new report.

A bookie that is down keeps its reports: once it is gone past `lost_bookie_delay_s`
the auditor moves all it held, and its reports then no longer apply. An entry with no
good copy anywhere is logged at error level (`event=replica_no_good_copy`): data loss
unless a bookie that is down comes back with it.

Every repair is logged (`event=replica_repaired`) and counted
(`blobstore_replica_repairs_total`, `blobstore_replica_repaired_bytes_total`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from aiolimiter import AsyncLimiter

from blobstore.ledger import LedgerClient
from blobstore.ledger.bookie_client import BookieError, BookieUnavailableError
from blobstore.ledger.distribution_schedule import write_set_bookies
from blobstore.ledger.errors import NoSuchLedgerError
from blobstore.ledger.ledger_metadata import LedgerMetadata
from blobstore.ledger.passwords import LedgerPasswords
from blobstore.ledger.replicas import OK, UNAVAILABLE, read_verified
from blobstore.recovery import underreplication
from blobstore.recovery.decommission import recovery_passwords
from blobstore.recovery.metrics import (
    REPLICA_REPAIRED_BYTES,
    REPLICA_REPAIRS,
    UNDERREPLICATED_LEDGERS,
)
from blobstore.runtime.aio import for_each
from blobstore.runtime.zk import ZooKeeperClient
from blobstore.wire import underreplicated as urs
from blobstore.wire.protocol import master_key

logger = logging.getLogger(__name__)

REPAIR_WINDOW_ENTRIES = 16
LEDGER_CONCURRENCY = 4

# Verdicts on one (bookie, entry) of a report.
REPAIRED = "repaired"  # a good copy stored and read back
GOOD = "good"  # the bookie's copy verifies now: nothing to do
STALE = "stale"  # the report no longer applies (entry or bookie not in the ledger)
BOOKIE_DOWN = "bookie_down"  # kept: the bookie is not registered or did not answer
NO_GOOD_COPY = "no_good_copy"  # kept: no other replica has a good copy
FAILED = "failed"  # kept: the copy was refused or did not read back
KEPT = (BOOKIE_DOWN, NO_GOOD_COPY, FAILED)


@dataclass(slots=True)
class LedgerRepair:
    ledger_id: int
    status: str  # repaired | kept | dropped (deleted, stale) | open | no_password
    verdicts: dict[str, int] = field(default_factory=dict)
    bytes_repaired: int = 0
    left: dict[str, set[int]] = field(default_factory=dict)  # bookie -> entries kept

    def count(self, verdict: str) -> None:
        self.verdicts[verdict] = self.verdicts.get(verdict, 0) + 1

    def to_json(self) -> dict[str, Any]:
        return {
            "ledger_id": self.ledger_id,
            "status": self.status,
            "entries_repaired": self.verdicts.get(REPAIRED, 0),
            "bytes_repaired": self.bytes_repaired,
            "verdicts": dict(sorted(self.verdicts.items())),
            "left": {
                b: [list(r) for r in urs.entry_ranges(e)] for b, e in sorted(self.left.items())
            },
        }


@dataclass(slots=True)
class RepairPass:
    ledgers: list[LedgerRepair] = field(default_factory=list)
    duration_s: float = 0.0

    @property
    def entries_repaired(self) -> int:
        return sum(r.verdicts.get(REPAIRED, 0) for r in self.ledgers)

    @property
    def bytes_repaired(self) -> int:
        return sum(r.bytes_repaired for r in self.ledgers)

    @property
    def entries_left(self) -> int:
        return sum(len(e) for r in self.ledgers for e in r.left.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "ledgers": [r.to_json() for r in self.ledgers],
            "entries_repaired": self.entries_repaired,
            "bytes_repaired": self.bytes_repaired,
            "entries_left": self.entries_left,
            "duration_s": round(self.duration_s, 3),
        }


class ReplicationWorker:
    def __init__(
        self,
        zk: ZooKeeperClient,
        *,
        worker_id: str,
        rate_bytes_per_s: float = 0.0,
        passwords: LedgerPasswords | None = None,
    ) -> None:
        """`rate_bytes_per_s`: the most entry bytes copied per second (0: no limit).
        `passwords`: the ledgers' (default: from the environment's cluster key)."""
        self._zk = zk
        self._worker_id = worker_id
        self._passwords = recovery_passwords(
            LedgerPasswords.from_env() if passwords is None else passwords
        )
        self._limiter = AsyncLimiter(rate_bytes_per_s, 1.0) if rate_bytes_per_s > 0 else None
        self._client = LedgerClient(zk)  # a fresh one per pass (`run_once`)
        self._live: set[str] = set()

    async def run_once(self) -> RepairPass:
        """Repair everything the set names now."""
        started = time.monotonic()
        result = RepairPass()
        damage = underreplication.merge(await underreplication.list_reports(self._zk))
        if damage:
            self._client = LedgerClient(self._zk)
            await self._client.start()
            try:
                self._live = {b.bookie_id for b in await self._client.manager.bookies(refresh=True)}

                async def one(ledger: underreplication.LedgerDamage) -> None:
                    result.ledgers.append(await self._repair_ledger(ledger))

                await for_each(damage, one, LEDGER_CONCURRENCY)
            finally:
                await self._client.close()
        result.ledgers.sort(key=lambda r: r.ledger_id)
        result.duration_s = time.monotonic() - started
        UNDERREPLICATED_LEDGERS.set(await underreplication.ledger_count(self._zk))
        return result

    async def _repair_ledger(self, damage: underreplication.LedgerDamage) -> LedgerRepair:
        ledger_id = damage.ledger_id
        try:
            metadata = (await self._client.manager.read(ledger_id)).value
        except NoSuchLedgerError:
            await underreplication.remove(self._zk, [s.name for s in damage.reports])
            return LedgerRepair(ledger_id, "dropped")
        if not metadata.closed:
            return LedgerRepair(ledger_id, "open")
        password = self._passwords.matching(ledger_id, metadata.password_hash)
        if password is None:
            logger.warning("event=replica_repair_skipped ledger_id=%d: unknown password", ledger_id)
            return LedgerRepair(ledger_id, "no_password")
        repair = LedgerRepair(ledger_id, "repaired")
        key = master_key(password)
        pairs = [(b, e) for b, ids in sorted(damage.entries.items()) for e in sorted(ids)]

        async def one(pair: tuple[str, int]) -> None:
            bookie, entry_id = pair
            verdict, size = await self._repair_entry(metadata, bookie, entry_id, key)
            repair.count(verdict)
            repair.bytes_repaired += size
            if verdict in KEPT:
                repair.left.setdefault(bookie, set()).add(entry_id)

        await for_each(pairs, one, REPAIR_WINDOW_ENTRIES)
        await self._settle(damage, repair)
        return repair

    async def _settle(self, damage: underreplication.LedgerDamage, repair: LedgerRepair) -> None:
        """Replace the reports handled by one naming what is left; log the pass."""
        reason = min(damage.reasons)
        for bookie, entry_ids in sorted(repair.left.items()):
            for report in urs.split_reports(
                repair.ledger_id,
                bookie,
                entry_ids,
                reason,
                f"worker {self._worker_id}",
                time.time(),
            ):
                await underreplication.add(self._zk, report)
        await underreplication.remove(self._zk, [s.name for s in damage.reports])
        if repair.left:
            repair.status = "kept"
        elif not repair.verdicts.get(REPAIRED):
            repair.status = "dropped"
        REPLICA_REPAIRED_BYTES.inc(repair.bytes_repaired)
        log = logger.warning if repair.verdicts.get(REPAIRED) or repair.left else logger.info
        log(
            "event=replica_repaired ledger_id=%d bookies=%s entries_repaired=%d bytes=%d "
            "left=%d verdicts=%s",
            repair.ledger_id,
            ",".join(sorted(damage.entries)),
            repair.verdicts.get(REPAIRED, 0),
            repair.bytes_repaired,
            sum(len(e) for e in repair.left.values()),
            repair.verdicts,
        )

    async def _repair_entry(
        self, metadata: LedgerMetadata, bookie: str, entry_id: int, key: bytes
    ) -> tuple[str, int]:
        """(verdict, bytes copied) for one reported copy."""
        verdict, size = await self._repair_copy(metadata, bookie, entry_id, key)
        REPLICA_REPAIRS.labels(verdict).inc()
        if verdict == NO_GOOD_COPY:
            logger.error(
                "event=replica_no_good_copy ledger_id=%d entry_id=%d bookie=%s",
                metadata.ledger_id,
                entry_id,
                bookie,
            )
        return verdict, size

    async def _repair_copy(
        self, metadata: LedgerMetadata, bookie: str, entry_id: int, key: bytes
    ) -> tuple[str, int]:
        ledger_id = metadata.ledger_id
        if entry_id > metadata.last_entry_id:
            return STALE, 0
        write_set = write_set_bookies(
            entry_id, metadata.ensemble_for(entry_id), metadata.write_quorum
        )
        if bookie not in write_set:
            return STALE, 0
        if bookie not in self._live:
            return BOOKIE_DOWN, 0
        pool = self._client.pool
        outcome, _ = await read_verified(pool, bookie, ledger_id, entry_id)
        if outcome == OK:
            return GOOD, 0
        if outcome == UNAVAILABLE:
            return BOOKIE_DOWN, 0
        data = await self._good_copy(write_set, bookie, ledger_id, entry_id)
        if data is None:
            return NO_GOOD_COPY, 0
        if self._limiter is not None:
            await self._limiter.acquire(min(len(data), self._limiter.max_rate))
        try:
            await pool.add_entry(bookie, ledger_id, entry_id, key, (data,), recovery=True)
        except (BookieError, BookieUnavailableError, TimeoutError) as e:
            logger.warning(
                "event=replica_repair_refused ledger_id=%d entry_id=%d bookie=%s error=%r",
                ledger_id,
                entry_id,
                bookie,
                e,
            )
            return FAILED, 0
        outcome, _ = await read_verified(pool, bookie, ledger_id, entry_id)
        return (REPAIRED, len(data)) if outcome == OK else (FAILED, 0)

    async def _good_copy(
        self, write_set: list[str], bookie: str, ledger_id: int, entry_id: int
    ) -> bytes | None:
        for source in write_set:
            if source == bookie:
                continue
            outcome, data = await read_verified(self._client.pool, source, ledger_id, entry_id)
            if outcome == OK and data is not None:
                return data
        return None
