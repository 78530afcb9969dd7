"""Access control lists: an owner and grants, as S3 keeps them on buckets and objects.

A grant gives one grantee one permission: READ, WRITE, READ_ACP, WRITE_ACP or
FULL_CONTROL. A grantee is a user, by canonical user id (which is the user's name in
this cluster, as in the `Owner/ID` of every listing), or a group:

    AllUsers            http://acs.amazonaws.com/groups/global/AllUsers  (anonymous too)
    AuthenticatedUsers  http://acs.amazonaws.com/groups/global/AuthenticatedUsers
    LogDelivery         http://acs.amazonaws.com/groups/s3/LogDelivery  (no request here)

What each permission allows (S3's "ACL permissions and access policy permissions"):

| permission | on a bucket | on an object |
|---|---|---|
| READ | s3:ListBucket, s3:ListBucketVersions, s3:ListBucketMultipartUploads | s3:GetObject, s3:GetObjectVersion, s3:GetObjectTorrent, s3:GetObject(Version)Attributes |
| WRITE | s3:PutObject, s3:DeleteObject on any key; s3:AbortMultipartUpload, s3:ListMultipartUploadParts | - |
| READ_ACP | s3:GetBucketAcl | s3:GetObjectAcl, s3:GetObjectVersionAcl |
| WRITE_ACP | s3:PutBucketAcl | s3:PutObjectAcl, s3:PutObjectVersionAcl |
| FULL_CONTROL | all of the above | all of the above |

The multipart actions under bucket WRITE stand in for S3's "the initiator may abort and
list its upload", as uploads here do not record their initiator. `acl_permission(action)`
tells which ACL (the bucket's or the object's) and which permission an action needs;
actions not in the table (policies, configurations, tags) are never granted by an ACL.

`canned_acl` turns a canned ACL name into grants; `header_grants` reads the
`x-amz-grant-*` headers (an `emailAddress` grantee is refused as S3 does where it does not
resolve e-mail addresses). `AccessControlList.to_dict/from_dict` give the JSON-able form
the catalog stores; the AccessControlPolicy XML belongs to the gateway.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

READ = "READ"
WRITE = "WRITE"
READ_ACP = "READ_ACP"
WRITE_ACP = "WRITE_ACP"
FULL_CONTROL = "FULL_CONTROL"
PERMISSIONS = (READ, WRITE, READ_ACP, WRITE_ACP, FULL_CONTROL)

ALL_USERS = "http://acs.amazonaws.com/groups/global/AllUsers"
AUTHENTICATED_USERS = "http://acs.amazonaws.com/groups/global/AuthenticatedUsers"
LOG_DELIVERY = "http://acs.amazonaws.com/groups/s3/LogDelivery"
GROUPS = (ALL_USERS, AUTHENTICATED_USERS, LOG_DELIVERY)
PUBLIC_GROUPS = frozenset({ALL_USERS, AUTHENTICATED_USERS})

CANONICAL_USER = "CanonicalUser"
GROUP = "Group"

CANNED_ACLS = (
    "private",
    "public-read",
    "public-read-write",
    "authenticated-read",
    "aws-exec-read",
    "bucket-owner-read",
    "bucket-owner-full-control",
    "log-delivery-write",
)
GRANT_HEADERS = {
    "x-amz-grant-read": READ,
    "x-amz-grant-write": WRITE,
    "x-amz-grant-read-acp": READ_ACP,
    "x-amz-grant-write-acp": WRITE_ACP,
    "x-amz-grant-full-control": FULL_CONTROL,
}

BUCKET_ACL = "bucket"
OBJECT_ACL = "object"
# action -> (whose ACL decides it, the permission it needs)
_ACL_ACTIONS: dict[str, tuple[str, str]] = {
    **{
        a: (BUCKET_ACL, READ)
        for a in ("s3:ListBucket", "s3:ListBucketVersions", "s3:ListBucketMultipartUploads")
    },
    **{
        a: (BUCKET_ACL, WRITE)
        for a in (
            "s3:PutObject",
            "s3:DeleteObject",
            "s3:AbortMultipartUpload",
            "s3:ListMultipartUploadParts",
        )
    },
    "s3:GetBucketAcl": (BUCKET_ACL, READ_ACP),
    "s3:PutBucketAcl": (BUCKET_ACL, WRITE_ACP),
    **{
        a: (OBJECT_ACL, READ)
        for a in (
            "s3:GetObject",
            "s3:GetObjectVersion",
            "s3:GetObjectTorrent",
            "s3:GetObjectAttributes",
            "s3:GetObjectVersionAttributes",
        )
    },
    "s3:GetObjectAcl": (OBJECT_ACL, READ_ACP),
    "s3:GetObjectVersionAcl": (OBJECT_ACL, READ_ACP),
    "s3:PutObjectAcl": (OBJECT_ACL, WRITE_ACP),
    "s3:PutObjectVersionAcl": (OBJECT_ACL, WRITE_ACP),
}


class AclError(ValueError):
    """An ACL request S3 would refuse: `code` and `message` are S3's."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class Grantee:
    kind: str  # CANONICAL_USER or GROUP
    identifier: str  # the canonical user id (the user's name) or the group's URI

    def __post_init__(self) -> None:
        assert self.kind in (CANONICAL_USER, GROUP), self.kind
        assert self.kind != GROUP or self.identifier in GROUPS, self.identifier

    def includes(self, user: str | None) -> bool:
        """Whether this grantee covers the requester (None: anonymous)."""
        if self.kind == CANONICAL_USER:
            return user is not None and user == self.identifier
        if self.identifier == ALL_USERS:
            return True
        return self.identifier == AUTHENTICATED_USERS and user is not None

    @property
    def is_public(self) -> bool:
        return self.kind == GROUP and self.identifier in PUBLIC_GROUPS


def user(name: str) -> Grantee:
    return Grantee(CANONICAL_USER, name)


def group(uri: str) -> Grantee:
    return Grantee(GROUP, uri)


@dataclass(frozen=True, slots=True)
class Grant:
    grantee: Grantee
    permission: str

    def __post_init__(self) -> None:
        assert self.permission in PERMISSIONS, self.permission

    def to_dict(self) -> dict[str, str]:
        return {
            "type": self.grantee.kind,
            "grantee": self.grantee.identifier,
            "permission": self.permission,
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Grant:
        kind, identifier, permission = raw["type"], raw["grantee"], raw["permission"]
        if kind not in (CANONICAL_USER, GROUP) or permission not in PERMISSIONS:
            raise ValueError(f"not a grant: {dict(raw)}")
        if kind == GROUP and identifier not in GROUPS:
            raise ValueError(f"not a group: {identifier}")
        return cls(Grantee(kind, identifier), permission)


@dataclass(frozen=True, slots=True)
class AccessControlList:
    """A bucket's or an object's ACL."""

    owner: str
    grants: tuple[Grant, ...]

    def allows(self, user: str | None, permission: str, *, ignore_public: bool = False) -> bool:
        """Whether a grant gives the requester `permission` (FULL_CONTROL gives all);
        `ignore_public` drops grants to AllUsers and AuthenticatedUsers (IgnorePublicAcls)."""
        return any(
            grant.permission in (permission, FULL_CONTROL)
            and grant.grantee.includes(user)
            and not (ignore_public and grant.grantee.is_public)
            for grant in self.grants
        )

    def to_dict(self) -> dict[str, Any]:
        return {"owner": self.owner, "grants": [grant.to_dict() for grant in self.grants]}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> AccessControlList:
        return cls(str(raw["owner"]), tuple(Grant.from_dict(grant) for grant in raw["grants"]))


def is_public_acl(grants: tuple[Grant, ...]) -> bool:
    """Whether any grant goes to AllUsers or AuthenticatedUsers (S3's "public" ACL)."""
    return any(grant.grantee.is_public for grant in grants)


def acl_permission(action: str) -> tuple[str, str] | None:
    """(BUCKET_ACL or OBJECT_ACL, permission) an ACL must grant for `action`; None when
    no ACL grants it."""
    return _ACL_ACTIONS.get(action)


def canned_acl(name: str, owner: str, bucket_owner: str = "") -> AccessControlList:
    """The ACL a canned ACL names, for a resource owned by `owner` (`bucket_owner` is the
    bucket's owner, for bucket-owner-read/-full-control on an object; on a bucket those
    two are `private`, as S3 treats them)."""
    owner_grant = Grant(user(owner), FULL_CONTROL)
    extra: tuple[Grant, ...]
    if name in ("private", "aws-exec-read"):
        extra = ()
    elif name == "public-read":
        extra = (Grant(group(ALL_USERS), READ),)
    elif name == "public-read-write":
        extra = (Grant(group(ALL_USERS), READ), Grant(group(ALL_USERS), WRITE))
    elif name == "authenticated-read":
        extra = (Grant(group(AUTHENTICATED_USERS), READ),)
    elif name in ("bucket-owner-read", "bucket-owner-full-control"):
        permission = READ if name == "bucket-owner-read" else FULL_CONTROL
        extra = (
            (Grant(user(bucket_owner), permission),)
            if bucket_owner and bucket_owner != owner
            else ()
        )
    elif name == "log-delivery-write":
        extra = (Grant(group(LOG_DELIVERY), WRITE), Grant(group(LOG_DELIVERY), READ_ACP))
    else:
        raise AclError("InvalidArgument", f"Invalid canned ACL: {name}")
    return AccessControlList(owner, (owner_grant, *extra))


_GRANTEE = re.compile(r'\s*(id|uri|emailAddress)\s*=\s*"?([^",]*)"?\s*', re.IGNORECASE)


def _grantee(text: str) -> Grantee:
    found = _GRANTEE.fullmatch(text)
    if found is None or not found.group(2):
        raise AclError("InvalidArgument", f"Invalid grantee: {text.strip()}")
    kind, value = found.group(1).lower(), found.group(2)
    if kind == "emailaddress":
        raise AclError(
            "UnresolvableGrantByEmailAddress",
            "The e-mail address you provided does not match any account on record.",
        )
    if kind == "uri":
        if value not in GROUPS:
            raise AclError("InvalidArgument", "Invalid group uri")
        return group(value)
    return user(value)


def header_grants(headers: Mapping[str, str]) -> tuple[Grant, ...]:
    """The grants of a request's `x-amz-grant-*` headers (lower-case names), each a
    comma-separated list of `id="..."`, `uri="..."`; AclError as S3 refuses them. Whether
    each id names a user is the caller's check (S3: InvalidArgument "Invalid id")."""
    grants: list[Grant] = []
    for header, permission in GRANT_HEADERS.items():
        value = headers.get(header)
        if value is None:
            continue
        grants.extend(Grant(_grantee(part), permission) for part in value.split(","))
    return tuple(grants)


def request_acl(
    headers: Mapping[str, str], owner: str, bucket_owner: str = ""
) -> AccessControlList | None:
    """The ACL a write's headers ask for (canned `x-amz-acl` or grant headers; None when
    neither is sent). S3 refuses both at once."""
    canned = headers.get("x-amz-acl")
    grants = header_grants(headers)
    if canned is not None and grants:
        raise AclError(
            "InvalidRequest", "Specifying both Canned ACLs and Header Grants is not allowed"
        )
    if canned is not None:
        return canned_acl(canned.strip(), owner, bucket_owner)
    if grants:
        return AccessControlList(owner, grants)
    return None
