"""Prometheus metrics of the gateway, and the /metrics exposition.

With one worker, /metrics shows that process's registry. With several workers, every
worker writes its samples to files in PROMETHEUS_MULTIPROC_DIR (the gateway command
creates a private directory when the variable is unset, before any worker starts) and
/metrics, answered by whichever worker gets the request, aggregates all workers' files:
counters and histograms are summed, gauges use their `multiprocess_mode`.
"""

from __future__ import annotations

import os

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

from blobstore.runtime import batched_metrics
from blobstore.runtime.batched_metrics import (
    BatchedCounter,
    BatchedHistogram,
    batched_counter,
    batched_histogram,
)
from blobstore.runtime.loop_lag import LAG_BUCKETS_S
from blobstore.runtime.sampled_gauge import SampledGauge
from s3api import deferred_metrics

REQUESTS = Counter(
    "s3_requests_total", "S3 requests by operation and HTTP status", ["operation", "status"]
)
# Fine between 5 and 50 ms, where small requests' latency aims (PUT p99 15 ms) lie.
REQUEST_BUCKETS_S = (
    0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.1, 0.25, 0.5,
    1, 2.5, 5, 10, 30, 60,
)  # fmt: skip
REQUEST_SECONDS = Histogram(
    "s3_request_duration_seconds",
    "Time from request start to the end of the response, by operation",
    ["operation"],
    buckets=REQUEST_BUCKETS_S,
)
BYTES_IN = Counter("s3_bytes_in_total", "Request body bytes received, by operation", ["operation"])
BYTES_OUT = Counter("s3_bytes_out_total", "Response body bytes sent, by operation", ["operation"])
EVENT_LOOP_LAG = Histogram(
    "blobstore_event_loop_lag_seconds",
    "How late a worker's event loop ran a timer due every 50 ms (blobstore.runtime.loop_lag): "
    "what every request of that worker waited then",
    buckets=LAG_BUCKETS_S,
)
IN_FLIGHT = SampledGauge(
    Gauge("s3_requests_in_flight", "Requests being served", multiprocess_mode="livesum")
)


class RequestTally:
    """Per-request samples (request count, latency, bytes) added up in plain numbers
    (`blobstore.runtime.batched_metrics` children) and published at most once a second, and
    whenever no request is in flight.

    In a multi-worker gateway every prometheus_client update takes a lock and writes an
    mmap'd file: five per request (count, histogram sum and bucket, bytes in and out),
    a tenth of a small GET's CPU. Here a request adds to its operation's batched
    children (one dict lookup finds all four), so scrapes see the same totals, at most a
    second late under load and exact when the worker is idle.
    """

    __slots__ = (
        "requests",
        "seconds",
        "bytes_in",
        "bytes_out",
        "in_flight",
        "_children",
        "_touched",
    )

    def __init__(
        self,
        requests: Counter,
        seconds: Histogram,
        bytes_in: Counter,
        bytes_out: Counter,
        in_flight: SampledGauge,
    ) -> None:
        self.requests = requests
        self.seconds = seconds
        self.bytes_in = bytes_in
        self.bytes_out = bytes_out
        self.in_flight = in_flight
        # (operation, status) -> (count, latency, bytes in, bytes out)
        self._children: dict[
            tuple[str, str],
            tuple[BatchedCounter, BatchedHistogram, BatchedCounter, BatchedCounter],
        ] = {}
        self._touched: set[tuple[str, str]] = set()  # added to since the last publish

    def add(
        self, operation: str, status: str, seconds: float, bytes_in: int, bytes_out: int
    ) -> None:
        children = self._children.get((operation, status))
        if children is None:
            children = self._children[(operation, status)] = (
                batched_counter(self.requests, operation, status),
                batched_histogram(self.seconds, operation),
                batched_counter(self.bytes_in, operation),
                batched_counter(self.bytes_out, operation),
            )
        self._touched.add((operation, status))
        count, latency, sizes_in, sizes_out = children
        count.inc()
        latency.observe(seconds)
        if bytes_in or bytes_out:
            sizes_in.inc(bytes_in)
            sizes_out.inc(bytes_out)
        if self.in_flight.value == 0:
            self.publish()

    def publish(self) -> None:
        touched, self._touched = self._touched, set()
        for key in touched:
            for child in self._children[key]:
                child.publish()
        deferred_metrics.flush()  # and what the libraries below counted meanwhile


TALLY = RequestTally(REQUESTS, REQUEST_SECONDS, BYTES_IN, BYTES_OUT, IN_FLIGHT)


def publish() -> None:
    """Every batched update of this worker, the requests' and the libraries', into the
    Prometheus values (and, with several workers, their files): before an exposition,
    once a second while the worker is busy, and at shutdown."""
    batched_metrics.publish_all()
    deferred_metrics.flush()


def exposition() -> tuple[bytes, str]:
    """The metrics text and its content type (all workers' when in multiprocess mode)."""
    publish()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(), CONTENT_TYPE_LATEST
