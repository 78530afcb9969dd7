"""RequestTally: per-request samples added up and published in bulk give exactly the
exposition that observing each request directly gives (counts, histogram buckets and
sum, bytes), published when the worker is idle and at most an interval late otherwise."""

from __future__ import annotations

import random
import time

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from blobstore.runtime.sampled_gauge import PUBLISH_INTERVAL_S, SampledGauge
from s3api.metrics import RequestTally

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


def _metric_set(registry: CollectorRegistry) -> tuple[Counter, Histogram, Counter, Counter]:
    return (
        Counter("t_requests_total", "r", ["operation", "status"], registry=registry),
        Histogram("t_seconds", "s", ["operation"], buckets=BUCKETS, registry=registry),
        Counter("t_bytes_in_total", "i", ["operation"], registry=registry),
        Counter("t_bytes_out_total", "o", ["operation"], registry=registry),
    )


def _samples(registry: CollectorRegistry) -> list[tuple[str, tuple[tuple[str, str], ...], float]]:
    return sorted(
        (s.name, tuple(sorted(s.labels.items())), round(s.value, 9))
        for family in registry.collect()
        for s in family.samples
        if not s.name.endswith("_created")
    )


def test_bulk_publication_equals_direct_observation() -> None:
    direct, tallied = CollectorRegistry(), CollectorRegistry()
    requests, seconds, bytes_in, bytes_out = _metric_set(direct)
    in_flight = SampledGauge(Gauge("t_in_flight", "f", registry=CollectorRegistry()))
    tally = RequestTally(*_metric_set(tallied), in_flight)
    in_flight.value = 3  # busy: nothing is published before the interval
    rng = random.Random(7)
    operations = ["GetObject", "PutObject", "ListObjectsV2"]
    # Values on bucket bounds too: "le" includes the bound itself.
    values = [rng.choice([*BUCKETS, 0.0, 100.0, rng.uniform(0, 2)]) for _ in range(500)]
    for value in values:
        operation = rng.choice(operations)
        status = rng.choice(["200", "404", "503"])
        size_in, size_out = rng.choice([(0, 0), (4096, 0), (0, 4096)])
        requests.labels(operation=operation, status=status).inc()
        seconds.labels(operation=operation).observe(value)
        bytes_in.labels(operation=operation).inc(size_in)
        bytes_out.labels(operation=operation).inc(size_out)
        tally.add(operation, status, value, size_in, size_out)
    tally.publish()
    assert _samples(tallied) == _samples(direct) != []
    assert generate_latest(tallied).count(b"t_seconds_bucket") == generate_latest(direct).count(
        b"t_seconds_bucket"
    )


def test_published_when_idle_and_after_the_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [50.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    registry = CollectorRegistry()
    in_flight = SampledGauge(Gauge("t_in_flight", "f", registry=registry))
    tally = RequestTally(*_metric_set(registry), in_flight)

    def count() -> float | None:
        return registry.get_sample_value(
            "t_requests_total", {"operation": "GetObject", "status": "200"}
        )

    in_flight.value = 2
    tally.add("GetObject", "200", 0.002, 0, 10)  # first: published at once
    assert count() == 1
    tally.add("GetObject", "200", 0.002, 0, 10)
    tally.add("GetObject", "200", 0.002, 0, 10)
    assert count() == 1  # busy, within the interval
    now[0] += PUBLISH_INTERVAL_S
    tally.add("GetObject", "200", 0.002, 0, 10)
    assert count() == 4
    tally.add("GetObject", "200", 0.002, 0, 10)
    in_flight.value = 0
    tally.add("GetObject", "200", 0.002, 0, 10)  # the worker is idle: published
    assert count() == 6
    assert registry.get_sample_value("t_bytes_out_total", {"operation": "GetObject"}) == 60
