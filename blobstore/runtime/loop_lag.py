"""How late an event loop runs its callbacks: a timer due every `interval_s` measures
its own lateness, which every other callback of the loop waited too. A long callback, a
C call holding the interpreter lock in another thread of the process (a sync RocksDB
write's fsync did, in the bookie), or a CPU starved by other processes shows here
before it shows anywhere else: as every request's latency.

The lateness goes to a Prometheus histogram (`observe`); a stall past `warn_s` is also
logged, rate-limited. A timer samples: a stall shorter than the interval is seen when the
timer falls due inside it, so the histogram's share of late samples is the share of time
the loop was that late, not a count of stalls.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol

logger = logging.getLogger(__name__)

INTERVAL_S = 0.05
WARN_S = 0.25
LOG_EVERY_S = 10.0
# Fine from 1 ms (uvloop's timer resolution) to the seconds of a frozen process.
LAG_BUCKETS_S = (0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)


class _Observer(Protocol):
    def observe(self, value: float) -> None: ...


class LoopLagMonitor:
    """Start on the loop to watch; `stop()` cancels its timer."""

    def __init__(
        self,
        histogram: _Observer,
        name: str,
        interval_s: float = INTERVAL_S,
        warn_s: float = WARN_S,
    ) -> None:
        self.histogram = histogram
        self.name = name
        self.interval_s = interval_s
        self.warn_s = warn_s
        self.worst_s = 0.0  # largest lateness seen
        self._due = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._logged_at = -LOG_EVERY_S

    def start(self) -> None:
        self._schedule()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _schedule(self) -> None:
        # time.monotonic(), not loop.time(): uvloop's clock moves in whole milliseconds.
        self._due = time.monotonic() + self.interval_s
        self._timer = asyncio.get_running_loop().call_later(self.interval_s, self._tick)

    def _tick(self) -> None:
        now = time.monotonic()
        late_s = max(0.0, now - self._due)
        self.histogram.observe(late_s)
        self.worst_s = max(self.worst_s, late_s)
        if late_s >= self.warn_s and now - self._logged_at >= LOG_EVERY_S:
            self._logged_at = now
            logger.warning(
                "event loop stalled process=%s late_ms=%.0f (every request waited as long)",
                self.name,
                late_s * 1e3,
            )
        self._schedule()
