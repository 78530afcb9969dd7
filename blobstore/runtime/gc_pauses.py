"""Python's cyclic garbage collector in the long-running processes: frozen after startup,
and its pauses measured.

A full (generation 2) collection stops the event loop for as long as it takes to walk
every tracked object. In a busy ledger client such a pause lasts tens of milliseconds
(docs/benchmarks/design-figures.md): a latency spike for everything in flight. Most of what
it walked was never garbage: modules, classes, configuration, the objects built at
startup. `freeze_after_startup()` moves all of them to the permanent generation (as
`gc.freeze` is documented for), so later collections walk only what was made since.

Every pause is observed in `python_gc_pause_seconds{generation}` (published from the
event loop once a second, never from inside the collector's callback), and a pause over
`SLOW_PAUSE_S` is logged.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import logging
import time
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Histogram

logger = logging.getLogger(__name__)

SLOW_PAUSE_S = 0.05
PUBLISH_INTERVAL_S = 1.0

_pauses: list[Any] = []  # per generation, once registered
_started = [0.0]
# (generation, pause s, objects collected) of collections not yet published. The
# collector's callback only appends here: it runs wherever a collection starts, possibly
# inside a metric update that holds prometheus_client's lock (in a multi-worker gateway
# one lock for all values), so observing a histogram there could deadlock the thread.
_recent: collections.deque[tuple[int, float, int]] = collections.deque(maxlen=4096)


def _measure(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        _started[0] = time.perf_counter()
        return
    pause = time.perf_counter() - _started[0]
    _recent.append((int(info.get("generation", 2)), pause, int(info.get("collected", 0))))


def publish() -> None:
    """Move the pauses measured since the last call into the histogram; log slow ones."""
    while _recent:
        generation, pause, collected = _recent.popleft()
        if _pauses:
            _pauses[min(generation, 2)].observe(pause)
        if pause >= SLOW_PAUSE_S:
            logger.info(
                "event=gc_pause generation=%d pause_ms=%.1f collected=%d",
                generation,
                pause * 1000,
                collected,
            )


def freeze_after_startup(registry: CollectorRegistry = REGISTRY) -> None:
    """Call once the process has built its long-lived state (before serving), on its
    event loop: measured pauses are published from there every `PUBLISH_INTERVAL_S`.
    The pause histogram goes to the first call's `registry` (the process's own, or the
    default one)."""
    loop = asyncio.get_running_loop()
    if not _pauses:
        histogram = Histogram(
            "python_gc_pause_seconds",
            "Pauses of the cyclic garbage collector, by generation",
            ["generation"],
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
            registry=registry,
        )
        _pauses.extend(histogram.labels(str(generation)) for generation in range(3))

        def tick() -> None:
            publish()
            loop.call_later(PUBLISH_INTERVAL_S, tick)

        loop.call_later(PUBLISH_INTERVAL_S, tick)
    gc.collect()
    gc.freeze()
    if _measure not in gc.callbacks:
        gc.callbacks.append(_measure)
    logger.debug("gc frozen objects=%d", gc.get_freeze_count())
