"""Settings every bucket and object here has and none can change: answered as S3 answers
for a bucket or object that has the default.

- ACLs: buckets and objects belong to their owner alone, S3's default object ownership
  ("bucket owner enforced": ACLs disabled). GetBucketAcl / GetObjectAcl show the owner's
  FULL_CONTROL; PutBucketAcl / PutObjectAcl accept only an ACL saying so (`private`,
  `bucket-owner-full-control`, or a policy granting the owner FULL_CONTROL and no one
  else anything) and refuse any other as S3 does (AccessControlListNotSupported), as do
  PutObject, CopyObject and CreateMultipartUpload (`check_acl`).
- Bucket configurations the gateway has no way to set (policy, encryption, website,
  replication, Object Lock, ownership controls (BucketOwnerEnforced), public access block, logging,
  notifications, transfer acceleration, requester pays): their GETs answer as S3 does for
  a bucket without them (a 404 with the configuration's own code, or the empty
  document). Tools that read a bucket's whole state (Terraform's aws_s3_bucket, s3cmd
  info, backup tools) then work; setting any of them stays NotImplemented.

Each still checks ownership first: another user gets AccessDenied, as everywhere.
"""

from __future__ import annotations

from starlette.responses import Response

from s3api import xml_requests, xml_responses
from s3api.errors import S3Error
from s3api.handlers._private import version_headers, xml_response
from s3api.handlers.context import S3Context
from s3api.handlers.objects import GRANT_HEADERS, check_acl, load_version
from s3api.limits import validate_key

# GET ?<subresource> on a bucket -> the S3 error that says it is not configured.
UNSET_CONFIGURATION_ERRORS: dict[str, str] = {
    "GetBucketPolicy": "NoSuchBucketPolicy",
    "GetBucketPolicyStatus": "NoSuchBucketPolicy",
    "GetBucketEncryption": "ServerSideEncryptionConfigurationNotFoundError",
    "GetBucketWebsite": "NoSuchWebsiteConfiguration",
    "GetBucketReplication": "ReplicationConfigurationNotFoundError",
    "GetObjectLockConfiguration": "ObjectLockConfigurationNotFoundError",
    "GetPublicAccessBlock": "NoSuchPublicAccessBlockConfiguration",
}
# ... or the document S3 returns with nothing set.
UNSET_CONFIGURATION_DOCUMENTS: dict[str, bytes] = {
    "GetBucketLogging": xml_responses.empty_configuration("BucketLoggingStatus"),
    "GetBucketNotificationConfiguration": xml_responses.empty_configuration(
        "NotificationConfiguration"
    ),
    "GetBucketAccelerateConfiguration": xml_responses.empty_configuration(
        "AccelerateConfiguration"
    ),
    "GetBucketRequestPayment": xml_responses.request_payment_configuration(),
    "GetBucketOwnershipControls": xml_responses.ownership_controls("BucketOwnerEnforced"),
}
UNSET_CONFIGURATION_OPERATIONS = frozenset(UNSET_CONFIGURATION_ERRORS) | frozenset(
    UNSET_CONFIGURATION_DOCUMENTS
)


async def get_unset_configuration(ctx: S3Context) -> Response:
    await ctx.owned_bucket()
    code = UNSET_CONFIGURATION_ERRORS.get(ctx.operation)
    if code is not None:
        raise S3Error(code, BucketName=ctx.bucket)
    return xml_response(UNSET_CONFIGURATION_DOCUMENTS[ctx.operation])


async def get_bucket_acl(ctx: S3Context) -> Response:
    bucket = await ctx.owned_bucket()
    return xml_response(xml_responses.access_control_policy(bucket.owner))


async def put_bucket_acl(ctx: S3Context) -> Response:
    bucket = await ctx.owned_bucket()
    await _check_private(ctx, bucket.owner)
    return Response(b"")


async def get_object_acl(ctx: S3Context) -> Response:
    validate_key(ctx.key)
    bucket = await ctx.owned_bucket()
    record = await load_version(ctx)
    return xml_response(
        xml_responses.access_control_policy(bucket.owner),
        headers=version_headers(record.version_id, bucket.versioning),
    )


async def put_object_acl(ctx: S3Context) -> Response:
    validate_key(ctx.key)
    bucket = await ctx.owned_bucket()
    record = await load_version(ctx)
    await _check_private(ctx, bucket.owner)
    return Response(b"", headers=version_headers(record.version_id, bucket.versioning))


async def _check_private(ctx: S3Context, owner: str) -> None:
    """The ACL a Put*Acl request asks for must be the owner's alone: with ACLs disabled
    S3 refuses any other (AccessControlListNotSupported)."""
    canned = ctx.headers.get("x-amz-acl")
    granted = any(name in ctx.headers for name in GRANT_HEADERS)
    body = (await ctx.small_body()).strip()
    if sum((canned is not None, granted, bool(body))) > 1:
        raise S3Error(
            "InvalidRequest",
            "Specify an ACL by one of: the x-amz-acl header, x-amz-grant-* headers, or a body",
        )
    if canned is None and not granted and not body:
        raise S3Error("MissingSecurityHeader", "Your request was missing a required header")
    if body and not xml_requests.acl_grants_only_owner(body, owner) and ctx.config.acls != "ignore":
        raise S3Error("AccessControlListNotSupported")
    check_acl(ctx)
