"""AppendObjectOp: stream one body into ledger entries.

The body is cut into entries of `entry_size_bytes` (the last one shorter). Whole
entries are appended in batches of `append_batch_bytes` (the rest when the body ends),
in one step of the event loop, so their frames leave for the bookies in one write and
each bookie writes the ones it gets in one group: one fdatasync, and one journal fsync
for their records. Appended one by one as they filled, they mostly took one group each
(16 MiB PUTs, 4 in flight: ~0.8 groups per entry; ~0.45 in batches of 4 MiB, and about
a tenth less CPU per PUT for the whole cluster). A ledger is taken from the writer pool only
once a batch is buffered (or the body ended), so a slow client does not hold a ledger
while a body trickles in. Appends are pipelined with at most `append_window_bytes` in
flight. The MD5 (the S3 ETag) is computed while streaming, off the event loop for large
chunks (unless the caller hashes the body itself, as the gateway does while verifying
Content-MD5). The received pieces are gathered, not copied, until an entry's worth is
here: each byte is copied once, into its entry.

The result names the entries only after every one of them was acknowledged by an ack
quorum; the caller commits a catalog record referencing them, or nothing. When anything
fails, the entries already appended stay unreferenced (garbage for the maintenance job);
a ledger whose append failed is never appended to again (its tail's fate is unknown).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import deque
from collections.abc import AsyncIterator
from concurrent.futures import Executor
from dataclasses import dataclass

from blobstore.catalog.records import Extent
from blobstore.ledger import PendingAddsFullError
from blobstore.objects.config import ObjectStoreConfig
from blobstore.objects.errors import EntityTooLargeError
from blobstore.objects.extents import check_extent
from blobstore.objects.metrics import (
    ABANDONED_WRITES,
    ENTRY_APPEND_SECONDS,
    OBJECT_BYTES_WRITTEN,
)
from blobstore.objects.writer_pool import LedgerWriterPool, WriterLedger
from blobstore.runtime.aio import wait_shielded

logger = logging.getLogger(__name__)

APPEND_TIMEOUT_S = 120.0
HASH_OFF_LOOP_BYTES_MIN = 256 * 1024


@dataclass(frozen=True, slots=True)
class WrittenData:
    """Acknowledged entries holding a body, in order, with its size and MD5."""

    extents: tuple[Extent, ...]
    size: int
    md5: bytes  # empty when the caller hashes the body itself

    def __post_init__(self) -> None:
        assert sum(e.length for e in self.extents) == self.size, self
        assert len(self.md5) in (0, 16), self.md5


def entries_to_append(buffered_bytes: int, entry_size: int, batch_entries: int, ended: bool) -> int:
    """How many whole entries of the `buffered_bytes` received and not yet appended go
    now: whole batches while the body streams, every whole entry once it ended."""
    whole = buffered_bytes // entry_size
    return whole if ended else whole - whole % batch_entries


def cut_entry(
    pieces: list[bytes | memoryview], entry_size: int
) -> tuple[list[bytes | memoryview], list[bytes | memoryview]]:
    """(the pieces of the first entry_size bytes of pieces, the pieces of the rest),
    nothing copied: an entry is sent as its pieces, and a piece that crosses its end is
    split by memoryview."""
    assert sum(len(piece) for piece in pieces) >= entry_size, (len(pieces), entry_size)
    index = 0
    taken = len(pieces[0])
    while taken < entry_size:
        index += 1
        taken += len(pieces[index])
    over = taken - entry_size
    if not over:
        return pieces[: index + 1], pieces[index + 1 :]
    view = memoryview(pieces[index])
    head, tail = view[: len(view) - over], view[len(view) - over :]
    return [*pieces[:index], head], [tail, *pieces[index + 1 :]]


class AppendObjectOp:
    def __init__(
        self,
        pool: LedgerWriterPool,
        config: ObjectStoreConfig,
        hash_executor: Executor | None,
        size_max: int,
        *,
        compute_md5: bool = True,
    ) -> None:
        self._pool = pool
        self._entry_size = config.entry_size_bytes
        self._window = config.append_window_entries
        self._batch = config.append_batch_entries
        self._hash_executor = hash_executor
        self._size_max = size_max
        self._md5 = hashlib.md5() if compute_md5 else None
        self._writer: WriterLedger | None = None
        # (the add's own future, this op's waiter for it): see PendingAddOp
        self._pending: deque[tuple[asyncio.Future[int], asyncio.Future[int]]] = deque()
        self._first_entry = -1
        self._last_entry = -1
        self._appended_bytes = 0

    async def run(self, body: AsyncIterator[bytes | memoryview]) -> WrittenData:
        started_s = time.monotonic()
        pieces: list[bytes | memoryview] = []  # of the next entry, received so far
        pieces_bytes = 0
        size = 0
        try:
            async for chunk in body:
                if not chunk:
                    continue
                size += len(chunk)
                if size > self._size_max:
                    raise EntityTooLargeError(self._size_max)
                await self._hash(chunk)
                pieces.append(chunk)
                pieces_bytes += len(chunk)
                pieces, pieces_bytes = await self._append_whole(pieces, pieces_bytes, False)
            pieces, pieces_bytes = await self._append_whole(pieces, pieces_bytes, True)
            if pieces:
                await self._append(pieces, pieces_bytes)
            await self._drain()
        except BaseException:
            await self._abandon()
            raise
        finally:
            if self._writer is not None:
                self._pool.release(self._writer)
                self._writer = None
        ENTRY_APPEND_SECONDS.observe(time.monotonic() - started_s)
        assert self._appended_bytes == size, (self._appended_bytes, size)
        extents: tuple[Extent, ...] = ()
        if size:
            assert self._writer is None
            extent = Extent(
                ledger_id=self._ledger_id,
                first_entry=self._first_entry,
                last_entry=self._last_entry,
                length=size,
                entry_size=self._entry_size,
            )
            check_extent(extent)
            extents = (extent,)
        md5 = self._md5.digest() if self._md5 is not None else b""
        return WrittenData(extents=extents, size=size, md5=md5)

    # ------------------------------------------------------------------ internals

    async def _hash(self, chunk: bytes | memoryview) -> None:
        if self._md5 is None:
            return
        if self._hash_executor is not None and len(chunk) >= HASH_OFF_LOOP_BYTES_MIN:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self._hash_executor, self._md5.update, chunk)
        else:
            self._md5.update(chunk)

    async def _append_whole(
        self, pieces: list[bytes | memoryview], pieces_bytes: int, ended: bool
    ) -> tuple[list[bytes | memoryview], int]:
        """Append the whole entries `entries_to_append` lets go now, one after the other
        in one step of the loop unless the window is full; (the pieces left, their bytes)."""
        size = self._entry_size
        for _ in range(entries_to_append(pieces_bytes, size, self._batch, ended)):
            entry, pieces = cut_entry(pieces, size)
            pieces_bytes -= size
            await self._append(entry, size)
        return pieces, pieces_bytes

    async def _append(self, pieces: list[bytes | memoryview], size: int) -> None:
        """Append one entry of `size` bytes, given as `pieces`."""
        if self._writer is None:
            self._writer = await self._pool.acquire()
            self._ledger_id = self._writer.handle.ledger_id
        handle = self._writer.handle
        waiter: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        while True:
            try:
                future = handle.append_pieces(pieces, waiter)
                break
            except PendingAddsFullError:
                await asyncio.wait_for(handle.wait_for_capacity(), APPEND_TIMEOUT_S)
            except BaseException:
                # Closed, fenced or failed handle: never hand it out again.
                self._writer.failed = True
                raise
        self._pending.append((future, waiter))
        self._writer.bytes_appended += size
        self._appended_bytes += size
        OBJECT_BYTES_WRITTEN.inc(size)
        while len(self._pending) >= self._window:
            await self._acknowledged(self._pending.popleft())

    async def _drain(self) -> None:
        while self._pending:
            await self._acknowledged(self._pending.popleft())

    async def _acknowledged(self, add: tuple[asyncio.Future[int], asyncio.Future[int]]) -> None:
        """Wait for one add. The waiter, not the add's own future, is awaited: it wakes
        this task in the loop iteration after the acknowledgement (a callback chained to
        the add's future would take one more), and a timeout or a cancelled request
        cancels only the waiter; `_abandon` learns the add's fate from its future."""
        assert self._writer is not None
        try:
            async with asyncio.timeout(APPEND_TIMEOUT_S):
                entry_id = await add[1]
        except BaseException:
            self._writer.failed = True
            raise
        if self._first_entry < 0:
            self._first_entry = entry_id
        else:
            assert entry_id == self._last_entry + 1, (self._last_entry, entry_id)
        self._last_entry = entry_id

    async def _abandon(self) -> None:
        """After a failure: learn the fate of the appends in flight, so the ledger is
        either known healthy (back to the pool) or marked failed (retired)."""
        if self._writer is None:
            return
        ABANDONED_WRITES.inc()
        pending = [future for future, _ in self._pending]
        self._pending.clear()
        if pending:
            results = await asyncio.gather(
                *(wait_shielded(f, APPEND_TIMEOUT_S) for f in pending),
                return_exceptions=True,
            )
            if any(isinstance(r, BaseException) for r in results):
                self._writer.failed = True
        logger.info(
            "event=object_write_abandoned ledger_id=%d first_entry=%d failed=%s",
            self._writer.handle.ledger_id,
            self._first_entry,
            self._writer.failed,
        )
