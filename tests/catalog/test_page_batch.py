"""The pure decision of a page commit: a batch applied to a copy of its page, and what
the commit does with it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from blobstore.catalog.errors import PreconditionFailedError, RecordTooLargeError
from blobstore.catalog.page import IndexPage, encode_versions
from blobstore.catalog.page_batch import (
    CommitAction,
    Mutation,
    apply_batch,
    check_line_size,
    commit_action,
)
from blobstore.catalog.records import BucketRecord

BUCKET = BucketRecord("b", "alice", 0.0)


def _put(key: str, size: int = 1) -> Mutation:
    def apply(versions: list[dict[str, Any]], _bucket: BucketRecord) -> tuple[Any, Any]:
        return [{"v": len(versions) + 1, "s": "x" * size}, *versions], len(versions) + 1

    return Mutation("b", key, apply)


def _unchanged(key: str) -> Mutation:
    return Mutation("b", key, lambda versions, _bucket: (None, len(versions)))


def _refused(key: str) -> Mutation:
    def apply(_versions: list[dict[str, Any]], _bucket: BucketRecord) -> tuple[Any, Any]:
        raise PreconditionFailedError("If-Match")

    return Mutation("b", key, apply)


def _page() -> IndexPage:
    line = encode_versions([{"v": 1}])
    return IndexPage("p1", "b", "m", ["c"], [line], version=5)


def _run(body: Any) -> Any:
    async def main() -> Any:
        return body()

    return asyncio.run(main())


def test_mutations_apply_in_order_and_each_sees_the_ones_before() -> None:
    def body() -> None:
        first, second = _put("d"), _put("d")
        page = _page()
        batch = apply_batch(page, [first, second], BUCKET, 1 << 20)
        assert batch.changed
        assert [result for _, result in batch.applied] == [1, 2]
        assert batch.work.versions("d")[0]["v"] == 2
        assert page.versions("d") == [], "the page read is never changed"

    _run(body)


def test_a_key_outside_the_page_is_rerouted_and_not_applied() -> None:
    def body() -> None:
        inside, outside, below = _put("c"), _put("x"), _put("a")
        batch = apply_batch(_page(), [inside, outside, below], BUCKET, 1 << 20)
        assert batch.rerouted == [outside, below]
        assert batch.applied_mutations() == [inside]
        assert batch.still_pending() == [inside]

    _run(body)


def test_a_refused_mutation_fails_alone_and_stays_pending_after_the_applied() -> None:
    def body() -> None:
        refused, applied = _refused("c"), _put("d")
        batch = apply_batch(_page(), [refused, applied], BUCKET, 1 << 20)
        assert [m for m, _ in batch.refused] == [refused]
        assert isinstance(batch.refused[0][1], PreconditionFailedError)
        assert batch.still_pending() == [applied, refused]

    _run(body)


def test_a_record_too_large_is_refused_and_leaves_the_page_unchanged() -> None:
    def body() -> None:
        large = _put("d", size=300)
        batch = apply_batch(_page(), [large], BUCKET, 100)
        assert not batch.changed
        assert isinstance(batch.refused[0][1], RecordTooLargeError)
        assert batch.work.versions("d") == []

    _run(body)


def test_nothing_to_write_when_no_mutation_changes_the_page() -> None:
    def body() -> None:
        batch = apply_batch(_page(), [_unchanged("c"), _unchanged("d")], BUCKET, 1 << 20)
        assert not batch.changed
        assert [result for _, result in batch.applied] == [1, 0]

    _run(body)


@pytest.mark.parametrize(
    ("changed", "newest", "action"),
    [
        (True, False, CommitAction.WRITE),
        (True, True, CommitAction.WRITE),
        (False, True, CommitAction.ANSWER),
        (False, False, CommitAction.READ_AGAIN),
    ],
)
def test_a_decision_without_a_write_stands_only_on_the_newest_state(
    changed: bool, newest: bool, action: CommitAction
) -> None:
    assert commit_action(changed, newest) is action


@pytest.mark.parametrize(
    ("line_bytes", "newest_bytes", "error"),
    [(100, 100, None), (150, 50, None), (150, 120, "record"), (201, 50, "the versions")],
)
def test_line_size_limits(line_bytes: int, newest_bytes: int, error: str | None) -> None:
    newest = {"s": "x" * (newest_bytes - len(encode_versions([{"s": ""}])))}
    assert len(encode_versions([newest])) == newest_bytes
    line = b"x" * line_bytes
    if error is None:
        check_line_size("k", line, [newest], 100)
        return
    with pytest.raises(RecordTooLargeError, match=error):
        check_line_size("k", line, [newest], 100)
