"""Bucket operations through boto3, with their error cases."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from botocore.exceptions import ClientError

from tests.cluster.gateway import GatewayProcess
from tests.s3.test_objects import error_code, status


def test_create_head_delete(s3: Any, bucket_name: Callable[[], str]) -> None:
    name = bucket_name()
    s3.create_bucket(Bucket=name)
    assert s3.head_bucket(Bucket=name)["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert name in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    # Created again by its owner in us-east-1: 200 and nothing changes, as S3 answers
    # there (tests/s3/test_conformance_regressions.py has the other regions).
    assert s3.create_bucket(Bucket=name)["ResponseMetadata"]["HTTPStatusCode"] == 200
    s3.put_object(Bucket=name, Key="k", Body=b"x")
    with pytest.raises(ClientError) as e:
        s3.delete_bucket(Bucket=name)
    assert error_code(e) == "BucketNotEmpty"
    s3.delete_object(Bucket=name, Key="k")
    s3.delete_bucket(Bucket=name)
    with pytest.raises(ClientError) as e:
        s3.head_bucket(Bucket=name)
    assert status(e) == 404
    with pytest.raises(ClientError) as e:
        s3.delete_bucket(Bucket=name)
    assert error_code(e) == "NoSuchBucket"


def test_location_constraint(s3: Any, bucket_name: Callable[[], str]) -> None:
    east = bucket_name()
    s3.create_bucket(Bucket=east, CreateBucketConfiguration={"LocationConstraint": "us-east-1"})
    assert s3.get_bucket_location(Bucket=east)["LocationConstraint"] is None
    west = bucket_name()
    s3.create_bucket(Bucket=west, CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
    assert s3.get_bucket_location(Bucket=west)["LocationConstraint"] == "eu-west-1"


def test_invalid_bucket_names(s3: Any) -> None:
    for name in ("ab", "UPPER-case", "bad_underscore", "192.168.1.1", "a..b"):
        with pytest.raises(ClientError) as e:
            s3.create_bucket(Bucket=name)
        assert error_code(e) == "InvalidBucketName", name


def test_buckets_belong_to_their_creator(s3: Any, other_s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"secret")
    with pytest.raises(ClientError) as e:
        other_s3.get_object(Bucket=bucket, Key="k")
    assert error_code(e) == "AccessDenied"
    with pytest.raises(ClientError) as e:
        other_s3.put_object(Bucket=bucket, Key="k", Body=b"overwrite")
    assert error_code(e) == "AccessDenied"
    with pytest.raises(ClientError) as e:
        other_s3.list_objects_v2(Bucket=bucket)
    assert error_code(e) == "AccessDenied"
    with pytest.raises(ClientError) as e:
        other_s3.create_bucket(Bucket=bucket)
    assert error_code(e) == "BucketAlreadyExists"
    assert bucket not in [b["Name"] for b in other_s3.list_buckets()["Buckets"]]


def test_expected_bucket_owner(s3: Any, bucket: str, bucket_name: Any) -> None:
    """x-amz-expected-bucket-owner (boto3's ExpectedBucketOwner) and, for copies,
    x-amz-source-expected-bucket-owner: AccessDenied unless they name the bucket's owner
    (the Owner ID the listings show); nothing is written or copied on a mismatch."""
    s3.put_object(Bucket=bucket, Key="k", Body=b"v")
    owner = s3.list_objects_v2(Bucket=bucket, FetchOwner=True)["Contents"][0]["Owner"]["ID"]
    assert owner == s3.list_buckets()["Owner"]["ID"]
    s3.put_object(Bucket=bucket, Key="mine", Body=b"ok", ExpectedBucketOwner=owner)
    assert s3.get_object(Bucket=bucket, Key="mine", ExpectedBucketOwner=owner)["Body"].read() == (
        b"ok"
    )
    refused: list[Callable[[], object]] = [
        lambda: s3.put_object(Bucket=bucket, Key="theirs", Body=b"x", ExpectedBucketOwner="bob"),
        lambda: s3.get_object(Bucket=bucket, Key="k", ExpectedBucketOwner="bob"),
        lambda: s3.head_bucket(Bucket=bucket, ExpectedBucketOwner="bob"),
        lambda: s3.list_objects_v2(Bucket=bucket, ExpectedBucketOwner="bob"),
        lambda: s3.delete_object(Bucket=bucket, Key="k", ExpectedBucketOwner="bob"),
        lambda: s3.create_multipart_upload(Bucket=bucket, Key="mp", ExpectedBucketOwner="bob"),
        lambda: s3.copy_object(
            Bucket=bucket,
            Key="copy",
            CopySource={"Bucket": bucket, "Key": "k"},
            ExpectedSourceBucketOwner="bob",
        ),  # fmt: skip
    ]
    for request in refused:
        with pytest.raises(ClientError) as e:
            request()
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
        assert error_code(e) in ("AccessDenied", "403"), e.value.response
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]
    assert keys == ["k", "mine"]
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    s3.copy_object(
        Bucket=bucket, Key="copy", CopySource={"Bucket": bucket, "Key": "k"},
        ExpectedSourceBucketOwner=owner, ExpectedBucketOwner=owner,
    )  # fmt: skip
    assert s3.get_object(Bucket=bucket, Key="copy")["Body"].read() == b"v"


def test_list_objects_v2_pagination_and_options(s3: Any, bucket: str) -> None:
    keys = [f"a/{i:02d}" for i in range(7)] + ["b/x", "b/y", "c", "sp ace+plus"]
    for key in keys:
        s3.put_object(Bucket=bucket, Key=key, Body=key.encode())
    seen: list[str] = []
    token = None
    while True:
        kwargs: dict[str, Any] = {"Bucket": bucket, "MaxKeys": 3}
        if token:
            kwargs["ContinuationToken"] = token
        page = s3.list_objects_v2(**kwargs)
        seen += [o["Key"] for o in page.get("Contents", [])]
        assert page["KeyCount"] == len(page.get("Contents", []))
        if not page["IsTruncated"]:
            break
        token = page["NextContinuationToken"]
    assert seen == sorted(keys)
    grouped = s3.list_objects_v2(Bucket=bucket, Delimiter="/")
    assert [p["Prefix"] for p in grouped["CommonPrefixes"]] == ["a/", "b/"]
    assert [o["Key"] for o in grouped["Contents"]] == ["c", "sp ace+plus"]
    after = s3.list_objects_v2(Bucket=bucket, StartAfter="b/x")
    assert [o["Key"] for o in after["Contents"]] == ["b/y", "c", "sp ace+plus"]
    owned = s3.list_objects_v2(Bucket=bucket, Prefix="c", FetchOwner=True)
    assert owned["Contents"][0]["Owner"]["ID"]
    # botocore decodes keys only when it asked for url encoding itself.
    encoded = s3.list_objects_v2(Bucket=bucket, Prefix="sp", EncodingType="url")
    assert [o["Key"] for o in encoded["Contents"]] == ["sp%20ace%2Bplus"]
    assert s3.list_objects_v2(Bucket=bucket, MaxKeys=0)["KeyCount"] == 0
    with pytest.raises(ClientError) as e:
        s3.list_objects_v2(Bucket=bucket, ContinuationToken="!!not-a-token!!")
    assert error_code(e) == "InvalidArgument"


def test_list_objects_v1(s3: Any, bucket: str) -> None:
    for key in ("x/1", "x/2", "y", "z"):
        s3.put_object(Bucket=bucket, Key=key, Body=b"")
    first = s3.list_objects(Bucket=bucket, MaxKeys=2, Delimiter="/")
    assert first["IsTruncated"]
    rest = s3.list_objects(Bucket=bucket, Marker=first["NextMarker"], Delimiter="/")
    names = [p["Prefix"] for p in first.get("CommonPrefixes", [])] + [
        o["Key"] for o in first.get("Contents", []) + rest.get("Contents", [])
    ]
    assert sorted(names) == ["x/", "y", "z"]


def test_versioning_and_list_object_versions(s3: Any, bucket: str) -> None:
    assert "Status" not in s3.get_bucket_versioning(Bucket=bucket)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Enabled"
    v1 = s3.put_object(Bucket=bucket, Key="k", Body=b"one")["VersionId"]
    v2 = s3.put_object(Bucket=bucket, Key="k", Body=b"two")["VersionId"]
    assert v1 != v2
    assert s3.get_object(Bucket=bucket, Key="k", VersionId=v1)["Body"].read() == b"one"
    deleted = s3.delete_object(Bucket=bucket, Key="k")
    assert deleted["DeleteMarker"]
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="k")
    assert error_code(e) == "NoSuchKey"
    marker_headers = e.value.response["ResponseMetadata"]["HTTPHeaders"]
    assert marker_headers["x-amz-delete-marker"] == "true"
    versions = s3.list_object_versions(Bucket=bucket)
    # The delete marker's Last-Modified (when the key was deleted) travels with the 404
    # and with the 405 of a GET naming the marker's version, as S3 sends it.
    (marker,) = versions["DeleteMarkers"]
    listed = marker["LastModified"].replace(microsecond=0)  # headers carry whole seconds
    assert parsedate_to_datetime(marker_headers["last-modified"]) == listed
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="k", VersionId=marker["VersionId"])
    assert error_code(e) == "MethodNotAllowed"
    assert "last-modified" in e.value.response["ResponseMetadata"]["HTTPHeaders"]
    assert [v["VersionId"] for v in versions["Versions"]] == [v2, v1]
    assert len(versions["DeleteMarkers"]) == 1 and versions["DeleteMarkers"][0]["IsLatest"]
    copied = s3.copy_object(
        Bucket=bucket, Key="restored", CopySource={"Bucket": bucket, "Key": "k", "VersionId": v1}
    )
    assert copied["CopySourceVersionId"] == v1
    assert s3.get_object(Bucket=bucket, Key="restored")["Body"].read() == b"one"
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Suspended"})
    assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Suspended"


def test_bucket_tagging(s3: Any, bucket: str) -> None:
    with pytest.raises(ClientError) as e:
        s3.get_bucket_tagging(Bucket=bucket)
    assert error_code(e) == "NoSuchTagSet"
    s3.put_bucket_tagging(Bucket=bucket, Tagging={"TagSet": [{"Key": "team", "Value": "x"}]})
    assert s3.get_bucket_tagging(Bucket=bucket)["TagSet"] == [{"Key": "team", "Value": "x"}]
    # Resource tags: letters, numbers and spaces of any script, and _.:/=+-@.
    tags = [{"Key": "équipe 2/ops", "Value": "a_b.c:d=e+f-g@h"}, {"Key": "empty", "Value": ""}]
    s3.put_bucket_tagging(Bucket=bucket, Tagging={"TagSet": tags})
    assert s3.get_bucket_tagging(Bucket=bucket)["TagSet"] == tags
    for bad in ({"Key": "team#1", "Value": "x"}, {"Key": "team", "Value": "x*"}):
        with pytest.raises(ClientError) as e:
            s3.put_bucket_tagging(Bucket=bucket, Tagging={"TagSet": [bad]})
        assert error_code(e) == "InvalidTag"
    assert s3.get_bucket_tagging(Bucket=bucket)["TagSet"] == tags
    s3.delete_bucket_tagging(Bucket=bucket)
    with pytest.raises(ClientError) as e:
        s3.get_bucket_tagging(Bucket=bucket)
    assert error_code(e) == "NoSuchTagSet"


def test_bucket_lifecycle(s3: Any, bucket: str) -> None:
    with pytest.raises(ClientError) as e:
        s3.get_bucket_lifecycle_configuration(Bucket=bucket)
    assert error_code(e) == "NoSuchLifecycleConfiguration"
    rules = [
        {
            "ID": "expire-logs",
            "Filter": {"Prefix": "logs/"},
            "Status": "Enabled",
            "Expiration": {"Days": 30},
            "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 7},
        }
    ]
    s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": rules})
    got = s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
    assert got[0]["ID"] == "expire-logs"
    assert got[0]["Expiration"]["Days"] == 30
    assert got[0]["Filter"]["Prefix"] == "logs/"
    s3.delete_bucket_lifecycle(Bucket=bucket)
    with pytest.raises(ClientError) as e:
        s3.get_bucket_lifecycle_configuration(Bucket=bucket)
    assert error_code(e) == "NoSuchLifecycleConfiguration"


def refused_preflight(gateway: GatewayProcess, path: str, origin: str) -> bytes:
    """The body of a 403 answer to a GET preflight from `origin`."""
    request = urllib.request.Request(
        f"{gateway.endpoint}{path}",
        method="OPTIONS",
        headers={"Origin": origin, "Access-Control-Request-Method": "GET"},
    )
    with pytest.raises(urllib.error.HTTPError) as http_error:
        urllib.request.urlopen(request, timeout=10)
    assert http_error.value.code == 403
    body: bytes = http_error.value.read()
    return body


def test_cors_configuration_preflight_and_headers(
    s3: Any, bucket: str, gateway: GatewayProcess
) -> None:
    with pytest.raises(ClientError) as e:
        s3.get_bucket_cors(Bucket=bucket)
    assert error_code(e) == "NoSuchCORSConfiguration"
    refused = refused_preflight(gateway, f"/{bucket}/k", "https://app.example")
    assert b"CORS is not enabled for this bucket" in refused
    for field, value in (("AllowedOrigins", "https://*.*.example"), ("AllowedHeaders", "x-*-*")):
        wildcards = {"AllowedOrigins": ["*"], "AllowedMethods": ["GET"], field: [value]}
        with pytest.raises(ClientError) as e:
            s3.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": [wildcards]})
        assert error_code(e) == "InvalidRequest"  # at most one wildcard, as S3
    rule = {
        "AllowedOrigins": ["https://app.example"],
        "AllowedMethods": ["GET", "PUT"],
        "AllowedHeaders": ["*"],
        "ExposeHeaders": ["ETag"],
        "MaxAgeSeconds": 600,
    }
    s3.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": [rule]})
    got = s3.get_bucket_cors(Bucket=bucket)["CORSRules"][0]
    assert got["AllowedOrigins"] == ["https://app.example"]
    assert got["MaxAgeSeconds"] == 600
    preflight = urllib.request.Request(
        f"{gateway.endpoint}/{bucket}/k",
        method="OPTIONS",
        headers={
            "Origin": "https://app.example",
            "Access-Control-Request-Method": "PUT",
            "Access-Control-Request-Headers": "content-type",
        },
    )
    with urllib.request.urlopen(preflight, timeout=10) as response:
        assert response.headers["Access-Control-Allow-Origin"] == "https://app.example"
        assert "PUT" in response.headers["Access-Control-Allow-Methods"]
        assert response.headers["Access-Control-Max-Age"] == "600"
    refused = refused_preflight(gateway, f"/{bucket}/k", "https://evil.example")
    assert b"<Code>AccessForbidden</Code>" in refused
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "k"})
    with urllib.request.urlopen(
        urllib.request.Request(url, headers={"Origin": "https://app.example"}), timeout=10
    ) as response:
        assert response.headers["Access-Control-Allow-Origin"] == "https://app.example"
        assert response.headers["Access-Control-Expose-Headers"] == "ETag"
    s3.delete_bucket_cors(Bucket=bucket)
    with pytest.raises(ClientError) as e:
        s3.get_bucket_cors(Bucket=bucket)
    assert error_code(e) == "NoSuchCORSConfiguration"


def test_virtual_hosted_style(s3_cluster: Any, bucket: str, s3: Any) -> None:
    import boto3
    from botocore.config import Config

    from tests.cluster.gateway import ACCESS_KEY, SECRET_KEY

    vhost = s3_cluster.start_gateway("gateway-vhost", extra_args=("--domain", "s3.localhost"))
    try:
        s3.put_object(Bucket=bucket, Key="dir/file", Body=b"virtual")
        client = boto3.client(
            "s3",
            endpoint_url=f"http://s3.localhost:{vhost.port}",
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name="us-east-1",
            config=Config(s3={"addressing_style": "virtual"}),
        )
        for operation, params, expected in (
            ("get_object", {"Bucket": bucket, "Key": "dir/file"}, b"virtual"),
            ("list_objects_v2", {"Bucket": bucket}, b"<Key>dir/file</Key>"),
        ):
            url = urlsplit(client.generate_presigned_url(operation, Params=params))
            assert url.hostname == f"{bucket}.s3.localhost"
            request = urllib.request.Request(
                urlunsplit(url._replace(netloc=f"127.0.0.1:{vhost.port}")),
                headers={"Host": url.netloc},
            )
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    assert expected in response.read()
            except urllib.error.HTTPError as e:
                raise AssertionError(e.read()) from None
    finally:
        vhost.kill()


def test_versions_pagination_and_delete_marker_versions(s3: Any, bucket: str) -> None:
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    ids = [
        s3.put_object(Bucket=bucket, Key="k", Body=str(i).encode())["VersionId"] for i in range(3)
    ]
    marker = s3.delete_object(Bucket=bucket, Key="k")["VersionId"]
    seen: list[str] = []
    kwargs: dict[str, Any] = {"Bucket": bucket, "MaxKeys": 2}
    while True:
        page = s3.list_object_versions(**kwargs)
        seen += [v["VersionId"] for v in page.get("Versions", []) + page.get("DeleteMarkers", [])]
        if not page["IsTruncated"]:
            break
        kwargs.update(KeyMarker=page["NextKeyMarker"], VersionIdMarker=page["NextVersionIdMarker"])
    assert sorted(seen) == sorted([*ids, marker])
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="k", VersionId=marker)
    assert status(e) == 405
    s3.delete_object(Bucket=bucket, Key="k", VersionId=marker)
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"2"
    s3.delete_object(Bucket=bucket, Key="k", VersionId=ids[2])
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"1"
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="k", VersionId=ids[2])
    assert error_code(e) == "NoSuchVersion"


def test_list_buckets_in_pages(s3: Any, bucket_name: Callable[[], str]) -> None:
    prefix = bucket_name() + "-"
    names = [f"{prefix}{i}" for i in range(5)]
    for name in names:
        s3.create_bucket(Bucket=name)
    outside = bucket_name()
    s3.create_bucket(Bucket=outside)
    seen: list[str] = []
    tokens = 0
    for page in s3.get_paginator("list_buckets").paginate(
        Prefix=prefix, PaginationConfig={"PageSize": 2}
    ):
        seen += [b["Name"] for b in page["Buckets"]]
        assert len(page["Buckets"]) <= 2
        tokens += "ContinuationToken" in page
    assert seen == names
    assert tokens == 2  # pages of 2, 2 and 1
    everything = [b["Name"] for b in s3.list_buckets(Prefix=prefix)["Buckets"]]
    assert everything == seen, "without max-buckets: one page"
    assert s3.list_buckets(Prefix=prefix, BucketRegion="nowhere-1")["Buckets"] == []
    with pytest.raises(ClientError) as e:
        s3.list_buckets(MaxBuckets=2, ContinuationToken="not a token!")
    assert error_code(e) == "InvalidArgument"
    for name in [*names, outside]:
        s3.delete_bucket(Bucket=name)
