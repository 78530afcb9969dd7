"""One add in flight: its entry bytes, which write-set slots acknowledged it, and the
future its caller awaits. The handle owns the ordering (completions in entry order)."""

from __future__ import annotations

import asyncio
import time

from blobstore.ledger.distribution_schedule import AckSet


class PendingAddOp:
    __slots__ = (
        "entry_id",
        "entry",
        "payload_bytes",
        "ledger_length",
        "ack_set",
        "future",
        "started",
    )

    def __init__(
        self,
        entry_id: int,
        entry: bytes,
        payload_bytes: int,
        ledger_length: int,
        ack_set: AckSet,
        future: asyncio.Future[int],
    ) -> None:
        assert entry_id >= 0, entry_id
        self.entry_id = entry_id
        self.entry = entry  # Entry.encode() bytes: resent unchanged after an ensemble change
        self.payload_bytes = payload_bytes
        self.ledger_length = ledger_length
        self.ack_set = ack_set
        self.future = future
        self.started = time.monotonic()

    @property
    def done(self) -> bool:
        return self.future.done()
