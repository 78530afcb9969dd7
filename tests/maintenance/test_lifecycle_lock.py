"""Lifecycle against Object Lock, as pure decisions: an expiration never removes a
version Object Lock keeps (SKIP_LOCKED, counted as skipped), a marker on a locked
current version is still added, a transition still moves it; the scan reads the lock
from the stored record; a partition of skipped actions opens no session."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from blobstore.catalog.records import ObjectRecord, VersionRefs
from blobstore.maintenance import execute, scan
from blobstore.maintenance.lifecycle import ActionKind, Version, key_actions, parse_rules


def at(year: int, month: int, day: int) -> float:
    return datetime(year, month, day, tzinfo=UTC).timestamp()


def rules(**parts: Any) -> Any:
    return parse_rules([{"ID": "r1", "Status": "Enabled", "Filter": {}} | parts])


def kinds(actions: list[Any]) -> list[tuple[ActionKind, str]]:
    return [(action.kind, action.version_id) for action in actions]


NOW = at(2026, 6, 1)
EXPIRE_NONCURRENT = {"NoncurrentVersionExpiration": {"NoncurrentDays": 1}}


@pytest.mark.parametrize(
    ("lock", "expected"),
    [
        ({}, ActionKind.DELETE_VERSION),
        ({"retain_until": at(2027, 1, 1)}, ActionKind.SKIP_LOCKED),
        ({"retain_until": NOW}, ActionKind.DELETE_VERSION),  # retain-until reached
        ({"legal_hold": True}, ActionKind.SKIP_LOCKED),
        ({"retain_until": at(2020, 1, 1), "legal_hold": True}, ActionKind.SKIP_LOCKED),
    ],
)
def test_a_locked_noncurrent_version_is_skipped_not_expired(
    lock: dict[str, Any], expected: ActionKind
) -> None:
    versions = [
        Version("v2", at(2026, 1, 2), 10),
        Version("v1", at(2026, 1, 1), 10, **lock),
    ]
    actions = key_actions("k", versions, rules(**EXPIRE_NONCURRENT), "Enabled", NOW)
    assert kinds(actions) == [(expected, "v1")]
    if expected is ActionKind.SKIP_LOCKED:
        assert "kept by Object Lock" in actions[0].reason


def test_a_locked_current_version_still_gets_its_delete_marker() -> None:
    """The marker removes nothing: the version stays, noncurrent, and locked."""
    versions = [Version("v1", at(2026, 1, 1), 10, retain_until=at(2030, 1, 1))]
    actions = key_actions("k", versions, rules(Expiration={"Days": 1}), "Enabled", NOW)
    assert kinds(actions) == [(ActionKind.ADD_DELETE_MARKER, "v1")]


def test_a_locked_null_version_of_an_unversioned_key_is_skipped() -> None:
    versions = [Version("null", at(2026, 1, 1), 10, legal_hold=True)]
    actions = key_actions("k", versions, rules(Expiration={"Days": 1}), "", NOW)
    assert kinds(actions) == [(ActionKind.SKIP_LOCKED, "null")]


def test_a_version_skipped_as_locked_may_still_move_to_a_tier() -> None:
    versions = [
        Version("v2", at(2026, 1, 2), 10),
        Version("v1", at(2026, 1, 1), 10, retain_until=at(2030, 1, 1)),
    ]
    moving = {"NoncurrentVersionTransition": [{"NoncurrentDays": 1, "StorageClass": "COLD"}]}
    actions = key_actions("k", versions, rules(**EXPIRE_NONCURRENT, **moving), "Enabled", NOW)
    assert kinds(actions) == [(ActionKind.SKIP_LOCKED, "v1"), (ActionKind.TRANSITION, "v1")]


def test_the_scan_judges_the_lock_the_record_stores() -> None:
    current = ObjectRecord("b", "k", "v2", size=1, last_modified=at(2026, 1, 2))
    locked = ObjectRecord(
        "b",
        "k",
        "v1",
        size=1,
        last_modified=at(2026, 1, 1),
        lock_mode="COMPLIANCE",
        lock_until=at(2030, 1, 1),
    )
    versions = [VersionRefs(current.to_dict()), VersionRefs(locked.to_dict())]
    rows = list(scan.key_lifecycle("b", "k", versions, rules(**EXPIRE_NONCURRENT), "Enabled", NOW))
    assert [(row[6], row[9]) for row in rows] == [(str(ActionKind.SKIP_LOCKED), "v1")]
    unlocked = list(
        scan.key_lifecycle(
            "b", "k", versions, rules(**EXPIRE_NONCURRENT), "Enabled", at(2031, 1, 1)
        )
    )
    assert [(row[6], row[9]) for row in unlocked] == [(str(ActionKind.DELETE_VERSION), "v1")]


def test_skipped_actions_are_reported_without_a_session() -> None:
    """A partition of SKIP_LOCKED actions only opens no ZooKeeper session (None would
    fail if it did) and reports each as skipped, "locked"."""
    action = (str(ActionKind.SKIP_LOCKED), "b", "k", "v1", at(2026, 1, 1), "r1", "reason")
    rows = list(execute.lifecycle_partition(None, [action]))  # type: ignore[arg-type]
    assert rows == [(execute.RESULT_SKIPPED, -1, "b", "k", "v1", 0, execute.LOCKED)]
