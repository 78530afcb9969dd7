"""Server-side encryption at the gateway: what a request asks (its headers, or its
bucket's default encryption), the headers that say how an object is stored, and the
bucket's default encryption (Put/Get/DeleteBucketEncryption).

The object layer seals and opens the bytes (blobstore/objects/encryption.py); here only
S3's rules: SSE-C only over TLS (unless BLOBSTORE_GATEWAY_SSE_C_OVER_HTTP), the key's
MD5 checked, and the same customer key given again on every read, part and copy.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from starlette.responses import Response

from blobstore.catalog.records import BucketRecord, ObjectRecord
from blobstore.objects.encryption import SSE_C, SSE_KMS, SseSpec, same_sealing
from s3api import sse_request, xml_requests, xml_responses
from s3api.errors import S3Error
from s3api.handlers._private import xml_response
from s3api.handlers.context import S3Context

BUCKET_DEFAULT = "encryption"  # the bucket setting holding its default encryption


def write_spec(ctx: S3Context, bucket: BucketRecord) -> SseSpec:
    """The encryption a write asks for: its headers, else the bucket's default."""
    asked = sse_request.parse_sse(
        ctx.headers, secure=ctx.secure, allow_insecure=ctx.config.sse_c_over_http
    )
    default = bucket.settings.get(BUCKET_DEFAULT)
    if asked.mode:
        if asked.mode == SSE_KMS and not asked.kms_key_id and default:
            if default["algorithm"] == SSE_KMS:  # the bucket's key, as S3 takes it
                return replace(asked, kms_key_id=default.get("key_id", ""))
        return asked
    if default is None:
        return SseSpec()
    return SseSpec(default["algorithm"], default.get("key_id", ""))


def customer_key(ctx: S3Context, *, source: bool = False) -> bytes:
    """The SSE-C key a request gives for its object (or, `source`, its copy source);
    b"" for none."""
    prefix = sse_request.COPY_SOURCE_PREFIX if source else ""
    given = sse_request.parse_customer_key(
        ctx.headers, prefix, secure=ctx.secure, allow_insecure=ctx.config.sse_c_over_http
    )
    return given.customer_key if given is not None else b""


def refuse_write_headers_on_read(ctx: S3Context) -> None:
    """A GET or HEAD naming x-amz-server-side-encryption: S3 refuses it (the header
    belongs to writes)."""
    if sse_request.SSE in ctx.headers or sse_request.KMS_KEY_ID in ctx.headers:
        raise S3Error(
            "InvalidArgument",
            "x-amz-server-side-encryption header is not supported for this operation.",
            ArgumentName=sse_request.SSE,
        )


async def read_key(ctx: S3Context, record: ObjectRecord, given: bytes) -> bytes | None:
    """The key a GET opens `record` with (None: in clear), `given` the request's SSE-C
    key; a HEAD checks only an SSE-C key, which S3 asks for there too. Refused here,
    before any byte is answered."""
    if ctx.method == "HEAD" and not given and (record.sse is None or record.sse["m"] != SSE_C):
        return None
    key = await ctx.store.open_sse(record.sse, given)
    return key if record.sse is not None else None


def same_encryption(record: ObjectRecord, spec: SseSpec) -> bool:
    """A copy of `record` onto itself asking `spec` changes none of its encryption."""
    return same_sealing(record.sse, spec) and spec.mode != SSE_C


def response_headers(sse: dict[str, Any] | None, key: bytes = b"") -> dict[str, str]:
    """How an object is stored, as S3 says it in its answers (the customer key's MD5 for
    SSE-C, never the key)."""
    if sse is None:
        return {}
    if sse["m"] == SSE_C:
        headers = {sse_request.CUSTOMER_ALGORITHM: "AES256"}
        if key:
            headers[sse_request.CUSTOMER_KEY_MD5] = sse_request.customer_key_md5(key)
        return headers
    headers = {sse_request.SSE: sse["m"]}
    if sse["m"] == SSE_KMS:
        headers[sse_request.KMS_KEY_ID] = sse.get("k") or sse["w"].split(":")[1]
    return headers


def spec_headers(spec: SseSpec) -> dict[str, str]:
    """The headers of a write answered before its object exists (CreateMultipartUpload)."""
    if not spec.mode:
        return {}
    if spec.mode == SSE_C:
        return response_headers({"m": SSE_C}, spec.customer_key)
    return {sse_request.SSE: spec.mode} | (
        {sse_request.KMS_KEY_ID: spec.kms_key_id} if spec.kms_key_id else {}
    )


# ---------------------------------------------------------------------- bucket default


async def get_bucket_encryption(ctx: S3Context) -> Response:
    bucket = await ctx.authorized_bucket()
    default = bucket.settings.get(BUCKET_DEFAULT)
    if default is None:
        raise S3Error("ServerSideEncryptionConfigurationNotFoundError", BucketName=ctx.bucket)
    body = xml_responses.bucket_encryption(
        default["algorithm"], default.get("key_id", ""), default.get("bucket_key", False)
    )
    return xml_response(body)


async def put_bucket_encryption(ctx: S3Context) -> Response:
    """The bucket's default encryption: what writes that name none get."""
    await ctx.authorized_bucket()
    algorithm, key_id, bucket_key = xml_requests.parse_bucket_encryption(
        await ctx.small_body(checksum_required=True)
    )
    default: dict[str, Any] = {"algorithm": algorithm, "bucket_key": bucket_key}
    if key_id:
        default["key_id"] = key_id
    await ctx.store.catalog.update_bucket(
        ctx.bucket, lambda b: replace(b, settings={**b.settings, BUCKET_DEFAULT: default})
    )
    return Response(b"")


async def delete_bucket_encryption(ctx: S3Context) -> Response:
    await ctx.authorized_bucket()
    await ctx.store.catalog.update_bucket(
        ctx.bucket,
        lambda b: replace(b, settings={k: v for k, v in b.settings.items() if k != BUCKET_DEFAULT}),
    )
    return Response(b"", status_code=204)
