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

from blobstore.sampled_gauge import SampledGauge

REQUESTS = Counter(
    "s3_requests_total", "S3 requests by operation and HTTP status", ["operation", "status"]
)
REQUEST_SECONDS = Histogram(
    "s3_request_duration_seconds",
    "Time from request start to the end of the response, by operation",
    ["operation"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
BYTES_IN = Counter("s3_bytes_in_total", "Request body bytes received, by operation", ["operation"])
BYTES_OUT = Counter("s3_bytes_out_total", "Response body bytes sent, by operation", ["operation"])
IN_FLIGHT = SampledGauge(
    Gauge("s3_requests_in_flight", "Requests being served", multiprocess_mode="livesum")
)


def exposition() -> tuple[bytes, str]:
    """The metrics text and its content type (all workers' when in multiprocess mode)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(), CONTENT_TYPE_LATEST
