"""S3's authorization, decided: may this requester do this action on this resource?

    decision = decide(AccessRequest(requester, access, context, bucket=state))
    if not decision.allowed: raise AccessDenied   # and log decision.log_fields()

Pure: the caller (the gateway) loads the requester's identity policies, the bucket's
owner, policy, ACLs, ownership setting and public access blocks, builds the condition
context (`policy_context.condition_context`) and the accesses
(`actions.required_accesses`), and asks once per access; `combine` gives the request's
decision (every access must be allowed).

The order, first match wins:

1. **Explicit deny.** A Deny statement that applies, in one of the requester's identity
   policies or in the bucket policy, denies, whoever asks (admins and owners too). One
   exception, as S3 makes for the account's root user: the bucket policy's denials do not
   stop the bucket's owner or an admin from Get/Put/DeleteBucketPolicy, so a policy can
   never lock a bucket for good.
2. **Admin.** The cluster's admin users may do everything (they are to the cluster what
   the root user is to an AWS account).
3. **Ownership.** A bucket's owner may do everything on the bucket and its objects, as
   the owner of a single-account S3 whose identity policy grants it all. Where ACLs are
   enabled (ObjectWriter, BucketOwnerPreferred) an object another user wrote belongs to
   that user: its owner may do everything on it, and the bucket's owner only deletes and
   overwrites it (s3:PutObject, s3:DeleteObject, s3:DeleteObjectVersion and the multipart
   actions) unless an ACL or a policy grants more. Any user may list its own buckets and
   create buckets (s3:ListAllMyBuckets, s3:CreateBucket with no bucket yet), as an
   account's users may by default; an identity policy's Deny takes that away.
4. **Allow by policy.** Other users need an Allow from one of their identity policies or
   from the bucket policy: either is enough, as AWS decides for principals of the
   bucket owner's account, and all users of the cluster are one account. Anonymous
   requests have no identity policy, so only the bucket policy (principal `*`) can
   allow them. Under RestrictPublicBuckets, a public bucket policy allows only users.
5. **Allow by ACL.** Where ACLs are enabled (not BucketOwnerEnforced), a grant of the
   permission the action needs (`acl.acl_permission`) in the bucket's or the object's ACL
   allows; under IgnorePublicAcls, grants to AllUsers and AuthenticatedUsers do not.
6. **Implicit deny** otherwise (rule `public-access-block` when a grant or statement would
   have allowed but for the public access block, so the access log says why).

`Decision` says which rule decided, in which policy or ACL, and which statement (its Sid,
or `Statement[i]`), for the access log.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from blobstore.access.acl import BUCKET_ACL, AccessControlList, acl_permission, is_public_acl
from blobstore.access.actions import Access
from blobstore.access.conditions import ConditionContext
from blobstore.access.policy import Policy, Statement
from blobstore.access.policy_public import (
    PublicAccessBlock,
    is_public_policy,
    refuses_acl,
    refuses_policy,
)

__all__ = [
    "ACL",
    "ADMIN",
    "BUCKET_OWNER_ENFORCED",
    "BUCKET_OWNER_PREFERRED",
    "BUCKET_POLICY",
    "EXPLICIT_DENY",
    "IDENTITY_POLICY",
    "IMPLICIT_DENY",
    "OBJECT_WRITER",
    "OWNER",
    "PUBLIC_ACCESS_BLOCK",
    "AccessRequest",
    "BucketState",
    "Decision",
    "NamedPolicy",
    "ObjectState",
    "PublicAccessBlock",
    "Requester",
    "combine",
    "decide",
    "is_public_acl",
    "is_public_policy",
    "refuses_acl",
    "refuses_policy",
]

BUCKET_OWNER_ENFORCED = "BucketOwnerEnforced"
BUCKET_OWNER_PREFERRED = "BucketOwnerPreferred"
OBJECT_WRITER = "ObjectWriter"
OWNERSHIP_SETTINGS = (BUCKET_OWNER_ENFORCED, BUCKET_OWNER_PREFERRED, OBJECT_WRITER)

# Decision rules, as the access log names them.
EXPLICIT_DENY = "explicit-deny"
ADMIN = "admin"
OWNER = "owner"
IDENTITY_POLICY = "identity-policy"
BUCKET_POLICY = "bucket-policy"
ACL = "acl"
PUBLIC_ACCESS_BLOCK = "public-access-block"
IMPLICIT_DENY = "implicit-deny"

# Never stopped by the bucket policy's denials for the owner or an admin.
LOCKOUT_EXEMPT_ACTIONS = frozenset(
    {"s3:GetBucketPolicy", "s3:PutBucketPolicy", "s3:DeleteBucketPolicy"}
)
# What every user may do with no bucket in question.
SELF_SERVICE_ACTIONS = frozenset({"s3:ListAllMyBuckets", "s3:CreateBucket"})
# What a bucket's owner may do to an object another user owns.
BUCKET_OWNER_OBJECT_ACTIONS = frozenset(
    {
        "s3:PutObject",
        "s3:DeleteObject",
        "s3:DeleteObjectVersion",
        "s3:AbortMultipartUpload",
        "s3:ListMultipartUploadParts",
    }
)


@dataclass(frozen=True, slots=True)
class NamedPolicy:
    """An identity policy and the name the access log gives it (e.g. "group:readers/ro")."""

    name: str
    policy: Policy


@dataclass(frozen=True, slots=True)
class Requester:
    user: str | None = None  # None: anonymous
    admin: bool = False
    policies: tuple[NamedPolicy, ...] = ()  # the user's own and its groups'

    def __post_init__(self) -> None:
        assert self.user is not None or not (self.admin or self.policies), "anonymous has none"


@dataclass(frozen=True, slots=True)
class BucketState:
    owner: str
    policy: Policy | None = None
    acl: AccessControlList | None = None
    ownership: str = BUCKET_OWNER_ENFORCED
    public_access_block: PublicAccessBlock = field(default_factory=PublicAccessBlock)

    def __post_init__(self) -> None:
        assert self.ownership in OWNERSHIP_SETTINGS, self.ownership

    @property
    def acls_enabled(self) -> bool:
        return self.ownership != BUCKET_OWNER_ENFORCED


@dataclass(frozen=True, slots=True)
class ObjectState:
    owner: str
    acl: AccessControlList | None = None


@dataclass(frozen=True, slots=True)
class AccessRequest:
    """Everything one access is decided on. `bucket` is None for account-level actions
    and for CreateBucket; `obj` is the object the access names, when it exists."""

    requester: Requester
    access: Access
    context: ConditionContext
    bucket: BucketState | None = None
    obj: ObjectState | None = None
    account_block: PublicAccessBlock = field(default_factory=PublicAccessBlock)

    @property
    def block(self) -> PublicAccessBlock:
        """The public access block in force: the bucket's merged with the account's."""
        if self.bucket is None:
            return self.account_block
        return self.bucket.public_access_block.merged(self.account_block)


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    rule: str  # EXPLICIT_DENY, ADMIN, OWNER, ...
    source: str  # which policy, ACL or setting ("bucket policy", "identity policy ro", ...)
    statement: str  # the statement's Sid or Statement[i]; the ACL permission; "" for none
    action: str
    resource: str

    def describe(self) -> str:
        """One line for a person: "deny (explicit-deny): bucket policy, statement DenyAll"."""
        verdict = "allow" if self.allowed else "deny"
        where = f": {self.source}" if self.source else ""
        which = f", statement {self.statement}" if self.statement else ""
        return f"{verdict} ({self.rule}){where}{which}"

    def log_fields(self) -> dict[str, str]:
        return {
            "decision": "allow" if self.allowed else "deny",
            "rule": self.rule,
            "source": self.source,
            "statement": self.statement,
            "action": self.action,
            "resource": self.resource,
        }


def _decision(
    request: AccessRequest, allowed: bool, rule: str, source: str = "", statement: str = ""
) -> Decision:
    access = request.access
    return Decision(allowed, rule, source, statement, access.action, access.resource)


def _applying(request: AccessRequest, policy: Policy, allow: bool) -> Statement | None:
    """The first statement of `policy` with this effect that applies to the request."""
    access, context = request.access, request.context
    variables = policy.variables(context)
    for statement in policy.statements:
        if statement.allow != allow:
            continue
        if statement.applies(
            request.requester.user, access.action, access.resource, context, variables
        ):
            return statement
    return None


def _is_owner_or_admin(request: AccessRequest) -> bool:
    user, bucket = request.requester.user, request.bucket
    return request.requester.admin or (bucket is not None and user == bucket.owner)


def _explicit_deny(request: AccessRequest) -> Decision | None:
    for named in request.requester.policies:
        statement = _applying(request, named.policy, allow=False)
        if statement is not None:
            return _decision(
                request, False, EXPLICIT_DENY, f"identity policy {named.name}", statement.name
            )
    bucket = request.bucket
    if bucket is None or bucket.policy is None:
        return None
    if request.access.action in LOCKOUT_EXEMPT_ACTIONS and _is_owner_or_admin(request):
        return None
    statement = _applying(request, bucket.policy, allow=False)
    if statement is None:
        return None
    return _decision(request, False, EXPLICIT_DENY, "bucket policy", statement.name)


def _ownership(request: AccessRequest) -> Decision | None:
    user, bucket, obj = request.requester.user, request.bucket, request.obj
    if user is None:
        return None
    if bucket is None:
        if request.access.action in SELF_SERVICE_ACTIONS:
            return _decision(request, True, OWNER, "any user's own account")
        return None
    foreign_object = (
        bucket.acls_enabled and request.access.key and obj is not None and obj.owner != bucket.owner
    )
    if foreign_object:
        assert obj is not None
        if user == obj.owner:
            return _decision(request, True, OWNER, "object owner")
        if user == bucket.owner and request.access.action in BUCKET_OWNER_OBJECT_ACTIONS:
            return _decision(request, True, OWNER, "bucket owner")
        return None
    if user == bucket.owner:
        return _decision(request, True, OWNER, "bucket owner")
    return None


def _identity_allow(request: AccessRequest) -> Decision | None:
    for named in request.requester.policies:
        statement = _applying(request, named.policy, allow=True)
        if statement is not None:
            return _decision(
                request, True, IDENTITY_POLICY, f"identity policy {named.name}", statement.name
            )
    return None


def _bucket_policy_allow(request: AccessRequest) -> Decision | None:
    """The bucket policy's Allow, or the public access block's denial of one."""
    bucket = request.bucket
    if bucket is None or bucket.policy is None:
        return None
    statement = _applying(request, bucket.policy, allow=True)
    if statement is None:
        return None
    restricted = request.block.restrict_public_buckets and is_public_policy(bucket.policy)
    if restricted and request.requester.user is None:
        return _decision(
            request, False, PUBLIC_ACCESS_BLOCK, "RestrictPublicBuckets", statement.name
        )
    return _decision(request, True, BUCKET_POLICY, "bucket policy", statement.name)


def _acl_allow(request: AccessRequest) -> Decision | None:
    """An ACL grant's Allow, or the public access block's denial of one."""
    bucket, needed = request.bucket, acl_permission(request.access.action)
    if bucket is None or needed is None or not bucket.acls_enabled:
        return None
    whose, permission = needed
    if whose == BUCKET_ACL:
        acl, source = bucket.acl, "bucket ACL"
    else:
        acl, source = (request.obj.acl if request.obj else None), "object ACL"
    if acl is None:
        return None
    user, ignore = request.requester.user, request.block.ignore_public_acls
    if acl.allows(user, permission, ignore_public=ignore):
        return _decision(request, True, ACL, source, permission)
    if ignore and acl.allows(user, permission):
        return _decision(request, False, PUBLIC_ACCESS_BLOCK, "IgnorePublicAcls", permission)
    return None


def decide(request: AccessRequest) -> Decision:
    """The decision on one access (the order is the module docstring's)."""
    denial = _explicit_deny(request)
    if denial is not None:
        return denial
    if request.requester.admin:
        return _decision(request, True, ADMIN, "admin user")
    blocked: Decision | None = None
    for step in (_ownership, _identity_allow, _bucket_policy_allow, _acl_allow):
        found = step(request)
        if found is not None and found.allowed:
            return found
        blocked = blocked or found
    return blocked or _decision(request, False, IMPLICIT_DENY)


def combine(decisions: Sequence[Decision]) -> Decision:
    """A request's decision from its accesses' (in `required_accesses` order): the first
    denial, else the first (main) access's allow."""
    assert decisions, "a request decided on no access"
    return next((d for d in decisions if not d.allowed), decisions[0])
