"""Garbage collection: drop ledgers deleted from the cluster, then compact entry logs.

Each round:
  1. snapshot the ids of every ledger with metadata in ZooKeeper (walk the
     `/ledgers/meta` hierarchy; only existence matters, contents are never read);
  2. for each local ledger missing from the snapshot, confirm with a direct exists() on its
     metadata path: a ledger created after the snapshot is never collected (ids are never
     reused, so a confirmed absence is final);
  3. drop confirmed ledgers (state, caches, index entries, per-log byte counts);
  4. run minor / major compaction when their interval has passed, and every round while
     the bookie is read-only (full disk: the space must come back without a restart).
Any ZooKeeper error aborts the round before anything is dropped.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from kazoo.exceptions import NoNodeError

from blobstore.runtime.zk import ZooKeeperClient
from blobstore.wire import zk_layout
from bookie.compactor import Compactor
from bookie.config import BookieConfig
from bookie.ledger_storage import LedgerStorage
from bookie.metrics import METRICS

logger = logging.getLogger(__name__)

LEDGER_WALK_NODES_MAX = 10_000_000


async def list_ledger_ids(zk: ZooKeeperClient) -> set[int]:
    """Ids of every ledger whose metadata znode exists (a snapshot)."""
    ids: set[int] = set()
    visited = 0

    async def walk(path: str, depth: int) -> None:
        nonlocal visited
        try:
            children = await zk.get_children(path)
        except NoNodeError:
            return
        for child in children:
            visited += 1
            if visited > LEDGER_WALK_NODES_MAX:
                raise RuntimeError("ledger metadata walk exceeded its node bound")
            child_path = f"{path}/{child}"
            if depth == 4:
                try:
                    ids.add(zk_layout.ledger_id_from_path(child_path))
                except ValueError:
                    continue
            elif child.isdigit():
                await walk(child_path, depth + 1)

    await walk(zk_layout.LEDGER_META_ROOT, 0)
    return ids


class GarbageCollector:
    def __init__(
        self,
        zk: ZooKeeperClient,
        storage: LedgerStorage,
        config: BookieConfig,
        is_read_only: Callable[[], bool],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.zk = zk
        self.storage = storage
        self.config = config
        self.is_read_only = is_read_only
        self.clock = clock
        self.compactor = Compactor(storage)
        now = clock()
        self.last_minor = now
        self.last_major = now
        self.wakeup = asyncio.Event()

    async def run(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self.wakeup.wait(), self.config.gc_interval_s)
            except TimeoutError:
                pass
            self.wakeup.clear()
            try:
                await self.run_once()
                METRICS.gc_runs.labels("ok").inc()
            except asyncio.CancelledError:
                raise
            except Exception:
                METRICS.gc_runs.labels("error").inc()
                logger.exception("garbage collection round failed")

    async def run_once(self) -> None:
        deleted = await self.collect_ledgers()
        now = self.clock()
        read_only = self.is_read_only()
        if read_only or now - self.last_major >= self.config.major_compaction_interval_s:
            self.last_major = now
            self.last_minor = now
            await self.compactor.compact(self.config.major_compaction_threshold, "major")
        elif now - self.last_minor >= self.config.minor_compaction_interval_s:
            self.last_minor = now
            await self.compactor.compact(self.config.minor_compaction_threshold, "minor")
        self.storage.entry_logger.close_retired()
        if deleted:
            logger.info("gc_round ledgers_deleted=%d", deleted)

    async def collect_ledgers(self) -> int:
        snapshot = await list_ledger_ids(self.zk)
        deleted = 0
        for ledger_id in list(self.storage.states):
            if ledger_id in snapshot or ledger_id > zk_layout.LEDGER_ID_MAX:
                continue
            if await self.zk.exists(zk_layout.ledger_path(ledger_id)) is not None:
                continue  # created after the snapshot
            await self.storage.delete_ledger(ledger_id)
            METRICS.gc_ledgers_deleted.inc()
            deleted += 1
            logger.info("gc_ledger_deleted ledger_id=%d", ledger_id)
        return deleted
