"""What S3 calls "public", and the public access block that limits it.

**A public policy** (`is_public_policy`, also GetBucketPolicyStatus's IsPublic) has an
Allow statement whose principal is a wildcard (`"*"`, `{"AWS": "*"}`, or any
NotPrincipal) and that no condition fixes. A condition fixes a statement when it holds
only for fixed values of one of these keys: aws:SourceArn, aws:SourceVpc,
aws:SourceVpce, aws:SourceAccount, aws:SourceOwner, aws:PrincipalOrgID,
aws:PrincipalAccount, aws:PrincipalArn, aws:userid, s3:DataAccessPointArn,
s3:DataAccessPointAccount (operator StringEquals, StringEqualsIgnoreCase, StringLike,
ArnEquals or ArnLike, without IfExists or ForAllValues, and values without wildcards
or variables), or aws:SourceIp with IpAddress and only ranges no wider than /8 (IPv4)
or /32 (IPv6): a wider range (0.0.0.0/1) is as good as none, as S3 judges.

**A public ACL** (`blobstore.access.acl.is_public_acl`) grants anything to AllUsers or
AuthenticatedUsers.

**The public access block** has four settings, each on for a bucket when its own block
or the account's (the cluster's) has it on (`PublicAccessBlock.merged`):
- BlockPublicAcls: a PutBucketAcl, PutObjectAcl, PutObject, CopyObject, CreateBucket or
  CreateMultipartUpload naming a public ACL is refused (`refuses_acl`).
- IgnorePublicAcls: grants to AllUsers and AuthenticatedUsers grant nothing.
- BlockPublicPolicy: a PutBucketPolicy of a public policy is refused (`refuses_policy`).
- RestrictPublicBuckets: while the bucket's policy is public, its Allow statements allow
  only users of the cluster (the account's principals): anonymous requests get nothing
  from it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass

from blobstore.access.acl import Grant, is_public_acl
from blobstore.access.conditions import Condition, normalize_key
from blobstore.access.policy import Policy, Statement
from blobstore.access.policy_match import has_wildcard

FIXING_KEYS = frozenset(
    normalize_key(key)
    for key in (
        "aws:SourceArn",
        "aws:SourceVpc",
        "aws:SourceVpce",
        "aws:SourceAccount",
        "aws:SourceOwner",
        "aws:PrincipalOrgID",
        "aws:PrincipalAccount",
        "aws:PrincipalArn",
        "aws:userid",
        "s3:DataAccessPointArn",
        "s3:DataAccessPointAccount",
    )
)
SOURCE_IP = normalize_key("aws:SourceIp")
_FIXING_OPERATORS = frozenset(
    {"StringEquals", "StringEqualsIgnoreCase", "StringLike", "ArnEquals", "ArnLike"}
)
IPV4_PREFIX_MIN = 8
IPV6_PREFIX_MIN = 32

_FIELDS = {
    "BlockPublicAcls": "block_public_acls",
    "IgnorePublicAcls": "ignore_public_acls",
    "BlockPublicPolicy": "block_public_policy",
    "RestrictPublicBuckets": "restrict_public_buckets",
}


@dataclass(frozen=True, slots=True)
class PublicAccessBlock:
    """One PublicAccessBlockConfiguration (all off: none set)."""

    block_public_acls: bool = False
    ignore_public_acls: bool = False
    block_public_policy: bool = False
    restrict_public_buckets: bool = False

    def merged(self, other: PublicAccessBlock) -> PublicAccessBlock:
        """The settings in force when both this block and `other` apply (each on if on
        in either: the bucket's and the account's)."""
        return PublicAccessBlock(
            self.block_public_acls or other.block_public_acls,
            self.ignore_public_acls or other.ignore_public_acls,
            self.block_public_policy or other.block_public_policy,
            self.restrict_public_buckets or other.restrict_public_buckets,
        )

    def to_dict(self) -> dict[str, bool]:
        """S3's names (those of the XML elements) -> settings."""
        return {name: bool(getattr(self, field)) for name, field in _FIELDS.items()}

    @classmethod
    def from_dict(cls, raw: Mapping[str, object]) -> PublicAccessBlock:
        """From S3's names; a name left out is off, as S3 reads the XML."""
        unknown = set(raw) - set(_FIELDS)
        if unknown:
            raise ValueError(f"not a public access block setting: {sorted(unknown)}")
        return cls(**{field: raw.get(name) is True for name, field in _FIELDS.items()})


def _narrow_network(value: str) -> bool:
    try:
        network = ipaddress.ip_network(value.strip(), strict=False)
    except ValueError:
        return False
    minimum = IPV4_PREFIX_MIN if network.version == 4 else IPV6_PREFIX_MIN
    return network.prefixlen >= minimum


def fixes_principal(condition: Condition) -> bool:
    """Whether the condition holds only for fixed values of a key that names who asks."""
    if condition.if_exists or condition.qualifier == "ForAllValues":
        return False
    if condition.key == SOURCE_IP:
        return condition.base == "IpAddress" and all(_narrow_network(v) for v in condition.values)
    if condition.key not in FIXING_KEYS or condition.base not in _FIXING_OPERATORS:
        return False
    return not any(has_wildcard(value) for value in condition.values)


def is_public_statement(statement: Statement) -> bool:
    if not statement.allow or statement.principals is None:
        return False
    wildcard = statement.not_principal or statement.principals.everyone
    return wildcard and not any(fixes_principal(c) for c in statement.conditions)


def is_public_policy(policy: Policy | None) -> bool:
    """S3's "public" for a bucket policy (GetBucketPolicyStatus's IsPublic)."""
    return policy is not None and any(is_public_statement(s) for s in policy.statements)


def refuses_policy(block: PublicAccessBlock, policy: Policy) -> bool:
    """Whether BlockPublicPolicy refuses this PutBucketPolicy (S3: AccessDenied)."""
    return block.block_public_policy and is_public_policy(policy)


def refuses_acl(block: PublicAccessBlock, grants: tuple[Grant, ...]) -> bool:
    """Whether BlockPublicAcls refuses a request setting these grants (S3: AccessDenied)."""
    return block.block_public_acls and is_public_acl(grants)
