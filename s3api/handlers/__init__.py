"""S3 operation handlers, by operation name (as `s3api.routes` resolves them)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.responses import Response

from s3api.errors import S3Error
from s3api.handlers import (
    access,
    buckets,
    cors,
    default_settings,
    encryption,
    multipart,
    object_lock,
    objects,
    post_object,
)
from s3api.handlers.context import S3Context
from s3api.handlers.post_object import FormRequest
from s3api.routes import FIXED_BUCKET_SETTINGS, NOT_IMPLEMENTED, unsupported_subresource

__all__ = ["FORM_HANDLERS", "HANDLERS", "FormHandler", "FormRequest", "Handler"]

Handler = Callable[[S3Context], Awaitable[Response]]
# Operations signed by fields of their form, not by their headers: their handlers
# authenticate them.
FormHandler = Callable[[FormRequest], Awaitable[Response]]


async def not_implemented(ctx: S3Context) -> Response:
    """A subresource this gateway does not implement (reached only once authenticated)."""
    name = unsupported_subresource(ctx.query)
    raise S3Error("NotImplemented", f"The {name} subresource is not implemented")


HANDLERS: dict[str, Handler] = {
    "ListBuckets": buckets.list_buckets,
    "CreateBucket": buckets.create_bucket,
    "HeadBucket": buckets.head_bucket,
    "DeleteBucket": buckets.delete_bucket,
    "GetBucketLocation": buckets.get_bucket_location,
    "GetBucketVersioning": buckets.get_bucket_versioning,
    "PutBucketVersioning": buckets.put_bucket_versioning,
    "GetBucketTagging": buckets.get_bucket_tagging,
    "PutBucketTagging": buckets.put_bucket_tagging,
    "DeleteBucketTagging": buckets.delete_bucket_tagging,
    "GetBucketCors": cors.get_bucket_cors,
    "PutBucketCors": cors.put_bucket_cors,
    "DeleteBucketCors": cors.delete_bucket_cors,
    "GetBucketLifecycleConfiguration": buckets.get_bucket_lifecycle,
    "PutBucketLifecycleConfiguration": buckets.put_bucket_lifecycle,
    "DeleteBucketLifecycle": buckets.delete_bucket_lifecycle,
    "ListObjects": buckets.list_objects_v1,
    "ListObjectsV2": buckets.list_objects_v2,
    "ListObjectVersions": buckets.list_object_versions,
    "DeleteObjects": buckets.delete_objects,
    "PutObject": objects.put_object,
    "GetObject": objects.get_object,
    "HeadObject": objects.head_object,
    "DeleteObject": objects.delete_object,
    "CopyObject": objects.copy_object,
    "GetObjectTagging": objects.get_object_tagging,
    "PutObjectTagging": objects.put_object_tagging,
    "DeleteObjectTagging": objects.delete_object_tagging,
    "GetObjectAttributes": objects.get_object_attributes,
    "RestoreObject": objects.restore_object,
    "CreateMultipartUpload": multipart.create_multipart_upload,
    "UploadPart": multipart.upload_part,
    "UploadPartCopy": multipart.upload_part_copy,
    "CompleteMultipartUpload": multipart.complete_multipart_upload,
    "AbortMultipartUpload": multipart.abort_multipart_upload,
    "ListParts": multipart.list_parts,
    "ListMultipartUploads": multipart.list_multipart_uploads,
    "GetBucketAcl": access.get_bucket_acl,
    "PutBucketAcl": access.put_bucket_acl,
    "GetObjectAcl": access.get_object_acl,
    "PutObjectAcl": access.put_object_acl,
    "GetBucketPolicy": access.get_bucket_policy,
    "PutBucketPolicy": access.put_bucket_policy,
    "DeleteBucketPolicy": access.delete_bucket_policy,
    "GetBucketPolicyStatus": access.get_bucket_policy_status,
    "GetPublicAccessBlock": access.get_public_access_block,
    "PutPublicAccessBlock": access.put_public_access_block,
    "DeletePublicAccessBlock": access.delete_public_access_block,
    "GetBucketOwnershipControls": access.get_bucket_ownership_controls,
    "PutBucketOwnershipControls": access.put_bucket_ownership_controls,
    "DeleteBucketOwnershipControls": access.delete_bucket_ownership_controls,
    "GetBucketEncryption": encryption.get_bucket_encryption,
    "PutBucketEncryption": encryption.put_bucket_encryption,
    "DeleteBucketEncryption": encryption.delete_bucket_encryption,
    "GetObjectLockConfiguration": object_lock.get_object_lock_configuration,
    "PutObjectLockConfiguration": object_lock.put_object_lock_configuration,
    "GetObjectRetention": object_lock.get_object_retention,
    "PutObjectRetention": object_lock.put_object_retention,
    "GetObjectLegalHold": object_lock.get_object_legal_hold,
    "PutObjectLegalHold": object_lock.put_object_legal_hold,
    **{
        operation: default_settings.get_unset_configuration
        for operation in default_settings.UNSET_CONFIGURATION_OPERATIONS
    },
    NOT_IMPLEMENTED: not_implemented,
}
assert set(FIXED_BUCKET_SETTINGS.values()) == default_settings.UNSET_CONFIGURATION_OPERATIONS

FORM_HANDLERS: dict[str, FormHandler] = {
    post_object.OPERATION: post_object.post_object,
}
assert HANDLERS.keys().isdisjoint(FORM_HANDLERS), "an operation is authenticated twice"
