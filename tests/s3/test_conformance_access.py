"""Authorization behaviours a conformance run of the S3 suite found apart from S3's,
against the real gateway: an ordinary user creating a bucket with an ACL, a missing key
read by a requester who may list it, s3:ExistingObjectTag conditions, an anonymous
upload naming an ACL in a bucket open to anonymous writes, the order of a canned ACL's
grants, and the gateway's default object ownership (BLOBSTORE_GATEWAY_OBJECT_OWNERSHIP).

`s3` is the cluster's admin and owns `bucket`; `other_s3` is an ordinary user with no
identity policy."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from botocore.exceptions import ClientError

from tests.cluster.gateway import GatewayProcess
from tests.s3.conftest import S3Cluster
from tests.s3.test_access_control import ALL_USERS, code_of, set_policy, statement
from tests.s3.test_post_object import post


def test_ordinary_user_creates_a_bucket_with_an_acl(
    other_s3: Any, bucket_name: Callable[[], str]
) -> None:
    name = bucket_name()
    other_s3.create_bucket(Bucket=name, ACL="public-read")
    grants = other_s3.get_bucket_acl(Bucket=name)["Grants"]
    assert {"Type": "Group", "URI": ALL_USERS} in [g["Grantee"] for g in grants]


def test_missing_key_is_no_such_key_to_who_may_list_it(s3: Any, other_s3: Any, bucket: str) -> None:
    set_policy(
        s3,
        bucket,
        statement(
            "Allow",
            "*",
            ["s3:ListBucket"],
            [f"arn:aws:s3:::{bucket}"],
            Condition={"StringLike": {"s3:prefix": "public/*"}},
        ),
    )
    # Listing under the key's name is allowed: the read of a missing key says so.
    assert code_of(lambda: other_s3.get_object(Bucket=bucket, Key="public/absent")) == ("NoSuchKey")
    assert code_of(lambda: other_s3.head_object(Bucket=bucket, Key="public/absent")) == "404"
    # Not allowed to list there: nothing is told about the key.
    assert code_of(lambda: other_s3.get_object(Bucket=bucket, Key="private/absent")) == (
        "AccessDenied"
    )
    assert code_of(lambda: other_s3.head_object(Bucket=bucket, Key="private/absent")) == "403"
    # A key that exists is still not readable by listing alone.
    s3.put_object(Bucket=bucket, Key="public/there", Body=b"x")
    assert code_of(lambda: other_s3.get_object(Bucket=bucket, Key="public/there")) == (
        "AccessDenied"
    )


def test_existing_object_tag_condition(s3: Any, other_s3: Any, bucket: str) -> None:
    for key, value in (("open", "public"), ("closed", "private")):
        s3.put_object(Bucket=bucket, Key=key, Body=key.encode(), Tagging=f"security={value}")
    s3.put_object(Bucket=bucket, Key="untagged", Body=b"u")
    set_policy(
        s3,
        bucket,
        statement(
            "Allow",
            "*",
            ["s3:GetObject", "s3:GetObjectTagging"],
            [f"arn:aws:s3:::{bucket}/*"],
            Condition={"StringEquals": {"s3:ExistingObjectTag/security": "public"}},
        ),
    )
    assert other_s3.get_object(Bucket=bucket, Key="open")["Body"].read() == b"open"
    assert other_s3.get_object_tagging(Bucket=bucket, Key="open")["TagSet"] == [
        {"Key": "security", "Value": "public"}
    ]
    for key in ("closed", "untagged"):
        with pytest.raises(ClientError) as denied:
            other_s3.get_object(Bucket=bucket, Key=key)
        assert denied.value.response["Error"]["Code"] == "AccessDenied", key


def test_anonymous_upload_with_an_acl_to_a_bucket_open_to_writes(
    s3: Any, gateway: GatewayProcess, bucket_name: Callable[[], str]
) -> None:
    name = bucket_name()
    s3.create_bucket(Bucket=name, ACL="public-read-write")
    url = f"{gateway.endpoint}/{name}"
    response = post(url, [("key", "dropped"), ("acl", "public-read")])
    assert response.status_code == 204, response.text
    assert s3.get_object(Bucket=name, Key="dropped")["Body"].read() == b"file body"
    assert httpx.get(f"{url}/dropped", timeout=30).content == b"file body"
    put = httpx.put(f"{url}/put", content=b"p", headers={"x-amz-acl": "public-read"}, timeout=30)
    assert put.status_code == 200, put.text
    # An explicit deny still denies the ACL.
    set_policy(
        s3,
        name,
        statement("Deny", "*", ["s3:PutObjectAcl"], [f"arn:aws:s3:::{name}/*"]),
    )
    denied = httpx.put(f"{url}/put", content=b"p", headers={"x-amz-acl": "public-read"}, timeout=30)
    assert denied.status_code == 403
    assert httpx.put(f"{url}/plain", content=b"p", timeout=30).status_code == 200
    # Without a WRITE grant to everyone, an anonymous upload is refused, ACL or not.
    s3.put_bucket_acl(Bucket=name, ACL="public-read")
    assert post(url, [("key", "again"), ("acl", "public-read")]).status_code == 403


def test_canned_acl_grants_list_groups_first(s3: Any, bucket_name: Callable[[], str]) -> None:
    name = bucket_name()
    s3.create_bucket(Bucket=name, ACL="public-read-write")
    grants = s3.get_bucket_acl(Bucket=name)["Grants"]
    assert [(g["Grantee"]["Type"], g["Permission"]) for g in grants] == [
        ("Group", "READ"),
        ("Group", "WRITE"),
        ("CanonicalUser", "FULL_CONTROL"),
    ]


@pytest.fixture(scope="module")
def object_writer_gateway(s3_cluster: S3Cluster) -> Iterator[GatewayProcess]:
    yield s3_cluster.start_gateway(
        "gateway-object-writer", env={"BLOBSTORE_GATEWAY_OBJECT_OWNERSHIP": "ObjectWriter"}
    )


def test_default_object_ownership_of_the_gateway(
    object_writer_gateway: GatewayProcess, s3: Any, bucket_name: Callable[[], str]
) -> None:
    client = object_writer_gateway.client()
    opened = bucket_name()
    client.create_bucket(Bucket=opened)
    rules = client.get_bucket_ownership_controls(Bucket=opened)["OwnershipControls"]["Rules"]
    assert rules == [{"ObjectOwnership": "ObjectWriter"}]
    client.put_bucket_acl(Bucket=opened, ACL="public-read")  # ACLs are enabled
    # Asked for, S3's default still holds; and the default gateway keeps S3's default.
    enforced = bucket_name()
    client.create_bucket(Bucket=enforced, ObjectOwnership="BucketOwnerEnforced")
    assert code_of(lambda: client.put_bucket_acl(Bucket=enforced, ACL="public-read")) == (
        "AccessControlListNotSupported"
    )
    plain = bucket_name()
    s3.create_bucket(Bucket=plain)
    rules = s3.get_bucket_ownership_controls(Bucket=plain)["OwnershipControls"]["Rules"]
    assert rules == [{"ObjectOwnership": "BucketOwnerEnforced"}]
