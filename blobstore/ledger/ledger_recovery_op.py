"""Recovery of a ledger its writer left OPEN: fence, find the end, re-replicate, close.

1. Mark the metadata IN_RECOVERY (CAS). From then on the writer's ensemble changes and
   close fail: it is fenced at the metadata level.
2. Fence the ledger on the bookies of the last ensemble: READ_ENTRY(entry -1, FENCE).
   A fenced bookie refuses normal adds. Wait until every write set has fewer than AQ
   unfenced bookies (`FenceQuorum`): then no add of the old writer can reach AQ.
3. Start from the highest LAC in those answers (and never below the last segment's first
   entry - 1: a segment is recorded only once every entry before it was acknowledged).
4. Read forward from LAC + 1, entry by entry, from the entry's write set in the ensemble
   that was fenced. An entry read with a valid digest is recoverable: it is re-added,
   byte for byte, to its write set with RECOVERY_ADD (through a recovery LedgerHandle,
   so a dead bookie triggers an ensemble change, kept in that handle until the close
   writes it: ZooKeeper keeps the fenced ensembles for every other reader). The first
   entry that at least
   WQ - AQ + 1 replicas report missing could never have reached AQ: it ends the scan.
   Anything else (replicas unavailable, corrupt) is retried, then recovery fails and the
   ledger stays fenced for a later attempt.
5. Close by CAS at the last recovered entry. If a concurrent recovery closed it first,
   its result is adopted, so two recoveries always agree on the end.

Why two recoveries agree: the first CAS to CLOSED wins; the loser re-reads and returns
the winner's metadata. Why no acknowledged entry is lost: an acknowledged entry is on
>= AQ replicas, so at most WQ - AQ replicas can report it missing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

from blobstore.ledger import metrics
from blobstore.ledger.bookie_client import (
    BookieError,
    BookieUnavailableError,
    NoSuchEntryError,
    NoSuchLedgerOnBookieError,
    UnauthorizedError,
)
from blobstore.ledger.distribution_schedule import FenceQuorum, is_entry_missing, write_set_bookies
from blobstore.ledger.errors import (
    LedgerError,
    LedgerFencedError,
    LedgerRecoveryError,
    LedgerUnauthorizedError,
    MetadataVersionConflictError,
)
from blobstore.ledger.ledger_handle import ClientParts, LedgerHandle
from blobstore.ledger.ledger_metadata import STATE_OPEN, LedgerMetadata, Versioned
from blobstore.wire import protocol

logger = logging.getLogger(__name__)

RECOVERY_READ_BACKOFF_S = 0.2


class LedgerRecoveryOp:
    def __init__(self, client: ClientParts, ledger_id: int, password: bytes) -> None:
        self.client = client
        self.ledger_id = ledger_id
        self.password = password
        self.master_key = protocol.master_key(password)

    async def run(self) -> Versioned[LedgerMetadata]:
        """The ledger's metadata once CLOSED (by this recovery or a concurrent one)."""
        config = self.client.config
        started = time.monotonic()
        try:
            async with asyncio.timeout(config.recovery_timeout_s):
                result = await self._run()
        except TimeoutError:
            metrics.RECOVERIES.labels("failed").inc()
            raise LedgerRecoveryError(
                f"ledger_id={self.ledger_id} recovery took more than {config.recovery_timeout_s}s",
                ledger_id=self.ledger_id,
            ) from None
        except LedgerError:
            metrics.RECOVERIES.labels("failed").inc()
            raise
        metadata = result.value
        metrics.RECOVERIES.labels("ok").inc()
        logger.info(
            "ledger_recovery_done ledger_id=%d last_entry_id=%d length=%d duration_s=%.3f",
            self.ledger_id,
            metadata.last_entry_id,
            metadata.length,
            time.monotonic() - started,
        )
        return result

    async def _run(self) -> Versioned[LedgerMetadata]:
        manager = self.client.manager
        last_error: Exception | None = None
        for _ in range(self.client.config.metadata_cas_retries_max):
            versioned = await manager.read(self.ledger_id)
            if versioned.value.closed:
                return versioned
            if versioned.value.state == STATE_OPEN:
                try:
                    versioned = await manager.write(
                        versioned.value.in_recovery(), versioned.version
                    )
                except MetadataVersionConflictError as e:
                    last_error = e
                    continue
                logger.info("ledger_recovery_started ledger_id=%d", self.ledger_id)
            try:
                return await self._recover(versioned)
            except (MetadataVersionConflictError, LedgerFencedError) as e:
                # A concurrent recovery changed or closed the ledger: look again.
                logger.info("ledger recovery retry ledger_id=%d reason=%s", self.ledger_id, e)
                last_error = e
        raise LedgerRecoveryError(
            f"ledger_id={self.ledger_id} recovery kept conflicting: {last_error}",
            ledger_id=self.ledger_id,
        )

    async def _recover(self, versioned: Versioned[LedgerMetadata]) -> Versioned[LedgerMetadata]:
        metadata = versioned.value
        fenced_lac = await self._fence(metadata)
        lac = max(fenced_lac, metadata.ensembles[-1][0] - 1)
        length = 0
        if lac >= 0:
            entry = await self._read_for_recovery(metadata, lac)
            if entry is None:
                raise LedgerRecoveryError(
                    f"ledger_id={self.ledger_id} entry {lac} at the LAC is missing",
                    ledger_id=self.ledger_id,
                )
            length = entry[0].ledger_length
        logger.info(
            "ledger_recovery_fenced ledger_id=%d lac=%d length=%d", self.ledger_id, lac, length
        )
        handle = LedgerHandle(
            self.client,
            versioned,
            self.password,
            writable=True,
            recovery=True,
            last_add_confirmed=lac,
            length=length,
        )
        entry_id = lac + 1
        recovered = 0
        while True:
            found = await self._read_for_recovery(metadata, entry_id)
            if found is None:
                break
            recovered_entry, raw = found
            await handle.wait_for_capacity()
            handle.append_entry_bytes(recovered_entry, raw)
            recovered += 1
            entry_id += 1
        closed = await handle.close()
        metrics.RECOVERED_ENTRIES.inc(recovered)
        logger.info(
            "ledger_recovery_readded ledger_id=%d first_entry_id=%d count=%d",
            self.ledger_id,
            lac + 1,
            recovered,
        )
        return closed

    async def _fence(self, metadata: LedgerMetadata) -> int:
        """Fence the last ensemble; the highest LAC the fencing answers report."""
        ensemble = metadata.last_ensemble
        quorum = FenceQuorum(metadata.ensemble_size, metadata.write_quorum, metadata.ack_quorum)
        lac = protocol.NO_ENTRY
        for attempt in range(self.client.config.recovery_read_attempts_max):
            lac = await self._fence_round(ensemble, quorum, lac)
            if quorum.complete:
                return lac
            logger.warning(
                "ledger recovery fence quorum incomplete ledger_id=%d attempt=%d",
                self.ledger_id,
                attempt,
            )
            await asyncio.sleep(RECOVERY_READ_BACKOFF_S * (attempt + 1))
        raise LedgerRecoveryError(
            f"ledger_id={self.ledger_id} could not fence enough bookies of {list(ensemble)}",
            ledger_id=self.ledger_id,
        )

    async def _fence_round(self, ensemble: Sequence[str], quorum: FenceQuorum, lac: int) -> int:
        """Fence every bookie of the ensemble at once, until `quorum` is complete or all
        answered; `lac` raised to the highest LAC the answers report."""
        tasks = [
            asyncio.create_task(self._fence_bookie(slot, bookie_id))
            for slot, bookie_id in enumerate(ensemble)
        ]
        try:
            for next_done in asyncio.as_completed(tasks):
                slot, answer = await next_done
                if answer is None:
                    continue
                quorum.answered(slot)
                lac = max(lac, answer)
                if quorum.complete:
                    return lac
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return lac

    async def _fence_bookie(self, slot: int, bookie_id: str) -> tuple[int, int | None]:
        """(slot, the LAC the bookie reports once fenced; None if it could not be fenced)."""
        try:
            response = await self.client.pool.read_entry(
                bookie_id, self.ledger_id, protocol.LAST_ENTRY, fence_key=self.master_key
            )
        except UnauthorizedError as e:
            raise LedgerUnauthorizedError(
                f"ledger_id={self.ledger_id} bookie={bookie_id} rejected the master key",
                ledger_id=self.ledger_id,
            ) from e
        except (NoSuchEntryError, NoSuchLedgerOnBookieError) as e:
            # Fenced, but holds no entry of the ledger.
            lac = e.response.last_add_confirmed if e.response is not None else protocol.NO_ENTRY
            return slot, lac
        except (BookieError, BookieUnavailableError) as e:
            logger.warning(
                "ledger recovery fence failed ledger_id=%d bookie=%s error=%s",
                self.ledger_id,
                bookie_id,
                e,
            )
            return slot, None
        lac = response.last_add_confirmed
        try:
            lac = max(lac, protocol.Entry.decode(response.entry).last_add_confirmed)
        except protocol.CorruptEntryError:
            metrics.DIGEST_MISMATCHES.inc()
        return slot, lac

    async def _read_for_recovery(
        self, metadata: LedgerMetadata, entry_id: int
    ) -> tuple[protocol.Entry, bytes] | None:
        """The entry and its raw bytes; None when it can never have been acknowledged."""
        replicas = write_set_bookies(
            entry_id, metadata.ensemble_for(entry_id), metadata.write_quorum
        )
        pool = self.client.pool

        async def read(bookie_id: str) -> tuple[str, protocol.Entry | None, bytes]:
            try:
                response = await pool.read_entry(bookie_id, self.ledger_id, entry_id)
            except (NoSuchEntryError, NoSuchLedgerOnBookieError):
                return "missing", None, b""
            except (BookieError, BookieUnavailableError):
                return "unknown", None, b""
            try:
                entry = protocol.Entry.decode(response.entry)
            except protocol.CorruptEntryError:
                metrics.DIGEST_MISMATCHES.inc()
                return "unknown", None, b""
            if entry.ledger_id != self.ledger_id or entry.entry_id != entry_id:
                return "unknown", None, b""
            return "ok", entry, bytes(response.entry)

        for attempt in range(self.client.config.recovery_read_attempts_max):
            tasks = [asyncio.create_task(read(b)) for b in replicas]
            missing = 0
            try:
                for next_done in asyncio.as_completed(tasks):
                    outcome, entry, raw = await next_done
                    if outcome == "ok":
                        assert entry is not None
                        return entry, raw
                    if outcome == "missing":
                        missing += 1
                        if is_entry_missing(missing, metadata.write_quorum, metadata.ack_quorum):
                            return None
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            logger.warning(
                "ledger recovery read undecided ledger_id=%d entry_id=%d missing=%d attempt=%d",
                self.ledger_id,
                entry_id,
                missing,
                attempt,
            )
            await asyncio.sleep(RECOVERY_READ_BACKOFF_S * (attempt + 1))
        raise LedgerRecoveryError(
            f"ledger_id={self.ledger_id} entry_id={entry_id} neither readable nor "
            f"known missing on {replicas}",
            ledger_id=self.ledger_id,
        )
