"""S3 Object Lock as pure decisions: whether a version is locked at a moment, whether a
request may remove it or change its retention, what a new version gets from its
bucket's default retention. No catalog, no clock: callers pass the record and `now`.

A version is locked while its retention's retain-until moment is in the future, or while
its legal hold is ON. A locked version cannot be removed for good, by anyone:

- a legal hold blocks removal until it is turned OFF (whatever the retention);
- COMPLIANCE retention blocks removal and may only be extended (a later moment, same
  mode), never shortened, removed or turned into GOVERNANCE;
- GOVERNANCE retention blocks removal of the version, and shortening, removal or a
  change of mode of the retention, except for a request that asks to bypass it
  (`x-amz-bypass-governance-retention: true`) and is allowed
  s3:BypassGovernanceRetention; extending it in GOVERNANCE mode needs no bypass.

Writing a new version is always allowed (a versioned bucket never overwrites one in
place), and so is a delete marker. The catalog runs `check_removal` inside the
compare-and-set that removes a version (`Catalog.delete_object(guard=...)`), against
the version as committed, so a retention set between a request's check and its commit
cannot be lost; retention changes are compare-and-set swaps of the record they were
decided on.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from blobstore.catalog.errors import CatalogError
from blobstore.catalog.records import BucketRecord, ObjectRecord

GOVERNANCE = "GOVERNANCE"
COMPLIANCE = "COMPLIANCE"
MODES = (GOVERNANCE, COMPLIANCE)
DAY_S = 86_400
YEAR_DAYS = 365
# Bounds of a default retention period (S3 documents none; these keep the moment a
# representable date: 100 years).
DEFAULT_RETENTION_DAYS_MAX = 100 * YEAR_DAYS
DEFAULT_RETENTION_YEARS_MAX = 100


class ObjectLockedError(CatalogError):
    """The version is protected by Object Lock (S3: AccessDenied, 403). A CatalogError,
    so a commit refuses the one mutation whose guard raised it."""

    def __init__(self, key: str, version_id: str, reason: str) -> None:
        super().__init__(f"{key!r} version {version_id} is locked: {reason}")
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Retention:
    """A version's retention: a mode and the moment it ends (epoch seconds)."""

    mode: str
    until: float

    def __post_init__(self) -> None:
        assert self.mode in MODES, self.mode


@dataclass(frozen=True, slots=True)
class DefaultRetention:
    """A bucket's default retention: a mode and Days or Years (one of them, positive)."""

    mode: str
    days: int = 0
    years: int = 0

    def __post_init__(self) -> None:
        assert self.mode in MODES, self.mode
        assert (self.days > 0) != (self.years > 0), (self.days, self.years)

    def retention(self, created: float) -> Retention:
        """The retention a version created at `created` gets (a year is 365 days)."""
        days = self.days or self.years * YEAR_DAYS
        return Retention(self.mode, created + days * DAY_S)


@dataclass(frozen=True, slots=True)
class BucketLock:
    """A bucket's Object Lock configuration (enabled, as it always is once set)."""

    default: DefaultRetention | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"enabled": True}
        if self.default is not None:
            d["mode"] = self.default.mode
            if self.default.days:
                d["days"] = self.default.days
            else:
                d["years"] = self.default.years
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BucketLock:
        mode = d.get("mode")
        if not mode:
            return cls()
        return cls(DefaultRetention(mode, int(d.get("days", 0)), int(d.get("years", 0))))


def bucket_lock(bucket: BucketRecord) -> BucketLock | None:
    """The bucket's Object Lock configuration; None when Object Lock is not enabled."""
    if bucket.object_lock is None:
        return None
    return BucketLock.from_dict(bucket.object_lock)


def retention_of(record: ObjectRecord) -> Retention | None:
    if not record.lock_mode:
        return None
    return Retention(record.lock_mode, record.lock_until)


def retained(record: ObjectRecord, now: float) -> bool:
    """Whether the version's retention is in force at `now`."""
    return bool(record.lock_mode) and record.lock_until > now


def is_locked(record: ObjectRecord, now: float) -> bool:
    return record.legal_hold or retained(record, now)


def check_removal(record: ObjectRecord, now: float, *, bypass_governance: bool) -> None:
    """ObjectLockedError unless the version may be removed for good at `now`.
    `bypass_governance`: the request asks to bypass GOVERNANCE retention and is allowed
    to. Delete markers carry no lock."""
    where = (record.key, record.version_id)
    if record.legal_hold:
        raise ObjectLockedError(*where, "legal hold is ON")
    if not retained(record, now):
        return
    if record.lock_mode == GOVERNANCE and bypass_governance:
        return
    raise ObjectLockedError(*where, f"{record.lock_mode} retention until {record.lock_until}")


def check_retention_change(
    record: ObjectRecord, new: Retention | None, now: float, *, bypass_governance: bool
) -> None:
    """ObjectLockedError unless the version's retention may become `new` (None: none)
    at `now`. Only a retention in force restricts the change."""
    if not retained(record, now):
        return
    where = (record.key, record.version_id)
    extends = new is not None and new.until >= record.lock_until
    if record.lock_mode == COMPLIANCE:
        if extends and new is not None and new.mode == COMPLIANCE:
            return
        raise ObjectLockedError(*where, "COMPLIANCE retention may only be extended")
    if (extends and new is not None and new.mode == GOVERNANCE) or bypass_governance:
        return
    raise ObjectLockedError(
        *where, "GOVERNANCE retention may be shortened, removed or changed only with a bypass"
    )


def retention_fields(retention: Retention | None) -> dict[str, Any]:
    """The fields (for `dataclasses.replace`) setting the version's retention."""
    if retention is None:
        return {"lock_mode": "", "lock_until": 0.0}
    return {"lock_mode": retention.mode, "lock_until": retention.until}


def with_default_retention(bucket: BucketRecord, record: ObjectRecord) -> ObjectRecord:
    """A new version as its bucket completes it at the commit: with the bucket's
    default retention, counted from the version's creation, unless it names its own."""
    if record.lock_mode:
        return record
    retention = new_version_retention(bucket, None, record.last_modified)
    if retention is None:
        return record
    return replace(record, **retention_fields(retention))


def new_version_retention(
    bucket: BucketRecord, requested: Retention | None, created: float
) -> Retention | None:
    """The retention a new version written at `created` gets: the one the request names,
    else the bucket's default retention, if any."""
    if requested is not None:
        return requested
    lock = bucket_lock(bucket)
    if lock is None or lock.default is None:
        return None
    return lock.default.retention(created)
