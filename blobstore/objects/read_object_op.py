"""Reading object bytes: read handles kept in an LRU, and the windowed entry reader.

Records reference only acknowledged entries, but while the writer's ledger is still open
those may lie beyond the LAC the bookies know (the LAC travels with the next add), so
entries are read with `read_unconfirmed_entries`; every payload's digest is verified by
the ledger client. A cached read handle may predate an ensemble change of a ledger that
is still being written: when a read through a cached handle fails, the handle is
reopened (fresh metadata) and the read retried once.

Small entries that were read are kept in an `EntryCache` (bytes-bounded LRU). An entry
never changes once acknowledged (a ledger has one writer; recovery and re-replication
copy the same bytes; compaction writes new ledgers and ledger ids are never reused), so
a cached payload is always the entry's: which entry an object's bytes live in is still
read from the catalog on every request, under its view.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Coroutine, Sequence
from typing import Any

from cachetools import LRUCache

from blobstore.ledger import LedgerClient, LedgerHandle
from blobstore.ledger.errors import NoSuchLedgerError
from blobstore.ledger.passwords import LedgerPasswords
from blobstore.objects.extents import EntrySpan
from blobstore.objects.metrics import (
    ENTRY_CACHE_BYTES,
    ENTRY_CACHE_LOOKUPS,
    OBJECT_BYTES_READ,
    READ_RETRIES,
)

logger = logging.getLogger(__name__)

READ_TIMEOUT_S = 60.0
READ_BATCH_ENTRIES = 8
OPEN_TIMEOUT_S = 30.0


class ShortEntryError(Exception):
    """An entry's payload is shorter than the record says (corrupt catalog or ledger)."""


# What keeping one entry costs besides its payload (the bytes object's header, the key
# tuple, the LRU's dict and order slots: about 330 B): counted against the bound, so
# a cache of tiny objects stays within it too.
ENTRY_CACHE_OVERHEAD_BYTES = 330


def _cached_size(payload: bytes | memoryview) -> int:
    return len(payload) + ENTRY_CACHE_OVERHEAD_BYTES


class EntryCache:
    """Payloads of small entries by (ledger id, entry id), least recently used dropped
    first once they hold more than `bytes_max`, bookkeeping included (0: nothing is
    kept). Only entries up to `payload_bytes_max` are kept: large objects stream through
    without displacing the small, hot ones (a 4 KiB object's GET answered from here
    skips a bookie round trip, about a third of the worker's CPU for it)."""

    def __init__(self, bytes_max: int, payload_bytes_max: int) -> None:
        self.payload_bytes_max = payload_bytes_max if bytes_max > 0 else -1
        self._entries: LRUCache[tuple[int, int], bytes | memoryview] = LRUCache(
            maxsize=max(1, bytes_max), getsizeof=_cached_size
        )

    def get(self, ledger_id: int, entry_id: int) -> bytes | memoryview | None:
        if self.payload_bytes_max < 0:
            return None
        payload = self._entries.get((ledger_id, entry_id))
        ENTRY_CACHE_LOOKUPS[payload is not None].inc()
        return payload

    def put(self, ledger_id: int, entry_id: int, payload: bytes | memoryview) -> None:
        if len(payload) <= self.payload_bytes_max:
            held = self._entries.currsize
            self._entries[ledger_id, entry_id] = payload
            ENTRY_CACHE_BYTES.add(int(self._entries.currsize - held))

    def clear(self) -> None:
        ENTRY_CACHE_BYTES.add(-int(self._entries.currsize))
        self._entries.clear()


class ReadHandleCache:
    """Open read handles by ledger id, least recently used dropped first. Handles are
    opened without recovery: reading never disturbs a writer. `passwords`: the object
    ledgers' (default: from the cluster key of the environment)."""

    def __init__(
        self, client: LedgerClient, handles_max: int, passwords: LedgerPasswords | None = None
    ) -> None:
        self._client = client
        self._passwords = LedgerPasswords.from_env() if passwords is None else passwords
        self._handles_max = handles_max
        self._handles: OrderedDict[int, asyncio.Task[LedgerHandle]] = OrderedDict()

    async def get(self, ledger_id: int) -> LedgerHandle:
        task = self._handles.get(ledger_id)
        if task is None or (task.done() and (task.cancelled() or task.exception() is not None)):
            task = asyncio.ensure_future(
                asyncio.wait_for(
                    self._client.open_ledger(ledger_id, self._passwords, recovery=False),
                    OPEN_TIMEOUT_S,
                )
            )
            self._handles[ledger_id] = task
            while len(self._handles) > self._handles_max:
                self._handles.popitem(last=False)
        self._handles.move_to_end(ledger_id)
        if task.done():
            return task.result()  # open already (a failed open was replaced above)
        try:
            return await asyncio.shield(task)
        except BaseException:
            if self._handles.get(ledger_id) is task:
                del self._handles[ledger_id]
            raise

    def evict(self, ledger_id: int) -> None:
        self._handles.pop(ledger_id, None)

    def clear(self) -> None:
        self._handles.clear()


async def read_entries(
    cache: ReadHandleCache, ledger_id: int, first: int, last: int
) -> list[bytes | memoryview]:
    """Payloads of entries first..last; reopens the handle and retries once on failure."""
    for attempt in range(2):
        handle = await cache.get(ledger_id)
        try:
            if first == last:
                # One entry is bounded already: each replica's request has its deadline.
                payloads = await handle.read_unconfirmed_entries(first, last)
            else:
                async with asyncio.timeout(READ_TIMEOUT_S):
                    payloads = await handle.read_unconfirmed_entries(first, last)
            assert len(payloads) == last - first + 1, (ledger_id, first, last, len(payloads))
            return payloads
        except NoSuchLedgerError:
            cache.evict(ledger_id)
            raise
        except Exception as e:
            cache.evict(ledger_id)
            if attempt:
                raise
            READ_RETRIES.labels(reason="reopen").inc()
            logger.info(
                "event=read_handle_reopened ledger_id=%d first_entry=%d last_entry=%d error=%r",
                ledger_id,
                first,
                last,
                e,
            )
    raise AssertionError("unreachable")


def span_piece(
    span: EntrySpan, entry_id: int, payload: bytes | memoryview, left: int
) -> bytes | memoryview:
    """The bytes of `span` that entry `entry_id` holds, with `left` of the span's bytes
    still to come; ShortEntryError when the payload cannot hold what the record says."""
    skip = span.skip_bytes if entry_id == span.first_entry else 0
    piece = payload[skip : skip + left]
    if entry_id == span.last_entry:
        consistent = len(piece) == left
    else:
        consistent = len(piece) == len(payload) - skip and len(piece) < left
    if not consistent:
        raise ShortEntryError(
            f"ledger_id={span.ledger_id} entry_id={entry_id} holds {len(payload)} "
            f"bytes; the record needs {left} more from offset {skip}"
        )
    OBJECT_BYTES_READ.inc(len(piece))
    return piece


async def iter_spans(
    cache: ReadHandleCache, spans: Sequence[EntrySpan], window: int
) -> AsyncIterator[bytes | memoryview]:
    """The bytes of the spans in order, reading up to `window` entries ahead, in batches
    of consecutive entries (one ledger read call per batch, itself pipelined)."""
    assert window >= 1, window
    batch = max(1, min(READ_BATCH_ENTRIES, window))
    batches_max = max(1, window // batch)
    jobs = (
        (span, first, min(first + batch - 1, span.last_entry))
        for span in spans
        for first in range(span.first_entry, span.last_entry + 1, batch)
    )
    # A read with nothing to overlap (the whole request is one batch) is awaited in
    # place: a task only pays for itself by reading ahead.
    alone = len(spans) == 1 and spans[0].last_entry - spans[0].first_entry < batch
    in_flight: deque[
        tuple[
            EntrySpan,
            int,
            asyncio.Future[list[bytes | memoryview]]
            | Coroutine[Any, Any, list[bytes | memoryview]],
        ]
    ] = deque()

    def fill() -> None:
        while len(in_flight) < batches_max:
            job = next(jobs, None)
            if job is None:
                return
            span, first, last = job
            read = read_entries(cache, span.ledger_id, first, last)
            in_flight.append((span, first, read if alone else asyncio.ensure_future(read)))

    remaining = {index: span.byte_count for index, span in enumerate(spans)}
    indexes = {id(span): index for index, span in enumerate(spans)}
    try:
        fill()
        while in_flight:
            span, first, read = in_flight.popleft()
            payloads = await read
            fill()
            index = indexes[id(span)]
            for offset, payload in enumerate(payloads):
                left = remaining[index]
                piece = span_piece(span, first + offset, payload, left)
                remaining[index] = left - len(piece)
                if piece:
                    yield piece
    finally:
        for _, _, read in in_flight:
            if isinstance(read, asyncio.Future):
                read.cancel()
            else:
                read.close()
