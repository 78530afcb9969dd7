"""Bucket configurations the gateway has no way to set (website, replication,
logging, notifications, transfer acceleration, requester pays): their GETs
answer as S3 does for a bucket without them (a 404 with the configuration's own code,
or the empty document). Tools that read a bucket's whole state (Terraform's
aws_s3_bucket, s3cmd info, backup tools) then work; setting any of them stays
NotImplemented.

Each is authorized first, as every request is.
"""

from __future__ import annotations

from starlette.responses import Response

from s3api import xml_responses
from s3api.errors import S3Error
from s3api.handlers._private import xml_response
from s3api.handlers.context import S3Context

# GET ?<subresource> on a bucket -> the S3 error that says it is not configured.
UNSET_CONFIGURATION_ERRORS: dict[str, str] = {
    "GetBucketWebsite": "NoSuchWebsiteConfiguration",
    "GetBucketReplication": "ReplicationConfigurationNotFoundError",
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
}
UNSET_CONFIGURATION_OPERATIONS = frozenset(UNSET_CONFIGURATION_ERRORS) | frozenset(
    UNSET_CONFIGURATION_DOCUMENTS
)


async def get_unset_configuration(ctx: S3Context) -> Response:
    await ctx.authorized_bucket()
    code = UNSET_CONFIGURATION_ERRORS.get(ctx.operation)
    if code is not None:
        raise S3Error(code, BucketName=ctx.bucket)
    return xml_response(UNSET_CONFIGURATION_DOCUMENTS[ctx.operation])
