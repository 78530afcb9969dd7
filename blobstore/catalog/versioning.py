"""S3 versioning semantics on one key's version list (dicts in ObjectRecord.to_dict()
form, newest first). Pure functions: the commit queue applies them to a page copy inside
each compare-and-set attempt, so preconditions are checked against the state committed.

Every mutation is idempotent: its version id (or, for the null version, its whole record)
is fixed before the first attempt, and an attempt that finds its own result already in the
list reports success without changing anything. That makes retrying after an unknown
outcome (connection loss in the middle of a write) safe.
"""

from __future__ import annotations

import os
import random
import threading
import time
from dataclasses import dataclass, replace
from typing import Any

from blobstore.catalog.errors import (
    NoSuchKeyError,
    PreconditionFailedError,
)
from blobstore.catalog.records import (
    NULL_VERSION_ID,
    VERSIONING_ENABLED,
    VERSIONING_SUSPENDED,
    ObjectRecord,
)

VersionList = list[dict[str, Any]]

_TIME_HEX_DIGITS = 14
_TIME_MAX = (1 << (4 * _TIME_HEX_DIGITS)) - 1
_TOKEN_HEX_DIGITS = 10
_lock = threading.Lock()
_last_micros = 0
_token_random = random.Random(os.urandom(16))  # per process; ids need uniqueness only


def new_version_id(now_s: float | None = None) -> str:
    """A unique version id; later ids sort before earlier ones (newest first).

    14 hex digits of inverted microseconds (strictly decreasing within a process), then
    10 random hex digits that make the id unique across processes.
    """
    global _last_micros
    micros = int((time.time() if now_s is None else now_s) * 1_000_000)
    with _lock:
        micros = max(micros, _last_micros + 1)
        _last_micros = micros
        token = _token_random.getrandbits(4 * _TOKEN_HEX_DIGITS)
    return f"{_TIME_MAX - micros:0{_TIME_HEX_DIGITS}x}{token:0{_TOKEN_HEX_DIGITS}x}"


def well_formed_version_id(text: str) -> bool:
    """Whether `text` could name a version: "null", or an id new_version_id() makes."""
    return text == NULL_VERSION_ID or (
        len(text) == _TIME_HEX_DIGITS + _TOKEN_HEX_DIGITS
        and all(c in "0123456789abcdef" for c in text)
    )


def _token(version_id: str) -> str:
    return version_id[-_TOKEN_HEX_DIGITS:]


def _order_before(version_id: str, versions: VersionList) -> str:
    """`version_id`, or an id with the same token that sorts before every existing id, so a
    key's ids stay sorted newest first even when clocks of two gateways disagree."""
    newest = min((d["v"] for d in versions if d["v"] != NULL_VERSION_ID), default=None)
    if newest is None or version_id < newest:
        return version_id
    time_part = int(newest[:_TIME_HEX_DIGITS], 16)
    return f"{max(time_part - 1, 0):0{_TIME_HEX_DIGITS}x}{_token(version_id)}"


def _latest_live(versions: VersionList) -> dict[str, Any] | None:
    if versions and not versions[0].get("dm", False):
        return versions[0]
    return None


@dataclass(frozen=True, slots=True)
class Outcome:
    versions: VersionList
    record: ObjectRecord | None
    garbage: list[ObjectRecord]
    removed_version_id: str | None = None
    removed_delete_marker: bool = False
    changed: bool = True


def _garbage(bucket: str, key: str, d: dict[str, Any]) -> list[ObjectRecord]:
    if d.get("dm", False):
        return []
    return [ObjectRecord.from_dict(bucket, key, d)]


def check_write_conditions(
    bucket: str,
    key: str,
    latest_etag: str | None,
    *,
    if_match: str | None,
    if_none_match: str | None,
) -> None:
    """A write's If-None-Match ("*": the key has a current version; an ETag: that
    version's) and If-Match against the ETag of the key's current version (None: the key
    has none, or a delete marker)."""
    if if_none_match is not None and latest_etag is not None:
        unwanted = if_none_match.strip().strip('"')
        if unwanted in ("*", latest_etag):
            raise PreconditionFailedError(f"{key!r} matches If-None-Match {if_none_match!r}")
    if if_match is not None:
        if latest_etag is None:  # nothing to match: S3 answers NoSuchKey, not 412
            raise NoSuchKeyError(bucket, key)
        expected = if_match.strip().strip('"')
        if expected != "*" and latest_etag != expected:
            raise PreconditionFailedError(f"{key!r} does not match If-Match {if_match!r}")


def _check_current(
    versions: VersionList,
    bucket: str,
    key: str,
    *,
    if_match: str | None,
    if_none_match: str | None,
) -> None:
    """check_write_conditions against the key's current version in `versions`."""
    latest = _latest_live(versions)
    check_write_conditions(
        bucket,
        key,
        None if latest is None else latest.get("etag", ""),
        if_match=if_match,
        if_none_match=if_none_match,
    )


def apply_put(
    versions: VersionList,
    record: ObjectRecord,
    versioning: str,
    *,
    if_match: str | None,
    if_none_match: str | None,
    record_dict: dict[str, Any] | None = None,
) -> Outcome:
    """Put `record` (its version_id a candidate from new_version_id()). `record_dict` is
    `record.to_dict()` when the caller has it (commit attempts reuse it)."""
    base = record.to_dict() if record_dict is None else record_dict
    bucket, key = record.bucket, record.key
    # Already applied by an earlier attempt whose outcome was unknown?
    if versioning == VERSIONING_ENABLED:
        token = _token(record.version_id)
        for d in versions:
            if d["v"] != NULL_VERSION_ID and _token(d["v"]) == token:
                return Outcome(versions, ObjectRecord.from_dict(bucket, key, d), [], changed=False)
    else:
        null = {**base, "v": NULL_VERSION_ID}
        if versions and versions[0] == null:
            return Outcome(versions, ObjectRecord.from_dict(bucket, key, null), [], changed=False)
    _check_current(versions, bucket, key, if_match=if_match, if_none_match=if_none_match)
    if versioning == VERSIONING_ENABLED:
        new = {**base, "v": _order_before(record.version_id, versions)}
        result = [new, *versions]
        garbage: list[ObjectRecord] = []
    else:
        new = {**base, "v": NULL_VERSION_ID}
        garbage = [
            g for d in versions if d["v"] == NULL_VERSION_ID for g in _garbage(bucket, key, d)
        ]
        result = [new, *(d for d in versions if d["v"] != NULL_VERSION_ID)]
    return Outcome(result, ObjectRecord.from_dict(bucket, key, new, is_latest=True), garbage)


def apply_delete(
    versions: VersionList,
    bucket: str,
    key: str,
    version_id: str | None,
    versioning: str,
    marker_version_id: str,
    marker_time: float,
    owner: str,
    if_match: str | None = None,
) -> Outcome:
    """DeleteObject: with a version id remove it for good; otherwise per versioning state.
    `if_match` (an ETag, or "*": exists) is checked against the key's current version, as
    S3's conditional deletes are, whichever version the delete names; after the check
    for this delete's own marker (a retry after an unknown outcome finds it)."""

    def check_condition() -> None:
        if if_match is not None:
            _check_current(versions, bucket, key, if_match=if_match, if_none_match=None)

    if version_id is not None:
        check_condition()
        return _remove_version(versions, bucket, key, version_id)
    if versioning == VERSIONING_ENABLED:
        own = _own_marker(versions, bucket, key, marker_version_id)
        if own is not None:
            return Outcome(versions, own, [], changed=False)
        check_condition()
        marker = ObjectRecord(
            bucket,
            key,
            _order_before(marker_version_id, versions),
            last_modified=marker_time,
            is_delete_marker=True,
            owner=owner,
        )
        return Outcome([marker.to_dict(), *versions], replace(marker, is_latest=True), [])
    if versioning == VERSIONING_SUSPENDED:
        marker = ObjectRecord(
            bucket,
            key,
            NULL_VERSION_ID,
            last_modified=marker_time,
            is_delete_marker=True,
            owner=owner,
        )
        if versions and versions[0] == marker.to_dict():
            return Outcome(versions, marker, [], changed=False)
        check_condition()
        kept, garbage = _without_null_version(versions, bucket, key)
        return Outcome([marker.to_dict(), *kept], replace(marker, is_latest=True), garbage)
    # Never versioned: only null versions exist; the key goes away.
    check_condition()
    kept, garbage = _without_null_version(versions, bucket, key)
    return Outcome(kept, None, garbage, changed=len(kept) != len(versions))


def _remove_version(versions: VersionList, bucket: str, key: str, version_id: str) -> Outcome:
    """Remove one version for good (nothing changes when it is gone already)."""
    kept = [d for d in versions if d["v"] != version_id]
    if len(kept) == len(versions):
        return Outcome(versions, None, [], version_id, False, changed=False)
    removed = next(d for d in versions if d["v"] == version_id)
    return Outcome(
        kept,
        None,
        _garbage(bucket, key, removed),
        version_id,
        removed.get("dm", False),
    )


def _own_marker(
    versions: VersionList, bucket: str, key: str, marker_version_id: str
) -> ObjectRecord | None:
    """The delete marker an earlier attempt of this delete made, if it is there (its
    version id's token is this delete's)."""
    for d in versions:
        if d["v"] != NULL_VERSION_ID and _token(d["v"]) == _token(marker_version_id):
            return ObjectRecord.from_dict(bucket, key, d)
    return None


def _without_null_version(
    versions: VersionList, bucket: str, key: str
) -> tuple[VersionList, list[ObjectRecord]]:
    """The versions but the null one, and the null one's bytes as garbage."""
    garbage = [g for d in versions if d["v"] == NULL_VERSION_ID for g in _garbage(bucket, key, d)]
    kept = [d for d in versions if d["v"] != NULL_VERSION_ID]
    return kept, garbage


def apply_swap(
    versions: VersionList, expected: ObjectRecord, new: ObjectRecord
) -> tuple[VersionList, bool]:
    """Replace one version's record if it is still `expected` (compaction, tiering)."""
    assert expected.version_id == new.version_id, (expected.version_id, new.version_id)
    want = expected.to_dict()
    target = new.to_dict()
    for i, d in enumerate(versions):
        if d["v"] != expected.version_id:
            continue
        if d == target:
            return versions, True
        if d != want:
            return versions, False
        result = list(versions)
        result[i] = target
        return result, True
    return versions, False
