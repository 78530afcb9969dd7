"""Read-repair: a read served by one replica after another gave a bad copy (digest or
ids that do not verify) or none (no such entry, no such ledger) queues that copy's
repair in the under-replicated set (`blobstore/wire/underreplicated.py`), where the
replication worker copies the good replica back.

The read itself never waits for this: `suspect` only notes the copy, and one task per
client writes the notes to ZooKeeper, a report per (ledger, bookie, reason). Bounded:
at most `PENDING_MAX` copies wait to be written (more are dropped and counted), and a
copy reported in the last `REMEMBER_S` is not reported again (a hot object with a bad
replica is read many times before the worker repairs it).

A missing copy is noted only for a closed ledger: on an open one, a bookie outside the
ack quorum may not have an entry yet.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time

from prometheus_client import Counter

from blobstore.runtime.zk import ZooKeeperClient
from blobstore.wire import underreplicated as urs

logger = logging.getLogger(__name__)

PENDING_MAX = 1024
REMEMBER_S = 600.0
REMEMBERED_MAX = 10_000

READ_REPAIRS = Counter(
    "blobstore_ledger_read_repairs_total",
    "Bad or missing copies met by reads and queued for repair in the under-replicated set, "
    "by result: queued (written), dropped (too many waiting), failed (ZooKeeper refused)",
    ["result"],
)

# (ledger id, entry id, bookie id)
CopyKey = tuple[int, int, str]


class ReadRepairQueue:
    def __init__(self, zk: ZooKeeperClient, reporter: str = "reader") -> None:
        self._zk = zk
        self._reporter = reporter
        self._pending: dict[CopyKey, str] = {}  # copy -> reason, in arrival order
        # copy -> when it was queued (oldest first)
        self._remembered: collections.OrderedDict[CopyKey, float] = collections.OrderedDict()
        self._task: asyncio.Task[None] | None = None

    def suspect(self, ledger_id: int, entry_id: int, bookie_id: str, reason: str) -> None:
        """Note a bad (`digest_mismatch`) or missing copy met by a read that another
        replica served. Never blocks, never raises."""
        key = (ledger_id, entry_id, bookie_id)
        now = time.monotonic()
        while self._remembered:
            oldest, at = next(iter(self._remembered.items()))
            if now - at < REMEMBER_S and len(self._remembered) <= REMEMBERED_MAX:
                break
            del self._remembered[oldest]
        if key in self._remembered or key in self._pending:
            return
        if len(self._pending) >= PENDING_MAX:
            READ_REPAIRS.labels("dropped").inc()
            return
        self._pending[key] = reason
        self._remembered[key] = now
        logger.warning(
            "event=read_repair_queued ledger_id=%d entry_id=%d bookie=%s reason=%s",
            ledger_id,
            entry_id,
            bookie_id,
            reason,
        )
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._write(), name="read-repair")

    @property
    def pending(self) -> int:
        return len(self._pending)

    async def flush(self) -> None:
        """Wait until everything noted so far is written (tests, and `close`)."""
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)

    async def close(self) -> None:
        try:
            await asyncio.wait_for(self.flush(), 5.0)
        except (TimeoutError, asyncio.CancelledError):
            if self._task is not None:
                self._task.cancel()

    async def _write(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, {}
            grouped: dict[tuple[int, str, str], list[int]] = {}
            for (ledger_id, entry_id, bookie_id), reason in batch.items():
                grouped.setdefault((ledger_id, bookie_id, reason), []).append(entry_id)
            for (ledger_id, bookie_id, reason), entry_ids in grouped.items():
                await self._write_one(ledger_id, bookie_id, reason, entry_ids)

    async def _write_one(
        self, ledger_id: int, bookie_id: str, reason: str, entry_ids: list[int]
    ) -> None:
        for report in urs.split_reports(
            ledger_id, bookie_id, entry_ids, reason, self._reporter, time.time()
        ):
            try:
                await self._zk.create(
                    urs.report_path_prefix(ledger_id),
                    report.encode(),
                    sequence=True,
                    makepath=True,
                )
            except Exception as e:  # noqa: BLE001 - a lost note; the scrubber finds it later
                READ_REPAIRS.labels("failed").inc(report.entry_count)
                logger.warning(
                    "event=read_repair_not_queued ledger_id=%d bookie=%s error=%r",
                    ledger_id,
                    bookie_id,
                    e,
                )
            else:
                READ_REPAIRS.labels("queued").inc(report.entry_count)
