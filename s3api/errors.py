"""S3 errors: every error code the gateway can return, declared once, and their XML body.

An `S3Error` carries the code, HTTP status, message and the extra fields S3 puts in the
error document (BucketName, Key, Condition, ...). `to_s3_error` maps exceptions raised
below the gateway (catalog, ledger client, object layer, ZooKeeper session) to S3 errors
through one table keyed by their classes, so renaming or moving an exception breaks the
import here instead of turning its answer into a 500. Anything unmapped becomes
InternalError; the caller logs the traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from xml.sax.saxutils import escape

from kazoo.exceptions import ConnectionLoss, SessionExpiredError

from blobstore.catalog import errors as catalog_errors
from blobstore.ledger import errors as ledger_errors
from blobstore.objects import errors as object_errors
from blobstore.objects.lock import ObjectLockedError
from blobstore.objects.writer_pool import WriterPoolExhaustedError
from blobstore.runtime.zk_session import ZooKeeperRequestTooLargeError
from blobstore.tier.fs import TierUnavailableError

logger = logging.getLogger(__name__)

__all__ = [
    "DOMAIN_ERROR_CODES",
    "ERROR_SPECS",
    "ErrorSpec",
    "S3Error",
    "render_error",
    "to_s3_error",
]


@dataclass(frozen=True, slots=True)
class ErrorSpec:
    code: str
    status: int
    message: str


def _specs(*rows: tuple[str, int, str]) -> dict[str, ErrorSpec]:
    table = {code: ErrorSpec(code, status, message) for code, status, message in rows}
    assert len(table) == len(rows), "an S3 error code is declared twice"
    return table


ERROR_SPECS: dict[str, ErrorSpec] = _specs(
    ("AccessControlListNotSupported", 400, "The bucket does not allow ACLs"),
    ("AccessDenied", 403, "Access Denied"),
    ("AccessForbidden", 403, "CORSResponse: This CORS request is not allowed."),
    ("AuthorizationHeaderMalformed", 400, "The authorization header is malformed."),
    (
        "AuthorizationQueryParametersError",
        400,
        "Error parsing the X-Amz-Credential parameter.",
    ),
    ("BadDigest", 400, "The Content-MD5 you specified did not match what we received."),
    ("BadRequest", 400, "An error occurred when parsing the HTTP request."),
    (
        "BucketAlreadyExists",
        409,
        "The requested bucket name is not available. The bucket namespace is shared by all "
        "users of the system. Please select a different name and try again.",
    ),
    (
        "BucketAlreadyOwnedByYou",
        409,
        "Your previous request to create the named bucket succeeded and you already own it.",
    ),
    ("BucketNotEmpty", 409, "The bucket you tried to delete is not empty"),
    ("EntityTooLarge", 400, "Your proposed upload exceeds the maximum allowed size"),
    ("EntityTooSmall", 400, "Your proposed upload is smaller than the minimum allowed size"),
    ("ExpiredToken", 400, "The provided token has expired."),
    (
        "IncompleteBody",
        400,
        "You did not provide the number of bytes specified by the Content-Length HTTP header.",
    ),
    (
        "IncorrectNumberOfFilesInPostRequest",
        400,
        "POST requires exactly one file upload per request.",
    ),
    ("InternalError", 500, "We encountered an internal error. Please try again."),
    (
        "InvalidAccessKeyId",
        403,
        "The AWS Access Key Id you provided does not exist in our records.",
    ),
    ("InvalidArgument", 400, "Invalid Argument"),
    (
        "InvalidBucketAclWithObjectOwnership",
        400,
        "Bucket cannot have ACLs set with ObjectOwnership's BucketOwnerEnforced setting",
    ),
    ("InvalidBucketName", 400, "The specified bucket is not valid."),
    ("InvalidBucketState", 409, "The request is not valid with the current state of the bucket."),
    (
        "InvalidChunkSizeError",
        400,
        "Only the last chunk is allowed to have a size less than 8192 bytes",
    ),
    ("InvalidDigest", 400, "The Content-MD5 you specified is not valid."),
    (
        "InvalidObjectState",
        403,
        "The operation is not valid for the object's storage class",
    ),
    (
        "InvalidPart",
        400,
        "One or more of the specified parts could not be found.  The part may not have been "
        "uploaded, or the specified entity tag may not match the part's entity tag.",
    ),
    (
        "InvalidPartOrder",
        400,
        "The list of parts was not in ascending order. The parts list must be specified in "
        "order by part number.",
    ),
    (
        "InvalidPolicyDocument",
        400,
        "The content of the form does not meet the conditions specified in the policy document.",
    ),
    ("InvalidPartNumber", 416, "The requested partnumber is not satisfiable"),
    ("InvalidRange", 416, "The requested range is not satisfiable"),
    (
        "InvalidRedirectLocation",
        400,
        "The website redirect location must have a prefix of 'http://' or 'https://' or '/'.",
    ),
    ("InvalidRequest", 400, "Invalid Request"),
    ("KMS.NotFoundException", 400, "Invalid keyId"),
    ("InvalidStorageClass", 400, "The storage class you specified is not valid"),
    ("InvalidRetentionPeriod", 400, "The retention period must be a positive integer."),
    ("InvalidTag", 400, "The TagSet is not valid."),
    ("InvalidURI", 400, "Couldn't parse the specified URI."),
    ("KeyTooLongError", 400, "Your key is too long"),
    (
        "MalformedACLError",
        400,
        "The XML you provided was not well-formed or did not validate against our published schema",
    ),
    ("MalformedPolicy", 400, "Policies must be valid JSON and the first byte must be '{'"),
    (
        "MalformedXML",
        400,
        "The XML you provided was not well-formed or did not validate against our published schema",
    ),
    (
        "MalformedPOSTRequest",
        400,
        "The body of your POST request is not well-formed multipart/form-data.",
    ),
    (
        "MaxPostPreDataLengthExceeded",
        400,
        "Your POST request fields preceding the upload file were too large.",
    ),
    (
        "MetadataTooLarge",
        400,
        "Your metadata headers exceed the maximum allowed metadata size.",
    ),
    ("MethodNotAllowed", 405, "The specified method is not allowed against this resource."),
    ("MissingContentLength", 411, "You must provide the Content-Length HTTP header."),
    ("MissingSecurityHeader", 400, "Your request is missing a required header."),
    ("NoSuchBucket", 404, "The specified bucket does not exist"),
    (
        "OwnershipControlsNotFoundError",
        404,
        "The bucket ownership controls were not found",
    ),
    (
        "UnresolvableGrantByEmailAddress",
        400,
        "The e-mail address you provided does not match any account on record.",
    ),
    ("NoSuchBucketPolicy", 404, "The bucket policy does not exist"),
    (
        "NoSuchPublicAccessBlockConfiguration",
        404,
        "The public access block configuration was not found",
    ),
    (
        "NoSuchWebsiteConfiguration",
        404,
        "The specified bucket does not have a website configuration",
    ),
    (
        "ObjectLockConfigurationNotFoundError",
        404,
        "Object Lock configuration does not exist for this bucket",
    ),
    ("ReplicationConfigurationNotFoundError", 404, "The replication configuration was not found"),
    (
        "ServerSideEncryptionConfigurationNotFoundError",
        404,
        "The server side encryption configuration was not found",
    ),
    ("NoSuchCORSConfiguration", 404, "The CORS configuration does not exist"),
    ("NoSuchKey", 404, "The specified key does not exist."),
    ("NoSuchLifecycleConfiguration", 404, "The lifecycle configuration does not exist"),
    (
        "NoSuchObjectLockConfiguration",
        404,
        "The specified object does not have a ObjectLock configuration",
    ),
    ("NoSuchTagSet", 404, "The TagSet does not exist"),
    (
        "NoSuchUpload",
        404,
        "The specified upload does not exist. The upload ID may be invalid, or the upload "
        "may have been aborted or completed.",
    ),
    ("NoSuchVersion", 404, "The specified version does not exist."),
    ("NotImplemented", 501, "A header you provided implies functionality that is not implemented"),
    # 304 carries no body; it travels as an error so one handler sets ETag/Last-Modified.
    ("NotModified", 304, "Not Modified"),
    ("PreconditionFailed", 412, "At least one of the pre-conditions you specified did not hold"),
    (
        "RequestHeaderSectionTooLarge",
        400,
        "Your request header section exceeds the maximum allowed size.",
    ),
    (
        "RequestTimeTooSkewed",
        403,
        "The difference between the request time and the current time is too large.",
    ),
    (
        "RequestTimeout",
        400,
        "Your socket connection to the server was not read from or written to within the timeout period.",
    ),
    ("ServiceUnavailable", 503, "Please reduce your request rate."),
    (
        "SignatureDoesNotMatch",
        403,
        "The request signature we calculated does not match the signature you provided. "
        "Check your key and signing method.",
    ),
    ("SlowDown", 503, "Please reduce your request rate."),
    ("TooManyParts", 400, "You have attempted to upload more than the maximum number of parts"),
    (
        "XAmzContentSHA256Mismatch",
        400,
        "The provided 'x-amz-content-sha256' header does not match what was computed.",
    ),
)


class S3Error(Exception):
    """An S3 error response: code, HTTP status, message, resource and extra XML fields.

    `fields` become child elements of <Error> in insertion order (BucketName, Key,
    Condition, ...). `headers` are extra HTTP response headers (x-amz-delete-marker,
    Allow, ETag on 304, ...).
    """

    __slots__ = ("code", "status", "message", "resource", "fields", "headers")

    def __init__(
        self,
        code: str,
        message: str | None = None,
        *,
        resource: str | None = None,
        headers: dict[str, str] | None = None,
        **fields: str | int,
    ) -> None:
        spec = ERROR_SPECS.get(code)
        assert spec is not None, f"undeclared S3 error code {code!r}"
        self.code = code
        self.status = spec.status
        self.message = spec.message if message is None else message
        self.resource = resource
        self.fields: dict[str, str] = {name: str(value) for name, value in fields.items()}
        self.headers: dict[str, str] = dict(headers or {})
        super().__init__(f"{code}: {self.message}")

    @property
    def has_body(self) -> bool:
        """False for 304 Not Modified, which S3 sends without a body."""
        return self.status != 304

    def with_fields(self, fields: Mapping[str, str | int]) -> S3Error:
        """Add XML fields whose names are not Python identifiers (X-Amz-Expires, ...)."""
        self.fields.update({name: str(value) for name, value in fields.items()})
        return self

    def __repr__(self) -> str:
        return f"S3Error({self.code!r}, {self.message!r}, fields={self.fields!r})"


def render_error(
    err: S3Error, request_id: str, resource: str | None = None, host_id: str = ""
) -> bytes:
    """The S3 XML error document for err (an empty body for 304)."""
    if not err.has_body:
        return b""
    parts = [
        '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>',
        escape(err.code),
        "</Code><Message>",
        escape(err.message),
        "</Message>",
    ]
    for name, value in err.fields.items():
        parts.append(f"<{name}>{escape(value)}</{name}>")
    shown_resource = err.resource if err.resource is not None else resource
    if shown_resource is not None:
        parts.append(f"<Resource>{escape(shown_resource)}</Resource>")
    parts.append(f"<RequestId>{escape(request_id)}</RequestId>")
    parts.append(f"<HostId>{escape(host_id)}</HostId></Error>")
    return "".join(parts).encode("utf-8")


# Exceptions from below the gateway, by class, looked up along the MRO: a subclass maps like
# its base unless listed itself. Storage trouble that a retry can fix becomes SlowDown or
# ServiceUnavailable (503): SDKs retry 503 with backoff. Anything else that is not listed
# (a bug, lost data) is InternalError and gets its traceback logged.
DOMAIN_ERROR_CODES: dict[type[BaseException], str] = {
    catalog_errors.InvalidBucketNameError: "InvalidBucketName",
    catalog_errors.InvalidObjectKeyError: "InvalidArgument",
    catalog_errors.ObjectKeyTooLongError: "KeyTooLongError",
    catalog_errors.RecordTooLargeError: "MetadataTooLarge",
    catalog_errors.BucketAlreadyExistsError: "BucketAlreadyExists",
    catalog_errors.NoSuchBucketError: "NoSuchBucket",
    catalog_errors.BucketNotEmptyError: "BucketNotEmpty",
    catalog_errors.NoSuchKeyError: "NoSuchKey",
    catalog_errors.NoSuchVersionError: "NoSuchVersion",
    catalog_errors.DeleteMarkerError: "NoSuchKey",
    catalog_errors.PreconditionFailedError: "PreconditionFailed",
    catalog_errors.BucketOwnerChangedError: "AccessDenied",
    catalog_errors.NoSuchUploadError: "NoSuchUpload",
    catalog_errors.InvalidPartError: "InvalidPart",
    catalog_errors.CatalogBusyError: "SlowDown",
    catalog_errors.LedgerCondemnedError: "SlowDown",  # the retry reads its source again
    catalog_errors.CatalogUnavailableError: "ServiceUnavailable",
    ledger_errors.AddOutcomeUnknownError: "SlowDown",  # includes LedgerFencedError
    ledger_errors.NotEnoughBookiesError: "ServiceUnavailable",
    ledger_errors.PendingAddsFullError: "SlowDown",
    ledger_errors.MetadataVersionConflictError: "SlowDown",
    ledger_errors.ReadFailedError: "ServiceUnavailable",
    ledger_errors.LedgerRecoveryError: "ServiceUnavailable",
    WriterPoolExhaustedError: "SlowDown",
    object_errors.EntityTooLargeError: "EntityTooLarge",
    object_errors.IncompleteBodyError: "IncompleteBody",
    object_errors.InvalidPartListError: "InvalidPart",
    object_errors.InvalidPartOrderError: "InvalidPartOrder",
    object_errors.EntityTooSmallError: "EntityTooSmall",
    TierUnavailableError: "ServiceUnavailable",
    object_errors.RestoreNotAllowedError: "InvalidObjectState",
    ObjectLockedError: "AccessDenied",
    object_errors.SseKeyRequiredError: "InvalidRequest",
    object_errors.SseNotApplicableError: "InvalidRequest",
    object_errors.SseKeyMismatchError: "AccessDenied",
    object_errors.SseKmsError: "NotImplemented",
    # ZooKeeper and timeouts escaping a bounded wait (ConnectionClosedError is a
    # SessionExpiredError)
    ZooKeeperRequestTooLargeError: "InvalidRequest",
    ConnectionLoss: "ServiceUnavailable",
    SessionExpiredError: "ServiceUnavailable",
    TimeoutError: "ServiceUnavailable",
}
assert set(DOMAIN_ERROR_CODES.values()) <= ERROR_SPECS.keys(), "a domain error maps to no S3 code"

# The attributes of a domain error that become S3 error fields, by S3's names.
_FIELD_ATTRIBUTES = (
    ("bucket", "BucketName"),
    ("key", "Key"),
    ("version_id", "VersionId"),
    ("upload_id", "UploadId"),
)


def _fields(exc: BaseException) -> dict[str, str | int]:
    """The S3 error fields the exception carries: its `bucket`, `key`, `version_id` and
    `upload_id`, then its `details` (what S3 names beside the code, by S3's names)."""
    fields: dict[str, str | int] = {}
    for attribute, name in _FIELD_ATTRIBUTES:
        value = getattr(exc, attribute, None)
        if isinstance(value, str):
            fields[name] = value
    details = getattr(exc, "details", None)
    if isinstance(details, dict):
        fields.update(details)
    return fields


def _plain_answer(exc: BaseException, code: str, requester: str | None) -> S3Error:
    return S3Error(code).with_fields(_fields(exc))


def _bucket_exists_answer(
    exc: catalog_errors.BucketAlreadyExistsError, code: str, requester: str | None
) -> S3Error:
    """BucketAlreadyOwnedByYou when the existing owner is the requester."""
    if requester is not None and exc.existing_owner == requester:
        code = "BucketAlreadyOwnedByYou"
    return S3Error(code).with_fields(_fields(exc))


def _delete_marker_answer(
    exc: catalog_errors.DeleteMarkerError, code: str, requester: str | None
) -> S3Error:
    """NoSuchKey with x-amz-delete-marker and the marker's version id (a request that
    named the version of a delete marker gets MethodNotAllowed from the handler)."""
    headers = {"x-amz-delete-marker": "true"}
    if exc.record.version_id:
        headers["x-amz-version-id"] = exc.record.version_id
    fields = {"Key": exc.record.key} if exc.record.key else {}
    return S3Error(code, headers=headers).with_fields(fields)


def _key_too_long_answer(
    exc: catalog_errors.ObjectKeyTooLongError, code: str, requester: str | None
) -> S3Error:
    """KeyTooLongError without the key it refuses (which may be many kilobytes)."""
    return S3Error(code)


def _request_too_large_answer(
    exc: ZooKeeperRequestTooLargeError, code: str, requester: str | None
) -> S3Error:
    return S3Error(
        code,
        f"The request's catalog update is {exc.request_bytes} bytes; "
        f"the limit is {exc.limit_bytes}",
    )


def _not_enough_bookies_answer(
    exc: ledger_errors.NotEnoughBookiesError, code: str, requester: str | None
) -> S3Error:
    """Why, without showing clients the cluster's insides: how many bookies are
    read-only, not their addresses (the gateway's log has them)."""
    read_only = len(exc.read_only)
    why = f": {read_only} read-only (disk full or failing)" if read_only else ""
    return S3Error(
        code,
        f"The cluster cannot store new data now: too few writable bookies{why}. "
        "Retry later; an operator must add bookies or free their disks.",
    )


def _tier_unavailable_answer(
    exc: TierUnavailableError, code: str, requester: str | None
) -> S3Error:
    """Names the tier (an operator's word for it), not its address or its error."""
    return S3Error(
        code,
        f"The object's bytes are on the cold tier {exc.tier}, which cannot be reached now. "
        "Retry later.",
    )


def _restore_not_allowed_answer(
    exc: object_errors.RestoreNotAllowedError, code: str, requester: str | None
) -> S3Error:
    return S3Error(code, "Restore is not allowed for the object's current storage class")


def _object_locked_answer(exc: ObjectLockedError, code: str, requester: str | None) -> S3Error:
    """As S3 words it; the fields name nothing (AccessDenied never does)."""
    return S3Error(code, "Access Denied because object protected by object lock.")


def _sse_answer(exc: object_errors.ObjectLayerError, code: str, requester: str | None) -> S3Error:
    """The object layer's words: which key is missing, wrong or not applicable (never
    the key itself)."""
    return S3Error(code, str(exc))


def _kms_answer(exc: object_errors.SseKmsError, code: str, requester: str | None) -> S3Error:
    """A key that is not there is the client's mistake (400); a gateway without the
    cluster key cannot encrypt at all (501, saying why)."""
    return S3Error("KMS.NotFoundException" if exc.not_found else code, str(exc))


# Domain errors whose answer is not just the code and the fields the exception carries:
# a message made from its data, a header, the requester, fewer fields.
_DOMAIN_ANSWERS: dict[type[BaseException], Callable[[Any, str, str | None], S3Error]] = {
    catalog_errors.BucketAlreadyExistsError: _bucket_exists_answer,
    catalog_errors.DeleteMarkerError: _delete_marker_answer,
    catalog_errors.ObjectKeyTooLongError: _key_too_long_answer,
    ZooKeeperRequestTooLargeError: _request_too_large_answer,
    ledger_errors.NotEnoughBookiesError: _not_enough_bookies_answer,
    TierUnavailableError: _tier_unavailable_answer,
    object_errors.RestoreNotAllowedError: _restore_not_allowed_answer,
    ObjectLockedError: _object_locked_answer,
    object_errors.SseKeyRequiredError: _sse_answer,
    object_errors.SseNotApplicableError: _sse_answer,
    object_errors.SseKeyMismatchError: _sse_answer,
    object_errors.SseKmsError: _kms_answer,
}
assert _DOMAIN_ANSWERS.keys() <= DOMAIN_ERROR_CODES.keys(), "an answer for an unmapped error"


def to_s3_error(exc: BaseException, *, requester: str | None = None) -> S3Error:
    """The S3 error for an exception; unmapped ones become InternalError (log the traceback).

    requester is the authenticated owner (BucketAlreadyOwnedByYou). An error caused by
    too few writable bookies is answered as that cause (503 ServiceUnavailable counting
    the read-only bookies), whatever wraps it: e.g. an add that failed for want of a
    writable replacement.
    """
    if isinstance(exc, S3Error):
        return exc
    if isinstance(exc.__cause__, ledger_errors.NotEnoughBookiesError):
        exc = exc.__cause__
    for cls in type(exc).__mro__:
        code = DOMAIN_ERROR_CODES.get(cls)
        if code is not None:
            return _DOMAIN_ANSWERS.get(cls, _plain_answer)(exc, code, requester)
    return S3Error("InternalError")


def log_server_error(exc: BaseException, error: S3Error, request_id: str, resource: str) -> bool:
    """Log a failure that is the server's, not the client's: an unmapped exception
    (InternalError) with its traceback, storage trouble (another 5xx) as a warning naming
    the cause the client is not told. True when it logged. Shared by whole requests and
    by DeleteObjects' keys."""
    if error.code == "InternalError":
        logger.error(
            "event=internal_error request_id=%s resource=%s", request_id, resource, exc_info=exc
        )
        return True
    if error.status >= 500 and not isinstance(exc, S3Error):
        logger.warning(
            "request_id=%s error=%s message=%s cause=%s",
            request_id,
            error.code,
            error.message,
            exc,
        )
        return True
    return False
