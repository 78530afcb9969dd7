"""Reading one entry from its replicas, with speculative reads and digest checks.

The replicas of entry e are its write set in the segment holding e. The read goes to the
first replica; if no answer came within `speculative_read_timeout_ms`, the next replica
is asked too (a speculative read), and so on; an error or a bad digest moves on to the
next replica at once. The first entry whose CRC32C verifies and whose ids match wins;
the other requests are abandoned. Every replica failing gives EntryNotFoundError when
they all said "no such entry", ReadFailedError otherwise.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Sequence

from blobstore.ledger import metrics
from blobstore.ledger.bookie_client import (
    BookieClientPool,
    BookieError,
    BookieUnavailableError,
    NoSuchEntryError,
    NoSuchLedgerOnBookieError,
)
from blobstore.ledger.distribution_schedule import write_set_bookies
from blobstore.ledger.errors import EntryNotFoundError, ReadFailedError
from blobstore.ledger.ledger_metadata import LedgerMetadata
from blobstore.wire import protocol

logger = logging.getLogger(__name__)


def replica_order(
    metadata: LedgerMetadata,
    entry_id: int,
    pool: BookieClientPool,
    order: str,
    rng: random.Random,
) -> list[str]:
    """Replicas of the entry, in the order to ask them (unreachable bookies last)."""
    replicas = write_set_bookies(entry_id, metadata.ensemble_for(entry_id), metadata.write_quorum)
    if order == "random":
        rng.shuffle(replicas)
    reachable = [b for b in replicas if not pool.is_unreachable(b)]
    return reachable + [b for b in replicas if pool.is_unreachable(b)]


def _read_over() -> None:
    """What a finished read's `launch` and `speculate` become (see `PendingReadOp.run`)."""


def _task_outcome(
    task: asyncio.Task[protocol.ReadResponse],
) -> tuple[protocol.ReadResponse | None, BaseException | None]:
    if task.cancelled():
        return None, asyncio.CancelledError()
    error = task.exception()
    return (None, error) if error is not None else (task.result(), None)


class PendingReadOp:
    def __init__(
        self,
        pool: BookieClientPool,
        ledger_id: int,
        entry_id: int,
        replicas: Sequence[str],
        speculative_read_timeout_s: float,
    ) -> None:
        assert replicas, "an entry has at least one replica"
        self.pool = pool
        self.ledger_id = ledger_id
        self.entry_id = entry_id
        self.replicas = list(replicas)
        self.speculative_read_timeout_s = speculative_read_timeout_s

    async def run(self) -> protocol.Entry:
        """The entry, from the first replica that answers with a verified copy.

        Requests are sent without a task each where the connection allows
        (`read_entry_nowait`) and their answers handled in callbacks; the one
        future awaited here is settled by the first good copy or the last failure."""
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        outcome: asyncio.Future[protocol.Entry] = loop.create_future()
        errors: list[BaseException] = []
        in_flight: set[int] = set()  # replica indexes asked and not yet answered
        tasks: list[asyncio.Task[protocol.ReadResponse]] = []
        next_replica = 0
        speculation: asyncio.TimerHandle | None = None

        def answered(
            index: int, response: protocol.ReadResponse | None, error: BaseException | None
        ) -> None:
            if index not in in_flight:
                return
            in_flight.discard(index)
            if outcome.done():
                return
            try:
                entry = self._accept(response, error, self.replicas[index], errors)
            except asyncio.CancelledError:
                outcome.cancel()
                return
            except BaseException as e:  # not a bookie's failure: a bug, not a next replica
                outcome.set_exception(e)
                return
            if entry is not None:
                outcome.set_result(entry)
            elif not in_flight:
                if next_replica < len(self.replicas):
                    launch()
                else:
                    try:
                        self._fail(errors)
                    except (EntryNotFoundError, ReadFailedError) as e:
                        outcome.set_exception(e)

        def speculate() -> None:
            nonlocal speculation
            speculation = None
            if outcome.done() or next_replica >= len(self.replicas):
                return
            metrics.SPECULATIVE_READS.inc()
            logger.debug(
                "speculative read ledger_id=%d entry_id=%d bookie=%s",
                self.ledger_id,
                self.entry_id,
                self.replicas[next_replica],
            )
            launch()

        def launch() -> None:
            nonlocal next_replica, speculation
            index = next_replica
            bookie_id = self.replicas[index]
            next_replica += 1
            if not in_flight:
                # Nothing else in flight: this replica is the read's only hope, so it is
                # tried even while a recent connect failure holds it in backoff.
                self.pool.allow_connect(bookie_id)
            in_flight.add(index)
            if not self.pool.read_entry_nowait(
                bookie_id,
                self.ledger_id,
                self.entry_id,
                lambda response, error: answered(index, response, error),
            ):
                task = asyncio.ensure_future(
                    self.pool.read_entry(bookie_id, self.ledger_id, self.entry_id)
                )
                task.add_done_callback(lambda t: answered(index, *_task_outcome(t)))
                tasks.append(task)
            if speculation is not None:
                speculation.cancel()
                speculation = None
            if next_replica < len(self.replicas):
                speculation = loop.call_later(self.speculative_read_timeout_s, speculate)

        launch()
        try:
            entry = await outcome
        finally:
            in_flight.clear()  # answers still to come are dropped
            if speculation is not None:
                speculation.cancel()
                # The timer holds `speculate`, whose closure holds the timer.
                speculation = None
            for task in tasks:
                task.cancel()
            # `launch` and `speculate` call each other through their closures' cells:
            # reference cycles that would keep this read, its outcome and the entry's
            # payload alive until the cyclic garbage collector ran (every small GET
            # left ~25 such objects to it). Late answers stop at `answered`'s first
            # check and never reach them.
            launch = speculate = _read_over
        metrics.READS_OK.inc()
        metrics.READ_SECONDS.observe(time.monotonic() - started)
        return entry

    def _accept(
        self,
        response: protocol.ReadResponse | None,
        error: BaseException | None,
        bookie_id: str,
        errors: list[BaseException],
    ) -> protocol.Entry | None:
        if error is not None:
            if not isinstance(error, BookieError | BookieUnavailableError):
                raise error
            errors.append(error)
            return None
        assert response is not None
        try:
            entry = protocol.Entry.decode(response.entry)
        except protocol.CorruptEntryError as e:
            metrics.DIGEST_MISMATCHES.inc()
            logger.warning(
                "ledger_digest_mismatch ledger_id=%d entry_id=%d bookie=%s error=%s",
                self.ledger_id,
                self.entry_id,
                bookie_id,
                e,
            )
            errors.append(e)
            return None
        if entry.ledger_id != self.ledger_id or entry.entry_id != self.entry_id:
            metrics.DIGEST_MISMATCHES.inc()
            logger.warning(
                "ledger_entry_mismatch ledger_id=%d entry_id=%d bookie=%s got=%d/%d",
                self.ledger_id,
                self.entry_id,
                bookie_id,
                entry.ledger_id,
                entry.entry_id,
            )
            errors.append(protocol.CorruptEntryError("entry ids do not match the request"))
            return None
        return entry

    def _fail(self, errors: list[BaseException]) -> protocol.Entry:
        if errors and all(
            isinstance(e, NoSuchEntryError | NoSuchLedgerOnBookieError) for e in errors
        ):
            metrics.READS_NOT_FOUND.inc()
            raise EntryNotFoundError(
                f"ledger_id={self.ledger_id} entry_id={self.entry_id} on no replica "
                f"of {self.replicas}",
                ledger_id=self.ledger_id,
            )
        metrics.READS_FAILED.inc()
        raise ReadFailedError(
            f"ledger_id={self.ledger_id} entry_id={self.entry_id} unreadable from "
            f"{self.replicas}: {[str(e) for e in errors]}",
            ledger_id=self.ledger_id,
        )
