"""Multiprocess metric values that add up in memory and reach their files in batches.

In a multi-worker gateway prometheus_client keeps every sample in an mmap'd file per
process, so /metrics, answered by any worker, can add up all of them. Each `inc` then
takes a lock, packs two doubles and writes them into the mmap, and a small GET makes
about fifteen such updates below the S3 layer (cache lookups, views, bookie and ledger
timings, bytes read). Here an update adds to a plain number under one
process-wide lock; `flush()` writes every changed value to its file. The gateway
flushes when no request is in flight, once a second meanwhile, before answering
/metrics and at shutdown, so a scrape sees a worker's updates at most a second late,
and exactly once it is idle. `set` (gauges) writes at once, after dropping what was
pending (a set replaces it).

`install()` must run before any metric is created in the process, like prometheus's
own multiprocess setup; it also gives the values a process id cached at start
(prometheus_client asks os.getpid() on every update, to notice a fork), refreshed in a
forked child.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from prometheus_client import values

FLUSH_INTERVAL_S = 1.0

_lock = threading.Lock()  # executor threads (hashing, disk) may update metrics too
_dirty: list[Any] = []
_base: Any = None
_next_flush = 0.0


def install() -> None:
    global _base
    pid = [os.getpid()]

    def refresh() -> None:
        pid[0] = os.getpid()
        # The parent's pending updates are the parent's to write; the child's own
        # updates of the same values must queue them again.
        for value in _dirty:
            value._pending = 0.0
            value._queued = False
        _dirty.clear()

    os.register_at_fork(after_in_child=refresh)
    base = values.MultiProcessValue(  # type: ignore[no-untyped-call]
        process_identifier=lambda: pid[0]
    )
    _base = base

    class DeferredValue(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._pending = 0.0
            self._queued = False

        def inc(self, amount: float) -> None:
            with _lock:
                self._pending += amount
                if not self._queued:
                    self._queued = True
                    _dirty.append(self)
            if time.monotonic() >= _next_flush:
                flush()

        def set(self, value: float, timestamp: float | None = None) -> None:
            with _lock:
                self._pending = 0.0
            super().set(value, timestamp)

        def get(self) -> float:
            flush()
            return float(super().get())

    values.ValueClass = DeferredValue


def flush() -> None:
    """Write every pending update to its file (nothing to do unless installed)."""
    global _next_flush
    _next_flush = time.monotonic() + FLUSH_INTERVAL_S
    if _base is None or not _dirty:
        return
    with _lock:
        batch = [(value, value._pending) for value in _dirty]
        for value, _ in batch:
            value._pending = 0.0
            value._queued = False
        _dirty.clear()
    for value, amount in batch:
        if amount:
            _base.inc(value, amount)
