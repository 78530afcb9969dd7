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

A forced pass (the admin port's `POST /api/v1/bookie/gc`, `GarbageCollector.force`)
collects ledgers, checkpoints when asked to roll, then compacts every log under the
threshold it is given. Forced passes run on the collector's own task between its
periodic rounds, so two passes never run at once, and they leave the periodic schedule
as it was.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from kazoo.exceptions import NoNodeError

from blobstore.runtime.zk import ZooKeeperClient
from blobstore.wire import zk_layout
from bookie.compactor import CompactionResult, Compactor
from bookie.config import BookieConfig
from bookie.ledger_storage import LedgerStorage
from bookie.metrics import METRICS

logger = logging.getLogger(__name__)

LEDGER_WALK_NODES_MAX = 10_000_000
# Forced passes waiting for the collector's task, the running one included; more are
# refused (GcBusyError) rather than queued.
FORCED_PASSES_PENDING_MAX = 4


@dataclass(frozen=True, slots=True)
class GcResult:
    """What one garbage collection pass did."""

    ledgers_deleted: int
    bytes_freed: int
    entry_logs_deleted: int
    duration_s: float


@dataclass(frozen=True, slots=True)
class ForcedGcRequest:
    """A forced pass: compact every log whose live ratio is under `threshold`; `roll`:
    checkpoint first and compact the current log too (rolled when it is a candidate)."""

    threshold: float
    roll: bool

    def __post_init__(self) -> None:
        assert 0.0 <= self.threshold <= 1.0, self.threshold


class GcBusyError(Exception):
    """FORCED_PASSES_PENDING_MAX forced passes are waiting already."""


class GcFailedError(Exception):
    """A forced pass failed (the collector logged why); the message is one line."""


class GcStoppedError(Exception):
    """The collector stopped (the bookie is stopping) before the forced pass finished."""


@dataclass(frozen=True, slots=True)
class _ForcedPass:
    request: ForcedGcRequest
    done: asyncio.Future[GcResult]


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
        # Oldest first; the head is the pass running (or next to run).
        self.forced: collections.deque[_ForcedPass] = collections.deque()
        self.stopped = False

    async def force(self, request: ForcedGcRequest) -> GcResult:
        """One forced pass, run by the collector's task (`run`), waited for. A caller
        that stops waiting before its pass starts drops it; one that stops waiting later
        leaves it to finish."""
        if self.stopped:
            raise GcStoppedError("the bookie is stopping")
        if len(self.forced) >= FORCED_PASSES_PENDING_MAX:
            raise GcBusyError(f"{len(self.forced)} forced garbage collections already waiting")
        done: asyncio.Future[GcResult] = asyncio.get_running_loop().create_future()
        self.forced.append(_ForcedPass(request, done))
        self.wakeup.set()
        return await done

    async def run(self) -> None:
        """Periodic rounds every `gc_interval_s`, and forced passes as they come."""
        next_round_at = self.clock() + self.config.gc_interval_s
        try:
            while True:
                if not self.forced:
                    try:
                        timeout_s = max(0.0, next_round_at - self.clock())
                        await asyncio.wait_for(self.wakeup.wait(), timeout_s)
                    except TimeoutError:
                        pass
                self.wakeup.clear()
                if self.forced:
                    await self._run_forced(self.forced[0])
                    self.forced.popleft()
                elif self.clock() >= next_round_at:
                    await self._run_periodic()
                    next_round_at = self.clock() + self.config.gc_interval_s
        finally:
            self.stopped = True
            for forced in self.forced:
                if not forced.done.done():
                    forced.done.set_exception(GcStoppedError("the bookie is stopping"))
            self.forced.clear()

    async def _run_periodic(self) -> None:
        try:
            await self.run_once()
            METRICS.gc_runs.labels("ok").inc()
        except asyncio.CancelledError:
            raise
        except Exception:
            METRICS.gc_runs.labels("error").inc()
            logger.exception("garbage collection round failed")

    async def _run_forced(self, forced: _ForcedPass) -> None:
        """Run one forced pass and hand its result (or error) to its waiting caller."""
        if forced.done.done():
            return  # its caller stopped waiting before it started
        request = forced.request
        try:
            result = await self.run_forced_once(request)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            METRICS.gc_runs.labels("error").inc()
            logger.exception(
                "gc_forced failed threshold=%.3f roll=%s", request.threshold, request.roll
            )
            if not forced.done.done():
                reason = f"garbage collection failed: {e!r}".replace("\n", " ")
                forced.done.set_exception(GcFailedError(reason))
            return
        METRICS.gc_runs.labels("ok").inc()
        logger.info(
            "gc_forced ledgers_deleted=%d bytes_freed=%d entry_logs_deleted=%d "
            "threshold=%.3f roll=%s duration_s=%.3f",
            result.ledgers_deleted,
            result.bytes_freed,
            result.entry_logs_deleted,
            request.threshold,
            request.roll,
            result.duration_s,
        )
        if not forced.done.done():
            forced.done.set_result(result)

    async def run_once(self) -> GcResult:
        """One periodic round: collect ledgers, then minor or major compaction when due."""
        started = self.clock()
        deleted = await self.collect_ledgers()
        now = self.clock()
        read_only = self.is_read_only()
        compaction = CompactionResult()
        if read_only or now - self.last_major >= self.config.major_compaction_interval_s:
            self.last_major = now
            self.last_minor = now
            compaction = await self.compactor.compact(
                self.config.major_compaction_threshold, "major"
            )
        elif now - self.last_minor >= self.config.minor_compaction_interval_s:
            self.last_minor = now
            compaction = await self.compactor.compact(
                self.config.minor_compaction_threshold, "minor"
            )
        self.storage.entry_logger.close_retired()
        if deleted:
            logger.info("gc_round ledgers_deleted=%d", deleted)
        return GcResult(
            deleted, compaction.bytes_freed, compaction.entry_logs_deleted, self.clock() - started
        )

    async def run_forced_once(self, request: ForcedGcRequest) -> GcResult:
        """One forced pass: collect ledgers; when rolling, checkpoint (entries still in the
        write cache are in no entry log yet) and let compaction roll the current log;
        compact every log under the threshold; close the deleted logs' descriptors (the
        space comes back only then).

        Ledgers are collected before the checkpoint: a deleted ledger's cached entries
        are then dropped instead of being written to a log only to be compacted away."""
        started = self.clock()
        deleted = await self.collect_ledgers()
        if request.roll:
            await self.storage.checkpoint()
        compaction = await self.compactor.compact(
            request.threshold, "forced", include_current=request.roll
        )
        self.storage.entry_logger.close_retired()
        return GcResult(
            deleted, compaction.bytes_freed, compaction.entry_logs_deleted, self.clock() - started
        )

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
