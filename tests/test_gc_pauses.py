"""The collector is frozen after startup and every pause lands in the histogram."""

from __future__ import annotations

import asyncio
import gc

import pytest
from prometheus_client import CollectorRegistry

from blobstore.runtime import gc_pauses


def test_freeze_and_measure(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gc_pauses, "_pauses", [])  # as in a fresh process
    registry = CollectorRegistry()

    async def start() -> None:
        gc_pauses.freeze_after_startup(registry)

    asyncio.run(start())
    try:
        assert gc.get_freeze_count() > 0
        before = (
            registry.get_sample_value("python_gc_pause_seconds_count", {"generation": "2"}) or 0.0
        )
        gc.collect()
        # Measured in the collector's callback, published later (never under its locks).
        assert (
            registry.get_sample_value("python_gc_pause_seconds_count", {"generation": "2"})
            == before
        )
        gc_pauses.publish()
        after = registry.get_sample_value("python_gc_pause_seconds_count", {"generation": "2"})
        assert after == before + 1
        asyncio.run(start())  # again: one callback, one histogram
        assert gc.callbacks.count(gc_pauses._measure) == 1
    finally:
        gc.unfreeze()
