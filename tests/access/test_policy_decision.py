"""The authorization decision (blobstore/access/decision.py) and what S3 calls public
(blobstore/access/policy_public.py)."""

from __future__ import annotations

import json
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import given

from blobstore.access.acl import (
    ALL_USERS,
    AUTHENTICATED_USERS,
    READ,
    AccessControlList,
    Grant,
    canned_acl,
    group,
    user,
)
from blobstore.access.actions import Access, OperationRequest, required_accesses
from blobstore.access.conditions import ConditionContext
from blobstore.access.decision import (
    ACL,
    ADMIN,
    BUCKET_OWNER_ENFORCED,
    BUCKET_POLICY,
    EXPLICIT_DENY,
    IDENTITY_POLICY,
    IMPLICIT_DENY,
    OBJECT_WRITER,
    OWNER,
    PUBLIC_ACCESS_BLOCK,
    AccessRequest,
    BucketState,
    Decision,
    NamedPolicy,
    ObjectState,
    PublicAccessBlock,
    Requester,
    combine,
    decide,
    is_public_policy,
    refuses_acl,
    refuses_policy,
)
from blobstore.access.policy import Policy, parse_bucket_policy, parse_identity_policy
from blobstore.access.policy_context import RequestFacts, condition_context, context_of

B = "photos"
OWNER_NAME = "olivia"
ANONYMOUS = Requester()
ALICE = Requester("alice")
OLIVIA = Requester(OWNER_NAME)
ADMIN_USER = Requester("root", admin=True)
GET = Access("s3:GetObject", f"arn:aws:s3:::{B}/a.jpg", B, "a.jpg")
PUT = Access("s3:PutObject", f"arn:aws:s3:::{B}/a.jpg", B, "a.jpg")
LIST = Access("s3:ListBucket", f"arn:aws:s3:::{B}", B)
PUT_POLICY = Access("s3:PutBucketPolicy", f"arn:aws:s3:::{B}", B)
NO_BLOCK = PublicAccessBlock()
ALL_BLOCKED = PublicAccessBlock(True, True, True, True)


def rule(effect: str = "Allow", principal: Any = "*", **fields: Any) -> dict[str, Any]:
    statement = {
        "Effect": effect,
        "Principal": principal,
        "Action": "s3:GetObject",
        "Resource": f"arn:aws:s3:::{B}/*",
        **fields,
    }
    return {key: value for key, value in statement.items() if value is not None}


def bucket_policy(*statements: dict[str, Any]) -> Policy:
    return parse_bucket_policy(
        json.dumps({"Version": "2012-10-17", "Statement": list(statements)}), B
    )


def identity(name: str, *statements: dict[str, Any]) -> NamedPolicy:
    cleaned = [{**s, "Principal": None} for s in statements]
    text = json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [{k: v for k, v in s.items() if v is not None} for s in cleaned],
        }
    )
    return NamedPolicy(name, parse_identity_policy(text))


def user_with(*policies: NamedPolicy, name: str = "alice") -> Requester:
    return Requester(name, policies=policies)


def context(user: str | None = None, **keys: str) -> ConditionContext:
    return context_of({**({"aws:username": user} if user else {}), **keys})


def decision(
    requester: Requester,
    access: Access = GET,
    *,
    policy: Policy | None = None,
    bucket_acl: AccessControlList | None = None,
    obj: ObjectState | None = None,
    ownership: str = BUCKET_OWNER_ENFORCED,
    block: PublicAccessBlock = NO_BLOCK,
    account_block: PublicAccessBlock = NO_BLOCK,
    keys: ConditionContext | None = None,
) -> Decision:
    bucket = BucketState(OWNER_NAME, policy, bucket_acl, ownership, block)
    request = AccessRequest(
        requester,
        access,
        keys if keys is not None else context(requester.user),
        bucket,
        obj,
        account_block,
    )
    return decide(request)


# -- who may, with nothing granted --------------------------------------------------------


def test_the_owner_may_and_others_may_not_by_default() -> None:
    assert decision(OLIVIA).rule == OWNER and decision(OLIVIA).allowed
    for requester in (ALICE, ANONYMOUS):
        found = decision(requester)
        assert (found.allowed, found.rule) == (False, IMPLICIT_DENY)


def test_admins_may_do_anything_unless_explicitly_denied() -> None:
    assert (decision(ADMIN_USER, PUT_POLICY).allowed, decision(ADMIN_USER).rule) == (True, ADMIN)
    denied = decision(ADMIN_USER, policy=bucket_policy(rule("Deny", Sid="NoOne")))
    assert (denied.allowed, denied.rule, denied.statement) == (False, EXPLICIT_DENY, "NoOne")


def test_any_user_may_list_its_buckets_and_create_buckets_but_not_anonymous() -> None:
    for action in ("s3:ListAllMyBuckets", "s3:CreateBucket"):
        access = Access(action, "*" if action == "s3:ListAllMyBuckets" else f"arn:aws:s3:::{B}")
        assert decide(AccessRequest(ALICE, access, context("alice"))).allowed
        assert not decide(AccessRequest(ANONYMOUS, access, context())).allowed
    no_buckets = user_with(
        identity("no-create", rule("Deny", Action="s3:CreateBucket", Resource="*"))
    )
    refused = decide(
        AccessRequest(no_buckets, Access("s3:CreateBucket", "arn:aws:s3:::new"), context("alice"))
    )
    assert (refused.allowed, refused.source) == (False, "identity policy no-create")


# -- explicit deny wins -------------------------------------------------------------------


def test_a_bucket_policy_deny_beats_the_owner_an_identity_allow_and_an_acl() -> None:
    policy = bucket_policy(rule(), rule("Deny", Sid="Quarantine", Resource=f"arn:aws:s3:::{B}/a*"))
    reader = user_with(identity("reader", rule(Resource="*")))
    public = canned_acl("public-read", OWNER_NAME)
    for requester in (OLIVIA, reader, ALICE, ANONYMOUS):
        found = decision(
            requester, policy=policy, obj=ObjectState(OWNER_NAME, public), ownership=OBJECT_WRITER
        )
        assert (found.allowed, found.rule, found.source, found.statement) == (
            False,
            EXPLICIT_DENY,
            "bucket policy",
            "Quarantine",
        )


def test_an_identity_policy_deny_beats_ownership() -> None:
    limited = user_with(identity("no-get", rule("Deny", Resource="*")), name=OWNER_NAME)
    found = decision(limited)
    assert (found.allowed, found.source, found.statement) == (
        False,
        "identity policy no-get",
        "Statement[0]",
    )


def test_the_owner_can_always_manage_the_policy_that_denies_everything() -> None:
    policy = bucket_policy(
        rule("Deny", Action="s3:*", Resource=[f"arn:aws:s3:::{B}", f"arn:aws:s3:::{B}/*"])
    )
    assert decision(OLIVIA, PUT_POLICY, policy=policy).allowed
    assert not decision(OLIVIA, GET, policy=policy).allowed
    manager = user_with(identity("manage", rule(Action="s3:*", Resource="*")))
    assert not decision(manager, PUT_POLICY, policy=policy).allowed


STATEMENTS = st.lists(
    st.tuples(
        st.sampled_from(["Allow", "Deny"]), st.sampled_from(["*", {"AWS": "alice"}, {"AWS": "bob"}])
    ),
    max_size=6,
)


@given(STATEMENTS, STATEMENTS, st.randoms(use_true_random=False))
def test_explicit_deny_wins_for_any_order_of_statements(
    before: list[tuple[str, Any]], after: list[tuple[str, Any]], random: Any
) -> None:
    statements = [rule(effect, principal) for effect, principal in before + after]
    statements.append(rule("Deny", {"AWS": "alice"}, Sid="TheDeny"))
    random.shuffle(statements)
    reader = user_with(identity("reader", rule(Resource="*")))
    found = decision(reader, policy=bucket_policy(*statements))
    assert (found.allowed, found.rule) == (False, EXPLICIT_DENY)


@given(STATEMENTS.filter(bool), st.randoms(use_true_random=False))
def test_the_order_of_statements_never_changes_the_verdict(
    statements: list[tuple[str, Any]], random: Any
) -> None:
    documents = [rule(effect, principal) for effect, principal in statements]
    first = decision(ALICE, policy=bucket_policy(*documents)).allowed
    random.shuffle(documents)
    assert decision(ALICE, policy=bucket_policy(*documents)).allowed == first
    expected = any(
        e == "Allow" and p in ("*", {"AWS": "alice"}) for e, p in statements
    ) and not any(e == "Deny" and p in ("*", {"AWS": "alice"}) for e, p in statements)
    assert first == expected


# -- allow by policy ----------------------------------------------------------------------


def test_either_the_identity_policy_or_the_bucket_policy_allows_another_user() -> None:
    by_identity = decision(user_with(identity("photos-read", rule(Resource=f"arn:aws:s3:::{B}/*"))))
    assert (by_identity.allowed, by_identity.rule, by_identity.source) == (
        True,
        IDENTITY_POLICY,
        "identity policy photos-read",
    )
    by_bucket = decision(ALICE, policy=bucket_policy(rule(principal={"AWS": "alice"}, Sid="Alice")))
    assert (by_bucket.allowed, by_bucket.rule, by_bucket.statement) == (
        True,
        BUCKET_POLICY,
        "Alice",
    )
    assert not decision(
        Requester("bob"), policy=bucket_policy(rule(principal={"AWS": "alice"}))
    ).allowed


@pytest.mark.parametrize(
    ("access", "allowed"),
    [
        (GET, True),
        (Access("s3:GetObject", f"arn:aws:s3:::{B}/private/x", B, "private/x"), False),
        (PUT, False),
        (LIST, False),
        (Access("s3:GetObject", "arn:aws:s3:::other/a.jpg", "other", "a.jpg"), False),
    ],
)
def test_a_public_read_policy_allows_anonymous_reads_of_its_resources_only(
    access: Access, allowed: bool
) -> None:
    policy = bucket_policy(
        rule(Sid="PublicRead"),
        rule("Deny", Sid="Private", Resource=f"arn:aws:s3:::{B}/private/*"),
    )
    assert decision(ANONYMOUS, access, policy=policy).allowed is allowed


def test_the_account_principal_allows_users_but_not_anonymous() -> None:
    policy = bucket_policy(rule(principal={"AWS": "arn:aws:iam::000000000000:root"}))
    assert decision(ALICE, policy=policy).allowed
    assert not decision(ANONYMOUS, policy=policy).allowed


def test_conditions_decide_statements() -> None:
    policy = bucket_policy(
        rule(Sid="Office", Condition={"IpAddress": {"aws:SourceIp": "192.0.2.0/24"}}),
        rule("Deny", Sid="TlsOnly", Condition={"Bool": {"aws:SecureTransport": "false"}}),
    )
    office_tls = context(**{"aws:SourceIp": "192.0.2.9", "aws:SecureTransport": "true"})
    office_plain = context(**{"aws:SourceIp": "192.0.2.9", "aws:SecureTransport": "false"})
    home_tls = context(**{"aws:SourceIp": "198.51.100.1", "aws:SecureTransport": "true"})
    assert decision(ANONYMOUS, policy=policy, keys=office_tls).allowed
    assert decision(ANONYMOUS, policy=policy, keys=office_plain).statement == "TlsOnly"
    assert decision(ANONYMOUS, policy=policy, keys=home_tls).rule == IMPLICIT_DENY


def test_a_prefix_condition_limits_listing_to_a_users_home() -> None:
    home = identity(
        "home",
        rule(
            Action="s3:ListBucket",
            Resource=f"arn:aws:s3:::{B}",
            Condition={"StringLike": {"s3:prefix": ["home/${aws:username}/*"]}},
        ),
    )
    alice = user_with(home)

    def listing(prefix: str) -> bool:
        facts = RequestFacts(
            "alice", "192.0.2.1", True, 0.0, query={"prefix": prefix, "list-type": "2"}
        )
        return decision(alice, LIST, keys=condition_context(facts)).allowed

    assert listing("home/alice/")
    assert not listing("home/bob/")
    assert not listing("")


# -- allow by ACL -------------------------------------------------------------------------


def test_a_public_read_object_acl_allows_anonymous_reads_where_acls_are_enabled() -> None:
    public_object = ObjectState(OWNER_NAME, canned_acl("public-read", OWNER_NAME))
    found = decision(ANONYMOUS, obj=public_object, ownership=OBJECT_WRITER)
    assert (found.allowed, found.rule, found.source, found.statement) == (
        True,
        ACL,
        "object ACL",
        READ,
    )
    assert not decision(ANONYMOUS, obj=public_object, ownership=BUCKET_OWNER_ENFORCED).allowed


def test_bucket_acl_grants_decide_listing_and_writing() -> None:
    acl = AccessControlList(
        OWNER_NAME, (Grant(group(AUTHENTICATED_USERS), "WRITE"), Grant(group(ALL_USERS), READ))
    )
    assert decision(ANONYMOUS, LIST, bucket_acl=acl, ownership=OBJECT_WRITER).allowed
    assert decision(ALICE, PUT, bucket_acl=acl, ownership=OBJECT_WRITER).source == "bucket ACL"
    assert not decision(ANONYMOUS, PUT, bucket_acl=acl, ownership=OBJECT_WRITER).allowed


def test_an_object_another_user_wrote_is_its_owners() -> None:
    written = ObjectState("alice", canned_acl("private", "alice"))
    delete = Access("s3:DeleteObject", GET.resource, B, GET.key)
    assert decision(ALICE, obj=written, ownership=OBJECT_WRITER).source == "object owner"
    assert not decision(OLIVIA, obj=written, ownership=OBJECT_WRITER).allowed
    assert decision(OLIVIA, delete, obj=written, ownership=OBJECT_WRITER).source == "bucket owner"
    shared = ObjectState("alice", canned_acl("bucket-owner-read", "alice", OWNER_NAME))
    assert decision(OLIVIA, obj=shared, ownership=OBJECT_WRITER).rule == ACL
    assert decision(OLIVIA, obj=written, ownership=BUCKET_OWNER_ENFORCED).source == "bucket owner"


# -- the public access block --------------------------------------------------------------


def test_ignore_public_acls_drops_public_grants_and_says_so() -> None:
    acl = AccessControlList(
        OWNER_NAME,
        (
            Grant(group(ALL_USERS), READ),
            Grant(group(AUTHENTICATED_USERS), READ),
            Grant(group(ALL_USERS), READ),
        ),
    )
    public_object = ObjectState(OWNER_NAME, acl)
    block = PublicAccessBlock(ignore_public_acls=True)
    for requester in (ANONYMOUS, ALICE):
        found = decision(requester, obj=public_object, ownership=OBJECT_WRITER, block=block)
        assert (found.allowed, found.rule, found.source) == (
            False,
            PUBLIC_ACCESS_BLOCK,
            "IgnorePublicAcls",
        )
    alice_too = AccessControlList(OWNER_NAME, (*acl.grants, Grant(user("alice"), READ)))
    shared = ObjectState(OWNER_NAME, alice_too)
    assert decision(ALICE, obj=shared, ownership=OBJECT_WRITER, account_block=block).rule == ACL
    assert not decision(ANONYMOUS, obj=shared, ownership=OBJECT_WRITER, account_block=block).allowed


def test_restrict_public_buckets_keeps_a_public_policy_for_users_only() -> None:
    policy = bucket_policy(rule(Sid="PublicRead"))
    block = PublicAccessBlock(restrict_public_buckets=True)
    found = decision(ANONYMOUS, policy=policy, block=block)
    assert (found.allowed, found.rule, found.source, found.statement) == (
        False,
        PUBLIC_ACCESS_BLOCK,
        "RestrictPublicBuckets",
        "PublicRead",
    )
    assert decision(ALICE, policy=policy, block=block).allowed
    assert not decision(ANONYMOUS, policy=policy, account_block=block).allowed


def test_restrict_public_buckets_leaves_a_non_public_policy_alone() -> None:
    policy = bucket_policy(rule(Condition={"IpAddress": {"aws:SourceIp": "192.0.2.0/24"}}))
    keys = context(**{"aws:SourceIp": "192.0.2.5"})
    block = PublicAccessBlock(restrict_public_buckets=True)
    assert decision(ANONYMOUS, policy=policy, block=block, keys=keys).allowed


def test_the_whole_block_overrides_both_policy_and_acl_but_not_the_owner() -> None:
    policy = bucket_policy(rule())
    public_object = ObjectState(OWNER_NAME, canned_acl("public-read", OWNER_NAME))
    found = decision(
        ANONYMOUS, policy=policy, obj=public_object, ownership=OBJECT_WRITER, block=ALL_BLOCKED
    )
    assert (found.allowed, found.rule) == (False, PUBLIC_ACCESS_BLOCK)
    assert decision(
        OLIVIA, policy=policy, obj=public_object, ownership=OBJECT_WRITER, block=ALL_BLOCKED
    ).allowed
    without = decision(ANONYMOUS, policy=policy, obj=public_object, ownership=OBJECT_WRITER)
    assert without.allowed


def test_block_public_policy_and_acls_refuse_public_documents_only() -> None:
    public, private = bucket_policy(rule()), bucket_policy(rule(principal={"AWS": "alice"}))
    assert refuses_policy(ALL_BLOCKED, public) and not refuses_policy(ALL_BLOCKED, private)
    assert not refuses_policy(NO_BLOCK, public)
    public_grants = canned_acl("public-read", OWNER_NAME).grants
    assert refuses_acl(ALL_BLOCKED, public_grants) and not refuses_acl(NO_BLOCK, public_grants)
    assert not refuses_acl(ALL_BLOCKED, canned_acl("private", OWNER_NAME).grants)


def test_public_access_blocks_merge_and_read_back() -> None:
    bucket = PublicAccessBlock(block_public_acls=True)
    account = PublicAccessBlock(restrict_public_buckets=True)
    merged = bucket.merged(account)
    assert merged == PublicAccessBlock(True, False, False, True)
    assert merged.to_dict() == {
        "BlockPublicAcls": True,
        "IgnorePublicAcls": False,
        "BlockPublicPolicy": False,
        "RestrictPublicBuckets": True,
    }
    assert PublicAccessBlock.from_dict(merged.to_dict()) == merged
    assert PublicAccessBlock.from_dict({"BlockPublicPolicy": True}) == PublicAccessBlock(
        block_public_policy=True
    )
    with pytest.raises(ValueError):
        PublicAccessBlock.from_dict({"BlockEverything": True})


# -- what is public -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("statement", "public"),
    [
        (rule(), True),
        (rule(principal={"AWS": "*"}), True),
        (rule(principal={"AWS": ["alice", "*"]}), True),
        (rule(principal={"AWS": "alice"}), False),
        (rule(principal={"AWS": "000000000000"}), False),
        (rule(principal=None, NotPrincipal={"AWS": "alice"}), True),
        (rule("Deny"), False),
        (rule(Condition={"IpAddress": {"aws:SourceIp": "192.0.2.0/24"}}), False),
        (rule(Condition={"IpAddress": {"aws:SourceIp": ["192.0.2.0/24", "0.0.0.0/1"]}}), True),
        (rule(Condition={"IpAddress": {"aws:SourceIp": "2001:db8::/32"}}), False),
        (rule(Condition={"IpAddress": {"aws:SourceIp": "2001:db8::/16"}}), True),
        (rule(Condition={"NotIpAddress": {"aws:SourceIp": "192.0.2.0/24"}}), True),
        (rule(Condition={"StringEquals": {"aws:SourceAccount": "000000000000"}}), False),
        (rule(Condition={"StringLike": {"aws:SourceArn": "arn:aws:s3:::*"}}), True),
        (
            rule(
                Condition={"ArnEquals": {"aws:SourceArn": "arn:aws:sns:us-east-1:000000000000:t"}}
            ),
            False,
        ),
        (rule(Condition={"StringEqualsIfExists": {"aws:SourceVpce": "vpce-1"}}), True),
        (rule(Condition={"ForAllValues:StringEquals": {"aws:PrincipalOrgID": "o-1"}}), True),
        (rule(Condition={"StringEquals": {"aws:Referer": "https://example.com/"}}), True),
        (rule(Condition={"StringEquals": {"aws:userid": "alice"}}), False),
    ],
)
def test_is_public_policy_as_s3_defines_it(statement: dict[str, Any], public: bool) -> None:
    assert is_public_policy(bucket_policy(statement)) is public
    assert is_public_policy(bucket_policy(rule(principal={"AWS": "bob"}), statement)) is public


def test_no_policy_is_not_public() -> None:
    assert not is_public_policy(None)


# -- the record ---------------------------------------------------------------------------


def test_a_decision_describes_itself_for_the_access_log() -> None:
    found = decision(ANONYMOUS, policy=bucket_policy(rule("Deny", Sid="NoAnon")))
    assert found.describe() == "deny (explicit-deny): bucket policy, statement NoAnon"
    assert found.log_fields() == {
        "decision": "deny",
        "rule": EXPLICIT_DENY,
        "source": "bucket policy",
        "statement": "NoAnon",
        "action": "s3:GetObject",
        "resource": GET.resource,
    }
    assert decision(OLIVIA).describe() == "allow (owner): bucket owner"
    assert decision(ALICE).describe() == "deny (implicit-deny)"


def test_a_request_is_allowed_only_if_every_access_is() -> None:
    copy = required_accesses(
        OperationRequest(
            "CopyObject",
            bucket=B,
            key="copy.jpg",
            copy_source_bucket=B,
            copy_source_key="secret.jpg",
        )
    )
    policy = bucket_policy(
        rule(Action="s3:PutObject", principal={"AWS": "alice"}),
        rule(
            "Deny",
            principal={"AWS": "alice"},
            Sid="NoSecrets",
            Resource=f"arn:aws:s3:::{B}/secret*",
        ),
    )
    decisions = [decision(ALICE, access, policy=policy) for access in copy]
    assert [d.allowed for d in decisions] == [True, False]
    assert combine(decisions).statement == "NoSecrets"
    assert combine(decisions[:1]) == decisions[0]
