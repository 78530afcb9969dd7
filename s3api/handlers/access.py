"""Access settings of buckets and objects: bucket policies, the public access block,
object ownership controls, and bucket and object ACLs (their state lives where
`s3api.handlers.authorization` says; every request is authorized before it, as any).

- Bucket policy: PutBucketPolicy validates the document (`blobstore.access.policy`,
  MalformedPolicy with S3's message), refuses principals naming no user ("Invalid
  principal in policy") and, under BlockPublicPolicy (the bucket's or the account's),
  a public policy (AccessDenied); the text is kept as sent and answered as it was.
- GetBucketPolicyStatus: IsPublic as `blobstore.access.policy_public` judges it.
- Public access block: the bucket's own; GET answers what was set (404 when nothing).
- Ownership controls: BucketOwnerEnforced until set (S3's default); DELETE leaves the
  bucket without controls, which S3 treats as ObjectWriter (GET then answers
  OwnershipControlsNotFoundError). BucketOwnerEnforced is refused while the bucket's
  ACL grants anyone but its owner (InvalidBucketAclWithObjectOwnership), as S3 asks for
  the ACL to be reset first.
- ACLs: where ownership is BucketOwnerEnforced, GETs show the owner's FULL_CONTROL and
  PUTs accept only an ACL saying so (AccessControlListNotSupported otherwise, unless the
  gateway ignores ACLs); elsewhere Put*Acl stores the ACL of x-amz-acl, x-amz-grant-* or
  the AccessControlPolicy body (exactly one of them), refused when public under
  BlockPublicAcls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from starlette.responses import Response

from blobstore.access.acl import (
    CANONICAL_USER,
    FULL_CONTROL,
    GROUP,
    GROUPS,
    PERMISSIONS,
    AccessControlList,
    Grant,
    Grantee,
    user,
)
from blobstore.access.decision import BUCKET_OWNER_ENFORCED, is_public_policy, refuses_policy
from blobstore.access.policy import POLICY_BODY_BYTES_MAX, parse_bucket_policy
from blobstore.access.policy_errors import INVALID_PRINCIPAL, MalformedPolicy
from blobstore.access.policy_public import PublicAccessBlock
from blobstore.catalog.records import BucketRecord, ObjectRecord
from s3api import xml_requests, xml_responses
from s3api.errors import S3Error
from s3api.handlers import authorization as authz
from s3api.handlers._private import version_headers, xml_response
from s3api.handlers.context import S3Context
from s3api.handlers.objects import authorized_bucket_and_version, load_version
from s3api.limits import validate_key

ACL_CAS_ATTEMPTS_MAX = 16


async def _update_settings(
    ctx: S3Context, change: Callable[[dict[str, Any]], None]
) -> BucketRecord:
    def mutate(record: BucketRecord) -> BucketRecord:
        settings = dict(record.settings)
        change(settings)
        return replace(record, settings=settings)

    return await ctx.store.catalog.update_bucket(ctx.bucket, mutate)


# ---------------------------------------------------------------------- bucket policy


async def get_bucket_policy(ctx: S3Context) -> Response:
    record = await ctx.authorized_bucket()
    text = authz.bucket_policy_text(record)
    if text is None:
        raise S3Error("NoSuchBucketPolicy", BucketName=ctx.bucket)
    return Response(text.encode("utf-8"), media_type="application/json")


async def put_bucket_policy(ctx: S3Context) -> Response:
    record = await ctx.authorized_bucket()
    body = await ctx.small_body(POLICY_BODY_BYTES_MAX)
    try:
        policy = parse_bucket_policy(body, ctx.bucket)
        text = body.decode("utf-8")
    except MalformedPolicy as e:
        raise S3Error("MalformedPolicy", e.message) from None
    except UnicodeDecodeError:
        raise S3Error("MalformedPolicy", "This policy contains invalid Json") from None
    if not all(ctx.authorizer.knows_user(name) for name in policy.named_users()):
        raise S3Error("MalformedPolicy", INVALID_PRINCIPAL)
    if refuses_policy(authz.effective_block(record, ctx.authorizer), policy):
        raise S3Error("AccessDenied", "Access Denied: BlockPublicPolicy is on")
    await _update_settings(ctx, lambda settings: settings.update({authz.POLICY: text}))
    return Response(b"", status_code=204)


async def delete_bucket_policy(ctx: S3Context) -> Response:
    await ctx.authorized_bucket()
    await _update_settings(ctx, lambda settings: settings.pop(authz.POLICY, None))
    return Response(b"", status_code=204)


async def get_bucket_policy_status(ctx: S3Context) -> Response:
    record = await ctx.authorized_bucket()
    policy = ctx.authorizer.bucket_state(record).policy
    if policy is None:
        raise S3Error("NoSuchBucketPolicy", BucketName=ctx.bucket)
    return xml_response(xml_responses.policy_status(is_public_policy(policy)))


# ---------------------------------------------------------------------- public access block


async def get_public_access_block(ctx: S3Context) -> Response:
    record = await ctx.authorized_bucket()
    block = authz.bucket_block(record)
    if block is None:
        raise S3Error("NoSuchPublicAccessBlockConfiguration", BucketName=ctx.bucket)
    return xml_response(xml_responses.public_access_block_configuration(block.to_dict()))


async def put_public_access_block(ctx: S3Context) -> Response:
    await ctx.authorized_bucket()
    settings = xml_requests.parse_public_access_block(await ctx.small_body())
    block = PublicAccessBlock.from_dict(settings).to_dict()
    await _update_settings(ctx, lambda s: s.update({authz.PUBLIC_ACCESS_BLOCK: block}))
    return Response(b"")


async def delete_public_access_block(ctx: S3Context) -> Response:
    await ctx.authorized_bucket()
    await _update_settings(ctx, lambda settings: settings.pop(authz.PUBLIC_ACCESS_BLOCK, None))
    return Response(b"", status_code=204)


# ---------------------------------------------------------------------- ownership controls


async def get_bucket_ownership_controls(ctx: S3Context) -> Response:
    record = await ctx.authorized_bucket()
    if authz.OWNERSHIP in record.settings and record.settings[authz.OWNERSHIP] is None:
        raise S3Error("OwnershipControlsNotFoundError", BucketName=ctx.bucket)
    return xml_response(xml_responses.ownership_controls(authz.bucket_ownership(record)))


async def put_bucket_ownership_controls(ctx: S3Context) -> Response:
    await ctx.authorized_bucket()
    ownership = xml_requests.parse_ownership_controls(await ctx.small_body())

    def change(settings: dict[str, Any]) -> None:
        acl = settings.get(authz.ACL)
        if ownership == BUCKET_OWNER_ENFORCED and acl is not None:
            if not _only_owner(AccessControlList.from_dict(acl)):
                raise S3Error("InvalidBucketAclWithObjectOwnership")
            del settings[authz.ACL]
        settings[authz.OWNERSHIP] = ownership

    await _update_settings(ctx, change)
    return Response(b"")


async def delete_bucket_ownership_controls(ctx: S3Context) -> Response:
    await ctx.authorized_bucket()
    await _update_settings(ctx, lambda settings: settings.update({authz.OWNERSHIP: None}))
    return Response(b"", status_code=204)


# ---------------------------------------------------------------------- ACLs


def _only_owner(acl: AccessControlList) -> bool:
    """Whether the ACL grants nothing but its owner's FULL_CONTROL (`private`)."""
    owner_full = Grant(user(acl.owner), FULL_CONTROL)
    return all(grant == owner_full for grant in acl.grants)


def _body_grant(grant: xml_requests.AclGrant) -> Grant:
    if grant.kind == "AmazonCustomerByEmail":
        raise S3Error("UnresolvableGrantByEmailAddress")
    if grant.permission not in PERMISSIONS:
        raise S3Error("MalformedACLError")
    if grant.kind == GROUP and grant.identifier not in GROUPS:
        raise S3Error("InvalidArgument", "Invalid group uri")
    kind = GROUP if grant.kind == GROUP else CANONICAL_USER
    return Grant(Grantee(kind, grant.identifier), grant.permission)


async def _requested_acl(ctx: S3Context, owner: str, bucket_owner: str) -> AccessControlList:
    """The ACL a Put*Acl request asks for: by x-amz-acl, x-amz-grant-* or its body."""
    by_headers = authz.names_acl(ctx.headers)
    body = (await ctx.small_body()).strip()
    if by_headers and body:
        raise S3Error(
            "InvalidRequest",
            "Specify an ACL by one of: the x-amz-acl header, x-amz-grant-* headers, or a body",
        )
    if body:
        _, grants = xml_requests.parse_access_control_policy(body)
        return AccessControlList(owner, tuple(_body_grant(grant) for grant in grants))
    acl = authz.requested_acl(ctx.headers, owner, bucket_owner)
    if acl is None:
        raise S3Error("MissingSecurityHeader", "Your request was missing a required header")
    return acl


def _accepted(ctx: S3Context, bucket: BucketRecord, acl: AccessControlList) -> bool:
    """Whether the ACL is to be stored: where ACLs are disabled, one beyond the owner's
    is refused (AccessControlListNotSupported) unless the gateway ignores ACLs, and none
    is stored."""
    if not authz.acls_enabled(bucket):
        if not _only_owner(acl) and ctx.config.acls != "ignore":
            raise S3Error("AccessControlListNotSupported")
        return False
    authz.check_grants(acl, ctx.authorizer, authz.effective_block(bucket, ctx.authorizer))
    return True


async def get_bucket_acl(ctx: S3Context) -> Response:
    bucket = await ctx.authorized_bucket()
    acl = authz.bucket_acl(bucket) if authz.acls_enabled(bucket) else None
    if acl is None:
        return xml_response(xml_responses.access_control_policy(bucket.owner))
    return xml_response(xml_responses.access_control_policy(acl.owner, acl.grants))


async def put_bucket_acl(ctx: S3Context) -> Response:
    bucket = await ctx.authorized_bucket()
    acl = await _requested_acl(ctx, bucket.owner, "")
    if _accepted(ctx, bucket, acl):
        await _update_settings(ctx, lambda settings: settings.update({authz.ACL: acl.to_dict()}))
    return Response(b"")


async def get_object_acl(ctx: S3Context) -> Response:
    validate_key(ctx.key)
    bucket, record = await authorized_bucket_and_version(ctx)
    headers = version_headers(record.version_id, bucket.versioning)
    acl = authz.object_acl(record) if authz.acls_enabled(bucket) else None
    if acl is None:
        owner = (record.owner or bucket.owner) if authz.acls_enabled(bucket) else bucket.owner
        return xml_response(xml_responses.access_control_policy(owner), headers=headers)
    body = xml_responses.access_control_policy(acl.owner, acl.grants)
    return xml_response(body, headers=headers)


async def put_object_acl(ctx: S3Context) -> Response:
    validate_key(ctx.key)
    bucket, record = await authorized_bucket_and_version(ctx)
    acl = await _requested_acl(ctx, record.owner or bucket.owner, bucket.owner)
    if _accepted(ctx, bucket, acl):
        record = await _set_object_acl(ctx, record, acl)
    return Response(b"", headers=version_headers(record.version_id, bucket.versioning))


async def _set_object_acl(
    ctx: S3Context, record: ObjectRecord, acl: AccessControlList
) -> ObjectRecord:
    """Store the version's ACL by compare-and-swap of its record."""
    entry = authz.object_acl_metadata(acl)
    for _ in range(ACL_CAS_ATTEMPTS_MAX):
        updated = replace(record, system_metadata={**record.system_metadata, **entry})
        if await ctx.store.catalog.swap_object(record, updated):
            return record
        await asyncio.sleep(0.01)
        record = await load_version(ctx)
    raise S3Error("SlowDown")
