"""Small asyncio helpers for hot paths.

`asyncio.wait_for(asyncio.shield(f), t)` builds a shield future, an inner waiter and
(before Python 3.12) wraps coroutines in a new task: per entry appended or per ZooKeeper
reply that is a visible share of a gateway's CPU. `wait_shielded` gives the same contract
with one future and one timer. `asyncio.timeout` around every read of a stream pushes and
cancels a timer per read; `IdleWatchdog` keeps one timer for the whole stream.
`for_each` runs work over an iterable with a bounded number of workers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

T = TypeVar("T")


async def wait_shielded(future: asyncio.Future[T], timeout_s: float) -> T:
    """The result of `future`, waiting at most `timeout_s` (TimeoutError after that).
    Neither a timeout nor the cancellation of the waiting task cancels `future`."""
    if future.done():
        return future.result()
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()

    def wake(_: Any = None) -> None:
        if not waiter.done():
            waiter.set_result(None)

    timer = loop.call_later(timeout_s, wake)
    future.add_done_callback(wake)
    try:
        await waiter
    finally:
        timer.cancel()
        future.remove_done_callback(wake)
    if not future.done():
        raise TimeoutError(f"no result within {timeout_s:.3f}s")
    return future.result()


class IdleWatchdog:
    """Cancels the current task when one of its waits (between `waiting()` and
    `progressed()`) lasts `idle_s`; `expired()` then tells that cancellation apart from
    any other. One timer serves a whole stream: it is re-armed only when it fires before
    the running wait's deadline, not on every read as `asyncio.timeout` would be.

        watchdog = IdleWatchdog(60.0)
        try:
            watchdog.waiting()
            chunk = await receive()
            watchdog.progressed()
        except asyncio.CancelledError:
            if watchdog.expired():
                raise TimeoutError from None
            raise
        finally:
            watchdog.close()
    """

    __slots__ = ("_loop", "_task", "_idle_s", "_wait_started", "_timer", "_fired")

    def __init__(self, idle_s: float) -> None:
        self._loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None, "IdleWatchdog needs a task to cancel"
        self._task = task
        self._idle_s = idle_s
        self._wait_started: float | None = None
        self._timer = self._loop.call_later(idle_s, self._check)
        self._fired = False

    def waiting(self) -> None:
        """A wait that must end within `idle_s` starts now."""
        self._wait_started = self._loop.time()

    def progressed(self) -> None:
        """The running wait ended; the time until the next `waiting()` is not counted."""
        self._wait_started = None

    def expired(self) -> bool:
        """Whether the task's cancellation was this watchdog's, undoing its cancel
        request (`Task.uncancel`). False if the task was also cancelled by someone else,
        whose cancellation must then go on."""
        return self._fired and self._task.uncancel() == 0

    def close(self) -> None:
        self._timer.cancel()

    def _check(self) -> None:
        now = self._loop.time()
        started = self._wait_started
        if started is None:
            self._timer = self._loop.call_at(now + self._idle_s, self._check)
        elif now - started < self._idle_s:
            self._timer = self._loop.call_at(started + self._idle_s, self._check)
        else:
            self._fired = True
            self._task.cancel()


async def for_each(
    items: Iterable[T],
    work: Callable[[T], Awaitable[None]],
    concurrency: int,
    advance: Callable[[int], None] | None = None,
) -> None:
    """`await work(item)` for every item, `concurrency` workers pulling from one iterator
    (memory stays bounded however many items there are). The first error cancels all."""
    assert concurrency >= 1, concurrency
    iterator = iter(items)

    async def worker() -> None:
        for item in iterator:
            await work(item)
            if advance is not None:
                advance(1)

    async with asyncio.TaskGroup() as group:
        for _ in range(concurrency):
            group.create_task(worker())
