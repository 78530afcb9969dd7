"""The per-process pool of open writer ledgers.

A PUT takes one ledger exclusively (one writer per ledger, and the entries of one object
stay consecutive), appends its entries, and gives the ledger back. Many small objects so
share a ledger. A ledger is retired (closed) once it passes `ledger_bytes_max` or
`ledger_age_s_max`, or after any failed append: a failed ledger's tail has an unknown
fate, so nothing more is ever appended to it. An idle ledger whose current ensemble
names a bookie that cannot take writes now (gone from the registry, read-only, draining
or unreachable) is retired before a PUT takes it: that PUT would wait for an ensemble
change that may have no bookie to go to (three bookies, one down), where a new ledger
is placed at once on the bookies left. Retiring closes the ledger; when a plain
close fails it is opened with recovery, which fences and closes it. A process killed with
open ledgers leaves them to the sweeper of any other gateway (`ledger_sweeper.py`).

Every ledger records its writer (this process's gateway id) in the metadata's custom
field `writer`, and `purpose=objects`. Its password is derived from the cluster key and
its id (`blobstore/ledger/passwords.py`); without a cluster key it is the fixed one,
and the pool says so once, at WARNING, when it starts.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from blobstore.ledger import LedgerClient, LedgerHandle
from blobstore.ledger.config import OBJECT_LEDGER_PASSWORD, OBJECT_LEDGER_PURPOSE
from blobstore.ledger.ensemble_placement import BookieInfo
from blobstore.ledger.passwords import LedgerPasswords
from blobstore.objects.config import ObjectStoreConfig
from blobstore.objects.metrics import WRITER_LEDGERS_OPEN, WRITER_LEDGERS_RETIRED

logger = logging.getLogger(__name__)

# The fixed password: every object ledger's without a cluster key, and those written
# before the cluster had one (new ledgers take `LedgerPasswords`).
LEDGER_PASSWORD = OBJECT_LEDGER_PASSWORD
PURPOSE = OBJECT_LEDGER_PURPOSE
CLOSE_TIMEOUT_S = 30.0


class WriterPoolExhaustedError(Exception):
    """No writer ledger became free in time (the gateway answers SlowDown)."""


@dataclass(eq=False, slots=True)
class WriterLedger:
    """An open ledger this process appends to, with what the pool needs to retire it."""

    handle: LedgerHandle
    opened_at_s: float
    bytes_appended: int = 0
    failed: bool = False


def unwritable_bookies(
    ensemble: Sequence[str], candidates: Iterable[BookieInfo], unusable: Iterable[str]
) -> list[str]:
    """The bookies of `ensemble` that cannot take a write now: not registered, read-only,
    or among `unusable` (draining, unreachable from this process)."""
    writable = {c.bookie_id for c in candidates if not c.read_only} - set(unusable)
    return [bookie_id for bookie_id in ensemble if bookie_id not in writable]


class LedgerWriterPool:
    def __init__(
        self,
        client: LedgerClient,
        config: ObjectStoreConfig,
        writer_id: str,
        clock: Callable[[], float] = time.monotonic,
        passwords: LedgerPasswords | None = None,
    ) -> None:
        """`passwords`: the object ledgers' (default: from the cluster key of the
        environment, BLOBSTORE_CLUSTER_KEY_FILE)."""
        self._client = client
        self._config = config
        self._writer_id = writer_id
        self._passwords = LedgerPasswords.from_env() if passwords is None else passwords
        if not self._passwords.derived:
            logger.warning(
                "event=ledger_passwords_fixed: no cluster key (BLOBSTORE_CLUSTER_KEY_FILE), "
                "so every object ledger gets the one fixed password; give the gateways "
                "the cluster key for a password per ledger (docs/security.md)"
            )
        self._clock = clock
        self._idle: list[WriterLedger] = []
        self._busy: set[int] = set()  # ledger ids taken by a caller or being closed
        self._slots = asyncio.Semaphore(config.writer_ledgers_max)
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        self._ager: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._ager = asyncio.create_task(self._retire_aged_loop(), name="writer-pool-ager")

    @property
    def owned_ledger_ids(self) -> set[int]:
        """Ledgers this pool still appends to or is closing (the sweeper leaves them)."""
        return {w.handle.ledger_id for w in self._idle} | self._busy

    async def acquire(self) -> WriterLedger:
        """A ledger for this caller alone; give it back with `release`."""
        if self._closed:
            raise WriterPoolExhaustedError("writer pool is closed")
        try:
            if self._slots.locked():
                # A timeout scope, not wait_for: no task per waiting PUT.
                async with asyncio.timeout(self._config.writer_wait_s_max):
                    await self._slots.acquire()
            else:
                await self._slots.acquire()  # free: taken without waiting (no task per PUT)
        except TimeoutError:
            raise WriterPoolExhaustedError(
                f"no writer ledger free within {self._config.writer_wait_s_max}s"
            ) from None
        try:
            writer = await self._idle_writer()
            if writer is not None:
                self._busy.add(writer.handle.ledger_id)
                return writer
            handle = await self._client.create_ledger(
                ensemble_size=self._config.ensemble_size,
                write_quorum=self._config.write_quorum,
                ack_quorum=self._config.ack_quorum,
                password=self._passwords,
                metadata={"writer": self._writer_id, "purpose": PURPOSE},
                ack_quorum_min=self._config.ack_quorum_min,
            )
            WRITER_LEDGERS_OPEN.inc()
            logger.info(
                "event=writer_ledger_opened ledger_id=%d writer=%s",
                handle.ledger_id,
                self._writer_id,
            )
            self._busy.add(handle.ledger_id)
            return WriterLedger(handle=handle, opened_at_s=self._clock())
        except BaseException:
            self._slots.release()
            raise

    async def _idle_writer(self) -> WriterLedger | None:
        """An idle ledger fit for one more PUT, retiring the worn-out and the stranded."""
        while self._idle:
            writer = self._idle.pop()
            self._busy.add(writer.handle.ledger_id)  # owned while it is looked at
            if self._worn_out(writer):
                self._retire(writer, reason="age")
                continue
            candidates, unusable = await self._client.placement_candidates(refresh=False)
            ensemble = writer.handle.metadata.last_ensemble
            lost = unwritable_bookies(ensemble, candidates, unusable)
            if lost:
                logger.info(
                    "event=writer_ledger_stranded ledger_id=%d bookies=%s: retired, the "
                    "next PUT gets a new ledger",
                    writer.handle.ledger_id,
                    ",".join(lost),
                )
                self._retire(writer, reason="bookie_unwritable")
                continue
            return writer
        return None

    def release(self, writer: WriterLedger) -> None:
        """Give a ledger back; a failed, full or old one is closed in the background."""
        try:
            if writer.failed:
                self._retire(writer, reason="failed")
            elif self._closed or self._worn_out(writer):
                self._retire(writer, reason="full")
            else:
                self._busy.discard(writer.handle.ledger_id)
                self._idle.append(writer)
        finally:
            self._slots.release()

    def retire_idle(self, reason: str) -> None:
        """Close every idle ledger now (e.g. the ZooKeeper session was lost: other
        gateways may fence them as a dead writer's)."""
        while self._idle:
            self._retire(self._idle.pop(), reason=reason)

    async def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Close every idle ledger and wait (bounded) for the closes under way."""
        self._closed = True
        if self._ager is not None:
            self._ager.cancel()
        while self._idle:
            self._retire(self._idle.pop(), reason="shutdown")
        if self._tasks:
            _, pending = await asyncio.wait(list(self._tasks), timeout=timeout_s)
            for task in pending:
                task.cancel()

    # ------------------------------------------------------------------ internals

    def _worn_out(self, writer: WriterLedger) -> bool:
        return (
            writer.bytes_appended >= self._config.ledger_bytes_max
            or self._clock() - writer.opened_at_s >= self._config.ledger_age_s_max
        )

    def _retire(self, writer: WriterLedger, *, reason: str) -> None:
        self._busy.add(writer.handle.ledger_id)
        task = asyncio.create_task(self._close_ledger(writer, reason))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _close_ledger(self, writer: WriterLedger, reason: str) -> None:
        try:
            await self._close_or_recover(writer, reason)
        finally:
            self._busy.discard(writer.handle.ledger_id)

    async def _close_or_recover(self, writer: WriterLedger, reason: str) -> None:
        ledger_id = writer.handle.ledger_id
        WRITER_LEDGERS_OPEN.dec()
        WRITER_LEDGERS_RETIRED.labels(reason=reason).inc()
        try:
            await asyncio.wait_for(writer.handle.close(), CLOSE_TIMEOUT_S)
            logger.info(
                "event=writer_ledger_closed ledger_id=%d reason=%s bytes=%d",
                ledger_id,
                reason,
                writer.bytes_appended,
            )
            return
        except Exception as e:  # noqa: BLE001 - fall back to recovery below
            logger.warning(
                "event=writer_ledger_close_failed ledger_id=%d reason=%s error=%r",
                ledger_id,
                reason,
                e,
            )
        try:
            await asyncio.wait_for(
                self._client.open_ledger(ledger_id, self._passwords, recovery=True),
                CLOSE_TIMEOUT_S,
            )
            logger.info("event=writer_ledger_recovered ledger_id=%d", ledger_id)
        except Exception as e:  # noqa: BLE001 - the sweeper of a later run closes it
            logger.error("event=writer_ledger_recovery_failed ledger_id=%d error=%r", ledger_id, e)

    async def _retire_aged_loop(self) -> None:
        interval_s = max(0.05, self._config.ledger_age_s_max / 4)
        while True:
            await asyncio.sleep(interval_s)
            keep = []
            for writer in self._idle:
                if self._worn_out(writer):
                    self._retire(writer, reason="age")
                else:
                    keep.append(writer)
            self._idle[:] = keep
