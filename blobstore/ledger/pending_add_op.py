"""One add in flight: its entry bytes, which write-set slots acknowledged it, and the
future its caller awaits. The handle owns the ordering (completions in entry order).

`future` is the add's own outcome: the handle decides with it whether the add is done,
and a caller must never cancel it (await it through `wait_shielded`). A caller that
waits on the loop's hot path may pass a `waiter` too, a future of its own that the
handle resolves in the same step as `future`: awaiting it directly wakes the caller one
loop iteration sooner than a callback chained to `future` would, and cancelling it
(a timeout, a cancelled request) leaves the add untouched."""

from __future__ import annotations

import asyncio
import time

from blobstore.ledger.distribution_schedule import AckSet
from blobstore.wire import protocol


class PendingAddOp:
    __slots__ = (
        "entry_id",
        "entry",
        "payload_bytes",
        "ledger_length",
        "ack_set",
        "future",
        "waiter",
        "started",
    )

    def __init__(
        self,
        entry_id: int,
        entry: protocol.EntryParts,
        payload_bytes: int,
        ledger_length: int,
        ack_set: AckSet,
        future: asyncio.Future[int],
        waiter: asyncio.Future[int] | None = None,
    ) -> None:
        assert entry_id >= 0, entry_id
        self.entry_id = entry_id
        self.entry = entry  # encode_entry parts: resent unchanged after an ensemble change
        self.payload_bytes = payload_bytes
        self.ledger_length = ledger_length
        self.ack_set = ack_set
        self.future = future
        self.waiter = waiter
        self.started = time.monotonic()

    @property
    def done(self) -> bool:
        return self.future.done()

    def succeed(self) -> None:
        if not self.future.done():
            self.future.set_result(self.entry_id)
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(self.entry_id)

    def fail(self, error: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(error)
            self.future.exception()  # retrieved here: callers may drop futures
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)
            waiter.exception()
