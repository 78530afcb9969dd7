"""Pure pieces of the gateway: addressing, operation resolution, query parsing."""

from __future__ import annotations

import pytest

from s3api.errors import S3Error
from s3api.handlers.context import parse_query
from s3api.routes import (
    NOT_IMPLEMENTED,
    resolve_address,
    resolve_operation,
    unsupported_subresource,
)


@pytest.mark.parametrize(
    ("host", "path", "domain", "expected"),
    [
        ("127.0.0.1:9000", b"/", "", ("", "", False)),
        ("127.0.0.1:9000", b"/bucket", "", ("bucket", "", False)),
        ("127.0.0.1:9000", b"/bucket/", "", ("bucket", "", False)),
        ("127.0.0.1:9000", b"/bucket/a/b%20c+d", "", ("bucket", "a/b c+d", False)),
        ("bucket.s3.localhost:9000", b"/a/b", "s3.localhost", ("bucket", "a/b", True)),
        ("s3.localhost:9000", b"/bucket/a", "s3.localhost", ("bucket", "a", False)),
        ("BUCKET.S3.LOCALHOST", b"/", "s3.localhost", ("bucket", "", True)),
    ],
)
def test_resolve_address(
    host: str, path: bytes, domain: str, expected: tuple[str, str, bool]
) -> None:
    assert resolve_address(host, path, domain) == expected


def test_resolve_address_rejects_bad_utf8() -> None:
    with pytest.raises(S3Error):
        resolve_address("h", b"/bucket/%ff%fe", "")


@pytest.mark.parametrize(
    ("method", "bucket", "key", "query", "headers", "operation"),
    [
        ("GET", "", "", {}, {}, "ListBuckets"),
        ("GET", "b", "", {"list-type": "2"}, {}, "ListObjectsV2"),
        ("GET", "b", "", {}, {}, "ListObjects"),
        ("GET", "b", "", {"versions": ""}, {}, "ListObjectVersions"),
        ("GET", "b", "", {"uploads": ""}, {}, "ListMultipartUploads"),
        ("PUT", "b", "", {}, {}, "CreateBucket"),
        ("POST", "b", "", {"delete": ""}, {}, "DeleteObjects"),
        ("PUT", "b", "k", {}, {}, "PutObject"),
        ("PUT", "b", "k", {}, {"x-amz-copy-source": "/a/b"}, "CopyObject"),
        ("PUT", "b", "k", {"partNumber": "1", "uploadId": "u"}, {}, "UploadPart"),
        (
            "PUT",
            "b",
            "k",
            {"partNumber": "1", "uploadId": "u"},
            {"x-amz-copy-source": "a/b"},
            "UploadPartCopy",
        ),
        ("POST", "b", "k", {"uploads": ""}, {}, "CreateMultipartUpload"),
        ("POST", "b", "k", {"uploadId": "u"}, {}, "CompleteMultipartUpload"),
        ("DELETE", "b", "k", {"uploadId": "u"}, {}, "AbortMultipartUpload"),
        ("GET", "b", "k", {"uploadId": "u"}, {}, "ListParts"),
        ("GET", "b", "k", {"attributes": ""}, {}, "GetObjectAttributes"),
        ("OPTIONS", "b", "k", {}, {}, "PreflightCors"),
    ],
)
def test_resolve_operation(
    method: str,
    bucket: str,
    key: str,
    query: dict[str, str],
    headers: dict[str, str],
    operation: str,
) -> None:
    assert resolve_operation(method, bucket, key, query, headers) == operation


@pytest.mark.parametrize("subresource", ["analytics", "metrics", "inventory", "torrent"])
def test_unsupported_subresources(subresource: str) -> None:
    for method, key in (("GET", ""), ("PUT", ""), ("GET", "k"), ("DELETE", "k")):
        query = {"versionId": "x", subresource: ""}
        assert resolve_operation(method, "b", key, query, {}) == NOT_IMPLEMENTED
        assert unsupported_subresource(query) == subresource
    assert unsupported_subresource({"tagging": "", "versionId": "x"}) == ""


def test_fixed_settings_are_routed_alone() -> None:
    """ACLs and the bucket settings nothing can change are read (ACLs also set) as
    their defaults; setting the others, or any of them mixed with another operation's
    parameters, stays NotImplemented."""
    route = resolve_operation
    assert route("GET", "b", "", {"acl": ""}, {}) == "GetBucketAcl"
    assert route("PUT", "b", "", {"acl": ""}, {}) == "PutBucketAcl"
    assert route("GET", "b", "k", {"acl": "", "versionId": "v"}, {}) == "GetObjectAcl"
    assert route("PUT", "b", "k", {"acl": ""}, {}) == "PutObjectAcl"
    assert route("GET", "b", "", {"policy": ""}, {}) == "GetBucketPolicy"
    assert route("GET", "b", "", {"ownershipControls": ""}, {}) == "GetBucketOwnershipControls"
    for method, key, query in (
        ("PUT", "b", {"policy": ""}),
        ("DELETE", "", {"website": ""}),
        ("DELETE", "k", {"acl": ""}),
        ("PUT", "k", {"acl": "", "uploadId": "u", "partNumber": "1"}),
        ("PUT", "", {"acl": "", "versioning": ""}),
        ("GET", "", {"acl": "", "versionId": "v"}),
        ("GET", "", {"policy": "", "website": ""}),
        ("GET", "", {"policy": "", "list-type": "2"}),
    ):
        assert route(method, "b", key, query, {}) == NOT_IMPLEMENTED, (method, key, query)


def test_method_not_allowed() -> None:
    with pytest.raises(S3Error) as e:
        resolve_operation("PATCH", "b", "k", {}, {})
    assert e.value.code == "MethodNotAllowed"


def test_parse_query() -> None:
    assert parse_query(b"prefix=a%2Fb&delimiter=%2F&empty&x=1&x=2") == {
        "prefix": "a/b",
        "delimiter": "/",
        "empty": "",
        "x": "1",
    }
    with pytest.raises(S3Error):
        parse_query(b"&".join([b"k%d=v" % i for i in range(200)]))
