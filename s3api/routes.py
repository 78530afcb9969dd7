"""Which bucket, key and S3 operation a request names.

Addressing: virtual-hosted style (`<bucket>.<domain>` in Host, the whole path is the key)
when `--domain` is set and the Host ends with it; otherwise path style
(`/<bucket>/<key>`). The key comes from the raw path, percent-decoded once ('+' stays a
plus, as S3 does).

Operations are chosen by method, by whether a bucket and key are named, and by the
subresource query parameters. The bucket settings nothing here can change are read as
their defaults (`FIXED_BUCKET_SETTINGS`). Other subresources
this gateway does not implement (and setting those) resolve to `NOT_IMPLEMENTED`, whose
handler answers NotImplemented (rather than a plain GET or PUT mistaking them for its own)
once the request's signature is verified, as S3 checks authentication first: an
anonymous or forged request learns nothing from them.
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
        "analytics",
        "annotation",
        "intelligent-tiering",
        "inventory",
        "logging",
        "metadataAnnotationTable",
        "metadataConfiguration",
        "metadataInventoryTable",
        "metadataJournalTable",
        "metadataTable",
        "metrics",
        "notification",
        "renameObject",
        "replication",
        "requestPayment",
        "select",
        "session",
        "torrent",
        "website",
    }
)


# Subresources with operations on a bucket but none here on an object: PUT ?encryption on
# a key is UpdateObjectEncryption, never a PutObject of the XML body.
BUCKET_ONLY_SUBRESOURCES = frozenset({"encryption"})


# Access subresources, and the methods (on a bucket; on an object too for `acl`) that
# have an operation: any other use of them is no operation (a DELETE ?acl must never
# read as DeleteObject).
ACCESS_SUBRESOURCES: dict[str, tuple[str, ...]] = {
    "acl": ("GET", "PUT"),
    "policy": ("GET", "PUT", "DELETE"),
    "policyStatus": ("GET",),
    "publicAccessBlock": ("GET", "PUT", "DELETE"),
    "ownershipControls": ("GET", "PUT", "DELETE"),
}

# Object Lock subresources: on a bucket (False) or an object (True), GET and PUT only. Any
# other use is no operation (a DELETE ?retention must never read as DeleteObject).
LOCK_SUBRESOURCES: dict[str, bool] = {"object-lock": False, "retention": True, "legal-hold": True}

# The operation of a request naming a subresource this gateway does not implement.
NOT_IMPLEMENTED = "NotImplemented"
# The path of S3 Object Lambda's one operation (POST), which would read as a bucket's.
WRITE_GET_OBJECT_RESPONSE = "WriteGetObjectResponse"


@dataclass(frozen=True, slots=True)
class Target:
    bucket: str  # "" for service-level requests
    key: str  # "" for service- and bucket-level requests
    operation: str


def _decode(raw: bytes) -> str:
    try:
        return unquote_to_bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        raise S3Error("InvalidURI") from None  # S3's answer to a path not in UTF-8


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
    "website": "GetBucketWebsite",
    "replication": "GetBucketReplication",
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
    if method != "OPTIONS" and key and not BUCKET_ONLY_SUBRESOURCES.isdisjoint(query):
        return NOT_IMPLEMENTED
    if method != "OPTIONS" and bucket and not _access_subresource_fits(method, key, query):
        return NOT_IMPLEMENTED
    if method != "OPTIONS" and bucket and not _lock_subresource_fits(method, key, query):
        return NOT_IMPLEMENTED
    if method == "OPTIONS":
        if not bucket:
            raise S3Error("MethodNotAllowed", Method=method, ResourceType="SERVICE")
        return "PreflightCors"
    if not bucket:
        if method in ("GET", "HEAD"):
            return "ListBuckets"
        raise S3Error("MethodNotAllowed", Method=method, ResourceType="SERVICE")
    if not key:
        if method == "POST" and bucket == WRITE_GET_OBJECT_RESPONSE:
            # Not a bucket (no bucket name has capitals): S3 Object Lambda's endpoint.
            raise S3Error("NotImplemented", "S3 Object Lambda is not implemented")
        return _bucket_operation(method, query)
    return _object_operation(method, query, headers)


# Operations by method: the first subresource the query names picks one (in the order
# listed), otherwise the method's default. Bucket GET, object PUT and the POSTs with no
# default have helpers of their own.
_Choices = tuple[tuple[tuple[str, str], ...], str]
_BUCKET_OPERATIONS: dict[str, _Choices] = {
    "GET": (
        (
            ("acl", "GetBucketAcl"),
            ("policy", "GetBucketPolicy"),
            ("policyStatus", "GetBucketPolicyStatus"),
            ("publicAccessBlock", "GetPublicAccessBlock"),
            ("ownershipControls", "GetBucketOwnershipControls"),
            ("location", "GetBucketLocation"),
            ("versioning", "GetBucketVersioning"),
            ("tagging", "GetBucketTagging"),
            ("cors", "GetBucketCors"),
            ("lifecycle", "GetBucketLifecycleConfiguration"),
            ("object-lock", "GetObjectLockConfiguration"),
            ("encryption", "GetBucketEncryption"),
            ("versions", "ListObjectVersions"),
            ("uploads", "ListMultipartUploads"),
        ),
        "ListObjects",
    ),
    "HEAD": ((), "HeadBucket"),
    "PUT": (
        (
            ("acl", "PutBucketAcl"),
            ("policy", "PutBucketPolicy"),
            ("publicAccessBlock", "PutPublicAccessBlock"),
            ("ownershipControls", "PutBucketOwnershipControls"),
            ("versioning", "PutBucketVersioning"),
            ("tagging", "PutBucketTagging"),
            ("cors", "PutBucketCors"),
            ("lifecycle", "PutBucketLifecycleConfiguration"),
            ("object-lock", "PutObjectLockConfiguration"),
            ("encryption", "PutBucketEncryption"),
        ),
        "CreateBucket",
    ),
    "DELETE": (
        (
            ("policy", "DeleteBucketPolicy"),
            ("publicAccessBlock", "DeletePublicAccessBlock"),
            ("ownershipControls", "DeleteBucketOwnershipControls"),
            ("tagging", "DeleteBucketTagging"),
            ("cors", "DeleteBucketCors"),
            ("lifecycle", "DeleteBucketLifecycle"),
            ("encryption", "DeleteBucketEncryption"),
        ),
        "DeleteBucket",
    ),
}
_OBJECT_OPERATIONS: dict[str, _Choices] = {
    "GET": (
        (
            ("acl", "GetObjectAcl"),
            ("tagging", "GetObjectTagging"),
            ("attributes", "GetObjectAttributes"),
            ("retention", "GetObjectRetention"),
            ("legal-hold", "GetObjectLegalHold"),
            ("uploadId", "ListParts"),
        ),
        "GetObject",
    ),
    "HEAD": ((), "HeadObject"),
    "DELETE": (
        (("tagging", "DeleteObjectTagging"), ("uploadId", "AbortMultipartUpload")),
        "DeleteObject",
    ),
}
_OBJECT_POSTS = (
    ("uploads", "CreateMultipartUpload"),
    ("uploadId", "CompleteMultipartUpload"),
    ("restore", "RestoreObject"),
)


def _chosen(query: Mapping[str, str], subresources: tuple[tuple[str, str], ...]) -> str:
    """The operation of the first subresource `query` names ("" for none)."""
    for name, operation in subresources:
        if name in query:
            return operation
    return ""


def _bucket_operation(method: str, query: Mapping[str, str]) -> str:
    choices = _BUCKET_OPERATIONS.get(method)
    if choices is None:
        return _bucket_post(method, query)
    subresources, default = choices
    operation = _chosen(query, subresources)
    if operation:
        return operation
    if method == "GET" and query.get("list-type") == "2":
        return "ListObjectsV2"
    return default


def _bucket_post(method: str, query: Mapping[str, str]) -> str:
    if method != "POST":
        raise S3Error("MethodNotAllowed", Method=method, ResourceType="BUCKET")
    if "delete" in query:
        return "DeleteObjects"
    return "PostObject"  # a browser-form upload


def _object_operation(method: str, query: Mapping[str, str], headers: Mapping[str, str]) -> str:
    if method == "PUT":
        return _object_put(query, headers)
    choices = _OBJECT_OPERATIONS.get(method)
    if choices is None:
        operation = _chosen(query, _OBJECT_POSTS) if method == "POST" else ""
        if not operation:
            raise S3Error("MethodNotAllowed", Method=method, ResourceType="OBJECT")
        return operation
    subresources, default = choices
    return _chosen(query, subresources) or default


def _object_put(query: Mapping[str, str], headers: Mapping[str, str]) -> str:
    if "acl" in query:  # mixed with a part's parameters: neither operation, as S3
        return NOT_IMPLEMENTED if "uploadId" in query or "partNumber" in query else "PutObjectAcl"
    if "tagging" in query:
        return "PutObjectTagging"
    if "retention" in query:
        return "PutObjectRetention"
    if "legal-hold" in query:
        return "PutObjectLegalHold"
    copy = "x-amz-copy-source" in headers
    if "uploadId" in query or "partNumber" in query:
        return "UploadPartCopy" if copy else "UploadPart"
    return "CopyObject" if copy else "PutObject"


def _fixed_setting(method: str, bucket: str, key: str, query: Mapping[str, str]) -> str:
    """The operation reading a fixed setting, "" for none: only when the query names no
    other unsupported subresource."""
    names = [name for name in query if name in UNSUPPORTED_SUBRESOURCES]
    if not bucket or len(names) != 1:
        return ""
    (name,) = names
    # Nothing else that picks an operation may come with it (`?acl&uploadId=..` is no
    # ACL request): only an object ACL's versionId.
    others = set(query) - {name, "versionId" if key else name}
    if others:
        return ""
    if method == "GET" and not key:
        return FIXED_BUCKET_SETTINGS.get(name, "")
    return ""


def _access_subresource_fits(method: str, key: str, query: Mapping[str, str]) -> bool:
    """Whether the access subresources `query` names (if any) have an operation for
    this method and target."""
    named = [name for name in query if name in ACCESS_SUBRESOURCES]
    for name in named:
        methods = ACCESS_SUBRESOURCES[name]
        if method not in methods or (key and name != "acl"):
            return False
    if not named:
        return True
    # Alone: mixed with another operation's parameters it is neither operation (S3 too).
    others = _OPERATION_PARAMETERS | (set() if key else {"versionId"})
    return len(named) == 1 and others.isdisjoint(query)


def _lock_subresource_fits(method: str, key: str, query: Mapping[str, str]) -> bool:
    """Whether the Object Lock subresources `query` names (if any) have an operation
    for this method and target: one of them, alone, with GET or PUT on its target."""
    named = [name for name in query if name in LOCK_SUBRESOURCES]
    if not named:
        return True
    name = named[0]
    others = _OPERATION_PARAMETERS - {name}
    return (
        len(named) == 1
        and method in ("GET", "PUT")
        and LOCK_SUBRESOURCES[name] == bool(key)
        and others.isdisjoint(query)
    )


# Query parameters that name an operation of their own.
_OPERATION_PARAMETERS = frozenset(
    {"uploadId", "partNumber", "uploads", "versions", "list-type", "delete", "tagging",
     "attributes", "versioning", "location", "cors", "lifecycle", "object-lock", "retention",
     "legal-hold"}
)  # fmt: skip


def unsupported_subresource(query: Mapping[str, str]) -> str:
    """The first subresource of `query` this gateway does not implement ("" if none),
    or an access subresource used with a method that has no operation for it."""
    return next(
        (
            name
            for name in query
            if name in UNSUPPORTED_SUBRESOURCES
            or name in ACCESS_SUBRESOURCES
            or name in LOCK_SUBRESOURCES
        ),
        "",
    )
