"""Reading one entry from its replicas, with speculative reads and digest checks.

The replicas of entry e are its write set in the segment holding e. The read goes to the
first replica; if no answer came within `speculative_read_timeout_ms`, the next replica
is asked too (a speculative read), and so on; an error or a bad digest moves on to the
next replica at once. The first entry whose CRC32C verifies and whose ids match wins;
the other requests are abandoned. Every replica failing gives EntryNotFoundError when
they all said "no such entry", ReadFailedError otherwise.

Read-repair: when a good copy was found after a replica answered with a bad copy, or
with none (for a closed ledger: `report_missing`), that replica is named to
`bad_copy_found` (`read_repair.py` queues its repair) once the read is served.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Sequence

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
from blobstore.wire import underreplicated as urs

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


# bad_copy_found(ledger id, entry id, bookie id, reason)
BadCopyFound = Callable[[int, int, str, str], None]


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
        bad_copy_found: BadCopyFound | None = None,
        report_missing: bool = False,
    ) -> None:
        assert replicas, "an entry has at least one replica"
        self.pool = pool
        self.ledger_id = ledger_id
        self.entry_id = entry_id
        self.replicas = list(replicas)
        self.speculative_read_timeout_s = speculative_read_timeout_s
        self.bad_copy_found = bad_copy_found
        self.report_missing = report_missing
        self.suspects: list[tuple[str, str]] | None = None  # (bookie, reason)

    async def run(self) -> protocol.Entry:
        """The entry, from the first replica that answers with a verified copy.

        Requests are sent without a task each where the connection allows
        (`read_entry_nowait`) and their answers handled in callbacks; the one
        future awaited here is settled by the first good copy or the last failure."""
        started = time.monotonic()
        read = _ReplicaRead(self)
        read.launch()
        try:
            entry = await read.outcome
        finally:
            read.close()
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
            if self.report_missing and isinstance(
                error, NoSuchEntryError | NoSuchLedgerOnBookieError
            ):
                self._suspect(bookie_id, urs.MISSING)
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
            self._suspect(bookie_id, urs.DIGEST_MISMATCH)
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
            self._suspect(bookie_id, urs.DIGEST_MISMATCH)
            return None
        return entry

    def _suspect(self, bookie_id: str, reason: str) -> None:
        """A replica's copy is bad or missing: kept until the read is served."""
        if self.bad_copy_found is not None:
            if self.suspects is None:
                self.suspects = []
            self.suspects.append((bookie_id, reason))

    def _served(self) -> None:
        """A good copy was found: name the replicas that had none."""
        if self.suspects and self.bad_copy_found is not None:
            for bookie_id, reason in self.suspects:
                self.bad_copy_found(self.ledger_id, self.entry_id, bookie_id, reason)

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


class _ReplicaRead:
    """The state of one PendingReadOp.run: the replicas asked and not yet answered, the
    failures so far, the speculation timer, and `outcome`, settled by the first good
    copy or once every replica failed.

    `close` drops answers still to come, cancels the timer and the tasks: nothing of a
    finished read stays reachable from the loop (an armed timer holds `speculate`, which
    holds this read, which holds the timer), so it is freed by reference counting at
    once, not left to the cyclic collector."""

    __slots__ = (
        "op",
        "loop",
        "outcome",
        "errors",
        "in_flight",
        "tasks",
        "next_replica",
        "speculation",
    )

    def __init__(self, op: PendingReadOp) -> None:
        self.op = op
        self.loop = asyncio.get_running_loop()
        self.outcome: asyncio.Future[protocol.Entry] = self.loop.create_future()
        self.errors: list[BaseException] = []
        self.in_flight: set[int] = set()  # replica indexes asked and not yet answered
        self.tasks: list[asyncio.Task[protocol.ReadResponse]] = []
        self.next_replica = 0
        self.speculation: asyncio.TimerHandle | None = None

    def launch(self) -> None:
        """Ask the next replica, and arm the timer that asks the one after it."""
        op = self.op
        index = self.next_replica
        bookie_id = op.replicas[index]
        self.next_replica += 1
        if not self.in_flight:
            # Nothing else in flight: this replica is the read's only hope, so it is
            # tried even while a recent connect failure holds it in backoff.
            op.pool.allow_connect(bookie_id)
        self.in_flight.add(index)
        if not op.pool.read_entry_nowait(
            bookie_id,
            op.ledger_id,
            op.entry_id,
            lambda response, error: self.answered(index, response, error),
        ):
            self._read_in_task(index, bookie_id)
        if self.speculation is not None:
            self.speculation.cancel()
            self.speculation = None
        if self.next_replica < len(op.replicas):
            self.speculation = self.loop.call_later(op.speculative_read_timeout_s, self.speculate)

    def _read_in_task(self, index: int, bookie_id: str) -> None:
        """The read when the connection cannot take it without a task (not connected)."""
        op = self.op
        task = asyncio.ensure_future(op.pool.read_entry(bookie_id, op.ledger_id, op.entry_id))
        task.add_done_callback(lambda t: self.answered(index, *_task_outcome(t)))
        self.tasks.append(task)

    def speculate(self) -> None:
        """No answer within the speculative timeout: ask the next replica too."""
        self.speculation = None
        op = self.op
        if self.outcome.done() or self.next_replica >= len(op.replicas):
            return
        metrics.SPECULATIVE_READS.inc()
        logger.debug(
            "speculative read ledger_id=%d entry_id=%d bookie=%s",
            op.ledger_id,
            op.entry_id,
            op.replicas[self.next_replica],
        )
        self.launch()

    def answered(
        self, index: int, response: protocol.ReadResponse | None, error: BaseException | None
    ) -> None:
        if index not in self.in_flight:
            return  # the read is over, or this replica's answer was already taken
        self.in_flight.discard(index)
        outcome = self.outcome
        if outcome.done():
            return
        try:
            entry = self.op._accept(response, error, self.op.replicas[index], self.errors)
        except asyncio.CancelledError:
            outcome.cancel()
            return
        except BaseException as e:  # not a bookie's failure: a bug, not a next replica
            outcome.set_exception(e)
            return
        if entry is not None:
            outcome.set_result(entry)
            self.op._served()
        elif not self.in_flight:
            self._next_or_fail()

    def _next_or_fail(self) -> None:
        """Every replica asked so far failed: ask the next, or fail the read."""
        if self.next_replica < len(self.op.replicas):
            self.launch()
            return
        try:
            self.op._fail(self.errors)
        except (EntryNotFoundError, ReadFailedError) as e:
            self.outcome.set_exception(e)

    def close(self) -> None:
        self.in_flight.clear()  # answers still to come are dropped
        if self.speculation is not None:
            self.speculation.cancel()
            self.speculation = None
        for task in self.tasks:
            task.cancel()
