"""The gateway's side of authorization: the state `blobstore.access.decision` decides on,
read from where the gateway keeps it, and kept parsed so a request pays for no parse.

Where the state lives:
- a bucket's policy (its text), public access block, object ownership and ACL: in its
  record's `settings` (`POLICY`, `PUBLIC_ACCESS_BLOCK`, `OWNERSHIP`, `ACL`), written by
  the handlers of Put/Delete*, read from the catalog's watched cache of bucket records;
- an object's ACL: in its record's `system_metadata` under `OBJECT_ACL` (JSON; never
  answered as a header), its owner in the record's `owner`;
- the account's public access block: `blobstore.access.account` (watched);
- a user's identity policies: `s3api.identities` (watched).

`Authorizer` holds what is parsed: the requester (its identity policies parsed once per
change of the users' view) and each bucket's state (parsed once per version of its
record: the catalog hands out the same record object while the znode is unchanged).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping

from blobstore.access.account import AccountBlockView
from blobstore.access.acl import (
    CANONICAL_USER,
    GRANT_HEADERS,
    GROUP,
    AccessControlList,
    AclError,
    request_acl,
)
from blobstore.access.decision import (
    BUCKET_OWNER_ENFORCED,
    BUCKET_OWNER_PREFERRED,
    OBJECT_WRITER,
    BucketState,
    NamedPolicy,
    ObjectState,
    PublicAccessBlock,
    Requester,
    refuses_acl,
)
from blobstore.access.policy import Policy, parse_bucket_policy, parse_identity_policy
from blobstore.access.policy_errors import MalformedPolicy
from blobstore.access.user_records import ADMIN_POLICY
from blobstore.catalog.records import BucketRecord, ObjectRecord
from s3api.errors import S3Error
from s3api.identities import Identities, Identity

logger = logging.getLogger(__name__)

# Keys of BucketRecord.settings.
POLICY = "policy"  # the policy's text, as PutBucketPolicy sent it
PUBLIC_ACCESS_BLOCK = "public_access_block"  # S3's four names -> bool
OWNERSHIP = "ownership"  # absent: BucketOwnerEnforced; null: deleted (ObjectWriter, as S3)
ACL = "acl"  # AccessControlList.to_dict(); absent: the owner's FULL_CONTROL alone
# The key of ObjectRecord.system_metadata holding the object's ACL (JSON).
OBJECT_ACL = "x-blobstore-acl"

BUCKET_STATES_MAX = 4096  # parsed bucket states kept (all dropped past it)
ANONYMOUS = Requester()


def bucket_policy_text(record: BucketRecord) -> str | None:
    text = record.settings.get(POLICY)
    return text if isinstance(text, str) else None


def bucket_block(record: BucketRecord) -> PublicAccessBlock | None:
    """The bucket's own public access block; None when none is set."""
    raw = record.settings.get(PUBLIC_ACCESS_BLOCK)
    return PublicAccessBlock.from_dict(raw) if isinstance(raw, dict) else None


def bucket_ownership(record: BucketRecord) -> str:
    """The bucket's object ownership: BucketOwnerEnforced unless set, and ObjectWriter
    once its ownership controls are deleted (S3's behaviour without them)."""
    if OWNERSHIP not in record.settings:
        return BUCKET_OWNER_ENFORCED
    value = record.settings[OWNERSHIP]
    return value if isinstance(value, str) else OBJECT_WRITER


def bucket_acl(record: BucketRecord) -> AccessControlList | None:
    raw = record.settings.get(ACL)
    return AccessControlList.from_dict(raw) if isinstance(raw, dict) else None


def object_acl(record: ObjectRecord) -> AccessControlList | None:
    text = record.system_metadata.get(OBJECT_ACL)
    return AccessControlList.from_dict(json.loads(text)) if text else None


def object_acl_metadata(acl: AccessControlList | None) -> dict[str, str]:
    """The system metadata entry storing an object's ACL (none for no ACL)."""
    return {} if acl is None else {OBJECT_ACL: json.dumps(acl.to_dict(), separators=(",", ":"))}


def object_owner(record: BucketRecord, writer: str | None, canned_acl: str | None) -> str:
    """Who owns an object `writer` writes (None: anonymous), by the bucket's ownership:
    the bucket's owner under BucketOwnerEnforced, and for anonymous writes; the writer
    under ObjectWriter; under BucketOwnerPreferred the bucket's owner when the write
    says bucket-owner-full-control, else the writer."""
    ownership = bucket_ownership(record)
    if writer is None or ownership == BUCKET_OWNER_ENFORCED:
        return record.owner
    if ownership == BUCKET_OWNER_PREFERRED and canned_acl == "bucket-owner-full-control":
        return record.owner
    assert ownership in (OBJECT_WRITER, BUCKET_OWNER_PREFERRED), ownership
    return writer


def object_state(bucket: BucketRecord, record: ObjectRecord | None) -> ObjectState | None:
    if record is None or record.is_delete_marker:
        return None
    return ObjectState(record.owner or bucket.owner, object_acl(record))


class Authorizer:
    """The parsed state of requesters and buckets, for `S3Context.decide`."""

    def __init__(
        self, identities: Identities, account: AccountBlockView, bootstrap_names: frozenset[str]
    ) -> None:
        self.identities = identities
        self.account = account
        self.bootstrap_names = bootstrap_names  # the users the gateway was started with
        self._requesters: dict[tuple[str, tuple[str, ...]], tuple[int, Requester]] = {}
        self._policies: dict[str, tuple[str, NamedPolicy | None]] = {}
        self._buckets: dict[str, tuple[BucketRecord, BucketState]] = {}

    @property
    def account_block(self) -> PublicAccessBlock:
        return self.account.block

    def knows_user(self, name: str) -> bool:
        """Whether `name` is a user of the cluster (a policy may name only those)."""
        return name in self.bootstrap_names or self.identities.directory.user(name) is not None

    def requester(self, user: Identity | None) -> Requester:
        if user is None:
            return ANONYMOUS
        generation = self.identities.directory.generation
        key = (user.name, user.policies)
        cached = self._requesters.get(key)
        if cached is not None and cached[0] == generation:
            return cached[1]
        admin = user.bootstrap or ADMIN_POLICY in user.policies
        policies = () if admin else tuple(self._named_policies(user.policies))
        requester = Requester(user.name, admin, policies)
        if len(self._requesters) >= BUCKET_STATES_MAX:
            self._requesters.clear()
        self._requesters[key] = (generation, requester)
        return requester

    def _named_policies(self, names: tuple[str, ...]) -> list[NamedPolicy]:
        found = []
        for name in names:
            text = self.identities.policy_document(name)
            if text is None:
                continue
            cached = self._policies.get(name)
            if cached is None or cached[0] != text:
                cached = (text, _identity_policy(name, text))
                self._policies[name] = cached
            if cached[1] is not None:
                found.append(cached[1])
        return found

    def bucket_state(self, record: BucketRecord) -> BucketState:
        cached = self._buckets.get(record.name)
        if cached is not None and cached[0] is record:
            return cached[1]
        state = BucketState(
            owner=record.owner,
            policy=_stored_bucket_policy(record),
            acl=bucket_acl(record),
            ownership=bucket_ownership(record),
            public_access_block=bucket_block(record) or PublicAccessBlock(),
        )
        if len(self._buckets) >= BUCKET_STATES_MAX:
            self._buckets.clear()
        self._buckets[record.name] = (record, state)
        return state


def _identity_policy(name: str, text: str) -> NamedPolicy | None:
    try:
        return NamedPolicy(name, parse_identity_policy(text))
    except MalformedPolicy as e:
        logger.error("event=identity_policy_unreadable policy=%s error=%s", name, e.message)
        return None


def _stored_bucket_policy(record: BucketRecord) -> Policy | None:
    text = bucket_policy_text(record)
    if text is None:
        return None
    try:
        return parse_bucket_policy(text, record.name)
    except MalformedPolicy as e:  # accepted when stored: a rule changed since
        logger.error("event=bucket_policy_unreadable bucket=%s error=%s", record.name, e.message)
        return None


# ---------------------------------------------------------------------- ACLs of writes


# Canned ACLs that say only what ACLs disabled mean: the owner's full control.
OWNER_ONLY_ACLS = frozenset({"private", "bucket-owner-full-control"})


def acls_enabled(record: BucketRecord) -> bool:
    return bucket_ownership(record) != BUCKET_OWNER_ENFORCED


def names_acl(headers: Mapping[str, str]) -> bool:
    return "x-amz-acl" in headers or any(name in headers for name in GRANT_HEADERS)


def names_foreign_acl(headers: Mapping[str, str]) -> bool:
    """Whether the headers ask for more than the owner's full control."""
    canned = headers.get("x-amz-acl")
    foreign_canned = canned is not None and canned.strip() not in OWNER_ONLY_ACLS
    return foreign_canned or any(name in headers for name in GRANT_HEADERS)


def requested_acl(
    headers: Mapping[str, str], owner: str, bucket_owner: str = ""
) -> AccessControlList | None:
    """The ACL of x-amz-acl or x-amz-grant-* (None: neither), S3's errors as S3Error.
    A canned ACL lists its groups' grants before the owner's, the order S3 clients and
    conformance suites written against other S3 servers read (a document put as
    AccessControlPolicy keeps its own order)."""
    try:
        acl = request_acl(headers, owner, bucket_owner)
    except AclError as e:
        raise S3Error(e.code, e.message) from None
    if acl is None or "x-amz-acl" not in headers:
        return acl
    ordered = sorted(acl.grants, key=lambda grant: grant.grantee.kind != GROUP)
    return dataclasses.replace(acl, grants=tuple(ordered))


def check_grants(acl: AccessControlList, authorizer: Authorizer, block: PublicAccessBlock) -> None:
    """A new ACL's grantees must be users (InvalidArgument "Invalid id"), and it must
    not be public under BlockPublicAcls (AccessDenied)."""
    for grant in acl.grants:
        grantee = grant.grantee
        if grantee.kind == CANONICAL_USER and not authorizer.knows_user(grantee.identifier):
            raise S3Error("InvalidArgument", "Invalid id", ArgumentName="CanonicalUser/ID")
    if refuses_acl(block, acl.grants):
        raise S3Error("AccessDenied", "Access Denied: BlockPublicAcls is on")


def effective_block(record: BucketRecord, authorizer: Authorizer) -> PublicAccessBlock:
    own = bucket_block(record) or PublicAccessBlock()
    return own.merged(authorizer.account_block)


def written_object(
    headers: Mapping[str, str],
    writer: str | None,
    record: BucketRecord,
    authorizer: Authorizer,
    ignore_acls: bool,
) -> tuple[str, dict[str, str]]:
    """(owner, system metadata holding its ACL) of an object a write creates in the
    bucket of `record`. With ACLs disabled, an ACL beyond the owner's full control is
    refused as S3 refuses it (AccessControlListNotSupported), rather than ignored, unless
    the gateway ignores ACLs (`ignore_acls`); with ACLs enabled, it is the object's."""
    canned = headers.get("x-amz-acl")
    owner = object_owner(record, writer, canned.strip() if canned else None)
    if not acls_enabled(record):
        if names_foreign_acl(headers) and not ignore_acls:
            raise S3Error("AccessControlListNotSupported")
        return owner, {}
    acl = requested_acl(headers, owner, record.owner)
    if acl is None:
        return owner, {}
    check_grants(acl, authorizer, effective_block(record, authorizer))
    return owner, object_acl_metadata(acl)
