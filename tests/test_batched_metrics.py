"""Batched counters and histograms publish exactly what direct prometheus_client updates
would have, and a collection of the default registry sees every update made before it."""

from __future__ import annotations

import random
import sys
import threading

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, generate_latest

from blobstore.runtime.batched_metrics import (
    BatchedCounter,
    BatchedHistogram,
    batched_counter,
    batched_histogram,
    publish_all,
)

BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1)


def _samples(registry: CollectorRegistry, name: str) -> dict[str, float]:
    """`suffix{labels}` -> value for one metric family, its own name stripped."""
    out = {}
    for line in generate_latest(registry).decode().splitlines():
        if line.startswith(name) and not line.startswith(name + "_created"):
            key, value = line.rsplit(" ", 1)
            out[key[len(name) :]] = float(value)
    return out


def test_a_batched_histogram_publishes_what_observe_would_have() -> None:
    registry = CollectorRegistry()
    direct = Histogram("direct_seconds", "d", buckets=BUCKETS, registry=registry)
    batched = BatchedHistogram(
        Histogram("batched_seconds", "b", buckets=BUCKETS, registry=registry)
    )
    rng = random.Random(7)
    # Values on the bounds too: observe puts a value equal to a bound in that bucket.
    values = [*BUCKETS, 0.0, 1e9] + [rng.expovariate(50) for _ in range(500)]
    for value in values:
        direct.observe(value)
        batched.observe(value)
    publish_all()
    direct_samples = _samples(registry, "direct_seconds")
    batched_samples = _samples(registry, "batched_seconds")
    assert direct_samples.keys() == batched_samples.keys()
    for key, value in direct_samples.items():
        assert abs(batched_samples[key] - value) < 1e-9, key
    assert batched_samples['_bucket{le="0.005"}'] == sum(1 for v in values if v <= 0.005)
    assert batched_samples["_count"] == len(values)


def test_a_batched_counter_publishes_its_sum() -> None:
    registry = CollectorRegistry()
    counter = Counter("batched_things", "t", ["kind"], registry=registry)
    one, two = BatchedCounter(counter.labels("one")), BatchedCounter(counter.labels("two"))
    for _ in range(10):
        one.inc()
        two.inc(2.5)
    publish_all()
    samples = _samples(registry, "batched_things")
    assert samples['_total{kind="one"}'] == 10
    assert samples['_total{kind="two"}'] == 25


def test_collecting_the_default_registry_publishes_first() -> None:
    """Updates within the publish interval are pending; a scrape of the process's
    registry (the ledger client's metrics in a bookie or autorecovery process) still
    shows them, with no explicit publish."""
    histogram = BatchedHistogram(
        Histogram("batched_collect_seconds", "c", buckets=BUCKETS, registry=REGISTRY)
    )
    counter = BatchedCounter(Counter("batched_collect_things", "c", registry=REGISTRY))
    for _ in range(3):  # the first publishes at once, the next two wait
        histogram.observe(0.002)
        counter.inc()
    text = generate_latest(REGISTRY).decode()
    assert 'batched_collect_seconds_bucket{le="0.005"} 3.0' in text
    assert "batched_collect_seconds_count 3.0" in text
    assert "batched_collect_things_total 3.0" in text


def test_labelled_children_are_made_once_per_label_set() -> None:
    registry = CollectorRegistry()
    counter = Counter("batched_labelled", "l", ["kind"], registry=registry)
    histogram = Histogram(
        "batched_labelled_seconds", "l", ["op"], buckets=BUCKETS, registry=registry
    )
    assert batched_counter(counter, "a") is batched_counter(counter, "a")
    assert batched_counter(counter, "a") is not batched_counter(counter, "b")
    assert batched_histogram(histogram, "x") is batched_histogram(histogram, "x")
    batched_counter(counter, "a").inc(3)
    batched_histogram(histogram, "x").observe(0.002)
    publish_all()
    assert _samples(registry, "batched_labelled")['_total{kind="a"}'] == 3
    assert _samples(registry, "batched_labelled_seconds")['_count{op="x"}'] == 1


def test_publishing_on_other_threads_loses_and_repeats_nothing() -> None:
    """One thread updates (an event loop's role) while two others publish as fast as they
    can (a scrape on prometheus_client's server thread, another collection): the
    published totals end exactly at the updates made. The interpreter switches threads
    every microsecond here, so a publication lands inside updates many times over."""
    registry = CollectorRegistry()
    counter = BatchedCounter(Counter("raced_things", "t", registry=registry))
    histogram = BatchedHistogram(
        Histogram("raced_seconds", "s", buckets=BUCKETS, registry=registry)
    )
    # One per bucket, powers of two: every sum and difference of them is exact.
    values = [2**-11, 2**-8, 2**-7, 2**-5, 2**-4, 2**-1]
    rounds = 30_000
    done = threading.Event()

    def publish() -> None:
        while not done.is_set():
            counter.publish()
            histogram.publish()

    def update() -> None:
        for i in range(rounds):
            counter.inc()
            histogram.observe(values[i % len(values)])

    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    publishers = [threading.Thread(target=publish) for _ in range(2)]
    try:
        for thread in publishers:
            thread.start()
        updater = threading.Thread(target=update)
        updater.start()
        updater.join()
    finally:
        done.set()
        for thread in publishers:
            thread.join()
        sys.setswitchinterval(switch_interval)
    publish_all()
    assert _samples(registry, "raced_things")["_total"] == rounds
    seconds = _samples(registry, "raced_seconds")
    assert seconds["_count"] == rounds
    assert seconds['_bucket{le="0.001"}'] == rounds // len(values)
    assert seconds["_sum"] == sum(values[i % len(values)] for i in range(rounds))


def test_a_new_metric_never_gets_the_children_of_a_dropped_one() -> None:
    """Metrics made and dropped one after another (as tests do with registries) often
    reuse the same memory: each must still count into its own registry."""
    for _ in range(50):
        registry = CollectorRegistry()
        counter = Counter("t_dropped_total", "d", ["op"], registry=registry)
        child = batched_counter(counter, "x")
        child.inc()
        child.publish()
        assert registry.get_sample_value("t_dropped_total", {"op": "x"}) == 1
        del registry, counter, child
