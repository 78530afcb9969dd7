"""The hot-path asyncio helpers: `IdleWatchdog` times the waits it is told of, and only
those, and tells its own cancellation apart from anyone else's."""

from __future__ import annotations

import asyncio

import pytest

from blobstore.runtime.aio import IdleWatchdog


async def _read(watchdog: IdleWatchdog, source: asyncio.Queue[bytes]) -> bytes:
    watchdog.waiting()
    try:
        chunk = await source.get()
    except asyncio.CancelledError:
        if watchdog.expired():
            raise TimeoutError from None
        raise
    watchdog.progressed()
    return chunk


def test_a_wait_longer_than_the_idle_time_ends_in_timeout() -> None:
    async def main() -> None:
        watchdog = IdleWatchdog(0.05)
        source: asyncio.Queue[bytes] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            with pytest.raises(TimeoutError):
                await _read(watchdog, source)
        finally:
            watchdog.close()
        assert loop.time() - started >= 0.05
        # The task is usable afterwards: its cancellation was undone.
        assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
        await asyncio.sleep(0)

    asyncio.run(main())


def test_time_between_waits_is_not_counted() -> None:
    async def main() -> list[bytes]:
        watchdog = IdleWatchdog(0.05)
        source: asyncio.Queue[bytes] = asyncio.Queue()
        got = []
        try:
            for index in range(4):
                source.put_nowait(b"%d" % index)
                got.append(await _read(watchdog, source))
                # The consumer works on what it got for longer than the idle time; the
                # watchdog's timer fires meanwhile and must only re-arm.
                await asyncio.sleep(0.08)
            # Each wait is short, and the waits together are longer than the idle time.
            loop = asyncio.get_running_loop()
            for index in range(6):
                loop.call_later(0.03, source.put_nowait, b"late%d" % index)
                got.append(await _read(watchdog, source))
        finally:
            watchdog.close()
        return got

    got = asyncio.run(main())
    assert got == [b"0", b"1", b"2", b"3"] + [b"late%d" % i for i in range(6)]


def test_another_cancellation_is_not_taken_for_a_timeout() -> None:
    async def reader() -> None:
        watchdog = IdleWatchdog(10.0)
        try:
            await _read(watchdog, asyncio.Queue())
        finally:
            watchdog.close()

    async def main() -> None:
        task = asyncio.create_task(reader())
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())


def test_close_stops_the_timer() -> None:
    async def main() -> None:
        watchdog = IdleWatchdog(0.02)
        watchdog.waiting()
        watchdog.close()
        await asyncio.sleep(0.06)  # no cancellation arrives here

    asyncio.run(main())
