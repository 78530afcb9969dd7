"""The one way a test waits for something: poll a predicate until it holds or a deadline
passes, then fail with a message naming what was awaited.

The predicate is asked once more after the deadline passes, so a condition that comes
true while the poll sleeps is never reported as a timeout. A predicate may raise (an
`assert` that the process being watched is still alive, say) to fail the wait early.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar, overload

T = TypeVar("T")

INTERVAL_S = 0.05

Message = str | Callable[[], str]


def wait_until(
    predicate: Callable[[], T | None],
    timeout_s: float,
    *,
    message: Message,
    interval_s: float = INTERVAL_S,
) -> T:
    """The predicate's first truthy value, polled every `interval_s`; an AssertionError
    with `message` (a string, or a callable for state read at the timeout) after
    `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(_timed_out(message, timeout_s))
        time.sleep(interval_s)


@overload
async def wait_until_async(
    predicate: Callable[[], Awaitable[T | None]],
    timeout_s: float,
    *,
    message: Message,
    interval_s: float = INTERVAL_S,
) -> T: ...


@overload
async def wait_until_async(
    predicate: Callable[[], T | None],
    timeout_s: float,
    *,
    message: Message,
    interval_s: float = INTERVAL_S,
) -> T: ...


async def wait_until_async(
    predicate: Callable[[], object],
    timeout_s: float,
    *,
    message: Message,
    interval_s: float = INTERVAL_S,
) -> object:
    """`wait_until` inside an event loop: the predicate may be a coroutine function, and
    the loop keeps running between polls."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(_timed_out(message, timeout_s))
        await asyncio.sleep(interval_s)


def _timed_out(message: Message, timeout_s: float) -> str:
    text = message if isinstance(message, str) else message()
    return f"not within {timeout_s:g}s: {text}"
