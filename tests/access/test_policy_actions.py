"""What each S3 operation asks permission for (blobstore/access/actions.py)."""

from __future__ import annotations

import pytest

from blobstore.access.actions import (
    ALL_RESOURCES,
    NO_ACCESS_OPERATIONS,
    S3_ACTIONS,
    Access,
    OperationRequest,
    UnknownOperation,
    known_operations,
    required_accesses,
)
from s3api.handlers import HANDLERS

B, K = "photos", "a/b.jpg"
BUCKET = f"arn:aws:s3:::{B}"
OBJECT = f"arn:aws:s3:::{B}/{K}"

# operation -> (action without versionId, with one); resource bucket- or object-level
CASES = [
    ("ListBuckets", "s3:ListAllMyBuckets", ALL_RESOURCES),
    ("CreateBucket", "s3:CreateBucket", BUCKET),
    ("HeadBucket", "s3:ListBucket", BUCKET),
    ("DeleteBucket", "s3:DeleteBucket", BUCKET),
    ("ListObjects", "s3:ListBucket", BUCKET),
    ("ListObjectsV2", "s3:ListBucket", BUCKET),
    ("ListObjectVersions", "s3:ListBucketVersions", BUCKET),
    ("ListMultipartUploads", "s3:ListBucketMultipartUploads", BUCKET),
    ("GetBucketLocation", "s3:GetBucketLocation", BUCKET),
    ("DeleteBucketCors", "s3:PutBucketCORS", BUCKET),
    ("DeleteBucketLifecycle", "s3:PutLifecycleConfiguration", BUCKET),
    ("DeleteBucketTagging", "s3:PutBucketTagging", BUCKET),
    ("GetBucketPolicy", "s3:GetBucketPolicy", BUCKET),
    ("PutBucketPolicy", "s3:PutBucketPolicy", BUCKET),
    ("DeleteBucketPolicy", "s3:DeleteBucketPolicy", BUCKET),
    ("GetBucketPolicyStatus", "s3:GetBucketPolicyStatus", BUCKET),
    ("GetPublicAccessBlock", "s3:GetBucketPublicAccessBlock", BUCKET),
    ("PutPublicAccessBlock", "s3:PutBucketPublicAccessBlock", BUCKET),
    ("DeletePublicAccessBlock", "s3:PutBucketPublicAccessBlock", BUCKET),
    ("GetBucketOwnershipControls", "s3:GetBucketOwnershipControls", BUCKET),
    ("PutBucketOwnershipControls", "s3:PutBucketOwnershipControls", BUCKET),
    ("DeleteBucketOwnershipControls", "s3:PutBucketOwnershipControls", BUCKET),
    ("GetBucketAcl", "s3:GetBucketAcl", BUCKET),
    ("PutBucketAcl", "s3:PutBucketAcl", BUCKET),
    ("PutObject", "s3:PutObject", OBJECT),
    ("PostObject", "s3:PutObject", OBJECT),
    ("UploadPart", "s3:PutObject", OBJECT),
    ("CreateMultipartUpload", "s3:PutObject", OBJECT),
    ("CompleteMultipartUpload", "s3:PutObject", OBJECT),
    ("AbortMultipartUpload", "s3:AbortMultipartUpload", OBJECT),
    ("ListParts", "s3:ListMultipartUploadParts", OBJECT),
    ("GetObject", "s3:GetObject", OBJECT),
    ("HeadObject", "s3:GetObject", OBJECT),
    ("DeleteObject", "s3:DeleteObject", OBJECT),
    ("GetObjectTagging", "s3:GetObjectTagging", OBJECT),
    ("PutObjectAcl", "s3:PutObjectAcl", OBJECT),
    ("GetObjectAcl", "s3:GetObjectAcl", OBJECT),
]
VERSIONED = [
    ("GetObject", "s3:GetObjectVersion"),
    ("HeadObject", "s3:GetObjectVersion"),
    ("DeleteObject", "s3:DeleteObjectVersion"),
    ("GetObjectTagging", "s3:GetObjectVersionTagging"),
    ("PutObjectTagging", "s3:PutObjectVersionTagging"),
    ("DeleteObjectTagging", "s3:DeleteObjectVersionTagging"),
    ("GetObjectAcl", "s3:GetObjectVersionAcl"),
    ("PutObjectAcl", "s3:PutObjectVersionAcl"),
]


def accesses(operation: str, **fields: object) -> tuple[Access, ...]:
    return required_accesses(OperationRequest(operation, bucket=B, key=K, **fields))  # type: ignore[arg-type]


@pytest.mark.parametrize(("operation", "action", "resource"), CASES)
def test_each_operation_asks_for_its_action_on_its_resource(
    operation: str, action: str, resource: str
) -> None:
    (only,) = accesses(operation)
    assert (only.action, only.resource) == (action, resource)
    assert only.bucket == ("" if resource == ALL_RESOURCES else B)


@pytest.mark.parametrize(("operation", "action"), VERSIONED)
def test_a_version_id_asks_for_the_version_action(operation: str, action: str) -> None:
    (only,) = accesses(operation, version_id="v1")
    assert (only.action, only.resource) == (action, OBJECT)


def test_copies_read_the_source_and_write_the_destination() -> None:
    for operation in ("CopyObject", "UploadPartCopy"):
        found = accesses(operation, copy_source_bucket="src", copy_source_key="x/y")
        assert [(a.action, a.resource, a.bucket) for a in found] == [
            ("s3:PutObject", OBJECT, B),
            ("s3:GetObject", "arn:aws:s3:::src/x/y", "src"),
        ]
    versioned = accesses(
        "CopyObject", copy_source_bucket="src", copy_source_key="x", copy_source_version_id="v"
    )
    assert versioned[1].action == "s3:GetObjectVersion"


def test_writes_setting_an_acl_or_tags_ask_for_those_too() -> None:
    found = accesses("PutObject", sets_acl=True, sets_tags=True)
    assert [a.action for a in found] == ["s3:PutObject", "s3:PutObjectAcl", "s3:PutObjectTagging"]
    assert {a.resource for a in found} == {OBJECT}
    found = required_accesses(OperationRequest("CreateBucket", bucket=B, sets_acl=True))
    assert [a.action for a in found] == ["s3:CreateBucket", "s3:PutBucketAcl"]
    assert [a.action for a in accesses("UploadPart", sets_acl=True)] == ["s3:PutObject"]


def test_get_object_attributes_also_reads_the_object() -> None:
    assert [a.action for a in accesses("GetObjectAttributes")] == [
        "s3:GetObjectAttributes",
        "s3:GetObject",
    ]
    assert [a.action for a in accesses("GetObjectAttributes", version_id="v")] == [
        "s3:GetObjectVersionAttributes",
        "s3:GetObjectVersion",
    ]


def test_delete_objects_asks_for_each_key() -> None:
    found = required_accesses(
        OperationRequest("DeleteObjects", bucket=B, objects=(("a", ""), ("b", "v2")))
    )
    assert [(a.action, a.resource, a.key) for a in found] == [
        ("s3:DeleteObject", f"{BUCKET}/a", "a"),
        ("s3:DeleteObjectVersion", f"{BUCKET}/b", "b"),
    ]


def test_preflight_and_unimplemented_need_nothing_and_unknown_operations_raise() -> None:
    for operation in NO_ACCESS_OPERATIONS:
        assert accesses(operation) == ()
    with pytest.raises(UnknownOperation):
        accesses("FlyToTheMoon")


def test_every_routed_operation_is_known() -> None:
    assert set(HANDLERS) <= known_operations()


def test_every_operations_actions_are_s3_actions() -> None:
    for operation in known_operations() - NO_ACCESS_OPERATIONS - {"DeleteObjects"}:
        for access in accesses(operation, version_id="v", sets_acl=True, sets_tags=True):
            assert access.action in S3_ACTIONS, (operation, access)
