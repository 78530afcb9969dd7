"""Bucket operations: create, head, delete, location, versioning, tagging, lifecycle,
listings (ListObjects v1 and v2, ListObjectVersions) and DeleteObjects."""

from __future__ import annotations

import asyncio
import base64
import binascii
import time
from dataclasses import replace
from typing import Any

from starlette.responses import Response

from blobstore.access.actions import OperationRequest, required_accesses
from blobstore.access.decision import BUCKET_OWNER_ENFORCED, OBJECT_WRITER, OWNERSHIP_SETTINGS
from blobstore.catalog.errors import BucketAlreadyExistsError
from blobstore.catalog.records import BucketRecord, ListResult
from blobstore.catalog.versioning import well_formed_version_id
from blobstore.objects.lock import BucketLock
from blobstore.tier.tiers import TierStore, resolve_storage_class
from s3api import xml_requests, xml_responses
from s3api.errors import S3Error, log_server_error, to_s3_error
from s3api.handlers import authorization, object_lock
from s3api.handlers._private import xml_response
from s3api.handlers.context import S3Context
from s3api.limits import parse_max_count, validate_bucket_name

DELETE_CONCURRENCY = 16
# The region where S3 answers CreateBucket of a bucket its requester owns with 200.
LEGACY_REGION = "us-east-1"


def _encoding_type(ctx: S3Context) -> str | None:
    encoding = ctx.query.get("encoding-type")
    if encoding is not None and encoding != "url":
        raise S3Error(
            "InvalidArgument",
            "Invalid Encoding Method specified in Request",
            ArgumentName="encoding-type",
            ArgumentValue=encoding,
        )
    return encoding


# ---------------------------------------------------------------------- buckets


# ListBuckets pages: max-buckets is 1..10,000 (S3's bound); without it, every bucket.
LIST_BUCKETS_MAX = 10_000


async def list_buckets(ctx: S3Context) -> Response:
    ctx.authorize(None)  # s3:ListAllMyBuckets: any user, never anonymous
    prefix = ctx.query.get("prefix")
    region = ctx.query.get("bucket-region")
    max_text = ctx.query.get("max-buckets")
    token = ctx.query.get("continuation-token")
    max_buckets: int | None = None
    if max_text is not None:
        if not max_text.isdigit() or not 1 <= int(max_text) <= LIST_BUCKETS_MAX:
            raise S3Error(
                "InvalidArgument",
                f"max-buckets must be an integer from 1 to {LIST_BUCKETS_MAX}",
                ArgumentName="max-buckets",
                ArgumentValue=max_text,
            )
        max_buckets = int(max_text)
    after = _untoken(token) if token is not None else ""
    buckets = sorted(
        (
            b
            for b in await ctx.store.catalog.list_buckets()
            if b.owner == ctx.requester
            and b.name.startswith(prefix or "")
            and (region is None or b.region == region)
            and b.name > after
        ),
        key=lambda b: b.name,
    )
    next_token = None
    if max_buckets is not None and len(buckets) > max_buckets:
        buckets = buckets[:max_buckets]
        next_token = _token(buckets[-1].name)
    return xml_response(
        xml_responses.list_all_my_buckets_result(
            buckets, ctx.requester or "", prefix=prefix, continuation_token=next_token
        )
    )


async def create_bucket(ctx: S3Context) -> Response:
    validate_bucket_name(ctx.bucket)
    locked = ctx.headers.get("x-amz-bucket-object-lock-enabled", "").strip().lower() == "true"
    owner = ctx.requester
    if owner is None:
        ctx.authorize(None)  # AccessDenied: never allowed to anonymous requests
    assert owner is not None, "CreateBucket is never allowed to anonymous requests"
    # s3:CreateBucket, and s3:PutBucketAcl with an ACL, on the bucket as it will be:
    # its requester's, whose ACL is its owner's to set.
    ctx.authorize(BucketRecord(ctx.bucket, owner, time.time()))
    settings = _new_bucket_settings(ctx, owner)
    region = (
        xml_requests.parse_create_bucket_configuration(await ctx.small_body()) or ctx.config.region
    )
    try:
        # With Object Lock: versioning Enabled from the start, for good.
        await ctx.store.catalog.create_bucket(
            ctx.bucket, owner, region, object_lock=BucketLock().to_dict() if locked else None
        )
    except BucketAlreadyExistsError as exc:
        if exc.existing_owner != owner or region != LEGACY_REGION:
            raise
        existing = await ctx.store.catalog.get_bucket(ctx.bucket)
        if not _recreated_as_is(existing, owner, region, settings):
            raise S3Error("BucketAlreadyExists") from None
        return Response(b"", headers={"Location": f"/{ctx.bucket}"})
    if settings:
        # Created with the defaults (the most closed: ACLs disabled), then opened.
        await ctx.store.catalog.update_bucket(
            ctx.bucket, lambda b: replace(b, settings={**b.settings, **settings})
        )
    return Response(b"", headers={"Location": f"/{ctx.bucket}"})


def _recreated_as_is(
    existing: BucketRecord, owner: str, region: str, settings: dict[str, Any]
) -> bool:
    """Whether a CreateBucket of an existing bucket asks for it as it is: S3 answers
    such a re-creation by its owner in us-east-1 with 200 and changes nothing (elsewhere
    BucketAlreadyOwnedByYou); one asking for another ACL or ownership is refused
    (BucketAlreadyExists)."""
    kept = {
        name: existing.settings[name]
        for name in (authorization.OWNERSHIP, authorization.ACL)
        if name in existing.settings
    }
    return existing.owner == owner and existing.region == region and kept == settings


def _new_bucket_settings(ctx: S3Context, owner: str) -> dict[str, Any]:
    """The object ownership and ACL a CreateBucket asks for, as S3 takes them:
    `x-amz-object-ownership` sets the ownership, and BucketOwnerEnforced refuses an ACL
    beyond the owner's (InvalidBucketAclWithObjectOwnership); without it, a bucket
    created with such an ACL (public-read, x-amz-grant-*) has ACLs enabled
    (ObjectWriter), as S3 created buckets before it made BucketOwnerEnforced the
    default, and as conformance suites and older clients expect. Other buckets get the
    gateway's default ownership (BLOBSTORE_GATEWAY_OBJECT_OWNERSHIP; S3's by default)."""
    ownership = ctx.headers.get("x-amz-object-ownership")
    if ownership is not None and ownership not in OWNERSHIP_SETTINGS:
        raise S3Error(
            "InvalidArgument",
            "Invalid x-amz-object-ownership header",
            ArgumentName="x-amz-object-ownership",
            ArgumentValue=ownership,
        )
    foreign = authorization.names_foreign_acl(ctx.headers)
    if ownership is None:
        default = ctx.config.default_object_ownership
        ownership = OBJECT_WRITER if foreign and default == BUCKET_OWNER_ENFORCED else default
    if ownership == BUCKET_OWNER_ENFORCED:
        if foreign:
            raise S3Error("InvalidBucketAclWithObjectOwnership")
        return {}
    settings: dict[str, Any] = {authorization.OWNERSHIP: ownership}
    acl = authorization.requested_acl(ctx.headers, owner)
    if acl is not None:
        authorization.check_grants(acl, ctx.authorizer, ctx.authorizer.account_block)
        settings[authorization.ACL] = acl.to_dict()
    return settings


async def head_bucket(ctx: S3Context) -> Response:
    record = await ctx.authorized_bucket()
    return Response(b"", headers={"x-amz-bucket-region": record.region})


async def delete_bucket(ctx: S3Context) -> Response:
    await ctx.authorized_bucket()
    await ctx.store.catalog.delete_bucket(ctx.bucket)
    return Response(b"", status_code=204)


async def get_bucket_location(ctx: S3Context) -> Response:
    record = await ctx.authorized_bucket()
    return xml_response(xml_responses.location_constraint(record.region))


async def get_bucket_versioning(ctx: S3Context) -> Response:
    record = await ctx.authorized_bucket()
    return xml_response(xml_responses.versioning_configuration(record.versioning))


async def put_bucket_versioning(ctx: S3Context) -> Response:
    await ctx.authorized_bucket()
    status = xml_requests.parse_versioning_configuration(await ctx.small_body())

    def versioned(bucket: BucketRecord) -> BucketRecord:
        object_lock.refuse_suspending(bucket, status)
        return replace(bucket, versioning=status)

    await ctx.store.catalog.update_bucket(ctx.bucket, versioned)
    return Response(b"")


async def get_bucket_tagging(ctx: S3Context) -> Response:
    record = await ctx.authorized_bucket()
    if not record.tags:
        raise S3Error("NoSuchTagSet", BucketName=ctx.bucket)
    return xml_response(xml_responses.tagging(record.tags))


async def put_bucket_tagging(ctx: S3Context) -> Response:
    await ctx.authorized_bucket()
    tags = xml_requests.parse_tagging(await ctx.small_body(), bucket=True)
    await ctx.store.catalog.update_bucket(ctx.bucket, lambda b: replace(b, tags=tags))
    return Response(b"", status_code=204)


async def delete_bucket_tagging(ctx: S3Context) -> Response:
    await ctx.authorized_bucket()
    await ctx.store.catalog.update_bucket(ctx.bucket, lambda b: replace(b, tags={}))
    return Response(b"", status_code=204)


async def get_bucket_lifecycle(ctx: S3Context) -> Response:
    record = await ctx.authorized_bucket()
    if not record.lifecycle:
        raise S3Error("NoSuchLifecycleConfiguration", BucketName=ctx.bucket)
    return xml_response(xml_responses.lifecycle_configuration(record.lifecycle))


async def put_bucket_lifecycle(ctx: S3Context) -> Response:
    await ctx.authorized_bucket()
    rules = xml_requests.parse_lifecycle_configuration(await ctx.small_body())
    await _check_transition_classes(ctx, xml_requests.transition_classes(rules))
    await ctx.store.catalog.update_bucket(ctx.bucket, lambda b: replace(b, lifecycle=rules))
    return Response(b"")


async def _check_transition_classes(ctx: S3Context, classes: list[str]) -> None:
    """Each class a transition names must name a cold tier, or be an S3 class bound to
    one (`blobstore admin tier add ... --storage-class`): else InvalidStorageClass."""
    if not classes:
        return
    assert ctx.store.zk is not None
    tiers = await TierStore(ctx.store.zk).list()
    for storage_class in classes:
        if resolve_storage_class(tiers, storage_class) is None:
            raise S3Error(
                "InvalidStorageClass",
                f"The storage class you specified is not valid: no cold tier answers to "
                f"{storage_class}",
                StorageClassRequested=storage_class,
            )


async def delete_bucket_lifecycle(ctx: S3Context) -> Response:
    await ctx.authorized_bucket()
    await ctx.store.catalog.update_bucket(ctx.bucket, lambda b: replace(b, lifecycle=None))
    return Response(b"", status_code=204)


# ---------------------------------------------------------------------- listings


def _token(start_after: str) -> str:
    return base64.urlsafe_b64encode(start_after.encode("utf-8")).decode("ascii")


def _untoken(token: str) -> str:
    try:
        return base64.b64decode(token.encode("ascii"), altchars=b"-_", validate=True).decode(
            "utf-8"
        )
    except (binascii.Error, UnicodeError, ValueError):
        raise S3Error(
            "InvalidArgument",
            "The continuation token provided is incorrect",
            ArgumentName="continuation-token",
        ) from None


async def _list_objects(
    ctx: S3Context, prefix: str, delimiter: str, start_after: str, max_keys: int
) -> ListResult:
    """One page of keys for ListObjects v1 and v2, in the request's view (max-keys 0:
    an empty, untruncated page; nothing is read)."""
    return await ctx.store.catalog.list_objects(
        ctx.bucket,
        prefix=prefix,
        delimiter=delimiter,
        start_after=start_after,
        max_keys=max_keys,
        view=ctx.view(),
    )


async def list_objects_v2(ctx: S3Context) -> Response:
    await ctx.authorized_bucket()
    encoding_type = _encoding_type(ctx)
    prefix = ctx.query.get("prefix", "")
    delimiter = ctx.query.get("delimiter", "")
    max_keys = parse_max_count(ctx.query.get("max-keys"))
    token = ctx.query.get("continuation-token")
    start_after = ctx.query.get("start-after", "")
    fetch_owner = ctx.query.get("fetch-owner", "false").lower() == "true"
    # A continuation token carries the position; S3 ignores start-after beside one
    # (minio-py sends both, the second holding the token itself). An empty token is
    # none (S3 lists from the start and echoes it).
    position = _untoken(token) if token else start_after
    result = await _list_objects(ctx, prefix, delimiter, position, max_keys)
    return xml_response(
        xml_responses.list_bucket_result_v2(
            ctx.bucket,
            prefix=prefix,
            delimiter=delimiter,
            max_keys=max_keys,
            is_truncated=result.is_truncated,
            contents=result.contents,
            common_prefixes=result.common_prefixes,
            continuation_token=token,
            next_continuation_token=(
                _token(result.next_start_after) if result.is_truncated else None
            ),
            start_after=start_after or None,
            fetch_owner=fetch_owner,
            encoding_type=encoding_type,
        )
    )


async def list_objects_v1(ctx: S3Context) -> Response:
    await ctx.authorized_bucket()
    encoding_type = _encoding_type(ctx)
    prefix = ctx.query.get("prefix", "")
    delimiter = ctx.query.get("delimiter", "")
    marker = ctx.query.get("marker", "")
    max_keys = parse_max_count(ctx.query.get("max-keys"))
    result = await _list_objects(ctx, prefix, delimiter, marker, max_keys)
    return xml_response(
        xml_responses.list_bucket_result_v1(
            ctx.bucket,
            prefix=prefix,
            delimiter=delimiter,
            marker=marker,
            max_keys=max_keys,
            is_truncated=result.is_truncated,
            next_marker=result.next_start_after or None,
            contents=result.contents,
            common_prefixes=result.common_prefixes,
            encoding_type=encoding_type,
        )
    )


async def list_object_versions(ctx: S3Context) -> Response:
    await ctx.authorized_bucket()
    encoding_type = _encoding_type(ctx)
    prefix = ctx.query.get("prefix", "")
    delimiter = ctx.query.get("delimiter", "")
    key_marker = ctx.query.get("key-marker", "")
    version_id_marker = ctx.query.get("version-id-marker", "")
    if version_id_marker and not key_marker:
        raise S3Error(
            "InvalidArgument",
            "A version-id marker cannot be specified without a key marker.",
            ArgumentName="version-id-marker",
            ArgumentValue=version_id_marker,
        )
    if version_id_marker and not well_formed_version_id(version_id_marker):
        raise S3Error(
            "InvalidArgument",
            "Invalid version id specified",
            ArgumentName="version-id-marker",
            ArgumentValue=version_id_marker,
        )
    max_keys = parse_max_count(ctx.query.get("max-keys"))
    result = await ctx.store.catalog.list_object_versions(
        ctx.bucket,
        prefix=prefix,
        delimiter=delimiter,
        key_marker=key_marker,
        version_id_marker=version_id_marker,
        max_keys=max_keys,
        view=ctx.view(),
    )
    return xml_response(
        xml_responses.list_versions_result(
            ctx.bucket,
            prefix=prefix,
            delimiter=delimiter,
            key_marker=key_marker,
            version_id_marker=version_id_marker,
            max_keys=max_keys,
            is_truncated=result.is_truncated,
            next_key_marker=result.next_key_marker or None,
            next_version_id_marker=result.next_version_id_marker or None,
            versions=result.versions,
            common_prefixes=result.common_prefixes,
            encoding_type=encoding_type,
        )
    )


# ---------------------------------------------------------------------- DeleteObjects


async def delete_objects(ctx: S3Context) -> Response:
    """Each key's delete is decided on its own (s3:DeleteObject, s3:DeleteObjectVersion
    with a version id); a refused one is that key's AccessDenied, as S3 reports it."""
    bucket = await ctx.authorized_bucket()
    request = xml_requests.parse_delete(await ctx.small_body(checksum_required=True))
    slots = asyncio.Semaphore(DELETE_CONCURRENCY)
    outcomes = await asyncio.gather(
        *(_delete_one(ctx, bucket, item, slots) for item in request.objects)
    )
    deleted = [o for o in outcomes if isinstance(o, xml_responses.Deleted)]
    errors = [o for o in outcomes if isinstance(o, xml_responses.DeleteError)]
    return xml_response(xml_responses.delete_result([] if request.quiet else deleted, errors))


async def _delete_one(
    ctx: S3Context,
    bucket: BucketRecord,
    item: xml_requests.ObjectToDelete,
    slots: asyncio.Semaphore,
) -> xml_responses.Deleted | xml_responses.DeleteError:
    accesses = required_accesses(
        OperationRequest("DeleteObjects", ctx.bucket, objects=((item.key, item.version_id or ""),))
    )
    if not ctx.decide(accesses, bucket).allowed:
        denied = S3Error("AccessDenied")
        return xml_responses.DeleteError(item.key, denied.code, denied.message, item.version_id)
    if item.version_id is not None and not well_formed_version_id(item.version_id):
        # A version no key can have (S3 answers so, where DeleteObject says
        # InvalidArgument).
        error = S3Error("NoSuchVersion")
        return xml_responses.DeleteError(item.key, error.code, error.message, item.version_id)
    async with slots:
        try:
            result = await ctx.store.catalog.delete_object(
                ctx.bucket,
                item.key,
                item.version_id,
                owner=ctx.requester or bucket.owner,
                if_match=item.etag,
                guard=object_lock.removal_guard(ctx, bucket, item.key),
            )
        except Exception as e:  # noqa: BLE001 - reported per key, as S3 does
            return delete_error(e, item, request_id=ctx.request_id, bucket=ctx.bucket)
    if result.delete_marker and item.version_id is None:
        return xml_responses.Deleted(item.key, None, True, result.version_id)
    # A delete marker removed by its version id: S3 names it twice.
    marker_id = item.version_id if result.delete_marker else None
    return xml_responses.Deleted(item.key, item.version_id, result.delete_marker, marker_id)


def delete_error(
    exc: Exception, item: xml_requests.ObjectToDelete, *, request_id: str, bucket: str
) -> xml_responses.DeleteError:
    """The <Error> entry for a key whose delete raised `exc`; a failure of the server's
    (an unmapped exception, storage trouble) is logged as a whole request's is."""
    error = to_s3_error(exc)
    log_server_error(exc, error, request_id, f"/{bucket}/{item.key}")
    return xml_responses.DeleteError(item.key, error.code, error.message, item.version_id)
