"""ACLs where they are disabled (the default ownership) and the bucket settings nothing
here can change read as S3 reads their defaults (s3api/handlers/default_settings.py,
s3api/handlers/access.py), through a real gateway with boto3."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError


def _error(call: Any, **kwargs: Any) -> tuple[int, str]:
    with pytest.raises(ClientError) as e:
        call(**kwargs)
    response = e.value.response
    return response["ResponseMetadata"]["HTTPStatusCode"], response["Error"]["Code"]


def test_bucket_settings_read_as_unset(s3: Any, other_s3: Any, bucket: str) -> None:
    unset = {
        s3.get_bucket_policy: "NoSuchBucketPolicy",
        s3.get_bucket_policy_status: "NoSuchBucketPolicy",
        s3.get_bucket_website: "NoSuchWebsiteConfiguration",
        s3.get_bucket_replication: "ReplicationConfigurationNotFoundError",
        s3.get_object_lock_configuration: "ObjectLockConfigurationNotFoundError",
        s3.get_public_access_block: "NoSuchPublicAccessBlockConfiguration",
    }
    for call, code in unset.items():
        assert _error(call, Bucket=bucket) == (404, code), call
    assert "LoggingEnabled" not in s3.get_bucket_logging(Bucket=bucket)
    notifications = s3.get_bucket_notification_configuration(Bucket=bucket)
    assert not {"TopicConfigurations", "QueueConfigurations"} & set(notifications)
    assert "Status" not in s3.get_bucket_accelerate_configuration(Bucket=bucket)
    assert s3.get_bucket_request_payment(Bucket=bucket)["Payer"] == "BucketOwner"
    rules = s3.get_bucket_ownership_controls(Bucket=bucket)["OwnershipControls"]["Rules"]
    assert rules == [{"ObjectOwnership": "BucketOwnerEnforced"}]

    # Ownership first, as everywhere; an absent bucket is NoSuchBucket.
    assert _error(other_s3.get_bucket_policy, Bucket=bucket) == (403, "AccessDenied")
    assert _error(other_s3.get_bucket_logging, Bucket=bucket) == (403, "AccessDenied")
    assert _error(s3.get_bucket_website, Bucket="no-such-bucket-here") == (404, "NoSuchBucket")
    # Setting any of them is not implemented.
    assert _error(
        s3.put_bucket_request_payment,
        Bucket=bucket,
        RequestPaymentConfiguration={"Payer": "Requester"},
    ) == (501, "NotImplemented")
    assert _error(s3.delete_bucket_website, Bucket=bucket) == (501, "NotImplemented")


def test_acls_are_the_owners_alone(s3: Any, other_s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"v")
    owner = s3.list_buckets()["Owner"]
    for acl in (s3.get_bucket_acl(Bucket=bucket), s3.get_object_acl(Bucket=bucket, Key="k")):
        assert acl["Owner"] == owner
        (grant,) = acl["Grants"]
        assert grant["Permission"] == "FULL_CONTROL"
        assert grant["Grantee"] == {**owner, "Type": "CanonicalUser"}

    # The private ACL, by header or written out, is accepted; any other grant is not.
    s3.put_bucket_acl(Bucket=bucket, ACL="private")
    s3.put_object_acl(Bucket=bucket, Key="k", ACL="private")
    policy = s3.get_bucket_acl(Bucket=bucket)
    del policy["ResponseMetadata"]
    s3.put_bucket_acl(Bucket=bucket, AccessControlPolicy=policy)
    s3.put_object_acl(Bucket=bucket, Key="k", AccessControlPolicy=policy)
    public = {**policy, "Grants": policy["Grants"] + [{
        "Grantee": {"Type": "Group", "URI": "http://acs.amazonaws.com/groups/global/AllUsers"},
        "Permission": "READ",
    }]}  # fmt: skip
    refused = (400, "AccessControlListNotSupported")
    assert _error(s3.put_bucket_acl, Bucket=bucket, AccessControlPolicy=public) == refused
    assert _error(s3.put_object_acl, Bucket=bucket, Key="k", ACL="public-read") == refused
    assert _error(s3.put_bucket_acl, Bucket=bucket, GrantRead='id="someone"') == refused
    s3.put_object_acl(Bucket=bucket, Key="k", ACL="bucket-owner-full-control")
    assert _error(s3.put_bucket_acl, Bucket=bucket, ACL="private", GrantRead='id="x"') == (
        400,
        "InvalidRequest",
    )

    # The object must exist; other users are refused before anything is revealed.
    assert _error(s3.get_object_acl, Bucket=bucket, Key="absent") == (404, "NoSuchKey")
    assert _error(s3.put_object_acl, Bucket=bucket, Key="absent", ACL="private") == (
        404,
        "NoSuchKey",
    )
    assert _error(other_s3.get_bucket_acl, Bucket=bucket) == (403, "AccessDenied")
    assert _error(other_s3.get_object_acl, Bucket=bucket, Key="k") == (403, "AccessDenied")
    assert _error(other_s3.put_bucket_acl, Bucket=bucket, ACL="private") == (403, "AccessDenied")
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"v"


def test_object_acl_of_a_version(s3: Any, bucket: str) -> None:
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    first = s3.put_object(Bucket=bucket, Key="v", Body=b"1")["VersionId"]
    s3.put_object(Bucket=bucket, Key="v", Body=b"2")
    acl = s3.get_object_acl(Bucket=bucket, Key="v", VersionId=first)
    assert acl["Grants"][0]["Permission"] == "FULL_CONTROL"
    assert acl["ResponseMetadata"]["HTTPHeaders"]["x-amz-version-id"] == first
    s3.delete_object(Bucket=bucket, Key="v")  # a delete marker is now the latest
    assert _error(s3.get_object_acl, Bucket=bucket, Key="v")[0] == 404


def test_writes_naming_other_acls_are_refused(s3: Any, bucket: str, bucket_name: Any) -> None:
    """ACLs are disabled, as on S3 buckets with the default object ownership: a write that
    asks for a public or granted ACL is refused (not stored without it) and nothing is
    written; the owner-only canned ACLs are accepted."""
    refused = (400, "AccessControlListNotSupported")
    assert _error(s3.put_object, Bucket=bucket, Key="p", Body=b"x", ACL="public-read") == refused
    assert _error(
        s3.put_object, Bucket=bucket, Key="p", Body=b"x", GrantRead='uri="http://acs.amazonaws.com/groups/global/AllUsers"'
    ) == refused  # fmt: skip
    assert _error(s3.create_multipart_upload, Bucket=bucket, Key="p", ACL="public-read") == refused
    s3.put_object(Bucket=bucket, Key="src", Body=b"s")
    assert _error(
        s3.copy_object, Bucket=bucket, Key="p", CopySource={"Bucket": bucket, "Key": "src"},
        ACL="authenticated-read",
    ) == refused  # fmt: skip
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["src"]
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    for acl in ("private", "bucket-owner-full-control"):
        s3.put_object(Bucket=bucket, Key=f"ok-{acl}", Body=b"x", ACL=acl)

    name = bucket_name()
    # Asked for with BucketOwnerEnforced, a public ACL is refused; without
    # x-amz-object-ownership it makes a bucket with ACLs enabled (test_access_control).
    enforced = {"ObjectOwnership": "BucketOwnerEnforced"}
    assert _error(s3.create_bucket, Bucket=name, ACL="public-read", **enforced) == (
        400,
        "InvalidBucketAclWithObjectOwnership",
    )
    assert name not in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    s3.create_bucket(Bucket=name, ACL="private")


def test_acls_can_be_ignored(s3_cluster: Any, bucket: str) -> None:
    """BLOBSTORE_GATEWAY_ACLS=ignore, for applications that always send a public ACL:
    the write is stored and the ACL dropped (it still reads as the owner's alone); any
    other value is refused at start with one clear line."""
    lenient = s3_cluster.start_gateway("gateway-acls", env={"BLOBSTORE_GATEWAY_ACLS": "ignore"})
    client = lenient.client()
    client.put_object(Bucket=bucket, Key="public", Body=b"p", ACL="public-read")
    client.put_bucket_acl(Bucket=bucket, ACL="public-read-write")
    client.put_object_acl(Bucket=bucket, Key="public", GrantRead='id="someone"')
    (grant,) = client.get_object_acl(Bucket=bucket, Key="public")["Grants"]
    assert grant["Permission"] == "FULL_CONTROL"
    assert client.get_object(Bucket=bucket, Key="public")["Body"].read() == b"p"
    lenient.stop()
    with pytest.raises(Exception) as e:
        s3_cluster.start_gateway("gateway-acls-bad", env={"BLOBSTORE_GATEWAY_ACLS": "maybe"})
    assert "BLOBSTORE_GATEWAY_ACLS='maybe': must be refuse or ignore" in str(e.value)
