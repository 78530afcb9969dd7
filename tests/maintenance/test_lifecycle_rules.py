"""Lifecycle expiration decisions against S3's semantics: day counting, each action and
filter, several rules, and the three versioning states (blobstore.maintenance.lifecycle)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any

import pytest

from blobstore.maintenance.lifecycle import (
    AbortUpload,
    Action,
    ActionKind,
    Filter,
    Rule,
    Upload,
    Version,
    expiry_moment,
    key_actions,
    parse_rules,
    upload_action,
)

DELETE = ActionKind.DELETE_VERSION
MARK = ActionKind.ADD_DELETE_MARKER


def at(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> float:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC).timestamp()


def rule(rule_id: str = "r1", **parts: Any) -> dict[str, Any]:
    """A stored rule as the gateway keeps it: enabled, selecting everything by default."""
    return {"ID": rule_id, "Status": "Enabled", "Filter": {}} | parts


def obj(version_id: str, created: float, size: int = 100, **tags: str) -> Version:
    return Version(version_id, created, size, False, tags)


def marker(version_id: str, created: float) -> Version:
    return Version(version_id, created, 0, True, {})


def kinds(actions: list[Action]) -> list[tuple[ActionKind, str, str]]:
    return [(action.kind, action.version_id, action.rule_id) for action in actions]


# --------------------------------------------------------------------------- day counting


@pytest.mark.parametrize(
    ("created", "days", "expected"),
    [
        (at(2016, 1, 15, 10, 30), 1, at(2016, 1, 17)),  # plus a day, up to the next midnight
        (at(2016, 1, 15), 1, at(2016, 1, 16)),  # a midnight stays itself
        (at(2016, 1, 15, 0, 0, 1), 1, at(2016, 1, 17)),  # a second past midnight
        (at(2016, 1, 14, 23, 59, 59), 1, at(2016, 1, 16)),  # a second before midnight
        (at(2014, 1, 15, 10, 30), 3, at(2014, 1, 19)),  # S3's documented example
        (at(2016, 2, 28, 12), 1, at(2016, 3, 1)),  # leap day counted
        (at(2016, 12, 31, 12), 1, at(2017, 1, 2)),  # across a year
        (at(2016, 1, 15, 10, 30) + 0.25, 30, at(2016, 2, 15)),  # fractional seconds
    ],
)
def test_expiry_moment_rounds_up_to_the_next_midnight_utc(
    created: float, days: int, expected: float
) -> None:
    assert expiry_moment(created, days) == expected


@pytest.mark.parametrize(
    ("now", "expired"),
    [
        (at(2016, 1, 16, 23, 59, 59), False),  # a second before the midnight
        (at(2016, 1, 17), True),  # the midnight itself
        (at(2016, 1, 17, 0, 0, 1), True),
    ],
)
def test_expiration_days_acts_from_the_rounded_midnight_on(now: float, expired: bool) -> None:
    rules = parse_rules([rule(Expiration={"Days": 1})])
    versions = [obj("null", at(2016, 1, 15, 10, 30))]
    assert bool(key_actions("k", versions, rules, "", now)) == expired


@pytest.mark.parametrize(
    ("date", "created", "now", "expired"),
    [
        ("2026-01-01T00:00:00Z", at(2025, 6, 1), at(2025, 12, 31, 23, 59, 59), False),
        ("2026-01-01T00:00:00Z", at(2025, 6, 1), at(2026, 1, 1), True),
        ("2026-01-01T00:00:00.000Z", at(2025, 6, 1), at(2026, 1, 1), True),
        ("2026-01-01T00:00:00+00:00", at(2025, 6, 1), at(2026, 1, 1), True),
        ("2026-01-01", at(2025, 6, 1), at(2026, 1, 1), True),
        # An object made after the date is expired as soon as a run sees it.
        ("2026-01-01T00:00:00Z", at(2026, 3, 1, 9), at(2026, 3, 1, 10), True),
    ],
)
def test_expiration_date_expires_everything_selected_from_that_midnight(
    date: str, created: float, now: float, expired: bool
) -> None:
    rules = parse_rules([rule(Expiration={"Date": date})])
    actions = key_actions("k", [obj("null", created)], rules, "", now)
    assert kinds(actions) == ([(DELETE, "null", "r1")] if expired else [])


# --------------------------------------------------------------------------- current version


def test_expiration_in_a_never_versioned_bucket_deletes_the_null_version() -> None:
    rules = parse_rules([rule(Expiration={"Days": 3})])
    actions = key_actions("k", [obj("null", at(2026, 1, 1, 12))], rules, "", at(2026, 1, 5))
    assert actions == [
        Action(
            DELETE,
            "k",
            "null",
            "r1",
            "Expiration Days=3: current version expired at 2026-01-05T00:00:00Z",
        )
    ]


def test_expiration_in_a_versioned_bucket_adds_a_delete_marker_on_the_current_version() -> None:
    rules = parse_rules([rule(Expiration={"Days": 3})])
    versions = [obj("v2", at(2026, 1, 1, 12)), obj("v1", at(2025, 1, 1))]
    actions = key_actions("k", versions, rules, "Enabled", at(2026, 1, 5))
    assert kinds(actions) == [(MARK, "v2", "r1")]
    assert "a delete marker makes it noncurrent" in actions[0].reason


def test_expiration_in_a_suspended_bucket_adds_a_null_marker_replacing_the_null_version() -> None:
    rules = parse_rules([rule(Expiration={"Days": 3})])
    versions = [obj("null", at(2026, 1, 1, 12)), obj("v1", at(2025, 1, 1))]
    actions = key_actions("k", versions, rules, "Suspended", at(2026, 1, 5))
    assert kinds(actions) == [(MARK, "null", "r1")]
    assert "null delete marker replaces any null version" in actions[0].reason


@pytest.mark.parametrize("versioning", ["Enabled", "Suspended"])
def test_expiration_never_adds_a_marker_on_a_marker(versioning: str) -> None:
    rules = parse_rules([rule(Expiration={"Days": 1})])
    versions = [marker("m1", at(2020, 1, 1)), obj("v1", at(2019, 1, 1))]
    assert key_actions("k", versions, rules, versioning, at(2026, 1, 1)) == []


def test_expiration_ignores_noncurrent_versions() -> None:
    rules = parse_rules([rule(Expiration={"Days": 1})])
    versions = [obj("v3", at(2026, 1, 4, 12)), obj("v2", at(2020, 1, 1)), obj("v1", at(2019, 1, 1))]
    assert key_actions("k", versions, rules, "Enabled", at(2026, 1, 5)) == []


# --------------------------------------------------------------------------- delete markers


@pytest.mark.parametrize("versioning", ["Enabled", "Suspended"])
def test_expired_object_delete_marker_removes_a_marker_left_alone(versioning: str) -> None:
    rules = parse_rules([rule(Expiration={"ExpiredObjectDeleteMarker": True})])
    actions = key_actions(
        "k", [marker("m1", at(2026, 1, 4, 23))], rules, versioning, at(2026, 1, 5)
    )
    assert kinds(actions) == [(DELETE, "m1", "r1")]


def test_expired_object_delete_marker_keeps_a_marker_over_noncurrent_versions() -> None:
    rules = parse_rules([rule(Expiration={"ExpiredObjectDeleteMarker": True})])
    versions = [marker("m1", at(2020, 1, 1)), obj("v1", at(2019, 1, 1))]
    assert key_actions("k", versions, rules, "Enabled", at(2026, 1, 1)) == []


def test_expired_object_delete_marker_false_does_nothing() -> None:
    rules = parse_rules([rule(Expiration={"ExpiredObjectDeleteMarker": False})])
    assert key_actions("k", [marker("m1", at(2020, 1, 1))], rules, "Enabled", at(2026, 1, 1)) == []


def test_a_marker_left_alone_by_this_run_is_removed_by_a_later_one() -> None:
    rules = parse_rules(
        [
            rule(
                NoncurrentVersionExpiration={"NoncurrentDays": 1},
            ),
            rule("r2", Expiration={"ExpiredObjectDeleteMarker": True}),
        ]
    )
    versions = [marker("m1", at(2026, 1, 1, 12)), obj("v1", at(2025, 1, 1))]
    now = at(2026, 1, 10)
    assert kinds(key_actions("k", versions, rules, "Enabled", now)) == [(DELETE, "v1", "r1")]
    later = key_actions("k", versions[:1], rules, "Enabled", now)
    assert kinds(later) == [(DELETE, "m1", "r2")]


@pytest.mark.parametrize(
    ("now", "removed"),
    [(at(2026, 1, 4, 23, 59, 59), False), (at(2026, 1, 5), True)],
)
def test_expiration_days_removes_a_lone_marker_once_the_marker_is_old_enough(
    now: float, removed: bool
) -> None:
    rules = parse_rules([rule(Expiration={"Days": 3})])
    actions = key_actions("k", [marker("m1", at(2026, 1, 1, 12))], rules, "Enabled", now)
    assert kinds(actions) == ([(DELETE, "m1", "r1")] if removed else [])


def test_expiration_date_removes_a_lone_marker_from_the_date_on() -> None:
    rules = parse_rules([rule(Expiration={"Date": "2026-01-01T00:00:00Z"})])
    lone = [marker("m1", at(2026, 2, 1))]
    assert key_actions("k", lone, rules, "Enabled", at(2025, 12, 31)) == []
    assert kinds(key_actions("k", lone, rules, "Enabled", at(2026, 2, 2))) == [(DELETE, "m1", "r1")]


# --------------------------------------------------------------------------- noncurrent versions


@pytest.mark.parametrize(
    ("now", "expired"),
    [(at(2026, 1, 6, 23, 59, 59), False), (at(2026, 1, 7), True)],
)
def test_noncurrent_days_count_from_the_successors_creation(now: float, expired: bool) -> None:
    rules = parse_rules([rule(NoncurrentVersionExpiration={"NoncurrentDays": 5})])
    # v1 is years old, but noncurrent only since v2 was made on 2026-01-01 10:00.
    versions = [obj("v2", at(2026, 1, 1, 10)), obj("v1", at(2020, 1, 1))]
    actions = key_actions("k", versions, rules, "Enabled", now)
    assert kinds(actions) == ([(DELETE, "v1", "r1")] if expired else [])


def test_noncurrent_expiration_never_touches_the_current_version() -> None:
    rules = parse_rules([rule(NoncurrentVersionExpiration={"NoncurrentDays": 1})])
    versions = [obj("v1", at(2020, 1, 1))]
    assert key_actions("k", versions, rules, "Enabled", at(2026, 1, 1)) == []


def test_newer_noncurrent_versions_are_kept_whatever_their_age() -> None:
    rules = parse_rules(
        [rule(NoncurrentVersionExpiration={"NoncurrentDays": 1, "NewerNoncurrentVersions": 2})]
    )
    versions = [obj(f"v{n}", at(2020, 1, n)) for n in range(6, 0, -1)]  # v6 current
    actions = key_actions("k", versions, rules, "Enabled", at(2026, 1, 1))
    # v5 and v4 are the two newest noncurrent versions: kept; v3, v2, v1 go.
    assert kinds(actions) == [(DELETE, "v3", "r1"), (DELETE, "v2", "r1"), (DELETE, "v1", "r1")]


def test_newer_noncurrent_versions_wait_for_their_own_days() -> None:
    rules = parse_rules(
        [rule(NoncurrentVersionExpiration={"NoncurrentDays": 10, "NewerNoncurrentVersions": 1})]
    )
    versions = [
        obj("v4", at(2026, 1, 9)),
        obj("v3", at(2026, 1, 8)),  # kept: the newest noncurrent
        obj("v2", at(2020, 1, 1)),  # noncurrent since 2026-01-08: too young
        obj("v1", at(2019, 1, 1)),  # noncurrent since 2020-01-01: expired
    ]
    assert kinds(key_actions("k", versions, rules, "Enabled", at(2026, 1, 10))) == [
        (DELETE, "v1", "r1")
    ]


def test_newer_noncurrent_versions_count_only_versions_the_filter_selects() -> None:
    rules = parse_rules(
        [
            rule(
                Filter={"ObjectSizeGreaterThan": 1000},
                NoncurrentVersionExpiration={"NoncurrentDays": 1, "NewerNoncurrentVersions": 1},
            )
        ]
    )
    versions = [
        obj("v4", at(2020, 1, 4), size=5000),
        obj("v3", at(2020, 1, 3), size=10),  # not selected: neither counted nor expired
        obj("v2", at(2020, 1, 2), size=5000),  # the newest selected noncurrent: kept
        obj("v1", at(2020, 1, 1), size=5000),
    ]
    assert kinds(key_actions("k", versions, rules, "Enabled", at(2026, 1, 1))) == [
        (DELETE, "v1", "r1")
    ]


def test_noncurrent_delete_markers_expire_like_versions() -> None:
    rules = parse_rules([rule(NoncurrentVersionExpiration={"NoncurrentDays": 1})])
    versions = [obj("v2", at(2020, 1, 3)), marker("m1", at(2020, 1, 2)), obj("v1", at(2020, 1, 1))]
    actions = key_actions("k", versions, rules, "Enabled", at(2026, 1, 1))
    assert kinds(actions) == [(DELETE, "m1", "r1"), (DELETE, "v1", "r1")]
    assert "delete marker noncurrent since 2020-01-03T00:00:00Z" in actions[0].reason


def test_noncurrent_filters_judge_each_version_by_its_own_tags() -> None:
    rules = parse_rules(
        [
            rule(
                Filter={"Tag": {"Key": "tier", "Value": "scratch"}},
                NoncurrentVersionExpiration={"NoncurrentDays": 1},
            )
        ]
    )
    versions = [
        obj("v3", at(2020, 1, 3)),
        obj("v2", at(2020, 1, 2), tier="scratch"),
        obj("v1", at(2020, 1, 1), tier="keep"),
    ]
    assert kinds(key_actions("k", versions, rules, "Enabled", at(2026, 1, 1))) == [
        (DELETE, "v2", "r1")
    ]


# --------------------------------------------------------------------------- filters


@pytest.mark.parametrize(
    ("stored_filter", "key", "size", "tags", "selected"),
    [
        ({}, "any/key", 1, {}, True),
        ({"Prefix": ""}, "any/key", 1, {}, True),
        ({"Prefix": "logs/"}, "logs/a", 1, {}, True),
        ({"Prefix": "logs/"}, "log/a", 1, {}, False),
        ({"Prefix": "logs/"}, "data/logs/a", 1, {}, False),
        ({"Tag": {"Key": "k", "Value": "v"}}, "a", 1, {"k": "v", "other": "x"}, True),
        ({"Tag": {"Key": "k", "Value": "v"}}, "a", 1, {"k": "w"}, False),
        ({"Tag": {"Key": "k", "Value": "v"}}, "a", 1, {}, False),
        ({"Tag": {"Key": "k"}}, "a", 1, {"k": ""}, True),  # no Value: the empty value
        ({"Tag": {"Key": "k"}}, "a", 1, {"k": "v"}, False),
        ({"ObjectSizeGreaterThan": 10}, "a", 11, {}, True),
        ({"ObjectSizeGreaterThan": 10}, "a", 10, {}, False),  # strict
        ({"ObjectSizeLessThan": 10}, "a", 9, {}, True),
        ({"ObjectSizeLessThan": 10}, "a", 10, {}, False),  # strict
        ({"ObjectSizeLessThan": 10}, "a", 0, {}, True),
    ],
)
def test_filter_selects_current_versions_as_s3_does(
    stored_filter: dict[str, Any], key: str, size: int, tags: dict[str, str], selected: bool
) -> None:
    rules = parse_rules([rule(Filter=stored_filter, Expiration={"Days": 1})])
    versions = [Version("null", at(2020, 1, 1), size, False, tags)]
    assert bool(key_actions(key, versions, rules, "", at(2026, 1, 1))) == selected


AND = {
    "And": {
        "Prefix": "logs/",
        "Tag": [{"Key": "k", "Value": "v"}, {"Key": "team", "Value": "a"}],
        "ObjectSizeGreaterThan": 10,
        "ObjectSizeLessThan": 100,
    }
}


@pytest.mark.parametrize(
    ("key", "size", "tags", "selected"),
    [
        ("logs/a", 50, {"k": "v", "team": "a"}, True),
        ("data/a", 50, {"k": "v", "team": "a"}, False),  # prefix
        ("logs/a", 50, {"k": "v"}, False),  # one tag missing
        ("logs/a", 10, {"k": "v", "team": "a"}, False),  # at the lower bound
        ("logs/a", 100, {"k": "v", "team": "a"}, False),  # at the upper bound
    ],
)
def test_and_filter_needs_every_condition(
    key: str, size: int, tags: dict[str, str], selected: bool
) -> None:
    rules = parse_rules([rule(Filter=AND, Expiration={"Days": 1})])
    versions = [Version("null", at(2020, 1, 1), size, False, tags)]
    assert bool(key_actions(key, versions, rules, "", at(2026, 1, 1))) == selected


@pytest.mark.parametrize(
    ("stored", "selected"),
    [
        ({"Prefix": "logs/"}, True),  # the legacy top-level Prefix
        ({"Prefix": "data/"}, False),
        ({}, True),  # no Filter at all: everything
    ],
)
def test_a_rule_without_filter_uses_its_legacy_prefix_or_selects_everything(
    stored: dict[str, Any], selected: bool
) -> None:
    stored_rule = {"ID": "r1", "Status": "Enabled", "Expiration": {"Days": 1}} | stored
    rules = parse_rules([stored_rule])
    versions = [obj("null", at(2020, 1, 1))]
    assert bool(key_actions("logs/a", versions, rules, "", at(2026, 1, 1))) == selected


@pytest.mark.parametrize(
    ("stored_filter", "selected"),
    [
        ({"Prefix": "logs/"}, True),
        ({}, True),
        ({"ObjectSizeLessThan": 10}, False),  # a marker has no size to judge
        ({"ObjectSizeGreaterThan": 0}, False),
        ({"Tag": {"Key": "k", "Value": "v"}}, False),  # nor tags
        ({"And": {"Prefix": "logs/", "ObjectSizeLessThan": 10}}, False),
    ],
)
def test_a_filter_with_tag_or_size_conditions_never_selects_a_delete_marker(
    stored_filter: dict[str, Any], selected: bool
) -> None:
    rules = parse_rules(
        [rule(Filter=stored_filter, Expiration={"ExpiredObjectDeleteMarker": True})]
    )
    actions = key_actions(
        "logs/a", [marker("m1", at(2020, 1, 1))], rules, "Enabled", at(2026, 1, 1)
    )
    assert bool(actions) == selected


# --------------------------------------------------------------------------- several rules


def test_the_first_rule_in_stored_order_names_the_action() -> None:
    rules = parse_rules(
        [
            rule("short", Filter={"Prefix": "logs/"}, Expiration={"Days": 1}),
            rule("long", Expiration={"Days": 2}),
        ]
    )
    versions = [obj("null", at(2020, 1, 1))]
    assert kinds(key_actions("logs/a", versions, rules, "", at(2026, 1, 1))) == [
        (DELETE, "null", "short")
    ]
    assert kinds(key_actions("data/a", versions, rules, "", at(2026, 1, 1))) == [
        (DELETE, "null", "long")
    ]


def test_a_later_rule_acts_when_an_earlier_one_is_not_due_yet() -> None:
    rules = parse_rules(
        [rule("slow", Expiration={"Days": 30}), rule("fast", Expiration={"Days": 1})]
    )
    versions = [obj("null", at(2026, 1, 1, 12))]
    assert kinds(key_actions("k", versions, rules, "", at(2026, 1, 3))) == [
        (DELETE, "null", "fast")
    ]


def test_each_version_gets_one_action_from_overlapping_noncurrent_rules() -> None:
    rules = parse_rules(
        [
            rule(
                "keep-two",
                NoncurrentVersionExpiration={"NoncurrentDays": 1, "NewerNoncurrentVersions": 2},
            ),
            rule("all", NoncurrentVersionExpiration={"NoncurrentDays": 1}),
        ]
    )
    versions = [obj(f"v{n}", at(2020, 1, n)) for n in range(5, 0, -1)]
    assert kinds(key_actions("k", versions, rules, "Enabled", at(2026, 1, 1))) == [
        (DELETE, "v4", "all"),
        (DELETE, "v3", "all"),
        (DELETE, "v2", "keep-two"),
        (DELETE, "v1", "keep-two"),
    ]


def test_current_and_noncurrent_expiration_act_in_one_run() -> None:
    stored = rule(Expiration={"Days": 3}, NoncurrentVersionExpiration={"NoncurrentDays": 5})
    versions = [obj("v2", at(2026, 1, 1, 12)), obj("v1", at(2025, 1, 1))]
    actions = key_actions("k", versions, parse_rules([stored]), "Enabled", at(2026, 1, 8))
    assert kinds(actions) == [(MARK, "v2", "r1"), (DELETE, "v1", "r1")]


# --------------------------------------------------------------------------- rules that never act


def test_a_disabled_rule_never_acts() -> None:
    stored = rule(
        Expiration={"Days": 1},
        NoncurrentVersionExpiration={"NoncurrentDays": 1},
        AbortIncompleteMultipartUpload={"DaysAfterInitiation": 1},
    ) | {"Status": "Disabled"}
    rules = parse_rules([stored])
    assert rules[0].enabled is False
    versions = [obj("v2", at(2020, 1, 2)), obj("v1", at(2020, 1, 1))]
    for versioning in ("", "Enabled", "Suspended"):
        assert key_actions("k", versions, rules, versioning, at(2026, 1, 1)) == []
    assert key_actions("k", [marker("m1", at(2020, 1, 1))], rules, "Enabled", at(2026, 1, 1)) == []
    assert upload_action(Upload("u1", "k", at(2020, 1, 1)), rules, at(2026, 1, 1)) is None


TRANSITION = ActionKind.TRANSITION


def moves(actions: list[Action]) -> list[tuple[str, str]]:
    return [(a.version_id, a.storage_class) for a in actions if a.kind is TRANSITION]


def test_transition_rules_never_expire_anything() -> None:
    stored = rule(
        Transition=[
            {"Days": 30, "StorageClass": "GLACIER"},
            {"Date": "2021-01-01T00:00:00Z", "StorageClass": "DEEP_ARCHIVE"},
        ],
        NoncurrentVersionTransition=[{"NoncurrentDays": 1, "StorageClass": "GLACIER"}],
    )
    rules = parse_rules([stored])
    versions = [obj("v2", at(2020, 1, 2)), obj("v1", at(2020, 1, 1))]
    for versioning in ("", "Enabled", "Suspended"):
        actions = key_actions("k", versions, rules, versioning, at(2026, 1, 1))
        assert {a.kind for a in actions} == {TRANSITION}
    assert upload_action(Upload("u1", "k", at(2020, 1, 1)), rules, at(2026, 1, 1)) is None


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        (at(2020, 1, 30, 23, 59), []),  # created Jan 1 10:00 + 30 days -> Feb 1 00:00
        (at(2020, 2, 1), [("v1", "COLD")]),
        (at(2021, 1, 1), [("v1", "ARCHIVE")]),  # the transition due last wins
    ],
)
def test_transition_moves_the_current_version_when_due(
    now: float, expected: list[tuple[str, str]]
) -> None:
    rules = parse_rules(
        [
            rule(
                Transition=[
                    {"Days": 30, "StorageClass": "COLD"},
                    {"Date": "2021-01-01T00:00:00Z", "StorageClass": "ARCHIVE"},
                ]
            )
        ]
    )
    assert moves(key_actions("k", [obj("v1", at(2020, 1, 1, 10))], rules, "", now)) == expected


def test_transition_days_zero_moves_at_the_next_midnight() -> None:
    rules = parse_rules([rule(Transition=[{"Days": 0, "StorageClass": "COLD"}])])
    version = [obj("v1", at(2020, 1, 1, 10))]
    assert moves(key_actions("k", version, rules, "", at(2020, 1, 1, 23))) == []
    assert moves(key_actions("k", version, rules, "", at(2020, 1, 2))) == [("v1", "COLD")]


def test_transition_skips_tiered_versions_and_markers() -> None:
    rules = parse_rules(
        [
            rule(
                Transition=[{"Days": 1, "StorageClass": "COLD"}],
                NoncurrentVersionTransition=[{"NoncurrentDays": 1, "StorageClass": "COLD"}],
            )
        ]
    )
    tiered = Version("v3", at(2020, 1, 3), 10, tiered=True)
    versions = [tiered, marker("m2", at(2020, 1, 2)), obj("v1", at(2020, 1, 1))]
    assert moves(key_actions("k", versions, rules, "Enabled", at(2026, 1, 1))) == [("v1", "COLD")]


def test_expiration_wins_over_transition() -> None:
    rules = parse_rules(
        [
            rule(
                Expiration={"Days": 10},
                Transition=[{"Days": 1, "StorageClass": "COLD"}],
                NoncurrentVersionExpiration={"NoncurrentDays": 1},
                NoncurrentVersionTransition=[{"NoncurrentDays": 1, "StorageClass": "COLD"}],
            )
        ]
    )
    versions = [obj("v2", at(2020, 1, 2)), obj("v1", at(2020, 1, 1))]
    actions = key_actions("k", versions, rules, "Enabled", at(2026, 1, 1))
    assert kinds(actions) == [(MARK, "v2", "r1"), (DELETE, "v1", "r1")]
    # Before the expiration is due, the current version moves.
    actions = key_actions("k", versions, rules, "Enabled", at(2020, 1, 5))
    assert moves(actions) == [("v2", "COLD")]


def test_noncurrent_transition_keeps_the_newer_noncurrent_versions() -> None:
    rules = parse_rules(
        [
            rule(
                NoncurrentVersionTransition=[
                    {"NoncurrentDays": 5, "NewerNoncurrentVersions": 1, "StorageClass": "COLD"}
                ]
            )
        ]
    )
    versions = [obj(f"v{n}", at(2020, 1, 10 - n)) for n in range(4)]
    # v1 is kept (the newest noncurrent); v2 and v3 have been noncurrent long enough.
    assert moves(key_actions("k", versions, rules, "Enabled", at(2026, 1, 1))) == [
        ("v2", "COLD"),
        ("v3", "COLD"),
    ]
    # v3 became noncurrent Jan 8 (v2's creation): due Jan 13; v2 (since Jan 9) Jan 14.
    assert moves(key_actions("k", versions, rules, "Enabled", at(2020, 1, 13))) == [("v3", "COLD")]


def test_transition_filters_select_as_expiration_does() -> None:
    rules = parse_rules(
        [
            rule(
                Filter={"And": {"Prefix": "logs/", "ObjectSizeGreaterThan": 50}},
                Transition=[{"Days": 1, "StorageClass": "COLD"}],
            )
        ]
    )
    now = at(2026, 1, 1)
    assert moves(key_actions("logs/a", [obj("v", at(2020, 1, 1), 100)], rules, "", now)) == [
        ("v", "COLD")
    ]
    assert moves(key_actions("logs/a", [obj("v", at(2020, 1, 1), 10)], rules, "", now)) == []
    assert moves(key_actions("data/a", [obj("v", at(2020, 1, 1), 100)], rules, "", now)) == []


@pytest.mark.parametrize(
    ("transition", "message"),
    [
        ({"StorageClass": "COLD"}, "one of Days and Date"),
        ({"Days": 1, "Date": "2021-01-01T00:00:00Z", "StorageClass": "COLD"}, "one of Days"),
        ({"Days": 1}, "StorageClass"),
        ({"Days": -1, "StorageClass": "COLD"}, "Days"),
        ({"Days": 1, "StorageClass": "COLD", "Bogus": 1}, "unknown"),
    ],
)
def test_bad_transitions_are_named(transition: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_rules([rule(Transition=[transition])])


def test_no_rules_and_no_versions_give_no_actions() -> None:
    assert parse_rules(None) == []
    assert key_actions("k", [obj("null", at(2020, 1, 1))], [], "", at(2026, 1, 1)) == []
    assert (
        key_actions("k", [], parse_rules([rule(Expiration={"Days": 1})]), "", at(2026, 1, 1)) == []
    )


# --------------------------------------------------------------------------- invariants


HISTORIES = {
    "one version": [obj("v1", at(2020, 1, 1))],
    "null version": [obj("null", at(2020, 1, 1))],
    "lone marker": [marker("m1", at(2020, 1, 1))],
    "marker on versions": [
        marker("m2", at(2020, 1, 3)),
        obj("v2", at(2020, 1, 2)),
        obj("v1", at(2020, 1, 1)),
    ],
    "versions": [
        obj("v3", at(2020, 1, 3)),
        obj("null", at(2020, 1, 2)),
        marker("m1", at(2020, 1, 1)),
    ],
}
RULE_SETS = {
    "expire": [rule(Expiration={"Days": 1})],
    "date": [rule(Expiration={"Date": "2021-01-01T00:00:00Z"})],
    "markers": [rule(Expiration={"ExpiredObjectDeleteMarker": True})],
    "noncurrent": [rule(NoncurrentVersionExpiration={"NoncurrentDays": 1})],
    "everything": [
        rule("a", Expiration={"Days": 1}, NoncurrentVersionExpiration={"NoncurrentDays": 1}),
        rule("b", Expiration={"ExpiredObjectDeleteMarker": True}),
        rule("c", NoncurrentVersionExpiration={"NoncurrentDays": 2, "NewerNoncurrentVersions": 1}),
    ],
}


@pytest.mark.parametrize(
    ("history", "rule_set", "versioning"),
    list(itertools.product(HISTORIES, RULE_SETS, ["Enabled", "Suspended"])),
)
def test_a_versioned_bucket_never_loses_its_current_object_version(
    history: str, rule_set: str, versioning: str
) -> None:
    versions = HISTORIES[history]
    rules = parse_rules(RULE_SETS[rule_set])
    actions = key_actions("k", versions, rules, versioning, at(2026, 1, 1))
    current = versions[0]
    for action in actions:
        if action.version_id == current.version_id and action.kind is DELETE:
            assert current.is_delete_marker and len(versions) == 1, action
    assert len({action.version_id for action in actions}) == len(actions)
    assert {action.version_id for action in actions} <= {v.version_id for v in versions}


# --------------------------------------------------------------------------- multipart uploads


@pytest.mark.parametrize(
    ("now", "aborted"),
    [(at(2026, 1, 8, 23, 59, 59), False), (at(2026, 1, 9), True)],
)
def test_abort_incomplete_upload_counts_days_from_initiation(now: float, aborted: bool) -> None:
    rules = parse_rules(
        [rule(Filter={"Prefix": "up/"}, AbortIncompleteMultipartUpload={"DaysAfterInitiation": 7})]
    )
    action = upload_action(Upload("u1", "up/big", at(2026, 1, 1, 8)), rules, now)
    expected = AbortUpload(
        "up/big",
        "u1",
        "r1",
        "AbortIncompleteMultipartUpload DaysAfterInitiation=7: initiated 2026-01-01T08:00:00Z,"
        " expired at 2026-01-09T00:00:00Z",
    )
    assert action == (expected if aborted else None)


def test_abort_incomplete_upload_follows_the_prefix_only() -> None:
    rules = parse_rules(
        [
            rule(
                Filter={"And": {"Prefix": "up/", "ObjectSizeGreaterThan": 1 << 40}},
                AbortIncompleteMultipartUpload={"DaysAfterInitiation": 1},
            )
        ]
    )
    old = at(2020, 1, 1)
    assert upload_action(Upload("u1", "up/a", old), rules, at(2026, 1, 1)) is not None
    assert upload_action(Upload("u2", "down/a", old), rules, at(2026, 1, 1)) is None


def test_a_tag_filter_never_selects_an_upload() -> None:
    """An upload has no tags yet (the gateway refuses this rule; a stored one stays inert)."""
    rules = parse_rules(
        [
            rule(
                Filter={"And": {"Prefix": "up/", "Tag": [{"Key": "k", "Value": "v"}]}},
                AbortIncompleteMultipartUpload={"DaysAfterInitiation": 1},
            )
        ]
    )
    assert upload_action(Upload("u1", "up/a", at(2020, 1, 1)), rules, at(2026, 1, 1)) is None


def test_rules_without_abort_leave_uploads_alone() -> None:
    rules = parse_rules([rule(Expiration={"Days": 1})])
    assert upload_action(Upload("u1", "k", at(2020, 1, 1)), rules, at(2026, 1, 1)) is None


# --------------------------------------------------------------------------- parsing


def test_parse_rules_reads_the_gateways_stored_form() -> None:
    stored = {
        "ID": "r1",
        "Status": "Enabled",
        "Filter": {
            "And": {
                "Prefix": "logs/",
                "Tag": [{"Key": "k", "Value": "v"}],
                "ObjectSizeGreaterThan": 10,
            }
        },
        "Expiration": {"Days": 3},
        "NoncurrentVersionExpiration": {"NoncurrentDays": 5, "NewerNoncurrentVersions": 2},
        "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 7},
    }
    assert parse_rules([stored]) == [
        Rule(
            rule_id="r1",
            enabled=True,
            filter=Filter(prefix="logs/", tags=(("k", "v"),), size_greater_than=10),
            expiration_days=3,
            noncurrent_days=5,
            newer_noncurrent_versions=2,
            abort_days=7,
        )
    ]


def test_parse_rules_reads_dates_and_markers() -> None:
    rules = parse_rules(
        [
            {
                "Status": "Enabled",
                "Prefix": "a/",
                "Expiration": {"Date": "2026-01-01T00:00:00.000Z"},
            },
            {"Status": "Enabled", "Filter": {}, "Expiration": {"ExpiredObjectDeleteMarker": True}},
        ]
    )
    assert rules == [
        Rule(rule_id="", enabled=True, filter=Filter(prefix="a/"), expiration_date=at(2026, 1, 1)),
        Rule(rule_id="", enabled=True, expired_object_delete_marker=True),
    ]


@pytest.mark.parametrize(
    ("stored", "message"),
    [
        ("not a rule", "rule is not an object"),
        ({"Filter": {}, "Expiration": {"Days": 1}}, "Status must be Enabled or Disabled"),
        (rule(Status="On", Expiration={"Days": 1}), "Status must be Enabled or Disabled"),
        (rule(Expiration={"Days": 1}, Surprise=1), r"rule has unknown elements \['Surprise'\]"),
        (rule(Prefix="a", Expiration={"Days": 1}), "both Prefix and Filter"),
        (
            rule(Filter={"Prefix": "a", "ObjectSizeLessThan": 5}, Expiration={"Days": 1}),
            "one element at most",
        ),
        (rule(Filter={"Suffix": ".log"}, Expiration={"Days": 1}), "Filter has unknown elements"),
        (
            rule(Filter={"And": {"Tag": {"Key": "k"}}}, Expiration={"Days": 1}),
            "Filter.And.Tag is not a list",
        ),
        (rule(Filter={"Tag": {"Value": "v"}}, Expiration={"Days": 1}), "Filter.Tag has no Key"),
        (
            rule(Filter={"ObjectSizeGreaterThan": -1}, Expiration={"Days": 1}),
            "ObjectSizeGreaterThan must be",
        ),
        (
            rule(Filter={"ObjectSizeLessThan": "10"}, Expiration={"Days": 1}),
            "ObjectSizeLessThan must be",
        ),
        (rule(Expiration={}), "Expiration names none of"),
        (rule(Expiration={"Days": 0}), r"Expiration.Days must be an integer >= 1, not 0"),
        (rule(Expiration={"Days": True}), "Expiration.Days must be an integer"),
        (rule(Expiration={"Days": 1, "Date": "2026-01-01T00:00:00Z"}), "both Days and Date"),
        (
            rule(Expiration={"Days": 1, "ExpiredObjectDeleteMarker": True}),
            "cannot be specified with Days",
        ),
        (rule(Expiration={"ExpiredObjectDeleteMarker": "true"}), "is not a boolean"),
        (rule(Expiration={"Date": "2026-01-01T01:00:00Z"}), "must be at midnight UTC"),
        (rule(Expiration={"Date": "2026-01-01T00:00:00+02:00"}), "must be at midnight UTC"),
        (rule(Expiration={"Date": "next tuesday"}), "is not an ISO 8601 date"),
        (rule(NoncurrentVersionExpiration={"NewerNoncurrentVersions": 2}), "has no NoncurrentDays"),
        (
            rule(NoncurrentVersionExpiration={"NoncurrentDays": 1, "NewerNoncurrentVersions": -1}),
            "NewerNoncurrentVersions must be",
        ),
        (rule(AbortIncompleteMultipartUpload={}), "has no DaysAfterInitiation"),
        (
            rule(AbortIncompleteMultipartUpload={"DaysAfterInitiation": 0}),
            "DaysAfterInitiation must be",
        ),
    ],
)
def test_parse_rules_refuses_what_it_cannot_apply(stored: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_rules([rule("ok", Expiration={"Days": 1}), stored])


def test_parse_rules_names_the_rule_at_fault() -> None:
    with pytest.raises(ValueError, match=r"lifecycle rule 1 \(ID 'bad'\): Expiration.Days"):
        parse_rules([rule("ok", Expiration={"Days": 1}), rule("bad", Expiration={"Days": -3})])
    with pytest.raises(ValueError, match="lifecycle rules are not a list"):
        parse_rules("Expiration")
