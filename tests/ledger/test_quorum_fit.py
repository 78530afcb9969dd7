"""fit_quorums: the quorums a new ledger gets from the writable bookies there are."""

from __future__ import annotations

import pytest

from blobstore.ledger.ensemble_placement import BookieInfo, Quorums, fit_quorums
from blobstore.ledger.errors import NotEnoughBookiesError

E3 = Quorums(3, 2, 2)


def bookies(count: int, read_only: int = 0) -> list[BookieInfo]:
    return [BookieInfo(f"b{i}", read_only=i < read_only) for i in range(count)]


@pytest.mark.parametrize(
    ("writable", "floor", "fitted"),
    [
        (5, 2, Quorums(3, 2, 2)),  # enough: as asked
        (3, 2, Quorums(3, 2, 2)),
        (2, 2, Quorums(2, 2, 2)),  # one of three down: E shrinks, two copies kept
        (1, 1, Quorums(1, 1, 1)),  # single copies allowed
    ],
)
def test_shrinks_to_the_writable_bookies(writable: int, floor: int, fitted: Quorums) -> None:
    assert fit_quorums(E3, bookies(writable), floor) == fitted


def test_write_quorum_shrinks_before_the_ack_quorum() -> None:
    assert fit_quorums(Quorums(4, 3, 2), bookies(2), 2) == Quorums(2, 2, 2)
    assert fit_quorums(Quorums(5, 3, 3), bookies(4), 2) == Quorums(4, 3, 3)


def test_refuses_below_the_floor_and_names_read_only_bookies() -> None:
    with pytest.raises(NotEnoughBookiesError, match="1 writable bookie, 2 needed") as caught:
        fit_quorums(E3, bookies(3, read_only=2), 2)
    assert caught.value.read_only == ("b0", "b1")
    assert "2 read-only (disk full or failing)" in str(caught.value)
    with pytest.raises(NotEnoughBookiesError, match="0 writable bookies, 1 needed"):
        fit_quorums(E3, bookies(0), 1)


def test_excluded_bookies_do_not_count_and_quorums_are_never_raised() -> None:
    with pytest.raises(NotEnoughBookiesError, match="1 writable bookie"):
        fit_quorums(E3, bookies(3), 2, exclude=("b0", "b2"))
    # A floor above what the caller asked for is the caller's own AQ.
    assert fit_quorums(Quorums(1, 1, 1), bookies(1), 2) == Quorums(1, 1, 1)
