"""Prometheus metrics of the gateway, and the /metrics exposition.

With one worker, /metrics shows that process's registry. With several workers, every
worker writes its samples to files in PROMETHEUS_MULTIPROC_DIR (the gateway command
creates a private directory when the variable is unset, before any worker starts) and
/metrics, answered by whichever worker gets the request, aggregates all workers' files:
counters and histograms are summed, gauges use their `multiprocess_mode`.
"""

from __future__ import annotations

import bisect
import os
import time

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

from blobstore import batched_metrics, deferred_metrics
from blobstore.batched_metrics import fold_histogram
from blobstore.loop_lag import LAG_BUCKETS_S
from blobstore.sampled_gauge import PUBLISH_INTERVAL_S, SampledGauge

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
    "How late a worker's event loop ran a timer due every 50 ms (blobstore.loop_lag): "
    "what every request of that worker waited then",
    buckets=LAG_BUCKETS_S,
)
IN_FLIGHT = SampledGauge(
    Gauge("s3_requests_in_flight", "Requests being served", multiprocess_mode="livesum")
)


class RequestTally:
    """Per-request samples (request count, latency, bytes) added up in plain numbers and
    published at most once a second, and whenever no request is in flight.

    In a multi-worker gateway every prometheus_client update takes a lock and writes an
    mmap'd file: five per request (count, histogram sum and bucket, bytes in and out),
    a tenth of a small GET's CPU. Here a request adds to dicts; `publish()` moves the
    sums into the Prometheus children, so scrapes see the same totals, at most a
    second late under load and exact when the worker is idle.
    """

    __slots__ = (
        "requests",
        "seconds",
        "bytes_in",
        "bytes_out",
        "in_flight",
        "_bounds",
        "_counts",
        "_latency",
        "_bytes",
        "_next_publish",
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
        self._bounds = tuple(seconds._upper_bounds)  # ends with +Inf
        self._counts: dict[tuple[str, str], int] = {}
        # operation -> [sum of seconds, count in bucket 0, 1, ...]
        self._latency: dict[str, list[float]] = {}
        self._bytes: dict[str, list[int]] = {}  # operation -> [in, out]
        self._next_publish = 0.0

    def add(
        self, operation: str, status: str, seconds: float, bytes_in: int, bytes_out: int
    ) -> None:
        key = (operation, status)
        self._counts[key] = self._counts.get(key, 0) + 1
        latency = self._latency.get(operation)
        if latency is None:
            latency = self._latency[operation] = [0.0] * (len(self._bounds) + 1)
        latency[0] += seconds
        latency[1 + bisect.bisect_left(self._bounds, seconds)] += 1
        if bytes_in or bytes_out:
            sizes = self._bytes.get(operation)
            if sizes is None:
                sizes = self._bytes[operation] = [0, 0]
            sizes[0] += bytes_in
            sizes[1] += bytes_out
        if self.in_flight.value == 0 or time.monotonic() >= self._next_publish:
            self.publish()

    def publish(self) -> None:
        counts, self._counts = self._counts, {}
        latencies, self._latency = self._latency, {}
        sizes, self._bytes = self._bytes, {}
        for (operation, status), n in counts.items():
            self.requests.labels(operation=operation, status=status).inc(n)
        for operation, latency in latencies.items():
            fold_histogram(self.seconds.labels(operation=operation), latency[0], latency[1:])
        for operation, (bytes_in, bytes_out) in sizes.items():
            self.bytes_in.labels(operation=operation).inc(bytes_in)
            self.bytes_out.labels(operation=operation).inc(bytes_out)
        self._next_publish = time.monotonic() + PUBLISH_INTERVAL_S
        deferred_metrics.flush()  # and what the libraries below counted meanwhile


TALLY = RequestTally(REQUESTS, REQUEST_SECONDS, BYTES_IN, BYTES_OUT, IN_FLIGHT)


def exposition() -> tuple[bytes, str]:
    """The metrics text and its content type (all workers' when in multiprocess mode)."""
    batched_metrics.publish_all()  # the libraries' batched updates, then
    TALLY.publish()  # this worker's, and every value into its file
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(), CONTENT_TYPE_LATEST
