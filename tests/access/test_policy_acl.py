"""The ACL model (blobstore/access/acl.py): canned ACLs, grant headers, what each
permission allows, the JSON form."""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis import given

from blobstore.access.acl import (
    ALL_USERS,
    AUTHENTICATED_USERS,
    BUCKET_ACL,
    CANNED_ACLS,
    FULL_CONTROL,
    LOG_DELIVERY,
    OBJECT_ACL,
    PERMISSIONS,
    READ,
    READ_ACP,
    WRITE,
    WRITE_ACP,
    AccessControlList,
    AclError,
    Grant,
    acl_permission,
    canned_acl,
    group,
    header_grants,
    is_public_acl,
    request_acl,
    user,
)
from blobstore.access.actions import S3_ACTIONS

# canned ACL -> grants beside the owner's FULL_CONTROL (object owned by "writer" in a
# bucket owned by "owner")
CANNED = {
    "private": set(),
    "public-read": {(group(ALL_USERS), READ)},
    "public-read-write": {(group(ALL_USERS), READ), (group(ALL_USERS), WRITE)},
    "authenticated-read": {(group(AUTHENTICATED_USERS), READ)},
    "aws-exec-read": set(),
    "bucket-owner-read": {(user("owner"), READ)},
    "bucket-owner-full-control": {(user("owner"), FULL_CONTROL)},
    "log-delivery-write": {(group(LOG_DELIVERY), WRITE), (group(LOG_DELIVERY), READ_ACP)},
}


@pytest.mark.parametrize("name", CANNED_ACLS)
def test_each_canned_acl_gives_the_owner_full_control_and_its_own_grants(name: str) -> None:
    acl = canned_acl(name, "writer", bucket_owner="owner")
    assert acl.owner == "writer"
    assert acl.grants[0] == Grant(user("writer"), FULL_CONTROL)
    assert {(g.grantee, g.permission) for g in acl.grants[1:]} == CANNED[name]


def test_bucket_owner_acls_add_nothing_when_the_owner_owns_the_bucket() -> None:
    for name in ("bucket-owner-read", "bucket-owner-full-control"):
        assert canned_acl(name, "owner", bucket_owner="owner") == canned_acl("private", "owner")
        assert canned_acl(name, "owner") == canned_acl("private", "owner")


def test_an_unknown_canned_acl_is_refused() -> None:
    with pytest.raises(AclError) as raised:
        canned_acl("public", "owner")
    assert raised.value.code == "InvalidArgument"


@pytest.mark.parametrize(
    ("name", "public"),
    [
        (name, name in ("public-read", "public-read-write", "authenticated-read"))
        for name in CANNED_ACLS
    ],
)
def test_public_acls_are_those_granting_all_or_authenticated_users(name: str, public: bool) -> None:
    assert is_public_acl(canned_acl(name, "writer", "owner").grants) is public


def test_grantees_cover_their_requesters() -> None:
    acl = AccessControlList(
        "owner",
        (
            Grant(user("alice"), READ),
            Grant(group(AUTHENTICATED_USERS), READ_ACP),
            Grant(group(ALL_USERS), WRITE_ACP),
            Grant(group(LOG_DELIVERY), WRITE),
        ),
    )
    assert acl.allows("alice", READ) and not acl.allows("bob", READ) and not acl.allows(None, READ)
    assert acl.allows("bob", READ_ACP) and not acl.allows(None, READ_ACP)
    assert acl.allows(None, WRITE_ACP) and acl.allows("bob", WRITE_ACP)
    assert not acl.allows("bob", WRITE) and not acl.allows(None, WRITE)


def test_full_control_gives_every_permission() -> None:
    acl = AccessControlList("owner", (Grant(user("alice"), FULL_CONTROL),))
    assert all(acl.allows("alice", permission) for permission in PERMISSIONS)


def test_ignoring_public_grants_keeps_user_grants() -> None:
    acl = AccessControlList("owner", (Grant(group(ALL_USERS), READ), Grant(user("alice"), READ)))
    assert acl.allows("alice", READ, ignore_public=True)
    assert not acl.allows("bob", READ, ignore_public=True)
    assert not acl.allows(None, READ, ignore_public=True)
    assert acl.allows(None, READ)


# -- what each permission allows ----------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "needed"),
    [
        ("s3:ListBucket", (BUCKET_ACL, READ)),
        ("s3:ListBucketVersions", (BUCKET_ACL, READ)),
        ("s3:ListBucketMultipartUploads", (BUCKET_ACL, READ)),
        ("s3:PutObject", (BUCKET_ACL, WRITE)),
        ("s3:DeleteObject", (BUCKET_ACL, WRITE)),
        ("s3:AbortMultipartUpload", (BUCKET_ACL, WRITE)),
        ("s3:GetBucketAcl", (BUCKET_ACL, READ_ACP)),
        ("s3:PutBucketAcl", (BUCKET_ACL, WRITE_ACP)),
        ("s3:GetObject", (OBJECT_ACL, READ)),
        ("s3:GetObjectVersion", (OBJECT_ACL, READ)),
        ("s3:GetObjectAcl", (OBJECT_ACL, READ_ACP)),
        ("s3:GetObjectVersionAcl", (OBJECT_ACL, READ_ACP)),
        ("s3:PutObjectAcl", (OBJECT_ACL, WRITE_ACP)),
        ("s3:PutObjectVersionAcl", (OBJECT_ACL, WRITE_ACP)),
        ("s3:PutBucketPolicy", None),
        ("s3:GetObjectTagging", None),
        ("s3:DeleteBucket", None),
        ("s3:DeleteObjectVersion", None),
    ],
)
def test_the_permission_each_action_needs(action: str, needed: tuple[str, str] | None) -> None:
    assert acl_permission(action) == needed


def test_every_action_an_acl_grants_is_an_s3_action() -> None:
    granted = [action for action in S3_ACTIONS if acl_permission(action) is not None]
    assert len(granted) == 18


# -- grant headers ------------------------------------------------------------------------


def test_grant_headers_become_grants() -> None:
    headers = {
        "x-amz-grant-read": f'id="alice", uri="{ALL_USERS}"',
        "x-amz-grant-full-control": "id=bob",
        "x-amz-grant-write-acp": f'uri="{AUTHENTICATED_USERS}"',
    }
    assert set(header_grants(headers)) == {
        Grant(user("alice"), READ),
        Grant(group(ALL_USERS), READ),
        Grant(user("bob"), FULL_CONTROL),
        Grant(group(AUTHENTICATED_USERS), WRITE_ACP),
    }


@pytest.mark.parametrize(
    ("value", "code"),
    [
        ('emailAddress="a@example.com"', "UnresolvableGrantByEmailAddress"),
        ('uri="http://acs.amazonaws.com/groups/global/Everyone"', "InvalidArgument"),
        ('name="alice"', "InvalidArgument"),
        ('id=""', "InvalidArgument"),
        ("", "InvalidArgument"),
    ],
)
def test_bad_grant_headers_are_refused_as_s3_does(value: str, code: str) -> None:
    with pytest.raises(AclError) as raised:
        header_grants({"x-amz-grant-read": value})
    assert raised.value.code == code


def test_a_request_acl_is_canned_or_granted_never_both() -> None:
    assert request_acl({}, "alice") is None
    assert request_acl({"x-amz-acl": "public-read"}, "alice") == canned_acl("public-read", "alice")
    granted = request_acl({"x-amz-grant-read": "id=bob"}, "alice")
    assert granted == AccessControlList("alice", (Grant(user("bob"), READ),))
    with pytest.raises(AclError) as raised:
        request_acl({"x-amz-acl": "private", "x-amz-grant-read": "id=bob"}, "alice")
    assert raised.value.code == "InvalidRequest"


# -- the stored form ----------------------------------------------------------------------

GRANTEES = st.one_of(
    st.sampled_from([group(ALL_USERS), group(AUTHENTICATED_USERS), group(LOG_DELIVERY)]),
    st.text("abcdefgh-", min_size=1, max_size=8).map(user),
)
GRANTS = st.builds(Grant, GRANTEES, st.sampled_from(PERMISSIONS))


@given(st.text("abc", min_size=1, max_size=5), st.lists(GRANTS, max_size=6))
def test_the_json_form_reads_back_the_same_acl(owner: str, grants: list[Grant]) -> None:
    acl = AccessControlList(owner, tuple(grants))
    assert AccessControlList.from_dict(acl.to_dict()) == acl


@pytest.mark.parametrize(
    "grant",
    [
        {"type": "Group", "grantee": "http://example.com/group", "permission": "READ"},
        {"type": "CanonicalUser", "grantee": "alice", "permission": "ALL"},
        {"type": "Email", "grantee": "a@example.com", "permission": "READ"},
    ],
)
def test_the_json_form_refuses_what_is_not_a_grant(grant: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        AccessControlList.from_dict({"owner": "alice", "grants": [grant]})
