"""SampledGauge: the count is exact, the published gauge at most an interval behind and
exact whenever the count is back to zero."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Gauge

from blobstore.runtime import sampled_gauge
from blobstore.runtime.sampled_gauge import SampledGauge


def published(registry: CollectorRegistry) -> float | None:
    return registry.get_sample_value("work_in_flight")


def test_published_on_zero_and_after_the_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr("blobstore.runtime.sampled_gauge.time.monotonic", lambda: now[0])
    registry = CollectorRegistry()
    gauge = SampledGauge(Gauge("work_in_flight", "work", registry=registry))
    gauge.add(1)  # first change: published at once
    assert published(registry) == 1
    for _ in range(5):
        gauge.add(1)
    assert gauge.value == 6 and published(registry) == 1  # within the interval: not yet
    now[0] += sampled_gauge.PUBLISH_INTERVAL_S
    gauge.add(1)
    assert published(registry) == 7
    for _ in range(7):
        gauge.add(-1)
    assert gauge.value == 0 and published(registry) == 0  # idle is never shown as busy
