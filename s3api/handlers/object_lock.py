"""S3 Object Lock at the gateway: the bucket's configuration (Put/GetObjectLockConfiguration),
a version's retention and legal hold (Put/GetObjectRetention, Put/GetObjectLegalHold),
the x-amz-object-lock-* headers of writes (PutObject, CopyObject, CreateMultipartUpload)
and reads (GetObject, HeadObject), and the guard a delete of a version runs inside its
commit. What is allowed is decided in `blobstore.objects.lock`; see docs/object-lock.md.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from starlette.responses import Response

from blobstore.access.actions import object_lock_accesses
from blobstore.catalog import versioning
from blobstore.catalog.errors import DeleteMarkerError, NoSuchKeyError, NoSuchVersionError
from blobstore.catalog.records import VERSIONING_ENABLED, BucketRecord, ObjectRecord
from blobstore.objects.lock import (
    GOVERNANCE,
    MODES,
    BucketLock,
    Retention,
    bucket_lock,
    check_removal,
    check_retention_change,
    retention_fields,
)
from s3api import xml_requests, xml_responses
from s3api.checksums import RequestChecksums
from s3api.errors import S3Error
from s3api.handlers._private import version_headers, xml_response
from s3api.handlers.context import S3Context
from s3api.limits import validate_key

MODE_HEADER = "x-amz-object-lock-mode"
UNTIL_HEADER = "x-amz-object-lock-retain-until-date"
LEGAL_HOLD_HEADER = "x-amz-object-lock-legal-hold"
BYPASS_HEADER = "x-amz-bypass-governance-retention"
LOCK_CAS_ATTEMPTS_MAX = 8


@dataclass(frozen=True, slots=True)
class LockRequest:
    """The Object Lock a write asks for its new version (x-amz-object-lock-*)."""

    retention: Retention | None = None
    legal_hold: bool | None = None  # None: not named

    @property
    def named(self) -> bool:
        return self.retention is not None or self.legal_hold is not None

    def applied(self, record: ObjectRecord) -> ObjectRecord:
        """`record` (a new version's template) with the lock asked for."""
        if not self.named:
            return record
        return replace(record, **retention_fields(self.retention), legal_hold=bool(self.legal_hold))


def _missing_configuration() -> S3Error:
    return S3Error("InvalidRequest", "Bucket is missing Object Lock Configuration")


def parse_lock_headers(headers: Mapping[str, str], now: float) -> LockRequest:
    """The x-amz-object-lock-* headers: a mode and a retain-until date (ISO 8601, in
    the future) together or neither, and a legal hold ON or OFF."""
    mode = headers.get(MODE_HEADER)
    until_text = headers.get(UNTIL_HEADER)
    hold_text = headers.get(LEGAL_HOLD_HEADER)
    retention = None
    if (mode is None) != (until_text is None):
        raise S3Error(
            "InvalidArgument",
            "x-amz-object-lock-retain-until-date and x-amz-object-lock-mode must both be supplied",
        )
    if mode is not None and until_text is not None:
        if mode not in MODES:
            raise S3Error(
                "InvalidArgument", "Unknown wormMode directive.", ArgumentName=MODE_HEADER
            )
        until = xml_requests.parse_iso8601(until_text)
        if until is None:
            raise S3Error(
                "InvalidArgument",
                "The retain until date must be provided in ISO 8601 format",
                ArgumentName=UNTIL_HEADER,
            )
        if until <= now:
            raise S3Error("InvalidArgument", "The retain until date must be in the future!")
        retention = Retention(mode, until)
    if hold_text is not None and hold_text not in ("ON", "OFF"):
        raise S3Error(
            "InvalidArgument",
            "Legal Hold must be either of 'ON' or 'OFF'",
            ArgumentName=LEGAL_HOLD_HEADER,
        )
    return LockRequest(retention, None if hold_text is None else hold_text == "ON")


def check_lock_request(
    ctx: S3Context, bucket: BucketRecord, request: LockRequest, expect: RequestChecksums | None
) -> None:
    """A write naming Object Lock headers: only in a bucket with Object Lock, by a
    requester allowed s3:PutObjectRetention / s3:PutObjectLegalHold. An upload that sets
    a retention (its own or the bucket's default) must carry Content-MD5 or a checksum
    header (`expect`: what its body declares; None for a write without a body), as S3
    requires."""
    lock = bucket_lock(bucket)
    if request.named and lock is None:
        raise _missing_configuration()
    if request.named:
        accesses = object_lock_accesses(
            ctx.bucket,
            ctx.key,
            retention=request.retention is not None,
            legal_hold=request.legal_hold is not None,
        )
        if not ctx.decide(accesses, bucket).allowed:
            raise S3Error("AccessDenied")
    sets_retention = request.retention is not None or (
        lock is not None and lock.default is not None
    )
    if expect is None or not sets_retention:
        return
    if expect.content_md5 is None and not expect.algorithm:
        raise S3Error(
            "InvalidRequest",
            "Content-MD5 OR x-amz-checksum- HTTP header is required for Put Object requests "
            "with Object Lock parameters",
        )


def lock_headers(record: ObjectRecord) -> dict[str, str]:
    """The Object Lock headers of a GET or HEAD of the version (none when unset)."""
    headers = {}
    if record.lock_mode:
        headers[MODE_HEADER] = record.lock_mode
        headers[UNTIL_HEADER] = xml_responses.iso_timestamp(record.lock_until)
    if record.legal_hold:
        headers[LEGAL_HOLD_HEADER] = "ON"
    return headers


def may_bypass_governance(ctx: S3Context, bucket: BucketRecord, key: str) -> bool:
    """Whether the request asks to bypass GOVERNANCE retention and is allowed to."""
    if ctx.headers.get(BYPASS_HEADER, "").strip().lower() != "true":
        return False
    return ctx.decide(object_lock_accesses(ctx.bucket, key, bypass=True), bucket).allowed


def removal_guard(ctx: S3Context, bucket: BucketRecord, key: str) -> Callable[[ObjectRecord], None]:
    """The guard a delete runs, inside its commit, on each version it would remove for
    good (`Catalog.delete_object(guard=...)`): ObjectLockedError while it is locked. The
    bypass is decided only for a version GOVERNANCE retention keeps (once), so a
    request's recorded decision is no denial it did not need."""
    bypass: list[bool] = []

    def guard(record: ObjectRecord) -> None:
        now = time.time()
        if not bypass and record.lock_mode == GOVERNANCE and record.lock_until > now:
            bypass.append(may_bypass_governance(ctx, bucket, key))
        check_removal(record, now, bypass_governance=bool(bypass) and bypass[0])

    return guard


# ---------------------------------------------------------------------- bucket


async def get_object_lock_configuration(ctx: S3Context) -> Response:
    bucket = await ctx.authorized_bucket()
    lock = bucket_lock(bucket)
    if lock is None:
        raise S3Error("ObjectLockConfigurationNotFoundError", BucketName=ctx.bucket)
    default = lock.default
    shown = None if default is None else (default.mode, default.days, default.years)
    return xml_response(xml_responses.object_lock_configuration(shown))


async def put_object_lock_configuration(ctx: S3Context) -> Response:
    """Sets the default retention; enables Object Lock on a bucket whose versioning is
    Enabled (InvalidBucketState otherwise), for good."""
    await ctx.authorized_bucket()
    lock = xml_requests.parse_object_lock_configuration(
        await ctx.small_body(checksum_required=True)
    )
    await ctx.store.catalog.update_bucket(ctx.bucket, lambda b: _with_lock(b, lock))
    return Response(b"")


def _with_lock(bucket: BucketRecord, lock: BucketLock) -> BucketRecord:
    if bucket.versioning != VERSIONING_ENABLED:
        raise S3Error(
            "InvalidBucketState",
            "Versioning must be 'Enabled' on the bucket to apply a Object Lock configuration",
        )
    return replace(bucket, object_lock=lock.to_dict())


def refuse_suspending(bucket: BucketRecord, status: str) -> None:
    """PutBucketVersioning: a bucket with Object Lock keeps versioning Enabled."""
    if bucket.object_lock is not None and status != VERSIONING_ENABLED:
        raise S3Error(
            "InvalidBucketState",
            "An Object Lock configuration is present on this bucket, so the versioning state "
            "cannot be changed.",
        )


# ---------------------------------------------------------------------- versions


async def _locked_version(ctx: S3Context) -> tuple[BucketRecord, ObjectRecord]:
    """The bucket (with Object Lock, else InvalidRequest) and the version the request
    names, once the request is allowed on it."""
    validate_key(ctx.key)
    bucket = await ctx.authorized_bucket()
    if bucket.object_lock is None:
        raise _missing_configuration()
    version_id = ctx.query.get("versionId")
    if version_id is not None and not versioning.well_formed_version_id(version_id):
        raise S3Error("InvalidArgument", "Invalid version id specified")
    try:
        record = await ctx.store.catalog.get_object(
            ctx.bucket, ctx.key, version_id, view=ctx.view()
        )
    except DeleteMarkerError:
        raise S3Error("MethodNotAllowed", Method=ctx.method, ResourceType="DeleteMarker") from None
    except NoSuchKeyError:
        raise S3Error("NoSuchKey", Key=ctx.key) from None
    except NoSuchVersionError:
        raise S3Error("NoSuchVersion", Key=ctx.key, VersionId=version_id or "") from None
    ctx.authorize(bucket, record)
    return bucket, record


async def _changed_version(
    ctx: S3Context, change: Callable[[ObjectRecord, float], ObjectRecord]
) -> tuple[BucketRecord, ObjectRecord]:
    """Apply `change` (which may refuse) to the version the request names by
    compare-and-swap of its record: decided on the record it replaces."""
    for _ in range(LOCK_CAS_ATTEMPTS_MAX):
        bucket, record = await _locked_version(ctx)
        new = change(record, time.time())
        if new == record or await ctx.store.catalog.swap_object(record, new):
            return bucket, new
        await asyncio.sleep(0.01)
    raise S3Error("SlowDown")


async def get_object_retention(ctx: S3Context) -> Response:
    bucket, record = await _locked_version(ctx)
    if not record.lock_mode:
        raise S3Error("NoSuchObjectLockConfiguration")
    return xml_response(
        xml_responses.retention(record.lock_mode, record.lock_until),
        headers=version_headers(record.version_id, bucket.versioning),
    )


async def put_object_retention(ctx: S3Context) -> Response:
    await ctx.authorized_bucket()  # before the body is read
    retention = xml_requests.parse_retention(await ctx.small_body(checksum_required=True))
    if retention is not None and retention.until <= time.time():
        raise S3Error("InvalidArgument", "The retain until date must be in the future!")
    bypass: list[bool] = []  # decided once, when GOVERNANCE retention is in force

    def change(record: ObjectRecord, now: float) -> ObjectRecord:
        if not bypass and record.lock_mode == GOVERNANCE and record.lock_until > now:
            assert ctx.bucket_record is not None, "changed once the bucket's check passed"
            bypass.append(may_bypass_governance(ctx, ctx.bucket_record, record.key))
        allowed = bool(bypass) and bypass[0]
        check_retention_change(record, retention, now, bypass_governance=allowed)
        return replace(record, **retention_fields(retention))

    bucket, record = await _changed_version(ctx, change)
    return Response(b"", headers=version_headers(record.version_id, bucket.versioning))


async def get_object_legal_hold(ctx: S3Context) -> Response:
    bucket, record = await _locked_version(ctx)
    return xml_response(
        xml_responses.legal_hold(record.legal_hold),
        headers=version_headers(record.version_id, bucket.versioning),
    )


async def put_object_legal_hold(ctx: S3Context) -> Response:
    await ctx.authorized_bucket()  # before the body is read
    on = xml_requests.parse_legal_hold(await ctx.small_body(checksum_required=True))
    bucket, record = await _changed_version(
        ctx, lambda record, _now: replace(record, legal_hold=on)
    )
    return Response(b"", headers=version_headers(record.version_id, bucket.versioning))
