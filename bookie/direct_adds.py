"""Direct adds: large entries written once, to a direct entry log, then journaled small.

An add whose payload is at least `direct_write_min_bytes` goes here instead of into the
journal whole:

  1. a writer thread takes everything queued (up to `GROUP_BYTES_MAX`), writes it to the
     direct entry log with O_DIRECT and fdatasyncs once (group commit: adds arriving
     during that fdatasync form the next group);
  2. on the event loop, each add's DIRECT_ADD record (location, length, CRC32C of the
     entry) is queued to the journal, whose group commit writes it with small adds;
  3. after that record's fsync the journal applies it (the location is readable and
     will be indexed by the next checkpoint) and the add is acknowledged, as for any add.

So an acknowledged direct add has its bytes fdatasync'd in the log (step 1 ends before
step 2 starts) and its record fsync'd in the journal: replay after a crash finds both.
A crash between 1 and 3 leaves bytes nothing names: the add was never acknowledged.

Small adds never wait for this path: they go to the journal from the connection as they
did, and a direct add's journal record is one more small record there. The queue holds
at most `queue_items_max` items (the server's in-flight bounds keep it far below), and
its bytes are bounded by the server's `in_flight_bytes_max`.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from collections.abc import Callable

from blobstore.wire import protocol
from bookie import hooks
from bookie.direct_entry_log import DirectEntryLog, group_count, is_direct, record_span
from bookie.journal import (
    DirectDescriptor,
    Journal,
    JournalUnavailableError,
    RecordKind,
    encode_parts,
)
from bookie.ledger_storage import LedgerStorage
from bookie.metrics import METRICS

logger = logging.getLogger(__name__)

# One add as the server parsed it:
# (ledger_id, entry_id, master_key, entry, lac, request_id, received_at)
DirectAdd = tuple[int, int, bytes, bytes, int, int, float]
Done = Callable[[BaseException | None], None]
# The adds of one connection's read, answered together: (adds, done, record bytes).
QueueItem = tuple[list[DirectAdd], Done, int]
# An idle writer looks at its queue this often even unnotified (a bound, not the path).
WRITER_IDLE_RECHECK_S = 1.0


def journal_pieces(
    adds: list[DirectAdd], locations: list[int], crcs: list[int]
) -> tuple[list[bytes], int]:
    """The DIRECT_ADD records of written adds, as the journal takes them."""
    pieces: list[bytes] = []
    nbytes = 0
    for (ledger_id, entry_id, master_key, entry, *_), loc, crc in zip(
        adds, locations, crcs, strict=True
    ):
        descriptor = DirectDescriptor(loc, len(entry), crc).encode()
        prefix, _ = encode_parts(RecordKind.DIRECT_ADD, ledger_id, entry_id, master_key, descriptor)
        pieces += (prefix, descriptor)
        nbytes += len(prefix) + len(descriptor)
    return pieces, nbytes


class DirectAdds:
    """The direct write path (module docstring): a writer thread for the log, the
    journal hand-off on the loop."""

    def __init__(
        self,
        log: DirectEntryLog,
        storage: LedgerStorage,
        journal: Journal,
        *,
        min_bytes: int,
        queue_items_max: int,
    ) -> None:
        self.log = log
        self.storage = storage
        self.journal = journal
        self.min_bytes = min_bytes
        self.queue_items_max = queue_items_max
        # Appended on the loop, taken by the writer thread (deque ends are thread-safe).
        self._queue: collections.deque[QueueItem] = collections.deque()
        self._wake = threading.Condition(threading.Lock())
        self._writer_waiting = False
        self._closing = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._writer_exited: asyncio.Future[None] | None = None

    def wants(self, payload_bytes: int) -> bool:
        return is_direct(payload_bytes, self.min_bytes)

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._writer_exited = self._loop.create_future()
        self._thread = threading.Thread(target=self._writer, name="direct-writer", daemon=True)
        self._thread.start()

    def submit(self, adds: list[DirectAdd], done: Done) -> None:
        """Write the adds' entries, then journal their records; `done(None)` once those
        are fsync'd (the adds are durable), `done(error)` if either write failed."""
        failure = self.journal.failure
        if failure is not None or self._closing:
            done(failure or JournalUnavailableError("the bookie is stopping"))
            return
        assert len(self._queue) < self.queue_items_max, "direct add queue bound broken"
        span = sum(record_span(len(add[3])) for add in adds)
        self._queue.append((adds, done, span))
        if self._writer_waiting:
            with self._wake:
                self._wake.notify()

    async def close(self) -> None:
        """Write what is queued, stop the writer, finish the log."""
        self._closing = True
        if self._thread is not None:
            with self._wake:
                self._wake.notify()
            assert self._writer_exited is not None
            await self._writer_exited
            self._thread.join()
            self._thread = None
        await asyncio.to_thread(self.log.close)

    # ------------------------------------------------------------------ writer thread

    def _writer(self) -> None:
        loop = self._loop
        assert loop is not None
        try:
            while (items := self._next_group()) is not None:
                hooks.reached("direct_writing")
                entries = [add[3] for item in items for add in item[0]]
                started = time.monotonic()
                try:
                    locations = self.log.write(entries)
                    # Verified when the add arrived: the record carries it as it is.
                    crcs = [protocol.entry_digest(entry) for entry in entries]
                except Exception as e:  # noqa: BLE001 - these adds fail; later ones go on
                    if not isinstance(e, OSError):
                        logger.exception("direct write failed")
                    loop.call_soon_threadsafe(self._failed, items, e)
                    continue
                METRICS.direct_write_seconds.observe(time.monotonic() - started)
                mode = "o_direct" if self.log.direct else "buffered"
                METRICS.direct_write_bytes.labels(mode).inc(sum(item[2] for item in items))
                loop.call_soon_threadsafe(self._written, items, locations, crcs)
        finally:
            loop.call_soon_threadsafe(self._exited)

    def _next_group(self) -> list[QueueItem] | None:
        """Everything queued, up to GROUP_BYTES_MAX of records (at least one item), once
        there is something; None when closing with nothing left."""
        queue = self._queue
        while not queue:
            if self._closing:
                return None
            with self._wake:
                # Announced before the queue is looked at again: an item queued after
                # the look finds the flag set and notifies.
                self._writer_waiting = True
                if not queue and not self._closing:
                    self._wake.wait(WRITER_IDLE_RECHECK_S)
                self._writer_waiting = False
        count = group_count([item[2] for item in list(queue)])
        return [queue.popleft() for _ in range(count)]

    # ------------------------------------------------------------------ on the loop

    def _written(self, items: list[QueueItem], locations: list[int], crcs: list[int]) -> None:
        """The group is durable in the log: queue each item's records to the journal."""
        hooks.reached("direct_written")
        storage = self.storage
        start = 0
        for adds, done, _ in items:
            end = start + len(adds)
            item_locations = locations[start:end]
            pieces, nbytes = journal_pieces(adds, item_locations, crcs[start:end])
            start = end

            def apply(
                adds: list[DirectAdd] = adds, item_locations: list[int] = item_locations
            ) -> None:
                for (ledger_id, entry_id, master_key, entry, lac, *_), loc in zip(
                    adds, item_locations, strict=True
                ):
                    storage.apply_direct_add(
                        ledger_id, entry_id, master_key, loc, len(entry), lac, entry
                    )

            # A journal that failed answers `done` with its error: the pins stay (a
            # whole record may be on disk, and its replay reads these bytes).
            self.journal.submit(pieces, nbytes, apply, done)

    def _failed(self, items: list[QueueItem], error: Exception) -> None:
        """The log write failed: these adds are refused (never acknowledged)."""
        for _, done, _ in items:
            done(error)

    def _exited(self) -> None:
        if self._writer_exited is not None and not self._writer_exited.done():
            self._writer_exited.set_result(None)
