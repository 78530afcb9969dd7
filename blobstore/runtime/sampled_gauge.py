"""A gauge counted in a plain number and published to Prometheus at most once a second.

Requests in flight are counted on the hottest paths (every bookie request, every add,
every S3 request). A prometheus_client gauge takes a lock on every `inc`/`dec`, and in a
multi-worker gateway also writes an mmap'd file; two of those per request are a
measurable share of a small request. Here the paths change an int; the gauge is set
when a second has passed since it was last set, and whenever the count returns to
zero, so an idle process never shows stale work.
"""

from __future__ import annotations

import time

from prometheus_client import Gauge

PUBLISH_INTERVAL_S = 1.0


class SampledGauge:
    """`add(+1)` / `add(-1)` from one event loop; `value` is exact, the gauge is at most
    `PUBLISH_INTERVAL_S` behind it (exact whenever the count is zero)."""

    __slots__ = ("_gauge", "_next_publish", "value")

    def __init__(self, gauge: Gauge) -> None:
        self._gauge = gauge
        self._next_publish = 0.0
        self.value = 0

    def add(self, delta: int) -> None:
        self.value += delta
        if self.value == 0 or time.monotonic() >= self._next_publish:
            self.publish()

    def publish(self) -> None:
        self._gauge.set(self.value)
        self._next_publish = time.monotonic() + PUBLISH_INTERVAL_S
