"""Which bucket, key and S3 operation a request names.

Addressing: virtual-hosted style (`<bucket>.<domain>` in Host, the whole path is the key)
when `--domain` is set and the Host ends with it; otherwise path style
(`/<bucket>/<key>`). The key comes from the raw path, percent-decoded once ('+' stays a
plus, as S3 does).

Operations are chosen by method, by whether a bucket and key are named, and by the
subresource query parameters. ACLs and the bucket settings nothing here can change are
read as their defaults (`FIXED_BUCKET_SETTINGS`, the `private` ACL). Other subresources
this gateway does not implement (and setting those) resolve to `NOT_IMPLEMENTED`, whose handler answers NotImplemented (rather than a plain GET or PUT
mistaking them for its own) once the request's signature is verified, as S3 checks
authentication first: an anonymous or forged request learns nothing from them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote_to_bytes

from s3api.errors import S3Error

UNSUPPORTED_SUBRESOURCES = frozenset(
    {
        "abac",
        "accelerate",
        "acl",
        "analytics",
        "annotation",
        "encryption",
        "intelligent-tiering",
        "inventory",
        "legal-hold",
        "logging",
        "metadataAnnotationTable",
        "metadataConfiguration",
        "metadataInventoryTable",
        "metadataJournalTable",
        "metadataTable",
        "metrics",
        "notification",
        "object-lock",
        "ownershipControls",
        "policy",
        "policyStatus",
        "publicAccessBlock",
        "renameObject",
        "replication",
        "requestPayment",
        "restore",
        "retention",
        "select",
        "session",
        "torrent",
        "website",
    }
)


# The operation of a request naming a subresource this gateway does not implement.
NOT_IMPLEMENTED = "NotImplemented"


@dataclass(frozen=True, slots=True)
class Target:
    bucket: str  # "" for service-level requests
    key: str  # "" for service- and bucket-level requests
    operation: str


def _decode(raw: bytes) -> str:
    try:
        return unquote_to_bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        raise S3Error("InvalidArgument", "The path is not valid UTF-8") from None


def resolve_address(host: str, raw_path: bytes, domain: str) -> tuple[str, str, bool]:
    """(bucket, key, virtual-hosted?) named by the Host header and the raw path."""
    hostname = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    hostname = hostname.lower()
    if domain and hostname.endswith("." + domain):
        bucket = hostname[: -len(domain) - 1]
        key_raw = raw_path[1:] if raw_path.startswith(b"/") else raw_path
        return bucket, _decode(key_raw), True
    path = raw_path[1:] if raw_path.startswith(b"/") else raw_path
    if not path:
        return "", "", False
    bucket_raw, _, key_raw = path.partition(b"/")
    return _decode(bucket_raw), _decode(key_raw), False


# Bucket settings nothing here can change, whose GET answers as S3 does for a bucket that
# has the default (s3api/handlers/default_settings.py); setting them stays NotImplemented.
FIXED_BUCKET_SETTINGS = {
    "policy": "GetBucketPolicy",
    "policyStatus": "GetBucketPolicyStatus",
    "encryption": "GetBucketEncryption",
    "website": "GetBucketWebsite",
    "replication": "GetBucketReplication",
    "object-lock": "GetObjectLockConfiguration",
    "ownershipControls": "GetBucketOwnershipControls",
    "publicAccessBlock": "GetPublicAccessBlock",
    "logging": "GetBucketLogging",
    "notification": "GetBucketNotificationConfiguration",
    "accelerate": "GetBucketAccelerateConfiguration",
    "requestPayment": "GetBucketRequestPayment",
}


def resolve_operation(
    method: str, bucket: str, key: str, query: Mapping[str, str], headers: Mapping[str, str]
) -> str:
    """The S3 operation name (as in the API reference) for a request."""
    if method != "OPTIONS" and not UNSUPPORTED_SUBRESOURCES.isdisjoint(query):
        return _fixed_setting(method, bucket, key, query) or NOT_IMPLEMENTED
    if method == "OPTIONS":
        if not bucket:
            raise S3Error("MethodNotAllowed", Method=method, ResourceType="SERVICE")
        return "PreflightCors"
    if not bucket:
        if method in ("GET", "HEAD"):
            return "ListBuckets"
        raise S3Error("MethodNotAllowed", Method=method, ResourceType="SERVICE")
    if not key:
        return _bucket_operation(method, query)
    return _object_operation(method, query, headers)


def _bucket_operation(method: str, query: Mapping[str, str]) -> str:
    if method == "GET":
        for name, operation in (
            ("location", "GetBucketLocation"),
            ("versioning", "GetBucketVersioning"),
            ("tagging", "GetBucketTagging"),
            ("cors", "GetBucketCors"),
            ("lifecycle", "GetBucketLifecycleConfiguration"),
            ("versions", "ListObjectVersions"),
            ("uploads", "ListMultipartUploads"),
        ):
            if name in query:
                return operation
        if query.get("list-type") == "2":
            return "ListObjectsV2"
        return "ListObjects"
    if method == "HEAD":
        return "HeadBucket"
    if method == "PUT":
        for name, operation in (
            ("versioning", "PutBucketVersioning"),
            ("tagging", "PutBucketTagging"),
            ("cors", "PutBucketCors"),
            ("lifecycle", "PutBucketLifecycleConfiguration"),
        ):
            if name in query:
                return operation
        return "CreateBucket"
    if method == "DELETE":
        for name, operation in (
            ("tagging", "DeleteBucketTagging"),
            ("cors", "DeleteBucketCors"),
            ("lifecycle", "DeleteBucketLifecycle"),
        ):
            if name in query:
                return operation
        return "DeleteBucket"
    if method == "POST":
        if "delete" in query:
            return "DeleteObjects"
        raise S3Error("NotImplemented", "POST uploads (browser forms) are not implemented")
    raise S3Error("MethodNotAllowed", Method=method, ResourceType="BUCKET")


def _object_operation(method: str, query: Mapping[str, str], headers: Mapping[str, str]) -> str:
    if method == "GET":
        if "tagging" in query:
            return "GetObjectTagging"
        if "attributes" in query:
            return "GetObjectAttributes"
        if "uploadId" in query:
            return "ListParts"
        return "GetObject"
    if method == "HEAD":
        return "HeadObject"
    if method == "PUT":
        if "tagging" in query:
            return "PutObjectTagging"
        if "uploadId" in query or "partNumber" in query:
            if "x-amz-copy-source" in headers:
                return "UploadPartCopy"
            return "UploadPart"
        if "x-amz-copy-source" in headers:
            return "CopyObject"
        return "PutObject"
    if method == "DELETE":
        if "tagging" in query:
            return "DeleteObjectTagging"
        if "uploadId" in query:
            return "AbortMultipartUpload"
        return "DeleteObject"
    if method == "POST":
        if "uploads" in query:
            return "CreateMultipartUpload"
        if "uploadId" in query:
            return "CompleteMultipartUpload"
    raise S3Error("MethodNotAllowed", Method=method, ResourceType="OBJECT")


def _fixed_setting(method: str, bucket: str, key: str, query: Mapping[str, str]) -> str:
    """The operation reading (or, for ACLs, setting) a fixed setting, "" for none: only
    when the query names no other unsupported subresource."""
    names = [name for name in query if name in UNSUPPORTED_SUBRESOURCES]
    if not bucket or len(names) != 1:
        return ""
    (name,) = names
    # Nothing else that picks an operation may come with it (`?acl&uploadId=..` is no
    # ACL request): only an object ACL's versionId.
    others = set(query) - {name, "versionId" if key else name}
    if others:
        return ""
    if name == "acl" and method in ("GET", "PUT"):
        return ("Get" if method == "GET" else "Put") + ("ObjectAcl" if key else "BucketAcl")
    if method == "GET" and not key:
        return FIXED_BUCKET_SETTINGS.get(name, "")
    return ""


def unsupported_subresource(query: Mapping[str, str]) -> str:
    """The first subresource of `query` this gateway does not implement ("" if none)."""
    return next((name for name in query if name in UNSUPPORTED_SUBRESOURCES), "")
