"""Entry log compaction: copy a sparse log's live entries into the current log, then delete it.

Minor compaction takes logs whose live ratio is under `minor_compaction_threshold` (0.2,
hourly), major under `major_compaction_threshold` (0.8, daily), a forced one (the admin
port's `POST /api/v1/bookie/gc`) under the threshold it is given. A log with no live
bytes is deleted without being read.

On-disk effects and faults tolerated
------------------------------------
For each log (on the storage thread, so never interleaved with a checkpoint):
  1. scan the log; an entry is live when its ledger still exists locally and the index
     still points at this very record (not a later copy);
  2. append live entries to the current log and fsync it;
  3. write the new locations and the log's zeroed byte counts in one synced index batch;
  4. delete the old log file and fsync the directory.
A kill -9 before 3 leaves the index pointing at the old log (the copies are unreferenced
garbage for a later compaction), and so does a failed write or fsync in 2 (the entry
logger abandons its current log, `entry_logger.py`; nothing is indexed or counted);
after 3 and before 4 the old log is garbage and is collected on the next round (its
byte counts are zero). Entries are never lost.
Compaction does not need the bookie to be writable: it is how a full (read-only)
bookie gets space back. A pinned log (a direct entry log being written, or holding
entries whose locations a checkpoint has not indexed yet: `entry_logger.LogPins`) is
left alone: its unindexed entries would look like garbage. Its padding (records of a
direct log start on 4096-byte boundaries) counts as garbage like any dead record.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from bookie.entry_logger import LOG_HEADER_BYTES, RECORD_LENGTH, split_location
from bookie.ledger_storage import LedgerStorage
from bookie.metrics import METRICS

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CompactionResult:
    """What a compaction did: entry log bytes freed (a log's size less the live bytes
    copied out of it) and logs deleted."""

    bytes_freed: int = 0
    entry_logs_deleted: int = 0

    def __post_init__(self) -> None:
        assert self.bytes_freed >= 0, self.bytes_freed
        assert self.entry_logs_deleted >= 0, self.entry_logs_deleted

    def __add__(self, other: CompactionResult) -> CompactionResult:
        return CompactionResult(
            self.bytes_freed + other.bytes_freed,
            self.entry_logs_deleted + other.entry_logs_deleted,
        )


def live_ratios(storage: LedgerStorage) -> dict[int, tuple[int, int]]:
    """log id -> (live bytes, total record bytes), for every log on disk but the pinned
    ones (a direct entry log being written, or holding entries not indexed yet)."""
    result = {}
    pinned = storage.entry_logger.pins.pinned()
    for log_id in storage.entry_logger.list_logs():
        if log_id in pinned:
            continue
        total = storage.entry_logger.log_bytes(log_id) - LOG_HEADER_BYTES
        live = sum(storage.log_ledger_bytes.get(log_id, {}).values())
        result[log_id] = (live, max(total, 0))
    return result


def compact_log(storage: LedgerStorage, log_id: int, kind: str) -> CompactionResult:
    """Storage thread only: copy a log's live entries to the current log, then delete it.

    Rolls first when asked to compact the current log (nothing is done when that log is
    still empty).
    """
    if log_id in storage.entry_logger.pins.pinned():
        return CompactionResult()  # its entries are not all indexed yet
    if log_id == storage.entry_logger.current_log_id:
        storage.entry_logger.roll_if_used()
        if log_id == storage.entry_logger.current_log_id:
            return CompactionResult()
    size_before = os.path.getsize(storage.entry_logger.path(log_id))
    live_ledgers = storage.log_ledger_bytes.get(log_id, {})
    locations = []
    touched: dict[tuple[int, int], int] = {}
    copied = 0
    if live_ledgers:
        for offset, ledger_id, entry_id, data in storage.entry_logger.scan(log_id):
            if ledger_id not in live_ledgers:
                continue
            if storage.index.get_location(ledger_id, entry_id) != ((log_id << 32) | offset):
                continue  # superseded by a later copy, or dropped
            loc = storage.entry_logger.append(data)
            locations.append((ledger_id, entry_id, loc))
            key = (split_location(loc)[0], ledger_id)
            if key not in touched:
                touched[key] = storage.log_ledger_bytes.get(key[0], {}).get(ledger_id, 0)
            touched[key] += RECORD_LENGTH.size + len(data)
            copied += RECORD_LENGTH.size + len(data)
        if locations:
            storage.entry_logger.sync()
    for ledger_id in live_ledgers:
        touched[(log_id, ledger_id)] = 0
    storage.index.write(locations, {}, touched, None)
    for (new_log, ledger_id), size in touched.items():
        if new_log != log_id:
            storage.log_ledger_bytes.setdefault(new_log, {})[ledger_id] = size
    storage.log_ledger_bytes.pop(log_id, None)
    storage.entry_logger.delete(log_id)
    METRICS.compaction_bytes.labels(kind).inc(copied)
    METRICS.compaction_reclaimed_bytes.labels(kind).inc(max(0, size_before - copied))
    METRICS.entry_logs_deleted.inc()
    logger.info(
        "compaction_done kind=%s log_id=%d copied_bytes=%d freed_bytes=%d",
        kind,
        log_id,
        copied,
        size_before - copied,
    )
    return CompactionResult(max(0, size_before - copied), 1)


def candidates(
    ratios: dict[int, tuple[int, int]], threshold: float, current_log_id: int
) -> list[int]:
    """Logs whose live ratio is under the threshold, emptiest first."""
    chosen = []
    for log_id, (live, total) in ratios.items():
        if log_id == current_log_id and live == total:
            continue
        ratio = live / total if total > 0 else 0.0
        if ratio < threshold:
            chosen.append((ratio, log_id))
    return [log_id for _, log_id in sorted(chosen)]


class Compactor:
    def __init__(self, storage: LedgerStorage) -> None:
        self.storage = storage

    async def compact(
        self, threshold: float, kind: str, *, include_current: bool = True
    ) -> CompactionResult:
        """Compact every log under the threshold. The current log is among them (rolled
        first) unless `include_current` is false."""
        storage = self.storage
        ratios = await storage.in_storage_thread(live_ratios, storage)
        current_log_id = storage.entry_logger.current_log_id
        if not include_current:
            ratios.pop(current_log_id, None)
        result = CompactionResult()
        for log_id in candidates(ratios, threshold, current_log_id):
            result += await storage.in_storage_thread(compact_log, storage, log_id, kind)
        return result
