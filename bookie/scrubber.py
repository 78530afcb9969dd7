"""The scrubber: reads back and verifies every entry this bookie stores, at a bounded
rate, and reports the bad ones to the cluster's under-replicated set (BookKeeper's
local scrub, `ScrubberService` / `LocalConsistencyCheck`).

A pass walks the location index in key order (ledger, then entry) and, for each indexed
entry of a ledger this bookie still keeps, reads its record from the entry log and checks:

  - the record is there: the index names a log that exists and an offset the log holds
    whole (not past its end), with the ledger and entry ids of the index key; else the
    entry is `unreadable`;
  - the entry's CRC32C (the writer's digest, stored with it) verifies; else
    `digest_mismatch`.

Entries still in the write cache are not in the index yet: the next pass sees them.
A finding is checked once more before it is reported: compaction, or a repair, may
have moved the entry meanwhile (the index then names a new location, read again), and
a repaired copy may wait in the write cache to replace the indexed one (then the bad
copy read is not reported).

Findings go to `/ledgers/underreplicated` (`blobstore/wire/underreplicated.py`), one
report per ledger and reason, where the replication worker copies a good replica back
to this bookie. A pass reads at most `scrub_rate_mb_s` (counted in entry bytes, after
each batch of at most `BATCH_BYTES`), on a thread of its own: client reads keep the
read pool.

Passes run every `scrub_interval_s` (0: only on demand), counted from the end of the
last pass (kept in `<ledger_dir>/scrub.json`, so restarts do not put the next pass off;
without a record, the first comes after a random part of the interval, so bookies
started together do not scrub together), and on
demand through the admin port (`POST /api/v1/bookie/scrub`, `Scrubber.request`). One
pass at a time: a request while a pass runs joins it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import json
import logging
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from blobstore.runtime.zk import ZooKeeperClient
from blobstore.wire import protocol
from blobstore.wire import underreplicated as urs
from bookie.entry_logger import EntryLogMissingError
from bookie.ledger_storage import LedgerStorage
from bookie.metrics import METRICS

logger = logging.getLogger(__name__)

# One storage-thread call reads at most this many entries or bytes.
BATCH_ENTRIES = 256
BATCH_BYTES = 4 << 20
# Findings kept in a pass's result (all are reported; the result shows the first ones).
FINDINGS_SHOWN_MAX = 1000
# Reads of one entry while compaction keeps moving it.
MOVED_RETRIES = 3
RECORD_NAME = "scrub.json"  # in the ledger directory: {"last_done_at": wall time}


def first_wait_s(last_done_at: float | None, now: float, interval_s: float, draw: float) -> float:
    """Seconds until the first periodic pass after a start: one interval after the last
    pass ended (`draw` in [0, 1) spreads bookies due at once over 5 % of an interval),
    or a random half-to-whole interval when no pass ever ended."""
    if last_done_at is None:
        return interval_s * (0.5 + draw / 2)
    return max(0.0, last_done_at + interval_s - now) + interval_s * 0.05 * draw


def read_last_done_at(ledger_dir: str) -> float | None:
    try:
        with open(os.path.join(ledger_dir, RECORD_NAME)) as f:
            return float(json.load(f)["last_done_at"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_last_done_at(ledger_dir: str, when: float) -> None:
    path = os.path.join(ledger_dir, RECORD_NAME)
    with open(f"{path}.tmp", "w") as f:
        json.dump({"last_done_at": when}, f)
    os.replace(f"{path}.tmp", path)


@dataclass(frozen=True, slots=True)
class Finding:
    ledger_id: int
    entry_id: int
    reason: str  # urs.DIGEST_MISMATCH or urs.UNREADABLE
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {
            "ledger_id": self.ledger_id,
            "entry_id": self.entry_id,
            "reason": self.reason,
            "detail": self.detail,
        }


@dataclass(slots=True)
class ScrubPass:
    """One pass: its progress while it runs, its result after."""

    pass_id: int
    trigger: str  # "periodic" or "admin"
    rate_bytes_per_s: float  # 0: not limited
    bytes_total: int  # entry log bytes when the pass started (an estimate of its work)
    started_at: float = field(default_factory=time.time)
    state: str = "running"  # running | done | failed
    entries_verified: int = 0
    bytes_verified: int = 0
    findings: list[Finding] = field(default_factory=list)
    finding_count: int = 0
    reports_written: int = 0
    error: str = ""
    duration_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "pass_id": self.pass_id,
            "trigger": self.trigger,
            "state": self.state,
            "started_at": self.started_at,
            "duration_s": round(self.duration_s, 3),
            "rate_mb_s": self.rate_bytes_per_s / 1e6,
            "bytes_total": self.bytes_total,
            "entries_verified": self.entries_verified,
            "bytes_verified": self.bytes_verified,
            "errors": self.finding_count,
            "findings": [f.to_json() for f in self.findings],
            "reports_written": self.reports_written,
            "error": self.error,
        }


@dataclass(slots=True)
class BatchOutcome:
    """What one storage-thread call read: the key to go on from (None: the index ends)."""

    next_key: tuple[int, int] | None
    entries: int = 0
    bytes: int = 0
    findings: list[Finding] = field(default_factory=list)


def pause_for_rate(bytes_done: int, elapsed_s: float, rate_bytes_per_s: float) -> float:
    """Seconds to wait so that `bytes_done` over the pass so far stays within the rate."""
    if rate_bytes_per_s <= 0:
        return 0.0
    return max(0.0, bytes_done / rate_bytes_per_s - elapsed_s)


def check_record(data: bytes, ledger_id: int, entry_id: int) -> Finding | None:
    """A stored entry's bytes against its index key: None when good."""
    if not protocol.verify_entry(data):
        return Finding(ledger_id, entry_id, urs.DIGEST_MISMATCH, "CRC32C does not verify")
    stored_ledger, stored_entry, _ = protocol.entry_ids(data)
    if (stored_ledger, stored_entry) != (ledger_id, entry_id):
        detail = f"holds ledger {stored_ledger} entry {stored_entry}"
        return Finding(ledger_id, entry_id, urs.UNREADABLE, detail)
    return None


class Scrubber:
    def __init__(
        self,
        zk: ZooKeeperClient,
        storage: LedgerStorage,
        bookie_id: Callable[[], str],
        *,
        interval_s: float,
        rate_bytes_per_s: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Any] = asyncio.sleep,
    ) -> None:
        self._zk = zk
        self._storage = storage
        self._bookie_id = bookie_id
        self._interval_s = interval_s
        self._rate_bytes_per_s = rate_bytes_per_s
        self._clock = clock
        self._sleep = sleep
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="scrub")
        self._wakeup = asyncio.Event()
        self._requested_rate: float | None = None  # a pass asked for, at this rate
        self._pass_ids = itertools.count(1)
        self.current: ScrubPass | None = None
        self.last: ScrubPass | None = None

    # ------------------------------------------------------------------ control

    def status(self) -> dict[str, Any]:
        return {
            "state": "running" if self.current is not None else "idle",
            "interval_s": self._interval_s,
            "rate_mb_s": self._rate_bytes_per_s / 1e6,
            "current": self.current.to_json() if self.current else None,
            "last": self.last.to_json() if self.last else None,
        }

    def request(self, rate_bytes_per_s: float | None = None) -> int:
        """A pass now (or the one running): its id. `rate_bytes_per_s` overrides the
        configured rate for that pass (0: not limited)."""
        if self.current is not None:
            return self.current.pass_id
        if self._requested_rate is None:
            self._requested_rate = (
                self._rate_bytes_per_s if rate_bytes_per_s is None else rate_bytes_per_s
            )
        self._wakeup.set()
        return (self.last.pass_id if self.last else 0) + 1

    async def run(self) -> None:
        """Periodic passes (when `interval_s` > 0) and requested ones, one at a time."""
        periodic = self._interval_s > 0
        last_done_at = await asyncio.to_thread(read_last_done_at, self._storage.ledger_dir)
        next_at = self._clock() + first_wait_s(
            last_done_at, time.time(), self._interval_s, random.random()
        )
        while True:
            if self._requested_rate is None:
                timeout_s = max(0.0, next_at - self._clock()) if periodic else None
                try:
                    await asyncio.wait_for(self._wakeup.wait(), timeout_s)
                except TimeoutError:
                    pass
            self._wakeup.clear()
            if self._requested_rate is not None:
                rate, self._requested_rate = self._requested_rate, None
                await self.scrub("admin", rate)
            elif periodic and self._clock() >= next_at:
                await self.scrub("periodic", self._rate_bytes_per_s)
                next_at = self._clock() + self._interval_s

    async def close(self) -> None:
        """After the task running `run` ended: wait for a batch still reading."""
        await asyncio.to_thread(self._executor.shutdown, wait=True)

    # ------------------------------------------------------------------ a pass

    async def scrub(self, trigger: str, rate_bytes_per_s: float) -> ScrubPass:
        """One whole pass, findings reported; its result (also in `last`)."""
        bytes_total = sum(
            self._storage.entry_logger.log_bytes(log_id)
            for log_id in self._storage.entry_logger.list_logs()
        )
        scrub = ScrubPass(next(self._pass_ids), trigger, rate_bytes_per_s, bytes_total)
        self.current = scrub
        started = self._clock()
        logger.info(
            "scrub_started pass_id=%d trigger=%s rate_mb_s=%g bytes_total=%d",
            scrub.pass_id,
            trigger,
            rate_bytes_per_s / 1e6,
            bytes_total,
        )
        try:
            found = await self._verify_all(scrub, started)
            await self._report(scrub, found)
            scrub.state = "done"
            METRICS.scrub_passes.labels("ok").inc()
        except asyncio.CancelledError:
            scrub.state = "failed"
            scrub.error = "the bookie is stopping"
            raise
        except Exception as e:
            scrub.state = "failed"
            scrub.error = repr(e)
            METRICS.scrub_passes.labels("error").inc()
            logger.exception("scrub_failed pass_id=%d", scrub.pass_id)
        finally:
            scrub.duration_s = self._clock() - started
            self.current = None
            self.last = scrub
        self._log_done(scrub)
        if scrub.state == "done":
            try:
                await asyncio.to_thread(
                    write_last_done_at, self._storage.ledger_dir, scrub.started_at
                )
            except OSError as e:  # the next start schedules as if none ran
                logger.warning("scrub_record_not_written error=%r", e)
        return scrub

    def _log_done(self, scrub: ScrubPass) -> None:
        log = logger.warning if scrub.finding_count or scrub.error else logger.info
        log(
            "scrub_done pass_id=%d state=%s entries_verified=%d bytes_verified=%d errors=%d "
            "reports_written=%d duration_s=%.3f",
            scrub.pass_id,
            scrub.state,
            scrub.entries_verified,
            scrub.bytes_verified,
            scrub.finding_count,
            scrub.reports_written,
            scrub.duration_s,
        )

    async def _verify_all(self, scrub: ScrubPass, started: float) -> list[Finding]:
        """Every indexed entry, batch by batch, paced; the confirmed findings."""
        loop = asyncio.get_running_loop()
        found: list[Finding] = []
        key: tuple[int, int] | None = (0, 0)
        while key is not None:
            batch = await loop.run_in_executor(self._executor, self._verify_batch, key)
            key = batch.next_key
            scrub.entries_verified += batch.entries
            scrub.bytes_verified += batch.bytes
            METRICS.scrub_entries_verified.inc(batch.entries)
            METRICS.scrub_bytes_verified.inc(batch.bytes)
            for finding in batch.findings:
                METRICS.scrub_errors.labels(finding.reason).inc()
                logger.warning(
                    "scrub_bad_entry ledger_id=%d entry_id=%d reason=%s detail=%s",
                    finding.ledger_id,
                    finding.entry_id,
                    finding.reason,
                    finding.detail,
                )
                scrub.finding_count += 1
                if len(scrub.findings) < FINDINGS_SHOWN_MAX:
                    scrub.findings.append(finding)
            found += batch.findings
            pause = pause_for_rate(
                scrub.bytes_verified, self._clock() - started, scrub.rate_bytes_per_s
            )
            if pause > 0:
                await self._sleep(pause)
        return found

    def _verify_batch(self, key: tuple[int, int]) -> BatchOutcome:
        """Scrub thread: entries from index key `key` on, up to a batch's count or bytes."""
        index = self._storage.index
        outcome = BatchOutcome(next_key=None)
        for ledger_id, entry_id, loc in index.locations(*key):
            if outcome.entries >= BATCH_ENTRIES or outcome.bytes >= BATCH_BYTES:
                outcome.next_key = (ledger_id, entry_id)
                break
            if ledger_id not in self._storage.states:
                continue  # deleted: garbage collection drops it
            size, finding = self._verify_entry(ledger_id, entry_id, loc)
            outcome.entries += 1
            outcome.bytes += size
            if finding is not None:
                outcome.findings.append(finding)
        return outcome

    def _verify_entry(self, ledger_id: int, entry_id: int, loc: int) -> tuple[int, Finding | None]:
        """(bytes read, a finding or None) for one indexed entry, read where the index
        names it now (compaction or a repair may move it while the pass runs)."""
        finding: Finding | None = None
        for _ in range(MOVED_RETRIES):
            try:
                data = self._storage.entry_logger.read(loc, ledger_id, entry_id)
            except EntryLogMissingError as e:
                data, finding = b"", Finding(ledger_id, entry_id, urs.UNREADABLE, f"log {e} gone")
            except OSError as e:
                data, finding = b"", Finding(ledger_id, entry_id, urs.UNREADABLE, str(e))
            else:
                finding = check_record(data, ledger_id, entry_id)
            if finding is None or self._rewritten(ledger_id, entry_id):
                return len(data), None
            moved = self._storage.index.get_location(ledger_id, entry_id)
            if moved is None:
                return len(data), None  # deleted meanwhile
            if moved == loc:
                return len(data), finding
            loc = moved
        return 0, finding

    def _rewritten(self, ledger_id: int, entry_id: int) -> bool:
        """A newer copy waits in the write cache (a repair wrote it): the next checkpoint
        indexes it in place of the one read."""
        storage = self._storage
        return any(
            entry_id in cache.get(ledger_id, ()) for cache in (storage.active, storage.flushing)
        )

    # ------------------------------------------------------------------ reporting

    async def _report(self, scrub: ScrubPass, findings: list[Finding]) -> None:
        """One report per ledger and reason to the under-replicated set."""
        by_ledger: dict[tuple[int, str], list[int]] = {}
        for finding in findings:
            by_ledger.setdefault((finding.ledger_id, finding.reason), []).append(finding.entry_id)
        bookie_id = self._bookie_id()
        now = time.time()
        for (ledger_id, reason), entry_ids in sorted(by_ledger.items()):
            for report in urs.split_reports(
                ledger_id, bookie_id, entry_ids, reason, f"scrubber {bookie_id}", now
            ):
                path = await self._zk.create(
                    urs.report_path_prefix(ledger_id),
                    report.encode(),
                    sequence=True,
                    makepath=True,
                )
                scrub.reports_written += 1
                logger.warning(
                    "scrub_reported ledger_id=%d entries=%d reason=%s report=%s",
                    ledger_id,
                    report.entry_count,
                    reason,
                    path,
                )
