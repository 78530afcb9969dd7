"""The auditor's pure decisions: since when each bookie is missing, which are due, and
where each known bookie stands in the census."""

from __future__ import annotations

import pytest

from blobstore.recovery.auditor import BookieCensus, due_bookies, missing_since

NOW = 1_000.0


@pytest.mark.parametrize(
    ("missing", "previous", "since"),
    [
        pytest.param(set(), {}, {}, id="none-missing"),
        pytest.param(set(), {"b1": 10.0}, {}, id="a-bookie-back-is-forgotten"),
        pytest.param({"b1"}, {}, {"b1": NOW}, id="newly-missing-since-now"),
        pytest.param({"b1"}, {"b1": 10.0}, {"b1": 10.0}, id="still-missing-keeps-its-time"),
        pytest.param(
            {"b3", "b1", "b2"},
            {"b2": 20.0, "b4": 5.0},
            {"b1": NOW, "b2": 20.0, "b3": NOW},
            id="kept-new-and-forgotten-together",
        ),
    ],
)
def test_missing_since_keeps_the_first_time_a_bookie_was_seen_missing(
    missing: set[str], previous: dict[str, float], since: dict[str, float]
) -> None:
    """A bookie keeps its earlier time, a newly missing one gets `now`, one back is dropped."""
    assert missing_since(missing, previous, NOW) == since


def test_missing_since_is_in_bookie_order() -> None:
    """The record lists bookies sorted, whatever order the set iterates in."""
    assert list(missing_since({"c", "a", "b"}, {"b": 1.0}, NOW)) == ["a", "b", "c"]


DELAY_S = 60.0


@pytest.mark.parametrize(
    ("missing", "due"),
    [
        pytest.param({}, [], id="none-missing-none-due"),
        pytest.param({"b1": NOW}, [], id="just-missing-not-due"),
        pytest.param({"b1": NOW - DELAY_S + 1}, [], id="one-second-short-not-due"),
        pytest.param({"b1": NOW - DELAY_S}, ["b1"], id="exactly-the-delay-is-due"),
        pytest.param({"b1": NOW - DELAY_S - 1}, ["b1"], id="one-second-past-is-due"),
        pytest.param(
            {"b1": NOW - 2 * DELAY_S, "b2": NOW - 1, "b3": NOW - DELAY_S},
            ["b1", "b3"],
            id="only-those-gone-long-enough-in-record-order",
        ),
        pytest.param({"b1": NOW + DELAY_S}, [], id="a-time-in-the-future-is-not-due"),
    ],
)
def test_due_bookies_are_those_missing_at_least_the_delay(
    missing: dict[str, float], due: list[str]
) -> None:
    """A bookie is due once it has been missing `lost_bookie_delay_s` or longer."""
    assert due_bookies(missing, NOW, DELAY_S) == due


def test_a_zero_delay_makes_every_missing_bookie_due() -> None:
    """With no delay a bookie is due as soon as it is seen missing."""
    assert due_bookies({"b1": NOW, "b2": NOW - 1}, NOW, 0.0) == ["b1", "b2"]


CENSUS = BookieCensus(
    known={"live", "lost", "leaving", "gone"},
    live={"live", "leaving"},
    leaving={"leaving"},
    gone={"gone"},
    missing_since={"lost": 10.0},
    record_version=0,
)


@pytest.mark.parametrize(
    ("bookie", "decommission", "absent"),
    [
        pytest.param("live", None, "missing", id="registered-not-leaving"),
        pytest.param("lost", None, "missing", id="unregistered-is-missing"),
        pytest.param("leaving", "in progress", "decommissioning", id="being-decommissioned"),
        pytest.param("gone", "done", "decommissioned", id="decommissioned"),
    ],
)
def test_the_census_says_where_a_bookie_stands(
    bookie: str, decommission: str | None, absent: str
) -> None:
    """A finished decommission outranks one in progress; a bookie neither leaving nor
    gone is missing once it is unregistered (`absent_state` is asked only then)."""
    assert CENSUS.decommission_of(bookie) == decommission
    assert CENSUS.absent_state(bookie) == absent
