"""S3 operation handlers, by operation name (as `s3api.routes` resolves them)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.responses import Response

from s3api.errors import S3Error
from s3api.handlers import bucket, cors, fixed, multipart, object
from s3api.handlers.context import S3Context
from s3api.routes import FIXED_BUCKET_SETTINGS, NOT_IMPLEMENTED, unsupported_subresource

Handler = Callable[[S3Context], Awaitable[Response]]


async def not_implemented(ctx: S3Context) -> Response:
    """A subresource this gateway does not implement (reached only once authenticated)."""
    name = unsupported_subresource(ctx.query)
    raise S3Error("NotImplemented", f"The {name} subresource is not implemented")


HANDLERS: dict[str, Handler] = {
    "ListBuckets": bucket.list_buckets,
    "CreateBucket": bucket.create_bucket,
    "HeadBucket": bucket.head_bucket,
    "DeleteBucket": bucket.delete_bucket,
    "GetBucketLocation": bucket.get_bucket_location,
    "GetBucketVersioning": bucket.get_bucket_versioning,
    "PutBucketVersioning": bucket.put_bucket_versioning,
    "GetBucketTagging": bucket.get_bucket_tagging,
    "PutBucketTagging": bucket.put_bucket_tagging,
    "DeleteBucketTagging": bucket.delete_bucket_tagging,
    "GetBucketCors": cors.get_bucket_cors,
    "PutBucketCors": cors.put_bucket_cors,
    "DeleteBucketCors": cors.delete_bucket_cors,
    "GetBucketLifecycleConfiguration": bucket.get_bucket_lifecycle,
    "PutBucketLifecycleConfiguration": bucket.put_bucket_lifecycle,
    "DeleteBucketLifecycle": bucket.delete_bucket_lifecycle,
    "ListObjects": bucket.list_objects_v1,
    "ListObjectsV2": bucket.list_objects_v2,
    "ListObjectVersions": bucket.list_object_versions,
    "DeleteObjects": bucket.delete_objects,
    "PutObject": object.put_object,
    "GetObject": object.get_object,
    "HeadObject": object.head_object,
    "DeleteObject": object.delete_object,
    "CopyObject": object.copy_object,
    "GetObjectTagging": object.get_object_tagging,
    "PutObjectTagging": object.put_object_tagging,
    "DeleteObjectTagging": object.delete_object_tagging,
    "GetObjectAttributes": object.get_object_attributes,
    "CreateMultipartUpload": multipart.create_multipart_upload,
    "UploadPart": multipart.upload_part,
    "UploadPartCopy": multipart.upload_part_copy,
    "CompleteMultipartUpload": multipart.complete_multipart_upload,
    "AbortMultipartUpload": multipart.abort_multipart_upload,
    "ListParts": multipart.list_parts,
    "ListMultipartUploads": multipart.list_multipart_uploads,
    "GetBucketAcl": fixed.get_bucket_acl,
    "PutBucketAcl": fixed.put_bucket_acl,
    "GetObjectAcl": fixed.get_object_acl,
    "PutObjectAcl": fixed.put_object_acl,
    **{
        operation: fixed.get_unset_configuration
        for operation in fixed.UNSET_CONFIGURATION_OPERATIONS
    },
    NOT_IMPLEMENTED: not_implemented,
}
assert set(FIXED_BUCKET_SETTINGS.values()) == fixed.UNSET_CONFIGURATION_OPERATIONS
