"""Errors of the catalog. The gateway maps each, by class, to one S3 error in
`s3api/errors.py`. An error's `bucket`, `key`, `version_id` and `upload_id` attributes
are the names S3 shows beside the code (BucketName, Key, VersionId, UploadId)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from blobstore.catalog.records import ObjectRecord


class CatalogError(Exception):
    """Base of every catalog error."""


class InvalidBucketNameError(CatalogError):
    """The name breaks the S3 bucket naming rules (S3: InvalidBucketName, 400)."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"invalid bucket name {name!r}: {reason}")
        self.name = name
        self.bucket = name
        self.reason = reason


class InvalidObjectKeyError(CatalogError):
    """The key is empty or not valid UTF-8 (S3: InvalidArgument, 400)."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"invalid object key {key[:64]!r}: {reason}")
        self.key = key
        self.reason = reason


class ObjectKeyTooLongError(InvalidObjectKeyError):
    """The key is longer than the limit in UTF-8 bytes (S3: KeyTooLongError, 400)."""

    def __init__(self, key: str, size_bytes: int, limit_bytes: int) -> None:
        super().__init__(key, f"is {size_bytes} bytes; at most {limit_bytes} allowed")
        self.size_bytes = size_bytes
        self.limit_bytes = limit_bytes


class RecordTooLargeError(CatalogError):
    """One record (or one key's versions) would not fit in an index page."""

    def __init__(self, what: str, size_bytes: int, limit_bytes: int) -> None:
        super().__init__(f"{what} is {size_bytes} bytes encoded; the limit is {limit_bytes}")
        self.size_bytes = size_bytes
        self.limit_bytes = limit_bytes


class BucketAlreadyExistsError(CatalogError):
    """The name is taken; `existing_owner` tells BucketAlreadyOwnedByYou from BucketAlreadyExists.
    The answer names no bucket (no `bucket` attribute)."""

    def __init__(self, name: str, existing_owner: str) -> None:
        super().__init__(f"bucket {name!r} already exists (owner {existing_owner!r})")
        self.name = name
        self.existing_owner = existing_owner


class NoSuchBucketError(CatalogError):
    def __init__(self, name: str) -> None:
        super().__init__(f"no such bucket {name!r}")
        self.name = name
        self.bucket = name


class BucketNotEmptyError(CatalogError):
    """The bucket still holds objects, versions, delete markers or multipart uploads."""

    def __init__(self, name: str, what: str = "objects") -> None:
        super().__init__(f"bucket {name!r} is not empty: it holds {what}")
        self.name = name
        self.bucket = name
        self.what = what


class NoSuchKeyError(CatalogError):
    def __init__(self, bucket: str, key: str) -> None:
        super().__init__(f"no such key {key!r} in bucket {bucket!r}")
        self.bucket = bucket
        self.key = key


class NoSuchVersionError(CatalogError):
    def __init__(self, bucket: str, key: str, version_id: str) -> None:
        super().__init__(f"no version {version_id!r} of key {key!r} in bucket {bucket!r}")
        self.bucket = bucket
        self.key = key
        self.version_id = version_id


class DeleteMarkerError(CatalogError):
    """The latest version (or the version asked for) is a delete marker.

    The gateway answers 404 (latest) or 405 (explicit version id) with
    `x-amz-delete-marker: true` and the marker's version id.
    """

    def __init__(self, record: ObjectRecord) -> None:
        super().__init__(
            f"key {record.key!r} in bucket {record.bucket!r} is a delete marker "
            f"(version {record.version_id!r})"
        )
        self.record = record


class PreconditionFailedError(CatalogError):
    """If-Match / If-None-Match did not hold at commit time (S3: PreconditionFailed, 412)."""


class BucketOwnerChangedError(CatalogError):
    """The bucket was deleted and created again by another owner before the commit
    (S3: AccessDenied): an owner named at commit time is checked against the record
    the commit's version check holds."""


class NoSuchUploadError(CatalogError):
    def __init__(self, bucket: str, upload_id: str) -> None:
        super().__init__(f"no such upload {upload_id!r} in bucket {bucket!r}")
        self.bucket = bucket
        self.upload_id = upload_id


class CatalogBusyError(CatalogError):
    """Compare-and-set retries or a commit queue ran out (S3: SlowDown, 503). Retry later."""


class CatalogUnavailableError(CatalogError):
    """ZooKeeper could not be reached in time (S3: ServiceUnavailable, 503).

    The outcome of a write that fails this way is unknown: it may have been committed.
    """


class InvalidPartError(CatalogError):
    """A part named by CompleteMultipartUpload is missing or its ETag differs (S3: InvalidPart)."""

    def __init__(self, upload_id: str, part_number: int, reason: str) -> None:
        super().__init__(f"upload {upload_id!r} part {part_number}: {reason}")
        self.upload_id = upload_id
        self.part_number = part_number


class LedgerCondemnedError(CatalogError):
    """The commit would reference a ledger the maintenance job condemned (about to be
    deleted as unreferenced): nothing was written; the request may be retried, and then
    reads its source again (S3: SlowDown, 503)."""

    def __init__(self, ledger_ids: list[int]) -> None:
        super().__init__(f"ledgers {ledger_ids} are condemned by maintenance; retry the request")
        self.ledger_ids = ledger_ids
