"""What each S3 operation asks permission for: IAM actions on resource ARNs.

`required_accesses(OperationRequest(...))` gives the `Access`es (action, resource) a
request needs, all of which must be allowed, in the terms of AWS's "Actions, resources,
and condition keys for Amazon S3":

    GetObject b/k                  -> s3:GetObject on arn:aws:s3:::b/k
    GetObject b/k?versionId=v      -> s3:GetObjectVersion on arn:aws:s3:::b/k
    ListObjectsV2 b, HeadBucket b  -> s3:ListBucket on arn:aws:s3:::b
    CopyObject b/k from s/t        -> s3:PutObject on arn:aws:s3:::b/k
                                      + s3:GetObject on arn:aws:s3:::s/t
    PutObject with x-amz-acl       -> s3:PutObject + s3:PutObjectAcl on the object
    DeleteObjects b [k1, k2@v]     -> s3:DeleteObject on b/k1, s3:DeleteObjectVersion on b/k2
    ListBuckets                    -> s3:ListAllMyBuckets on *
    PutObjectRetention b/k         -> s3:PutObjectRetention on arn:aws:s3:::b/k
                                      (+ s3:BypassGovernanceRetention: object_lock_accesses)

Each `Access` also names the bucket whose owner, policy and ACLs decide it ("" for the
account-level actions). `S3_ACTIONS` is the catalog of S3's action names with the kind of
resource each applies to (a bucket, an object, or the account), which policy validation
uses ("Policy has invalid action", "Action does not apply to any resource(s) in
statement"). Operations needing no permission (`PreflightCors`, and `NotImplemented`,
whose answer says nothing) give no access; an operation this module does not know raises
`UnknownOperation`, so a new route cannot go unchecked by mistake.
"""

from __future__ import annotations

from dataclasses import dataclass

BUCKET = "bucket"
OBJECT = "object"
ACCOUNT = "account"
ALL_RESOURCES = "*"
S3_ARN_PREFIX = "arn:aws:s3:::"

_OBJECT_ACTIONS = """
AbortMultipartUpload BypassGovernanceRetention DeleteObject DeleteObjectTagging
DeleteObjectVersion DeleteObjectVersionTagging GetObject GetObjectAcl GetObjectAttributes
GetObjectLegalHold GetObjectRetention GetObjectTagging GetObjectTorrent GetObjectVersion
GetObjectVersionAcl GetObjectVersionAttributes GetObjectVersionForReplication
GetObjectVersionTagging GetObjectVersionTorrent InitiateReplication ListMultipartUploadParts
ObjectOwnerOverrideToBucketOwner PutObject PutObjectAcl PutObjectLegalHold PutObjectRetention
PutObjectTagging PutObjectVersionAcl PutObjectVersionTagging RenameObject ReplicateDelete
ReplicateObject ReplicateTags RestoreObject
"""
_BUCKET_ACTIONS = """
CreateBucket DeleteBucket DeleteBucketOwnershipControls DeleteBucketPolicy
DeleteBucketWebsite GetAccelerateConfiguration GetAnalyticsConfiguration GetBucketAcl
GetBucketCORS GetBucketLocation GetBucketLogging GetBucketNotification
GetBucketObjectLockConfiguration GetBucketOwnershipControls GetBucketPolicy
GetBucketPolicyStatus GetBucketPublicAccessBlock GetBucketRequestPayment GetBucketTagging
GetBucketVersioning GetBucketWebsite GetEncryptionConfiguration
GetIntelligentTieringConfiguration GetInventoryConfiguration GetLifecycleConfiguration
GetMetricsConfiguration GetReplicationConfiguration ListBucket ListBucketMultipartUploads
ListBucketVersions PutAccelerateConfiguration PutAnalyticsConfiguration PutBucketAcl
PutBucketCORS PutBucketLogging PutBucketNotification PutBucketObjectLockConfiguration
PutBucketOwnershipControls PutBucketPolicy PutBucketPublicAccessBlock
PutBucketRequestPayment PutBucketTagging PutBucketVersioning PutBucketWebsite
PutEncryptionConfiguration PutIntelligentTieringConfiguration PutInventoryConfiguration
PutLifecycleConfiguration PutMetricsConfiguration PutReplicationConfiguration
"""
_ACCOUNT_ACTIONS = """
CreateJob GetAccountPublicAccessBlock ListAllMyBuckets ListAccessPoints ListJobs
PutAccountPublicAccessBlock
"""

# Every S3 action, as AWS spells it, and the kind of resource it applies to.
S3_ACTIONS: dict[str, str] = {
    f"s3:{name}": kind
    for names, kind in (
        (_OBJECT_ACTIONS, OBJECT),
        (_BUCKET_ACTIONS, BUCKET),
        (_ACCOUNT_ACTIONS, ACCOUNT),
    )
    for name in names.split()
}


class UnknownOperation(ValueError):
    """An operation name `required_accesses` has no entry for (a programming error)."""


def bucket_arn(bucket: str) -> str:
    return S3_ARN_PREFIX + bucket


def object_arn(bucket: str, key: str) -> str:
    return f"{S3_ARN_PREFIX}{bucket}/{key}"


@dataclass(frozen=True, slots=True)
class Access:
    """One action on one resource, decided by the state of `bucket` ("" for the account)."""

    action: str
    resource: str
    bucket: str = ""
    key: str = ""

    def __post_init__(self) -> None:
        assert self.action in S3_ACTIONS, self.action


@dataclass(frozen=True, slots=True)
class OperationRequest:
    """What of a request decides its accesses."""

    operation: str  # as s3api.routes resolves it (and PostObject, the account PAB ones)
    bucket: str = ""
    key: str = ""
    version_id: str = ""  # the versionId query parameter
    copy_source_bucket: str = ""  # CopyObject, UploadPartCopy
    copy_source_key: str = ""
    copy_source_version_id: str = ""
    sets_acl: bool = False  # a write naming x-amz-acl or x-amz-grant-*
    sets_tags: bool = False  # a write naming x-amz-tagging
    objects: tuple[tuple[str, str], ...] = ()  # DeleteObjects: (key, version id or "")


# operation -> (action, the action when a versionId is given, resource kind)
_OPERATIONS: dict[str, tuple[str, str, str]] = {
    "ListBuckets": ("ListAllMyBuckets", "", ACCOUNT),
    "GetAccountPublicAccessBlock": ("GetAccountPublicAccessBlock", "", ACCOUNT),
    "PutAccountPublicAccessBlock": ("PutAccountPublicAccessBlock", "", ACCOUNT),
    "DeleteAccountPublicAccessBlock": ("PutAccountPublicAccessBlock", "", ACCOUNT),
    "CreateBucket": ("CreateBucket", "", BUCKET),
    "HeadBucket": ("ListBucket", "", BUCKET),
    "DeleteBucket": ("DeleteBucket", "", BUCKET),
    "GetBucketLocation": ("GetBucketLocation", "", BUCKET),
    "GetBucketVersioning": ("GetBucketVersioning", "", BUCKET),
    "PutBucketVersioning": ("PutBucketVersioning", "", BUCKET),
    "GetBucketTagging": ("GetBucketTagging", "", BUCKET),
    "PutBucketTagging": ("PutBucketTagging", "", BUCKET),
    "DeleteBucketTagging": ("PutBucketTagging", "", BUCKET),
    "GetBucketCors": ("GetBucketCORS", "", BUCKET),
    "PutBucketCors": ("PutBucketCORS", "", BUCKET),
    "DeleteBucketCors": ("PutBucketCORS", "", BUCKET),
    "GetBucketLifecycleConfiguration": ("GetLifecycleConfiguration", "", BUCKET),
    "PutBucketLifecycleConfiguration": ("PutLifecycleConfiguration", "", BUCKET),
    "DeleteBucketLifecycle": ("PutLifecycleConfiguration", "", BUCKET),
    "ListObjects": ("ListBucket", "", BUCKET),
    "ListObjectsV2": ("ListBucket", "", BUCKET),
    "ListObjectVersions": ("ListBucketVersions", "", BUCKET),
    "ListMultipartUploads": ("ListBucketMultipartUploads", "", BUCKET),
    "GetBucketAcl": ("GetBucketAcl", "", BUCKET),
    "PutBucketAcl": ("PutBucketAcl", "", BUCKET),
    "GetBucketPolicy": ("GetBucketPolicy", "", BUCKET),
    "PutBucketPolicy": ("PutBucketPolicy", "", BUCKET),
    "DeleteBucketPolicy": ("DeleteBucketPolicy", "", BUCKET),
    "GetBucketPolicyStatus": ("GetBucketPolicyStatus", "", BUCKET),
    "GetPublicAccessBlock": ("GetBucketPublicAccessBlock", "", BUCKET),
    "PutPublicAccessBlock": ("PutBucketPublicAccessBlock", "", BUCKET),
    "DeletePublicAccessBlock": ("PutBucketPublicAccessBlock", "", BUCKET),
    "GetBucketOwnershipControls": ("GetBucketOwnershipControls", "", BUCKET),
    "PutBucketOwnershipControls": ("PutBucketOwnershipControls", "", BUCKET),
    "DeleteBucketOwnershipControls": ("PutBucketOwnershipControls", "", BUCKET),
    "GetBucketEncryption": ("GetEncryptionConfiguration", "", BUCKET),
    "PutBucketEncryption": ("PutEncryptionConfiguration", "", BUCKET),
    "DeleteBucketEncryption": ("PutEncryptionConfiguration", "", BUCKET),
    "GetBucketWebsite": ("GetBucketWebsite", "", BUCKET),
    "PutBucketWebsite": ("PutBucketWebsite", "", BUCKET),
    "DeleteBucketWebsite": ("DeleteBucketWebsite", "", BUCKET),
    "GetBucketReplication": ("GetReplicationConfiguration", "", BUCKET),
    "GetObjectLockConfiguration": ("GetBucketObjectLockConfiguration", "", BUCKET),
    "PutObjectLockConfiguration": ("PutBucketObjectLockConfiguration", "", BUCKET),
    "GetBucketLogging": ("GetBucketLogging", "", BUCKET),
    "GetBucketNotificationConfiguration": ("GetBucketNotification", "", BUCKET),
    "GetBucketAccelerateConfiguration": ("GetAccelerateConfiguration", "", BUCKET),
    "GetBucketRequestPayment": ("GetBucketRequestPayment", "", BUCKET),
    "PutObject": ("PutObject", "", OBJECT),
    "PostObject": ("PutObject", "", OBJECT),
    "CopyObject": ("PutObject", "", OBJECT),
    "CreateMultipartUpload": ("PutObject", "", OBJECT),
    "UploadPart": ("PutObject", "", OBJECT),
    "UploadPartCopy": ("PutObject", "", OBJECT),
    "CompleteMultipartUpload": ("PutObject", "", OBJECT),
    "AbortMultipartUpload": ("AbortMultipartUpload", "", OBJECT),
    "ListParts": ("ListMultipartUploadParts", "", OBJECT),
    "GetObject": ("GetObject", "GetObjectVersion", OBJECT),
    "HeadObject": ("GetObject", "GetObjectVersion", OBJECT),
    "SelectObjectContent": ("GetObject", "GetObjectVersion", OBJECT),
    "DeleteObject": ("DeleteObject", "DeleteObjectVersion", OBJECT),
    "GetObjectTagging": ("GetObjectTagging", "GetObjectVersionTagging", OBJECT),
    "PutObjectTagging": ("PutObjectTagging", "PutObjectVersionTagging", OBJECT),
    "DeleteObjectTagging": ("DeleteObjectTagging", "DeleteObjectVersionTagging", OBJECT),
    "GetObjectAttributes": ("GetObjectAttributes", "GetObjectVersionAttributes", OBJECT),
    "GetObjectAcl": ("GetObjectAcl", "GetObjectVersionAcl", OBJECT),
    "PutObjectAcl": ("PutObjectAcl", "PutObjectVersionAcl", OBJECT),
    "GetObjectRetention": ("GetObjectRetention", "", OBJECT),
    "PutObjectRetention": ("PutObjectRetention", "", OBJECT),
    "GetObjectLegalHold": ("GetObjectLegalHold", "", OBJECT),
    "PutObjectLegalHold": ("PutObjectLegalHold", "", OBJECT),
    "RestoreObject": ("RestoreObject", "", OBJECT),
}
# Operations that ask for no permission: the CORS preflight (S3 answers it unsigned) and
# the answer to an unimplemented subresource (it tells nothing).
NO_ACCESS_OPERATIONS = frozenset({"PreflightCors", "NotImplemented"})
# Writes that also set the new object's (or bucket's) ACL or tags when the request says so.
_ACL_ON_WRITE = {
    "PutObject": "s3:PutObjectAcl",
    "PostObject": "s3:PutObjectAcl",
    "CopyObject": "s3:PutObjectAcl",
    "CreateMultipartUpload": "s3:PutObjectAcl",
    "CreateBucket": "s3:PutBucketAcl",
}
_TAGS_ON_WRITE = frozenset({"PutObject", "PostObject", "CopyObject", "CreateMultipartUpload"})
_COPIES = frozenset({"CopyObject", "UploadPartCopy"})
# Reads that also need the read of the object itself (GetObjectAttributes, as S3 says).
_ALSO_READ = frozenset({"GetObjectAttributes"})

assert all(f"s3:{action}" in S3_ACTIONS for action, _, _ in _OPERATIONS.values())
assert all(f"s3:{action}" in S3_ACTIONS for _, action, _ in _OPERATIONS.values() if action)
assert NO_ACCESS_OPERATIONS.isdisjoint(_OPERATIONS)


def known_operations() -> frozenset[str]:
    """Every operation `required_accesses` answers for."""
    return frozenset(_OPERATIONS) | NO_ACCESS_OPERATIONS | {"DeleteObjects"}


def _access(operation: str, bucket: str, key: str, version_id: str) -> Access:
    action, versioned, kind = _OPERATIONS[operation]
    name = "s3:" + (versioned if version_id and versioned else action)
    if kind == ACCOUNT:
        return Access(name, ALL_RESOURCES)
    if kind == BUCKET:
        return Access(name, bucket_arn(bucket), bucket)
    return Access(name, object_arn(bucket, key), bucket, key)


def _on_same_resource(first: Access, action: str) -> Access:
    return Access(action, first.resource, first.bucket, first.key)


def _delete_objects(request: OperationRequest) -> tuple[Access, ...]:
    return tuple(
        _access("DeleteObject", request.bucket, key, version_id)
        for key, version_id in request.objects
    )


def object_lock_accesses(
    bucket: str,
    key: str,
    *,
    retention: bool = False,
    legal_hold: bool = False,
    bypass: bool = False,
) -> tuple[Access, ...]:
    """What Object Lock asks beside an operation's own accesses: a write setting the new
    version's retention or legal hold (x-amz-object-lock-*) needs s3:PutObjectRetention
    or s3:PutObjectLegalHold on it, and a request bypassing GOVERNANCE retention
    (x-amz-bypass-governance-retention) s3:BypassGovernanceRetention."""
    resource = object_arn(bucket, key)
    wanted = (
        (retention, "s3:PutObjectRetention"),
        (legal_hold, "s3:PutObjectLegalHold"),
        (bypass, "s3:BypassGovernanceRetention"),
    )
    return tuple(Access(action, resource, bucket, key) for asked, action in wanted if asked)


def required_accesses(request: OperationRequest) -> tuple[Access, ...]:
    """Every access the request needs; it is allowed only if each one is."""
    operation = request.operation
    if operation in NO_ACCESS_OPERATIONS:
        return ()
    if operation == "DeleteObjects":
        return _delete_objects(request)
    if operation not in _OPERATIONS:
        raise UnknownOperation(operation)
    main = _access(operation, request.bucket, request.key, request.version_id)
    accesses = [main]
    if operation in _ALSO_READ:
        accesses.append(_access("GetObject", request.bucket, request.key, request.version_id))
    if request.sets_acl and operation in _ACL_ON_WRITE:
        accesses.append(_on_same_resource(main, _ACL_ON_WRITE[operation]))
    if request.sets_tags and operation in _TAGS_ON_WRITE:
        accesses.append(_on_same_resource(main, "s3:PutObjectTagging"))
    if operation in _COPIES:
        source = (request.copy_source_bucket, request.copy_source_key)
        accesses.append(_access("GetObject", *source, request.copy_source_version_id))
    return tuple(accesses)
