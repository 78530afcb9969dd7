"""The request's side of conditions: the condition keys a request carries, and their values.

The gateway fills one `RequestFacts` per request (after authentication, before the
decision) and passes `condition_context(facts)` to `blobstore.access.decision`. Keys
come from the principal, the connection, the query and the headers:

| key | value |
|---|---|
| aws:SourceIp | the client's address (the peer, or the configured proxy header's) |
| aws:SecureTransport | "true" over TLS |
| aws:CurrentTime, aws:EpochTime | the request's time (ISO 8601 UTC; whole seconds) |
| aws:Referer, aws:UserAgent | the headers of those names, when sent |
| aws:username | the user's name (absent when anonymous) |
| aws:userid | the user's name, or "anonymous" |
| aws:PrincipalType | "User", or "Anonymous" |
| aws:PrincipalAccount, aws:PrincipalArn | the cluster's account, the user's ARN (users only) |
| s3:prefix, s3:delimiter, s3:max-keys | the listing's query parameters, when given (also empty) |
| s3:VersionId | the `versionId` query parameter, when given |
| s3:x-amz-acl, s3:x-amz-content-sha256, s3:x-amz-server-side-encryption (and -aws-kms-key-id, -customer-algorithm), s3:x-amz-copy-source, s3:x-amz-metadata-directive, s3:x-amz-storage-class, s3:x-amz-grant-* | the headers of those names, when sent |
| s3:object-lock-mode, s3:object-lock-retain-until-date, s3:object-lock-legal-hold | the `x-amz-object-lock-*` headers, when sent |
| s3:RequestObjectTag/<key>, s3:RequestObjectTagKeys | the tags of `x-amz-tagging` (or `request_object_tags`) |
| s3:ExistingObjectTag/<key> | the stored object's tags, when the gateway read them |
| s3:signatureversion | "AWS4-HMAC-SHA256" (SigV4) or "AWS" (SigV2); absent when anonymous |
| s3:authType | "REST-HEADER", "REST-QUERY-STRING" (presigned) or "POST" (browser form) |

Keys not listed here are absent from every request.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import parse_qsl

from blobstore.access.conditions import ConditionContext, normalize_key
from blobstore.access.policy_principal import CLUSTER_ACCOUNT_ID, user_arn

# Headers passed through as s3:<header name> when the request sends them.
_HEADER_KEYS = (
    "x-amz-acl",
    "x-amz-content-sha256",
    "x-amz-server-side-encryption",
    "x-amz-server-side-encryption-aws-kms-key-id",
    "x-amz-server-side-encryption-customer-algorithm",
    "x-amz-copy-source",
    "x-amz-metadata-directive",
    "x-amz-storage-class",
    "x-amz-grant-read",
    "x-amz-grant-write",
    "x-amz-grant-read-acp",
    "x-amz-grant-write-acp",
    "x-amz-grant-full-control",
)
_OBJECT_LOCK_HEADERS = {
    "x-amz-object-lock-mode": "s3:object-lock-mode",
    "x-amz-object-lock-retain-until-date": "s3:object-lock-retain-until-date",
    "x-amz-object-lock-legal-hold": "s3:object-lock-legal-hold",
}
_QUERY_KEYS = {"prefix": "s3:prefix", "delimiter": "s3:delimiter", "max-keys": "s3:max-keys"}


@dataclass(frozen=True, slots=True)
class RequestFacts:
    """What the gateway knows of a request when it asks for a decision."""

    user: str | None  # None: anonymous
    source_ip: str
    secure_transport: bool
    now_s: float  # wall clock, seconds since the epoch
    headers: Mapping[str, str] = field(default_factory=dict)  # lower-case names
    query: Mapping[str, str] = field(default_factory=dict)
    auth_type: str = "REST-HEADER"
    signature_version: str = "AWS4-HMAC-SHA256"
    existing_object_tags: Mapping[str, str] | None = None
    request_object_tags: Mapping[str, str] | None = None  # None: read x-amz-tagging
    account_id: str = CLUSTER_ACCOUNT_ID


def _principal_keys(facts: RequestFacts) -> dict[str, str]:
    if facts.user is None:
        return {"aws:userid": "anonymous", "aws:PrincipalType": "Anonymous"}
    return {
        "aws:username": facts.user,
        "aws:userid": facts.user,
        "aws:PrincipalType": "User",
        "aws:PrincipalAccount": facts.account_id,
        "aws:PrincipalArn": user_arn(facts.user, facts.account_id),
        "s3:signatureversion": facts.signature_version,
    }


def _connection_keys(facts: RequestFacts) -> dict[str, str]:
    keys = {
        "aws:SourceIp": facts.source_ip,
        "aws:SecureTransport": "true" if facts.secure_transport else "false",
        "aws:CurrentTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(facts.now_s)),
        "aws:EpochTime": str(int(facts.now_s)),
        "s3:authType": facts.auth_type,
    }
    for header, key in (("referer", "aws:Referer"), ("user-agent", "aws:UserAgent")):
        if header in facts.headers:
            keys[key] = facts.headers[header]
    return keys


def _request_keys(facts: RequestFacts) -> dict[str, str]:
    keys = {key: facts.query[name] for name, key in _QUERY_KEYS.items() if name in facts.query}
    if "versionId" in facts.query:
        keys["s3:VersionId"] = facts.query["versionId"]
    keys |= {f"s3:{name}": facts.headers[name] for name in _HEADER_KEYS if name in facts.headers}
    keys |= {
        key: facts.headers[name]
        for name, key in _OBJECT_LOCK_HEADERS.items()
        if name in facts.headers
    }
    return keys


def _tag_keys(facts: RequestFacts) -> dict[str, tuple[str, ...]]:
    request_tags = facts.request_object_tags
    if request_tags is None and "x-amz-tagging" in facts.headers:
        request_tags = dict(parse_qsl(facts.headers["x-amz-tagging"], keep_blank_values=True))
    keys: dict[str, tuple[str, ...]] = {}
    if request_tags is not None:
        keys["s3:RequestObjectTagKeys"] = tuple(request_tags)
        keys |= {f"s3:RequestObjectTag/{k}": (v,) for k, v in request_tags.items()}
    for k, v in (facts.existing_object_tags or {}).items():
        keys[f"s3:ExistingObjectTag/{k}"] = (v,)
    return keys


def condition_context(facts: RequestFacts) -> ConditionContext:
    """The request's condition keys (normalized) and their values."""
    single = _principal_keys(facts) | _connection_keys(facts) | _request_keys(facts)
    context: dict[str, tuple[str, ...]] = {
        normalize_key(key): (value,) for key, value in single.items()
    }
    context |= {normalize_key(key): values for key, values in _tag_keys(facts).items()}
    return context


def context_of(values: Mapping[str, str | tuple[str, ...]]) -> ConditionContext:
    """A context from plain key -> value(s) (for tests and callers with their own keys)."""
    return {
        normalize_key(key): (value,) if isinstance(value, str) else value
        for key, value in values.items()
    }
