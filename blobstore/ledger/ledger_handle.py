"""An open ledger: appends (for its one writer), reads, LAC, close.

Write path
----------
`append` gives the next entry id, builds the entry (its LAC is the handle's LAC at that
moment, so every add carries the LAC to the bookies), and sends it to its write set:
ensemble[(e + w) % E] for w < WQ. Each bookie's ack is recorded by ensemble slot; the
head of the pending queue completes once AQ slots acked, so completions (and the LAC)
advance strictly in entry order.

Ensemble change (a write-set bookie failed: unavailable, timed out, read-only, ...):

1. Slot i's bookie B fails for entry 12 while entries 10..14 are pending (LAC 9).
2. B is marked failed: its acks on pending entries are dropped and it is sent nothing
   more, so no entry >= 10 can complete with B's ack.
3. A replacement R (writable, not in the ensemble, not failed) is chosen and a segment
   (10 -> ensemble with R at slot i) is written by compare-and-set on the metadata. If
   entries completed meanwhile (LAC 11), the segment starts at the then LAC + 1 = 12.
4. Pending entries whose write set includes slot i are resent to R; they complete once
   AQ slots of the new ensemble acked.
A CAS conflict means someone else changed the metadata: if it is IN_RECOVERY or CLOSED,
the ledger was fenced and this writer stops (its pending adds: outcome unknown).

Adds that fail because the ledger is fenced, or because no replacement bookie can be
found in time, fail with AddOutcomeUnknownError (LedgerFencedError when fenced): the
entry may or may not survive the ledger's recovery.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import time
from collections import deque
from collections.abc import AsyncIterator, Sequence
from typing import Protocol

from blobstore.ledger import metrics
from blobstore.ledger.bookie_client import (
    BadRequestError,
    BookieClientPool,
    BookieError,
    BookieUnavailableError,
    FencedError,
    LongPollTimeoutError,
    PoolClosedError,
    TooLargeError,
    UnauthorizedError,
)
from blobstore.ledger.config import LedgerConfig
from blobstore.ledger.distribution_schedule import AckSet, write_set
from blobstore.ledger.ensemble_placement import BookieInfo, choose_replacement
from blobstore.ledger.errors import (
    AddOutcomeUnknownError,
    BadLedgerConfigError,
    EntryNotFoundError,
    LedgerClosedError,
    LedgerError,
    LedgerFencedError,
    LedgerRecoveryError,
    LedgerUnauthorizedError,
    MetadataVersionConflictError,
    NotEnoughBookiesError,
    PendingAddsFullError,
    ReadFailedError,
)
from blobstore.ledger.ledger_manager import LedgerManager
from blobstore.ledger.ledger_metadata import (
    STATE_CLOSED,
    STATE_IN_RECOVERY,
    STATE_OPEN,
    LedgerMetadata,
    Versioned,
)
from blobstore.ledger.pending_add_op import PendingAddOp
from blobstore.ledger.pending_read_op import PendingReadOp, replica_order
from blobstore.ledger.read_repair import ReadRepairQueue
from blobstore.wire import protocol

logger = logging.getLogger(__name__)

LONG_POLL_IDLE_S = 0.1
WRITE_LAC_TIMEOUT_S = 2.0


class ClientParts(Protocol):
    """What a handle, and the recovery that opens one, use of the client that made them
    (`LedgerClient`): its settings, its bookie connections, its metadata manager and
    the bookies placement may choose from, and where reads note bad copies."""

    @property
    def config(self) -> LedgerConfig: ...
    @property
    def pool(self) -> BookieClientPool: ...
    @property
    def manager(self) -> LedgerManager: ...
    @property
    def read_repair(self) -> ReadRepairQueue: ...
    async def placement_candidates(
        self, *, refresh: bool = True
    ) -> tuple[list[BookieInfo], set[str]]: ...


class LedgerHandle:
    def __init__(
        self,
        client: ClientParts,
        versioned: Versioned[LedgerMetadata],
        password: bytes,
        *,
        writable: bool,
        recovery: bool = False,
        last_add_confirmed: int | None = None,
        length: int | None = None,
    ) -> None:
        metadata = versioned.value
        self.client = client
        self.ledger_id = metadata.ledger_id
        self._versioned = versioned
        self.master_key = protocol.master_key(password)
        self.writable = writable
        self._recovery = recovery
        if last_add_confirmed is None:
            last_add_confirmed = metadata.last_entry_id if metadata.closed else protocol.NO_ENTRY
        if length is None:
            length = metadata.length if metadata.closed else 0
        self.last_add_confirmed = last_add_confirmed
        self.length = length
        self._last_add_pushed = last_add_confirmed
        self._pushed_length = length
        self._pending: deque[PendingAddOp] = deque()
        self._pending_bytes = 0
        self._failed_slots: dict[int, str] = {}  # slot -> bookie being replaced
        # bookie id -> when it failed; not chosen as a replacement while quarantined, so
        # a flapping bookie is not picked again at once, but a restarted one is later.
        self._bad_bookies: dict[str, float] = {}
        self._ensemble_change_task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._capacity = asyncio.Event()
        self._capacity.set()
        self._error: LedgerError | None = None
        self._closing = False
        self._closed = metadata.closed or not writable
        self._rng = random.Random()
        config = client.config
        self._pending_adds_max = config.pending_adds_max
        self._pending_bytes_max = config.pending_add_bytes_max

    # ------------------------------------------------------------------ properties

    @property
    def metadata(self) -> LedgerMetadata:
        return self._versioned.value

    @property
    def metadata_version(self) -> int:
        return self._versioned.version

    @property
    def is_closed(self) -> bool:
        return self.metadata.closed

    @property
    def pending_add_count(self) -> int:
        return len(self._pending)

    # ------------------------------------------------------------------ write path

    def _check_writable(self) -> None:
        if self._error is not None:
            raise self._error
        if not self.writable:
            raise LedgerClosedError(
                f"ledger_id={self.ledger_id} is open read-only", ledger_id=self.ledger_id
            )
        if self._closed or self._closing:
            raise LedgerClosedError(
                f"ledger_id={self.ledger_id} is closed", ledger_id=self.ledger_id
            )

    def append(
        self, payload: bytes | memoryview, waiter: asyncio.Future[int] | None = None
    ) -> asyncio.Future[int]:
        """Send the next entry; the future resolves with its id once AQ bookies have it.

        Futures resolve in entry order. Raises PendingAddsFullError (nothing sent) when the
        handle's bound of adds in flight is reached. `waiter`, when given, is resolved in
        the same step as the returned future; the caller may await or cancel it freely
        (the returned future must not be cancelled: see PendingAddOp).
        """
        return self.append_pieces((payload,), waiter)

    def append_pieces(
        self,
        pieces: Sequence[bytes | bytearray | memoryview],
        waiter: asyncio.Future[int] | None = None,
    ) -> asyncio.Future[int]:
        """`append` of one entry whose payload is `pieces` end to end, sent as they are,
        never joined. A piece that is neither bytes nor a view of bytes is copied first:
        the entry is resent unchanged after an ensemble change, so its bytes must not
        change under it."""
        self._check_writable()
        frozen = tuple(map(_immutable, pieces))
        size = sum(len(piece) for piece in frozen)
        if size > protocol.ENTRY_PAYLOAD_BYTES_MAX:
            raise BadLedgerConfigError(
                f"entry of {size} bytes exceeds {protocol.ENTRY_PAYLOAD_BYTES_MAX}",
                ledger_id=self.ledger_id,
            )
        if self._is_full():
            self._capacity.clear()
            raise PendingAddsFullError(
                f"ledger_id={self.ledger_id} has {len(self._pending)} adds "
                f"({self._pending_bytes} bytes) in flight",
                ledger_id=self.ledger_id,
            )
        entry_id = self._last_add_pushed + 1
        ledger_length = self._pushed_length + size
        entry = protocol.encode_entry(
            self.ledger_id, entry_id, self.last_add_confirmed, ledger_length, frozen
        )
        return self._push(entry_id, entry, size, ledger_length, waiter)

    def append_entry_bytes(self, entry: protocol.Entry, raw: bytes) -> asyncio.Future[int]:
        """Recovery: re-add an entry read from a bookie, byte for byte."""
        assert self._recovery, "only a recovery re-adds stored entries"
        self._check_writable()
        assert entry.entry_id == self._last_add_pushed + 1, (entry.entry_id, self._last_add_pushed)
        return self._push(entry.entry_id, (raw,), len(entry.payload), entry.ledger_length)

    def _push(
        self,
        entry_id: int,
        entry: protocol.EntryParts,
        payload_bytes: int,
        ledger_length: int,
        waiter: asyncio.Future[int] | None = None,
    ) -> asyncio.Future[int]:
        metadata = self.metadata
        assert entry_id >= metadata.ensembles[-1][0], (entry_id, metadata.ensembles[-1][0])
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        slots = write_set(entry_id, metadata.ensemble_size, metadata.write_quorum)
        op = PendingAddOp(
            entry_id,
            entry,
            payload_bytes,
            ledger_length,
            AckSet(slots, metadata.ack_quorum),
            future,
            waiter,
        )
        self._last_add_pushed = entry_id
        self._pushed_length = ledger_length
        self._pending.append(op)
        self._pending_bytes += payload_bytes
        metrics.PENDING_ADDS.add(1)
        ensemble = metadata.last_ensemble
        for slot in slots:
            if slot not in self._failed_slots:
                self._send(op, slot, ensemble[slot])
        return future

    async def wait_for_capacity(self) -> None:
        """Return once `append` would accept another entry (or the handle failed)."""
        while self._is_full():
            self._capacity.clear()
            await self._capacity.wait()

    def _is_full(self) -> bool:
        # The byte bound may be passed by one entry: refusing only once it is reached
        # keeps `wait_for_capacity` and `append` in agreement for any entry size.
        return bool(self._pending) and (
            len(self._pending) >= self._pending_adds_max
            or self._pending_bytes >= self._pending_bytes_max
        )

    async def add_entry(self, payload: bytes) -> int:
        """Append and wait for the ack quorum (waits for room instead of refusing)."""
        self._check_writable()
        await self.wait_for_capacity()
        return await self.append(payload)  # not full: nothing ran since the wait

    def _send(self, op: PendingAddOp, slot: int, bookie_id: str) -> None:
        # The fast path when the bookie's connection is up; otherwise a task that may
        # connect (or wait for an in-flight slot) first.
        if self.client.pool.add_entry_nowait(
            bookie_id,
            self.ledger_id,
            op.entry_id,
            self.master_key,
            op.entry,
            functools.partial(self._add_outcome, op, slot, bookie_id),
            recovery=self._recovery,
        ):
            return
        task = asyncio.create_task(self._send_to_bookie(op, slot, bookie_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send_to_bookie(self, op: PendingAddOp, slot: int, bookie_id: str) -> None:
        try:
            await self.client.pool.add_entry(
                bookie_id,
                self.ledger_id,
                op.entry_id,
                self.master_key,
                op.entry,
                recovery=self._recovery,
            )
        except (BookieError, BookieUnavailableError, PoolClosedError) as e:
            self._add_outcome(op, slot, bookie_id, e)
        else:
            self._add_outcome(op, slot, bookie_id, None)

    def _add_outcome(
        self, op: PendingAddOp, slot: int, bookie_id: str, error: BaseException | None
    ) -> None:
        """One bookie's answer to one add (None: stored)."""
        if error is None:
            self._add_acked(op, slot, bookie_id)
            return
        if isinstance(error, FencedError):
            self._fail(
                LedgerFencedError(
                    f"ledger_id={self.ledger_id} fenced on bookie={bookie_id}",
                    ledger_id=self.ledger_id,
                )
            )
        elif isinstance(error, UnauthorizedError):
            self._fail(
                LedgerUnauthorizedError(
                    f"ledger_id={self.ledger_id} bookie={bookie_id} rejected the master key",
                    ledger_id=self.ledger_id,
                )
            )
        elif isinstance(error, PoolClosedError):
            self._fail(
                AddOutcomeUnknownError(
                    f"ledger_id={self.ledger_id} client closed with adds in flight",
                    ledger_id=self.ledger_id,
                )
            )
        elif isinstance(error, BadRequestError | TooLargeError):
            # Every bookie would refuse it the same way: replacing this one cannot help.
            self._fail(
                AddOutcomeUnknownError(
                    f"ledger_id={self.ledger_id} entry_id={op.entry_id} refused: {error}",
                    ledger_id=self.ledger_id,
                )
            )
        elif isinstance(error, BookieError | BookieUnavailableError):
            self._bookie_failed(op, slot, bookie_id, error)
        else:
            raise error

    def _add_acked(self, op: PendingAddOp, slot: int, bookie_id: str) -> None:
        if op.done or self._error is not None:
            return
        if self.metadata.ensemble_for(op.entry_id)[slot] != bookie_id:
            return  # a late ack from a bookie that was replaced: the entry was resent
        if self._failed_slots.get(slot) == bookie_id:
            return  # being replaced: this ack will not count in the new segment
        op.ack_set.ack(slot)
        self._complete_in_order()

    def _complete_in_order(self) -> None:
        completed = completed_bytes = 0
        now = 0.0
        while self._pending and self._pending[0].ack_set.complete:
            op = self._pending.popleft()
            assert op.entry_id == self.last_add_confirmed + 1, (
                op.entry_id,
                self.last_add_confirmed,
            )
            self.last_add_confirmed = op.entry_id
            self.length = op.ledger_length
            self._pending_bytes -= op.payload_bytes
            if not completed:
                now = time.monotonic()
            completed += 1
            completed_bytes += op.payload_bytes
            metrics.ADD_SECONDS.observe(now - op.started)
            op.succeed()
        if completed:  # one update for all the adds one ack completed
            metrics.PENDING_ADDS.add(-completed)
            metrics.ADDS_OK.inc(completed)
            metrics.ADD_BYTES.inc(completed_bytes)
        assert self.last_add_confirmed <= self._last_add_pushed
        if not self._is_full():
            self._capacity.set()

    def _fail(self, error: LedgerError) -> None:
        """Stop writing: every pending add gets `error` (its outcome is unknown)."""
        if self._error is None:
            self._error = error
            logger.warning(
                "ledger_writer_failed ledger_id=%d lac=%d pending=%d error=%s",
                self.ledger_id,
                self.last_add_confirmed,
                len(self._pending),
                error,
            )
        pending, self._pending = self._pending, deque()
        self._pending_bytes = 0
        for op in pending:
            metrics.PENDING_ADDS.add(-1)
            metrics.ADDS_UNKNOWN.inc()
            op.fail(self._error)
        self._capacity.set()

    # ------------------------------------------------------------------ ensemble change

    def _bookie_failed(
        self, op: PendingAddOp, slot: int, bookie_id: str, error: BaseException
    ) -> None:
        if self._error is not None or op.done:
            return
        current = self.metadata.last_ensemble[slot]
        if current != bookie_id:
            # Already replaced; resend there unless a change for that slot is under way.
            if slot not in self._failed_slots and not op.ack_set.has(slot):
                self._send(op, slot, current)
            return
        self._bad_bookies[bookie_id] = time.monotonic()
        if slot in self._failed_slots:
            return
        logger.warning(
            "ledger_bookie_failed ledger_id=%d entry_id=%d bookie=%s slot=%d error=%s",
            self.ledger_id,
            op.entry_id,
            bookie_id,
            slot,
            error,
        )
        self._failed_slots[slot] = bookie_id
        for pending in self._pending:
            if slot in pending.ack_set.write_set:
                pending.ack_set.unset(slot)
        if self._ensemble_change_task is None or self._ensemble_change_task.done():
            self._ensemble_change_task = asyncio.create_task(self._change_ensemble())

    async def _change_ensemble(self) -> None:
        config = self.client.config
        deadline = time.monotonic() + config.ensemble_change_timeout_s
        while self._failed_slots and self._error is None:
            failed = dict(self._failed_slots)
            try:
                await self._change_ensemble_once(failed)
            except (
                NotEnoughBookiesError,
                OSError,
                TimeoutError,
                MetadataVersionConflictError,
            ) as e:
                # kazoo's connection errors are not OSErrors: they are caught below.
                if time.monotonic() >= deadline:
                    error = AddOutcomeUnknownError(
                        f"ledger_id={self.ledger_id} no ensemble change within "
                        f"{config.ensemble_change_timeout_s}s: {e}",
                        ledger_id=self.ledger_id,
                    )
                    error.__cause__ = e  # the gateway tells "no writable bookies" apart
                    self._fail(error)
                    return
                await asyncio.sleep(config.ensemble_change_backoff_s)
            except LedgerError as e:
                self._fail(e)
                return
            except Exception as e:  # noqa: BLE001 - ZooKeeper errors: retry to the deadline
                if time.monotonic() >= deadline:
                    self._fail(
                        AddOutcomeUnknownError(
                            f"ledger_id={self.ledger_id} ensemble change failed: {e!r}",
                            ledger_id=self.ledger_id,
                        )
                    )
                    return
                logger.warning(
                    "ledger ensemble change retry ledger_id=%d error=%r", self.ledger_id, e
                )
                await asyncio.sleep(config.ensemble_change_backoff_s)

    def _quarantined_bookies(self) -> set[str]:
        now = time.monotonic()
        quarantine_s = self.client.config.bad_bookie_quarantine_s
        for bookie_id, failed_at in list(self._bad_bookies.items()):
            if now - failed_at >= quarantine_s:
                del self._bad_bookies[bookie_id]
        return set(self._bad_bookies)

    async def _change_ensemble_once(self, failed: dict[int, str]) -> None:
        client = self.client
        metadata = self.metadata
        candidates, unusable = await client.placement_candidates()
        ensemble = list(metadata.last_ensemble)
        for slot in sorted(failed):
            ensemble[slot] = choose_replacement(
                candidates,
                ensemble,
                slot,
                metadata.write_quorum,
                exclude=self._quarantined_bookies() | unusable,
                rng=self._rng,
            )
        first_entry_id = self.last_add_confirmed + 1
        proposed = metadata.with_ensemble_change(first_entry_id, tuple(ensemble))
        if self._recovery:
            # As BookKeeper's recovery handle: the change stays in this handle until the
            # close writes it with the ledger's end. Written now, it would send every
            # other reader of the IN_RECOVERY ledger (a concurrent recovery among them)
            # to the replacement bookie for entries this recovery has not re-added yet,
            # and its "no such entry" would end that recovery's scan early: a ledger
            # closed below acknowledged entries.
            versioned = Versioned(proposed, self._versioned.version)
        else:
            versioned = await self._write_ensemble_change(proposed, first_entry_id, ensemble)
        if self._error is not None:
            return
        self._versioned = versioned
        replaced = {slot: ensemble[slot] for slot in failed}
        for slot, old in failed.items():
            if self._failed_slots.get(slot) == old:
                del self._failed_slots[slot]
        metrics.ENSEMBLE_CHANGES.inc(len(replaced))
        logger.warning(
            "ledger_ensemble_change ledger_id=%d first_entry_id=%d replaced=%s ensemble=%s",
            self.ledger_id,
            first_entry_id,
            {failed[s]: b for s, b in replaced.items()},
            list(ensemble),
        )
        new_ensemble = versioned.value.last_ensemble
        for op in list(self._pending):
            for slot in op.ack_set.write_set:
                if slot in replaced and slot not in self._failed_slots and not op.ack_set.has(slot):
                    self._send(op, slot, new_ensemble[slot])
        self._complete_in_order()

    async def _write_ensemble_change(
        self, proposed: LedgerMetadata, first_entry_id: int, ensemble: list[str]
    ) -> Versioned[LedgerMetadata]:
        """Write a writer's ensemble change (CAS, retried while only unrelated fields
        changed); fenced when the ledger left OPEN or another client changed ensembles."""
        client = self.client
        metadata = self.metadata
        versioned = self._versioned
        for _ in range(client.config.metadata_cas_retries_max):
            try:
                return await client.manager.write(proposed, versioned.version)
            except MetadataVersionConflictError:
                current = await client.manager.read(self.ledger_id)
                if current.value.state != STATE_OPEN:
                    raise LedgerFencedError(
                        f"ledger_id={self.ledger_id} became {current.value.state} "
                        "during an ensemble change",
                        ledger_id=self.ledger_id,
                    ) from None
                if current.value == proposed:
                    return current  # our own write, its answer was lost
                if current.value.ensembles != metadata.ensembles:
                    raise LedgerFencedError(
                        f"ledger_id={self.ledger_id} ensembles changed by another client",
                        ledger_id=self.ledger_id,
                    ) from None
                versioned = current
                proposed = current.value.with_ensemble_change(first_entry_id, tuple(ensemble))
        raise MetadataVersionConflictError(
            f"ledger_id={self.ledger_id} ensemble change lost {client.config.metadata_cas_retries_max} races",
            ledger_id=self.ledger_id,
        )

    # ------------------------------------------------------------------ close

    async def close(self) -> Versioned[LedgerMetadata]:
        """Close at the last acknowledged entry (CAS); readers' handles just stop."""
        if self._closed and not self._closing:
            return self._versioned
        if not self.writable:
            self._closed = True
            return self._versioned
        self._closing = True
        try:
            versioned = await self._close_writer()
        except LedgerFencedError:
            self._closed = True
            raise
        finally:
            self._closing = False
        self._closed = True
        return versioned

    async def _close_writer(self) -> Versioned[LedgerMetadata]:
        await self._drain_for_close()
        versioned, closed_here = await self._write_close()
        self._versioned = versioned
        if not closed_here:
            return versioned  # closed by a concurrent recovery
        logger.info(
            "ledger_closed ledger_id=%d last_entry_id=%d length=%d",
            self.ledger_id,
            self.last_add_confirmed,
            self.length,
        )
        if self.last_add_confirmed >= 0 and not self._recovery:
            await self._write_lac_best_effort()
        return versioned

    async def _drain_for_close(self) -> None:
        """Wait for the adds in flight (their outcome is unknown past the deadline) and
        the ensemble change; raise if the ledger must not be closed at its LAC."""
        config = self.client.config
        drain_timeout_s = config.ensemble_change_timeout_s + 3 * config.bookie_request_timeout_s
        pending = [op.future for op in self._pending]
        if pending:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait(pending, timeout=drain_timeout_s)
        if self._pending:
            self._fail(
                AddOutcomeUnknownError(
                    f"ledger_id={self.ledger_id} adds still pending at close",
                    ledger_id=self.ledger_id,
                )
            )
        task = self._ensemble_change_task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if isinstance(self._error, LedgerFencedError):
            raise self._error
        if self._recovery and self._error is not None:
            # Closing below the recovered entries could drop acknowledged ones.
            raise LedgerRecoveryError(
                f"ledger_id={self.ledger_id} recovery re-adds failed: {self._error}",
                ledger_id=self.ledger_id,
            )

    async def _write_close(self) -> tuple[Versioned[LedgerMetadata], bool]:
        """Write the metadata closed at the LAC (CAS, retried while only unrelated
        fields changed): (the closed metadata, whether this write closed it)."""
        client = self.client
        retries_max = client.config.metadata_cas_retries_max
        versioned = self._versioned
        proposed = versioned.value.closed_at(self.last_add_confirmed, self.length)
        for _ in range(retries_max):
            try:
                return await client.manager.write(proposed, versioned.version), True
            except MetadataVersionConflictError:
                pass  # decided below, on the metadata as it is now
            current = await client.manager.read(self.ledger_id)
            if self._closed_by_another(current.value, proposed, versioned.value):
                return current, False
            versioned = current
            proposed = current.value.closed_at(self.last_add_confirmed, self.length)
        raise MetadataVersionConflictError(
            f"ledger_id={self.ledger_id} close lost {retries_max} races",
            ledger_id=self.ledger_id,
        )

    def _closed_by_another(
        self, current: LedgerMetadata, proposed: LedgerMetadata, written: LedgerMetadata
    ) -> bool:
        """After a lost close race, from the metadata now (`current`), the close this
        writer proposed, and the version it wrote against: True when `current` is the
        close to keep (a concurrent recovery's, or this writer's own whose answer was
        lost), False when the close is to be retried on `current`; raises when the
        ledger is no longer this writer's to close."""
        if current.state == STATE_CLOSED:
            if self._recovery or current == proposed:
                return True
            raise LedgerFencedError(
                f"ledger_id={self.ledger_id} was closed by another client at "
                f"last_entry_id={current.last_entry_id}",
                ledger_id=self.ledger_id,
            )
        expected_state = STATE_IN_RECOVERY if self._recovery else STATE_OPEN
        if current.state != expected_state:
            raise LedgerFencedError(
                f"ledger_id={self.ledger_id} is {current.state}", ledger_id=self.ledger_id
            )
        if self._recovery:
            # Still in recovery, yet changed: this recovery starts over on it.
            raise MetadataVersionConflictError(
                f"ledger_id={self.ledger_id} changed during its recovery",
                ledger_id=self.ledger_id,
            )
        if current.ensembles != written.ensembles:
            raise MetadataVersionConflictError(
                f"ledger_id={self.ledger_id} ensembles changed under close",
                ledger_id=self.ledger_id,
            )
        return False

    async def _write_lac_best_effort(self) -> None:
        """Tell the last ensemble the final LAC so tailing readers see the last entry."""
        results = await asyncio.gather(
            *(
                self.client.pool.write_lac(
                    bookie_id,
                    self.ledger_id,
                    self.master_key,
                    self.last_add_confirmed,
                    timeout_s=WRITE_LAC_TIMEOUT_S,
                )
                for bookie_id in self.metadata.last_ensemble
            ),
            return_exceptions=True,
        )
        for result in results:
            if isinstance(result, BaseException) and not isinstance(
                result, BookieError | BookieUnavailableError
            ):
                raise result

    # ------------------------------------------------------------------ read path

    async def _refresh_metadata(self) -> LedgerMetadata:
        if not self.writable and not self.metadata.closed:
            self._versioned = await self.client.manager.read(self.ledger_id)
            if self.metadata.closed:
                self.last_add_confirmed = max(self.last_add_confirmed, self.metadata.last_entry_id)
        return self.metadata

    async def read_entry_record(self, entry_id: int) -> protocol.Entry:
        """One entry (verified), from any replica; no LAC check."""
        config = self.client.config
        for attempt in range(2):
            metadata = self.metadata
            if metadata.closed and entry_id > metadata.last_entry_id:
                raise EntryNotFoundError(
                    f"ledger_id={self.ledger_id} entry_id={entry_id} is beyond the last entry "
                    f"{metadata.last_entry_id}",
                    ledger_id=self.ledger_id,
                )
            replicas = replica_order(
                metadata, entry_id, self.client.pool, config.read_replica_order, self._rng
            )
            try:
                return await PendingReadOp(
                    self.client.pool,
                    self.ledger_id,
                    entry_id,
                    replicas,
                    config.speculative_read_timeout_ms / 1000,
                    self.client.read_repair.suspect,
                    report_missing=metadata.closed,
                ).run()
            except (EntryNotFoundError, ReadFailedError):
                # A reader's metadata may predate an ensemble change: look again once.
                if attempt or self.writable or metadata.closed:
                    raise
                before = metadata.ensembles
                if (await self._refresh_metadata()).ensembles == before:
                    raise
        raise AssertionError("unreachable")

    def _check_range(self, first: int, last: int) -> None:
        if first < 0 or last < first:
            raise EntryNotFoundError(
                f"ledger_id={self.ledger_id} bad entry range {first}..{last}",
                ledger_id=self.ledger_id,
            )

    async def _ensure_confirmed(self, last: int) -> None:
        if last <= self.last_add_confirmed:
            return
        if not self.writable:
            await self.read_last_add_confirmed()
        if last > self.last_add_confirmed:
            raise EntryNotFoundError(
                f"ledger_id={self.ledger_id} entry {last} is beyond the LAC "
                f"{self.last_add_confirmed}",
                ledger_id=self.ledger_id,
            )

    async def read_entries(self, first: int, last: int) -> list[bytes | memoryview]:
        """Payloads of entries first..last (inclusive), all <= LAC."""
        self._check_range(first, last)
        await self._ensure_confirmed(last)
        return [
            payload async for payload in self._iter(first, last, self.client.config.read_window)
        ]

    async def read_unconfirmed_entries(self, first: int, last: int) -> list[bytes | memoryview]:
        """Like read_entries, but entries beyond the LAC may be read (if they exist)."""
        self._check_range(first, last)
        if first == last:  # no window to keep: no task, no generator
            return [(await self.read_entry_record(first)).payload]
        return [
            payload async for payload in self._iter(first, last, self.client.config.read_window)
        ]

    def iter_entries(
        self, first: int, last: int, *, window: int = 8
    ) -> AsyncIterator[bytes | memoryview]:
        """Payloads first..last (<= LAC) in order, with up to `window` reads in flight."""
        self._check_range(first, last)
        if window < 1:
            raise BadLedgerConfigError(f"window must be >= 1, got {window}")

        async def confirmed() -> AsyncIterator[bytes | memoryview]:
            await self._ensure_confirmed(last)
            async for payload in self._iter(first, last, window):
                yield payload

        return confirmed()

    async def _iter(self, first: int, last: int, window: int) -> AsyncIterator[bytes | memoryview]:
        in_flight: deque[asyncio.Task[protocol.Entry]] = deque()
        next_entry = first
        try:
            while next_entry <= last or in_flight:
                while next_entry <= last and len(in_flight) < window:
                    in_flight.append(asyncio.create_task(self.read_entry_record(next_entry)))
                    next_entry += 1
                entry = await in_flight.popleft()
                yield entry.payload
        finally:
            for task in in_flight:
                task.cancel()
            if in_flight:
                await asyncio.gather(*in_flight, return_exceptions=True)

    async def read_last_add_confirmed(self) -> int:
        """The LAC as the bookies of the last ensemble know it (max of their answers)."""
        if self.writable:
            return self.last_add_confirmed
        metadata = await self._refresh_metadata()
        if metadata.closed:
            return self.last_add_confirmed
        results = await asyncio.gather(
            *(self.client.pool.read_lac(b, self.ledger_id) for b in metadata.last_ensemble),
            return_exceptions=True,
        )
        answers = [r for r in results if isinstance(r, int)]
        for result in results:
            if isinstance(result, BaseException) and not isinstance(
                result, BookieError | BookieUnavailableError
            ):
                raise result
        if not answers and all(not isinstance(r, BookieError) for r in results):
            raise ReadFailedError(
                f"ledger_id={self.ledger_id} no bookie of {list(metadata.last_ensemble)} "
                "answered READ_LAC",
                ledger_id=self.ledger_id,
            )
        # Entries before the last segment were all acknowledged when it was recorded.
        candidate = max([*answers, metadata.ensembles[-1][0] - 1, protocol.NO_ENTRY])
        if candidate > self.last_add_confirmed:
            self.last_add_confirmed = candidate
        return self.last_add_confirmed

    async def wait_for_lac(self, previous_lac: int, timeout_s: float) -> int:
        """Long poll: return once the LAC passes `previous_lac` or `timeout_s` passed."""
        deadline = time.monotonic() + max(0.0, timeout_s)
        while True:
            if self.last_add_confirmed > previous_lac or self.writable:
                return self.last_add_confirmed
            metadata = await self._refresh_metadata()
            if metadata.closed:
                return self.last_add_confirmed
            remaining_s = deadline - time.monotonic()
            if remaining_s <= 0:
                return self.last_add_confirmed
            poll_ms = int(min(remaining_s * 1000, protocol.LONG_POLL_TIMEOUT_MS_MAX))
            lac = await self._long_poll(metadata, previous_lac, poll_ms)
            if lac > self.last_add_confirmed:
                self.last_add_confirmed = lac
            if self.last_add_confirmed <= previous_lac and deadline - time.monotonic() > 0:
                await asyncio.sleep(min(LONG_POLL_IDLE_S, max(0.0, deadline - time.monotonic())))

    async def _long_poll(self, metadata: LedgerMetadata, previous_lac: int, poll_ms: int) -> int:
        async def poll(bookie_id: str) -> int:
            try:
                response = await self.client.pool.read_entry(
                    bookie_id,
                    self.ledger_id,
                    protocol.LAST_ENTRY,
                    long_poll=(previous_lac, poll_ms),
                )
            except LongPollTimeoutError:
                return protocol.NO_ENTRY
            except BookieError as e:
                return (
                    e.response.last_add_confirmed if e.response is not None else protocol.NO_ENTRY
                )
            except BookieUnavailableError:
                return protocol.NO_ENTRY
            return response.last_add_confirmed

        tasks = [asyncio.create_task(poll(b)) for b in metadata.last_ensemble]
        best = protocol.NO_ENTRY
        try:
            for next_done in asyncio.as_completed(tasks):
                best = max(best, await next_done)
                if best > previous_lac:
                    break
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return best

    def __repr__(self) -> str:
        return (
            f"LedgerHandle(ledger_id={self.ledger_id}, state={self.metadata.state}, "
            f"lac={self.last_add_confirmed}, writable={self.writable})"
        )


def _immutable(piece: bytes | bytearray | memoryview) -> bytes | memoryview:
    """`piece` itself when its bytes cannot change (bytes, or a view of bytes), else a
    copy."""
    if isinstance(piece, bytes) or (isinstance(piece, memoryview) and isinstance(piece.obj, bytes)):
        return piece
    return bytes(piece)
