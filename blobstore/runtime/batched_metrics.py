"""Counters and histograms added up in plain numbers and published to Prometheus at most
once a second, and whenever metrics are collected.

A prometheus_client update takes a lock per value (and in a multi-worker gateway writes
an mmap'd file): `Histogram.observe` walks the bucket bounds and increments two values.
Counting each add and each bookie answer that way is a visible share of the CPU an add
costs the ledger client (docs/benchmarks/design-figures.md). Here `observe` is a bisect
into the bounds and two additions; `publish()` moves the sums into the Prometheus child (one increment per
non-empty bucket), so an exposition shows the same totals.

Publishing happens on an update once PUBLISH_INTERVAL_S has passed since the last one,
and on every collection of the default registry (a collector registered when this module
is imported, so before any metric built on it, and therefore collected first) or of a
registry given to `publish_on_collect` (the bookie's). An exposition that collects no
such registry in this process (the gateway's multiprocess one reads every worker's
files) calls `publish_all()` first. So a scrape
sees every update made before it, and a process's files at most a second behind.

Updates are for one thread (an event loop), like `SampledGauge`; publishing may happen on
any thread (prometheus_client's own HTTP server collects on its own). The updating thread
only adds to running totals, which nothing else writes; a publisher (under a lock, since
several may run at once) folds in what the totals gained since the last publication. So
an update racing a collection is published by this collection or the next, never lost
and never counted twice.
"""

from __future__ import annotations

import bisect
import itertools
import operator
import threading
import time
from collections.abc import Iterable
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
from prometheus_client.registry import Collector

from blobstore.runtime.sampled_gauge import PUBLISH_INTERVAL_S

_ALL: list[BatchedCounter | BatchedHistogram] = []
# Publishers may run on several threads at once (an update's once-a-second publication
# on the loop, a collection on prometheus_client's server thread); updates take no lock.
_PUBLISHING = threading.Lock()


class BatchedCounter:
    """A prometheus Counter child fed in batches."""

    __slots__ = ("_child", "_total", "_published", "_next_publish")

    def __init__(self, child: Any) -> None:
        self._child = child
        self._total = 0.0  # written by the updating thread only
        self._published = 0.0  # written by publishers only, under _PUBLISHING
        self._next_publish = 0.0
        _ALL.append(self)

    def inc(self, amount: float = 1) -> None:
        self._total += amount
        if time.monotonic() >= self._next_publish:
            self.publish()

    def publish(self) -> None:
        with _PUBLISHING:
            total = self._total
            if total != self._published:
                self._child.inc(total - self._published)
                self._published = total
            self._next_publish = time.monotonic() + PUBLISH_INTERVAL_S


class BatchedHistogram:
    """A prometheus Histogram child (one without labels, or one label set's) fed in
    batches."""

    __slots__ = (
        "_child",
        "_bounds",
        "_counts",
        "_sum",
        "_published_counts",
        "_published_sum",
        "_indexes",
        "_next_publish",
    )

    def __init__(self, child: Any) -> None:
        self._child = child
        self._bounds = tuple(child._upper_bounds)  # ends with +Inf
        # Running totals, written by the updating thread only ...
        self._counts = [0] * len(self._bounds)
        self._sum = 0.0
        # ... and what publishers (under _PUBLISHING) have folded into the child.
        self._published_counts = [0] * len(self._bounds)
        self._published_sum = 0.0
        self._indexes = range(len(self._bounds))
        self._next_publish = 0.0
        _ALL.append(self)

    def observe(self, value: float) -> None:
        self._counts[bisect.bisect_left(self._bounds, value)] += 1
        self._sum += value
        if time.monotonic() >= self._next_publish:
            self.publish()

    def publish(self) -> None:
        with _PUBLISHING:
            # Into the child what the running totals gained: per bucket (observe adds to
            # the first bucket whose bound holds the value; exposition cumulates them),
            # then the sum. The sum is read after the counts: an observation between the
            # two reads has its value published now and its count next time, never
            # either twice.
            counts = list(self._counts)
            published = self._published_counts
            if counts != published:
                buckets = self._child._buckets
                gained = list(map(operator.sub, counts, published))
                for i in itertools.compress(self._indexes, gained):  # the buckets that grew
                    buckets[i].inc(gained[i])
                self._published_counts = counts
            total = self._sum
            if total != self._published_sum:
                self._child._sum.inc(total - self._published_sum)
                self._published_sum = total
            self._next_publish = time.monotonic() + PUBLISH_INTERVAL_S


# Keyed by the metric itself, not its id(): the key keeps it alive, so a metric made
# later (tests make and drop registries) can never reuse a dropped one's id and be handed
# its children.
_CHILDREN: dict[tuple[Counter | Histogram, tuple[str, ...]], Any] = {}


def batched_counter(metric: Counter, *labels: str) -> BatchedCounter:
    """`metric.labels(*labels)`, batched: one per label set, made on first use (a
    labels() lookup costs more than the update it serves)."""
    child = _CHILDREN.get((metric, labels))
    if child is None:
        child = _CHILDREN[(metric, labels)] = BatchedCounter(metric.labels(*labels))
    return child


def batched_histogram(metric: Histogram, *labels: str) -> BatchedHistogram:
    """`metric.labels(*labels)`, batched, as `batched_counter`."""
    child = _CHILDREN.get((metric, labels))
    if child is None:
        child = _CHILDREN[(metric, labels)] = BatchedHistogram(metric.labels(*labels))
    return child


def publish_all() -> None:
    """Publish every batched metric of this process (before an exposition)."""
    for metric in _ALL:
        metric.publish()


class _PublishOnCollect(Collector):
    """Collected before the metrics built on this module (registered first): publishes
    them, contributes nothing itself."""

    def collect(self) -> Iterable[Any]:
        publish_all()
        return []

    def describe(self) -> Iterable[Any]:
        return []


def publish_on_collect(registry: CollectorRegistry) -> None:
    """Have every collection of `registry` publish the batched metrics first: call before
    the registry gets any metric (collectors are collected in registration order)."""
    registry.register(_PublishOnCollect())


publish_on_collect(REGISTRY)
