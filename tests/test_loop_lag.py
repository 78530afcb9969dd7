"""The loop-lag monitor sees a callback that holds the event loop, and logs it."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from blobstore.runtime.loop_lag import LoopLagMonitor


class _Recorder:
    def __init__(self) -> None:
        self.values: list[float] = []

    def observe(self, value: float) -> None:
        self.values.append(value)


def test_a_blocked_loop_shows_as_lag_and_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    recorder = _Recorder()

    async def main() -> LoopLagMonitor:
        monitor = LoopLagMonitor(recorder, "test", interval_s=0.01, warn_s=0.05)
        monitor.start()
        await asyncio.sleep(0.05)  # a few ticks on time
        time.sleep(0.2)  # a callback that holds the loop (a C call holding the GIL)
        await asyncio.sleep(0.05)
        monitor.stop()
        return monitor

    with caplog.at_level(logging.WARNING, logger="blobstore.runtime.loop_lag"):
        monitor = asyncio.run(main())
    assert len(recorder.values) >= 5
    # The tick due during the stall ran when it ended: at least ~190 ms late.
    assert max(recorder.values) >= 0.15
    assert monitor.worst_s == max(recorder.values)
    assert sum(1 for v in recorder.values if v >= 0.05) == 1  # one stall, one late tick
    assert "event loop stalled process=test" in caplog.text
