"""Deferred multiprocess metric values: updates reach the files (what /metrics of any
worker reads) only when flushed, exactly, in order with gauge sets; an update after the
interval flushes by itself. Runs in a child process: installing replaces
prometheus_client's value class for the whole process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import time
from s3api import deferred_metrics
deferred_metrics.install()
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, multiprocess

def sample(name, labels=None):
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    return registry.get_sample_value(name, labels or {})

deferred_metrics.flush()  # opens the interval
counter = Counter("t_events_total", "e", ["kind"])
histogram = Histogram("t_seconds", "s", buckets=(0.01, 0.1, 1.0))
gauge = Gauge("t_level", "l", multiprocess_mode="livesum")
for _ in range(1000):
    counter.labels("a").inc()
    histogram.observe(0.05)
gauge.inc(3)
gauge.set(10)  # a set replaces what was pending, and is written at once
gauge.inc(2)
assert sample("t_events_total", {"kind": "a"}) in (None, 0.0), "written before a flush"
assert sample("t_level") == 10.0
deferred_metrics.flush()
assert sample("t_events_total", {"kind": "a"}) == 1000.0
assert sample("t_seconds_count") == 1000.0
assert sample("t_seconds_bucket", {"le": "0.1"}) == 1000.0
assert sample("t_seconds_bucket", {"le": "0.01"}) == 0.0
assert abs(sample("t_seconds_sum") - 50.0) < 1e-6
assert sample("t_level") == 12.0
counter.labels("a").inc(5)
assert counter.labels("a")._value.get() == 1005.0  # get() writes what is pending
deferred_metrics._next_flush = time.monotonic() - 1  # the interval has passed
counter.labels("b").inc()  # flushes by itself
assert sample("t_events_total", {"kind": "b"}) == 1.0
# A forked child writes its own updates (under its own pid), not the parent's pending.
import os
counter.labels("c").inc(7)  # pending in the parent
child = os.fork()
if child == 0:
    counter.labels("c").inc(2)
    deferred_metrics.flush()
    os._exit(0)
os.waitpid(child, 0)
assert sample("t_events_total", {"kind": "c"}) == 2.0  # the child's, written
deferred_metrics.flush()
assert sample("t_events_total", {"kind": "c"}) == 9.0  # and the parent's
print("ok")
"""


def test_deferred_values_reach_the_files_when_flushed(tmp_path: Path) -> None:
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
