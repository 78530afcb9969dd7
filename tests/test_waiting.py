"""The tests' one waiting helper: the predicate's value, or a failure naming the wait."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from tests.waiting import wait_until, wait_until_async


def test_wait_until_returns_the_first_truthy_value() -> None:
    answers: Iterator[object] = iter([0, None, [], 7])
    assert wait_until(lambda: next(answers), 5, message="a value", interval_s=0) == 7


def test_wait_until_names_what_was_awaited() -> None:
    with pytest.raises(AssertionError, match=r"^not within 0.05s: the thing$"):
        wait_until(lambda: False, 0.05, message="the thing", interval_s=0.01)


def test_the_message_may_read_state_at_the_timeout() -> None:
    state = ["before"]

    def predicate() -> bool:
        state[0] = "after"
        return False

    with pytest.raises(AssertionError, match="state after"):
        wait_until(predicate, 0.05, message=lambda: f"state {state[0]}", interval_s=0.01)


def test_a_predicate_that_raises_ends_the_wait_at_once() -> None:
    def predicate() -> bool:
        raise RuntimeError("the child exited")

    with pytest.raises(RuntimeError, match="the child exited"):
        wait_until(predicate, 60, message="never reached")


def test_wait_until_async_takes_plain_and_coroutine_predicates() -> None:
    calls: list[int] = []

    async def ready() -> str:
        calls.append(1)
        return "ready" if len(calls) >= 3 else ""

    async def main() -> tuple[str, list[int]]:
        first = await wait_until_async(ready, 5, message="ready", interval_s=0)
        second = await wait_until_async(lambda: [len(calls)], 5, message="calls")
        return first, second

    assert asyncio.run(main()) == ("ready", [3])


def test_wait_until_async_names_what_was_awaited() -> None:
    async def main() -> None:
        await wait_until_async(lambda: 0, 0.05, message="the event", interval_s=0.01)

    with pytest.raises(AssertionError, match=r"^not within 0.05s: the event$"):
        asyncio.run(main())
