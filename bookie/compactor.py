"""Entry log compaction: copy a sparse log's live entries into the current log, then delete it.

Minor compaction takes logs whose live ratio is under `minor_compaction_threshold` (0.2,
hourly), major under `major_compaction_threshold` (0.8, daily). A log with no live bytes
is deleted without being read.

On-disk effects and faults tolerated
------------------------------------
For each log (on the storage thread, so never interleaved with a checkpoint):
  1. scan the log; an entry is live when its ledger still exists locally and the index
     still points at this very record (not a later copy);
  2. append live entries to the current log and fsync it;
  3. write the new locations and the log's zeroed byte counts in one synced index batch;
  4. delete the old log file and fsync the directory.
A kill -9 before 3 leaves the index pointing at the old log (the copies are unreferenced
garbage for a later compaction); after 3 and before 4 the old log is garbage and is
collected on the next round (its byte counts are zero). Entries are never lost.
Compaction does not need the bookie to be writable: it is how a full (read-only)
bookie gets space back.
"""

from __future__ import annotations

import asyncio
import logging

from bookie.ledger_storage import LedgerStorage

logger = logging.getLogger(__name__)


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

    async def compact(self, threshold: float, kind: str) -> int:
        """Compact every log under the threshold; returns the bytes freed."""
        storage = self.storage
        loop = asyncio.get_running_loop()
        ratios = await loop.run_in_executor(storage.storage_executor, storage.live_ratios)
        freed = 0
        for log_id in candidates(ratios, threshold, storage.entry_logger.current_log_id):
            freed += await loop.run_in_executor(
                storage.storage_executor, storage.compact_log, log_id, kind
            )
        return freed
