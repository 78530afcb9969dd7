"""Authorization through a real gateway: bucket policies (actions, resources, principals,
conditions, explicit deny), anonymous access through a policy and through an ACL, the
public access block (bucket and account) overriding both, ownership controls, ACL
documents, presigned URLs and POST forms of other users, and the access log's record
of who asked and what was decided.

`s3` is the cluster's admin (its bootstrap user) and owns the buckets; `other_s3` and
`third_s3` are ordinary users with no identity policy."""

from __future__ import annotations

import asyncio
import json
import uuid
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from botocore.exceptions import ClientError

from blobstore.access.account import delete_account_block, put_account_block
from blobstore.access.policy_public import PublicAccessBlock
from blobstore.runtime.zk import ZooKeeperClient
from tests.cluster.gateway import GatewayProcess
from tests.s3.test_post_object import post
from tests.waiting import wait_until

OWNER = "test-access-key"  # the bootstrap user's name
ALL_USERS = "http://acs.amazonaws.com/groups/global/AllUsers"


def code_of(call: Callable[[], Any]) -> str:
    """The S3 error code of a call, or "OK"."""
    try:
        call()
    except ClientError as e:
        return str(e.response["Error"]["Code"])
    return "OK"


def set_policy(s3: Any, bucket: str, *statements: dict[str, Any]) -> None:
    document = {"Version": "2012-10-17", "Statement": list(statements)}
    s3.put_bucket_policy(Bucket=bucket, Policy=json.dumps(document))


def statement(
    effect: str, principal: Any, actions: list[str], resources: list[str], **extra: Any
) -> dict[str, Any]:
    return {
        "Effect": effect,
        "Principal": principal,
        "Action": actions,
        "Resource": resources,
        **extra,
    }


def anonymous_get(gateway: GatewayProcess, path: str) -> httpx.Response:
    return httpx.get(f"{gateway.endpoint}{path}", timeout=30)


def error_code(response: httpx.Response) -> str:
    return ElementTree.fromstring(response.content).findtext("Code") or ""


def run_zk(gateway: GatewayProcess, body: Callable[[ZooKeeperClient], Any]) -> None:
    async def main() -> None:
        zk = ZooKeeperClient(gateway.zk)
        await zk.start()
        try:
            await body(zk)
        finally:
            await zk.stop()

    asyncio.run(main())


@pytest.fixture
def filled(s3: Any, bucket: str) -> str:
    for key in ("public/a.txt", "private/b.txt", "home/other/c.txt"):
        s3.put_object(Bucket=bucket, Key=key, Body=key.encode())
    return bucket


# ---------------------------------------------------------------------- policies


def test_no_policy_means_only_the_owner(s3: Any, other_s3: Any, filled: str) -> None:
    assert code_of(lambda: other_s3.get_object(Bucket=filled, Key="public/a.txt")) == (
        "AccessDenied"
    )
    assert code_of(lambda: other_s3.list_objects_v2(Bucket=filled)) == "AccessDenied"
    assert code_of(lambda: s3.get_object(Bucket=filled, Key="public/a.txt")) == "OK"


def test_allow_by_action_resource_and_principal(
    s3: Any, other_s3: Any, third_s3: Any, filled: str
) -> None:
    set_policy(
        s3,
        filled,
        statement("Allow", {"AWS": "other"}, ["s3:GetObject"], [f"arn:aws:s3:::{filled}/public/*"]),
        statement(
            "Allow",
            {"AWS": "arn:aws:iam::000000000000:user/other"},
            ["s3:PutObject"],
            [f"arn:aws:s3:::{filled}/home/${{aws:username}}/*"],
        ),
    )
    assert other_s3.get_object(Bucket=filled, Key="public/a.txt")["Body"].read() == (
        b"public/a.txt"
    )
    # Another resource, another action, another principal: refused.
    assert code_of(lambda: other_s3.get_object(Bucket=filled, Key="private/b.txt")) == (
        "AccessDenied"
    )
    assert code_of(lambda: other_s3.delete_object(Bucket=filled, Key="public/a.txt")) == (
        "AccessDenied"
    )
    assert code_of(lambda: third_s3.get_object(Bucket=filled, Key="public/a.txt")) == (
        "AccessDenied"
    )
    # A policy variable: each user's own home.
    assert code_of(lambda: other_s3.put_object(Bucket=filled, Key="home/other/n", Body=b"x")) == (
        "OK"
    )
    assert code_of(lambda: other_s3.put_object(Bucket=filled, Key="home/third/n", Body=b"x")) == (
        "AccessDenied"
    )
    # The object another user wrote belongs to the bucket's owner (BucketOwnerEnforced).
    assert s3.get_object_acl(Bucket=filled, Key="home/other/n")["Owner"]["ID"] == OWNER


def test_explicit_deny_beats_an_allow(s3: Any, other_s3: Any, filled: str) -> None:
    set_policy(
        s3,
        filled,
        statement("Allow", "*", ["s3:GetObject"], [f"arn:aws:s3:::{filled}/*"]),
        statement(
            "Deny",
            {"AWS": "other"},
            ["s3:GetObject"],
            [f"arn:aws:s3:::{filled}/private/*"],
            Sid="NoPrivate",
        ),
    )
    assert code_of(lambda: other_s3.get_object(Bucket=filled, Key="public/a.txt")) == "OK"
    assert code_of(lambda: other_s3.get_object(Bucket=filled, Key="private/b.txt")) == (
        "AccessDenied"
    )
    # The owner is denied too, but may still change the policy (no lockout).
    set_policy(
        s3,
        filled,
        statement("Deny", "*", ["s3:*"], [f"arn:aws:s3:::{filled}", f"arn:aws:s3:::{filled}/*"]),
    )
    assert code_of(lambda: s3.get_object(Bucket=filled, Key="public/a.txt")) == "AccessDenied"
    s3.delete_bucket_policy(Bucket=filled)
    assert code_of(lambda: s3.get_object(Bucket=filled, Key="public/a.txt")) == "OK"


def test_conditions_source_ip_prefix_and_secure_transport(
    s3: Any, other_s3: Any, filled: str
) -> None:
    set_policy(
        s3,
        filled,
        statement(
            "Allow",
            {"AWS": "other"},
            ["s3:ListBucket"],
            [f"arn:aws:s3:::{filled}"],
            Condition={"StringLike": {"s3:prefix": "public/*"}},
        ),
        statement(
            "Allow",
            {"AWS": "other"},
            ["s3:GetObject"],
            [f"arn:aws:s3:::{filled}/public/*"],
            Condition={"IpAddress": {"aws:SourceIp": "127.0.0.0/8"}},
        ),
        statement(
            "Allow",
            {"AWS": "other"},
            ["s3:GetObject"],
            [f"arn:aws:s3:::{filled}/private/*"],
            Condition={"IpAddress": {"aws:SourceIp": "192.0.2.0/24"}},
        ),
        statement(
            "Allow",
            {"AWS": "other"},
            ["s3:GetObject"],
            [f"arn:aws:s3:::{filled}/home/*"],
            Condition={"Bool": {"aws:SecureTransport": "true"}},
        ),
    )
    listed = other_s3.list_objects_v2(Bucket=filled, Prefix="public/")
    assert [o["Key"] for o in listed["Contents"]] == ["public/a.txt"]
    assert code_of(lambda: other_s3.list_objects_v2(Bucket=filled, Prefix="private/")) == (
        "AccessDenied"
    )
    assert code_of(lambda: other_s3.list_objects_v2(Bucket=filled)) == "AccessDenied"
    assert code_of(lambda: other_s3.get_object(Bucket=filled, Key="public/a.txt")) == "OK"
    assert code_of(lambda: other_s3.get_object(Bucket=filled, Key="private/b.txt")) == (
        "AccessDenied"
    )
    # Plain HTTP here: not secure transport.
    assert code_of(lambda: other_s3.get_object(Bucket=filled, Key="home/other/c.txt")) == (
        "AccessDenied"
    )


def test_secure_transport_over_tls(s3: Any, tls_gateway: GatewayProcess, filled: str) -> None:
    from tests.s3.conftest import OTHER_ACCESS_KEY, OTHER_SECRET_KEY

    set_policy(
        s3,
        filled,
        statement(
            "Allow",
            {"AWS": "other"},
            ["s3:GetObject"],
            [f"arn:aws:s3:::{filled}/home/*"],
            Condition={"Bool": {"aws:SecureTransport": "true"}},
        ),
    )
    over_tls = tls_gateway.client(OTHER_ACCESS_KEY, OTHER_SECRET_KEY)
    body = over_tls.get_object(Bucket=filled, Key="home/other/c.txt")["Body"].read()
    assert body == b"home/other/c.txt"


def test_malformed_and_invalid_principal_policies(s3: Any, bucket: str) -> None:
    def put(text: str) -> tuple[str, str]:
        try:
            s3.put_bucket_policy(Bucket=bucket, Policy=text)
        except ClientError as e:
            return e.response["Error"]["Code"], e.response["Error"]["Message"]
        return "OK", ""

    assert put("not json")[0] == "MalformedPolicy"
    unknown = statement(
        "Allow", {"AWS": "nobody-here"}, ["s3:GetObject"], [f"arn:aws:s3:::{bucket}/*"]
    )
    assert put(json.dumps({"Statement": [unknown]})) == (
        "MalformedPolicy",
        "Invalid principal in policy",
    )
    wrong = statement("Allow", "*", ["s3:GetObject"], ["arn:aws:s3:::another-bucket/*"])
    assert put(json.dumps({"Statement": [wrong]}))[0] == "MalformedPolicy"
    assert code_of(lambda: s3.get_bucket_policy(Bucket=bucket)) == "NoSuchBucketPolicy"


def test_policy_round_trip_and_status(s3: Any, bucket: str) -> None:
    private = statement("Allow", {"AWS": "other"}, ["s3:GetObject"], [f"arn:aws:s3:::{bucket}/*"])
    text = json.dumps({"Version": "2012-10-17", "Statement": [private]})
    s3.put_bucket_policy(Bucket=bucket, Policy=text)
    assert s3.get_bucket_policy(Bucket=bucket)["Policy"] == text
    assert s3.get_bucket_policy_status(Bucket=bucket)["PolicyStatus"]["IsPublic"] is False
    set_policy(s3, bucket, statement("Allow", "*", ["s3:GetObject"], [f"arn:aws:s3:::{bucket}/*"]))
    assert s3.get_bucket_policy_status(Bucket=bucket)["PolicyStatus"]["IsPublic"] is True
    s3.delete_bucket_policy(Bucket=bucket)
    assert code_of(lambda: s3.get_bucket_policy_status(Bucket=bucket)) == "NoSuchBucketPolicy"


def test_presigned_url_of_a_user_a_policy_allows(
    s3: Any, other_s3: Any, third_s3: Any, filled: str
) -> None:
    set_policy(
        s3,
        filled,
        statement("Allow", {"AWS": "other"}, ["s3:GetObject"], [f"arn:aws:s3:::{filled}/public/*"]),
    )
    params = {"Bucket": filled, "Key": "public/a.txt"}
    allowed = other_s3.generate_presigned_url("get_object", Params=params, ExpiresIn=300)
    response = httpx.get(allowed, timeout=30)
    assert (response.status_code, response.content) == (200, b"public/a.txt")
    refused = third_s3.generate_presigned_url("get_object", Params=params, ExpiresIn=300)
    response = httpx.get(refused, timeout=30)
    assert (response.status_code, error_code(response)) == (403, "AccessDenied")


# ---------------------------------------------------------------------- anonymous


def test_anonymous_read_through_a_public_policy(
    s3: Any, gateway: GatewayProcess, filled: str
) -> None:
    response = anonymous_get(gateway, f"/{filled}/public/a.txt")
    assert (response.status_code, error_code(response)) == (403, "AccessDenied")
    set_policy(
        s3,
        filled,
        statement("Allow", "*", ["s3:GetObject"], [f"arn:aws:s3:::{filled}/public/*"]),
    )
    response = anonymous_get(gateway, f"/{filled}/public/a.txt")
    assert (response.status_code, response.content) == (200, b"public/a.txt")
    assert anonymous_get(gateway, f"/{filled}/private/b.txt").status_code == 403
    assert anonymous_get(gateway, f"/{filled}").status_code == 403  # no s3:ListBucket
    assert anonymous_get(gateway, "/").status_code == 403  # ListBuckets: users only
    # RestrictPublicBuckets: the public policy allows users of the cluster only.
    s3.put_public_access_block(
        Bucket=filled, PublicAccessBlockConfiguration={"RestrictPublicBuckets": True}
    )
    assert anonymous_get(gateway, f"/{filled}/public/a.txt").status_code == 403


def test_anonymous_read_through_a_public_read_acl(
    s3: Any, gateway: GatewayProcess, bucket_name: Callable[[], str]
) -> None:
    bucket = bucket_name()
    s3.create_bucket(Bucket=bucket, ACL="public-read")  # ACLs enabled: ObjectWriter
    ownership = s3.get_bucket_ownership_controls(Bucket=bucket)["OwnershipControls"]
    assert ownership["Rules"] == [{"ObjectOwnership": "ObjectWriter"}]
    s3.put_object(Bucket=bucket, Key="open", Body=b"open", ACL="public-read")
    s3.put_object(Bucket=bucket, Key="closed", Body=b"closed")
    response = anonymous_get(gateway, f"/{bucket}/open")
    assert (response.status_code, response.content) == (200, b"open")
    assert anonymous_get(gateway, f"/{bucket}/closed").status_code == 403
    assert anonymous_get(gateway, f"/{bucket}").status_code == 200  # bucket READ: listing
    # IgnorePublicAcls (the bucket's): the grants to AllUsers grant nothing.
    s3.put_public_access_block(
        Bucket=bucket, PublicAccessBlockConfiguration={"IgnorePublicAcls": True}
    )
    assert anonymous_get(gateway, f"/{bucket}/open").status_code == 403
    s3.delete_public_access_block(Bucket=bucket)
    assert anonymous_get(gateway, f"/{bucket}/open").status_code == 200
    # BlockPublicAcls: a public ACL is refused; a private one is not.
    s3.put_public_access_block(
        Bucket=bucket, PublicAccessBlockConfiguration={"BlockPublicAcls": True}
    )
    assert (
        code_of(lambda: s3.put_object(Bucket=bucket, Key="x", Body=b"x", ACL="public-read"))
        == "AccessDenied"
    )
    assert code_of(lambda: s3.put_object_acl(Bucket=bucket, Key="closed", ACL="public-read")) == (
        "AccessDenied"
    )
    assert code_of(lambda: s3.put_object_acl(Bucket=bucket, Key="open", ACL="private")) == "OK"
    assert anonymous_get(gateway, f"/{bucket}/open").status_code == 403


@pytest.fixture
def account_block(gateway: GatewayProcess) -> Iterator[Callable[[PublicAccessBlock], None]]:
    def put(block: PublicAccessBlock) -> None:
        run_zk(gateway, lambda zk: put_account_block(zk, block))

    yield put
    run_zk(gateway, delete_account_block)


def test_account_public_access_block_overrides_policy_and_acl(
    s3: Any,
    gateway: GatewayProcess,
    bucket_name: Callable[[], str],
    account_block: Callable[[PublicAccessBlock], None],
) -> None:
    by_policy = bucket_name()
    s3.create_bucket(Bucket=by_policy)
    s3.put_object(Bucket=by_policy, Key="k", Body=b"policy")
    set_policy(
        s3, by_policy, statement("Allow", "*", ["s3:GetObject"], [f"arn:aws:s3:::{by_policy}/*"])
    )
    by_acl = bucket_name()
    s3.create_bucket(Bucket=by_acl, ACL="public-read")
    s3.put_object(Bucket=by_acl, Key="k", Body=b"acl", ACL="public-read")
    assert anonymous_get(gateway, f"/{by_policy}/k").status_code == 200
    assert anonymous_get(gateway, f"/{by_acl}/k").status_code == 200
    account_block(
        PublicAccessBlock(
            ignore_public_acls=True, restrict_public_buckets=True, block_public_policy=True
        )
    )

    def both_refused() -> bool:
        codes = {anonymous_get(gateway, f"/{b}/k").status_code for b in (by_policy, by_acl)}
        return codes == {403}

    wait_until(both_refused, 10, message="the account's block reaches the gateway")
    # BlockPublicPolicy (the account's): a public policy is refused.
    public = statement("Allow", "*", ["s3:GetObject"], [f"arn:aws:s3:::{by_policy}/*"])
    assert code_of(lambda: set_policy(s3, by_policy, public)) == "AccessDenied"
    # The owner still reads.
    assert s3.get_object(Bucket=by_acl, Key="k")["Body"].read() == b"acl"


def test_block_public_policy_of_the_bucket(s3: Any, bucket: str) -> None:
    s3.put_public_access_block(
        Bucket=bucket, PublicAccessBlockConfiguration={"BlockPublicPolicy": True}
    )
    got = s3.get_public_access_block(Bucket=bucket)["PublicAccessBlockConfiguration"]
    assert got == {
        "BlockPublicAcls": False,
        "IgnorePublicAcls": False,
        "BlockPublicPolicy": True,
        "RestrictPublicBuckets": False,
    }
    public = statement("Allow", "*", ["s3:GetObject"], [f"arn:aws:s3:::{bucket}/*"])
    assert code_of(lambda: set_policy(s3, bucket, public)) == "AccessDenied"
    fixed = statement(
        "Allow",
        "*",
        ["s3:GetObject"],
        [f"arn:aws:s3:::{bucket}/*"],
        Condition={"IpAddress": {"aws:SourceIp": "10.1.2.0/24"}},
    )
    assert code_of(lambda: set_policy(s3, bucket, fixed)) == "OK"
    s3.delete_public_access_block(Bucket=bucket)
    assert code_of(lambda: s3.get_public_access_block(Bucket=bucket)) == (
        "NoSuchPublicAccessBlockConfiguration"
    )


def test_anonymous_post_object_allowed_by_a_policy(
    s3: Any, gateway: GatewayProcess, bucket: str
) -> None:
    url = f"{gateway.endpoint}/{bucket}"
    response = post(url, [("key", "dropbox/one")])
    assert response.status_code == 403
    set_policy(
        s3, bucket, statement("Allow", "*", ["s3:PutObject"], [f"arn:aws:s3:::{bucket}/dropbox/*"])
    )
    response = post(url, [("key", "dropbox/one")])
    assert response.status_code == 204, response.text
    assert s3.get_object(Bucket=bucket, Key="dropbox/one")["Body"].read() == b"file body"
    assert post(url, [("key", "elsewhere")]).status_code == 403


# ---------------------------------------------------------------------- ownership and ACLs


def test_ownership_controls_round_trip(s3: Any, bucket: str) -> None:
    def ownership() -> str:
        rules = s3.get_bucket_ownership_controls(Bucket=bucket)["OwnershipControls"]["Rules"]
        return str(rules[0]["ObjectOwnership"])

    assert ownership() == "BucketOwnerEnforced"
    assert code_of(lambda: s3.put_bucket_acl(Bucket=bucket, ACL="public-read")) == (
        "AccessControlListNotSupported"
    )
    for value in ("BucketOwnerPreferred", "ObjectWriter", "BucketOwnerEnforced"):
        s3.put_bucket_ownership_controls(
            Bucket=bucket, OwnershipControls={"Rules": [{"ObjectOwnership": value}]}
        )
        assert ownership() == value
    s3.delete_bucket_ownership_controls(Bucket=bucket)
    assert code_of(ownership) == "OwnershipControlsNotFoundError"


def test_create_bucket_acl_rules(s3: Any, bucket_name: Callable[[], str]) -> None:
    enforced = bucket_name()
    assert (
        code_of(
            lambda: s3.create_bucket(
                Bucket=enforced, ACL="public-read", ObjectOwnership="BucketOwnerEnforced"
            )
        )
        == "InvalidBucketAclWithObjectOwnership"
    )
    preferred = bucket_name()
    s3.create_bucket(Bucket=preferred, ObjectOwnership="BucketOwnerPreferred")
    rules = s3.get_bucket_ownership_controls(Bucket=preferred)["OwnershipControls"]["Rules"]
    assert rules == [{"ObjectOwnership": "BucketOwnerPreferred"}]
    plain = bucket_name()
    s3.create_bucket(Bucket=plain, ACL="private")  # the owner's own: ACLs stay disabled
    rules = s3.get_bucket_ownership_controls(Bucket=plain)["OwnershipControls"]["Rules"]
    assert rules == [{"ObjectOwnership": "BucketOwnerEnforced"}]


def test_acl_documents_round_trip(
    s3: Any, other_s3: Any, gateway: GatewayProcess, bucket_name: Callable[[], str]
) -> None:
    bucket = bucket_name()
    s3.create_bucket(Bucket=bucket, ObjectOwnership="ObjectWriter")
    grants = [
        {"Grantee": {"Type": "CanonicalUser", "ID": OWNER}, "Permission": "FULL_CONTROL"},
        {"Grantee": {"Type": "CanonicalUser", "ID": "other"}, "Permission": "WRITE"},
        {"Grantee": {"Type": "Group", "URI": ALL_USERS}, "Permission": "READ"},
    ]
    policy = {"Owner": {"ID": OWNER}, "Grants": grants}
    s3.put_bucket_acl(Bucket=bucket, AccessControlPolicy=policy)
    got = s3.get_bucket_acl(Bucket=bucket)
    assert got["Owner"]["ID"] == OWNER
    shown = [
        (g["Grantee"].get("ID") or g["Grantee"].get("URI"), g["Permission"]) for g in got["Grants"]
    ]
    assert shown == [(OWNER, "FULL_CONTROL"), ("other", "WRITE"), (ALL_USERS, "READ")]
    # WRITE on the bucket: another user writes; the object is its own (ObjectWriter).
    other_s3.put_object(Bucket=bucket, Key="by-other", Body=b"mine", GrantRead=f'id="{OWNER}"')
    acl = s3.get_object_acl(Bucket=bucket, Key="by-other")
    assert acl["Owner"]["ID"] == "other"
    # Grant headers are the ACL, as S3 keeps them (the owner's rights are its own).
    assert [(g["Grantee"].get("ID"), g["Permission"]) for g in acl["Grants"]] == [(OWNER, "READ")]
    assert s3.get_object(Bucket=bucket, Key="by-other")["Body"].read() == b"mine"
    # Unknown grantees and e-mail grantees are refused.
    assert (
        code_of(lambda: s3.put_bucket_acl(Bucket=bucket, GrantRead='id="nobody-here"'))
        == "InvalidArgument"
    )
    assert (
        code_of(lambda: s3.put_bucket_acl(Bucket=bucket, GrantRead='emailAddress="a@example.com"'))
        == "UnresolvableGrantByEmailAddress"
    )
    # Back to enforced: refused while the ACL grants others.
    enforce = {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}
    assert (
        code_of(lambda: s3.put_bucket_ownership_controls(Bucket=bucket, OwnershipControls=enforce))
        == "InvalidBucketAclWithObjectOwnership"
    )
    assert anonymous_get(gateway, f"/{bucket}").status_code == 200


# ---------------------------------------------------------------------- the access log


def test_access_log_names_the_principal_and_the_decision(
    s3: Any, other_s3: Any, gateway: GatewayProcess, bucket: str
) -> None:
    key = f"log-{uuid.uuid4().hex[:8]}"
    s3.put_object(Bucket=bucket, Key=key, Body=b"x")
    set_policy(
        s3,
        bucket,
        statement(
            "Allow",
            {"AWS": "other"},
            ["s3:GetObject"],
            [f"arn:aws:s3:::{bucket}/*"],
            Sid="OtherReads",
        ),
    )
    other_s3.get_object(Bucket=bucket, Key=key)
    assert code_of(lambda: other_s3.delete_object(Bucket=bucket, Key=key)) == "AccessDenied"
    anonymous_get(gateway, f"/{bucket}/{key}")
    path = f"/{bucket}/{key}"

    def lines() -> list[str]:
        return [
            line
            for line in gateway.log_text().splitlines()
            if "s3api.access:" in line and f"path={path} " in line
        ]

    def written() -> bool:
        return sum("operation=GetObject" in line for line in lines()) >= 2 and any(
            "operation=DeleteObject" in line for line in lines()
        )

    wait_until(written, 10, message="the access lines are written")
    text = "\n".join(lines())
    assert (
        "principal=other decision=allow rule=bucket-policy "
        'source="bucket policy" statement=OtherReads action=s3:GetObject'
    ) in text
    assert "status=403" in text
    assert "principal=other decision=deny rule=implicit-deny" in text
    assert "principal=anonymous decision=deny rule=implicit-deny" in text
    assert f"principal={OWNER} decision=allow rule=admin" in text
