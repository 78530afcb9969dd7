"""Object operations through boto3, with their error cases."""

from __future__ import annotations

import base64
import datetime
import hashlib
import random
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.s3.conftest import ENTRY_SIZE_BYTES


def error_code(excinfo: pytest.ExceptionInfo[ClientError]) -> str:
    return str(excinfo.value.response["Error"]["Code"])


def status(excinfo: pytest.ExceptionInfo[ClientError]) -> int:
    return int(excinfo.value.response["ResponseMetadata"]["HTTPStatusCode"])


def test_put_stores_headers_and_metadata(s3: Any, bucket: str) -> None:
    expires = datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    s3.put_object(
        Bucket=bucket,
        Key="doc.txt",
        Body=b"text",
        ContentType="text/plain",
        ContentEncoding="identity",
        ContentDisposition='attachment; filename="doc.txt"',
        CacheControl="max-age=60",
        ContentLanguage="en",
        Expires=expires,
        StorageClass="STANDARD_IA",
        Metadata={"a": "1", "b-c": "two"},
        Tagging="t1=v1&t2=v2",
    )
    head = s3.head_object(Bucket=bucket, Key="doc.txt")
    assert head["ContentType"] == "text/plain"
    assert head["ContentEncoding"] == "identity"
    assert head["ContentDisposition"] == 'attachment; filename="doc.txt"'
    assert head["CacheControl"] == "max-age=60"
    assert head["ContentLanguage"] == "en"
    assert head["Expires"] == expires
    assert head["StorageClass"] == "STANDARD_IA"
    assert head["Metadata"] == {"a": "1", "b-c": "two"}
    assert head["ResponseMetadata"]["HTTPHeaders"]["x-amz-tagging-count"] == "2"
    assert head["ResponseMetadata"]["HTTPHeaders"]["x-amz-request-id"]
    tags = s3.get_object_tagging(Bucket=bucket, Key="doc.txt")["TagSet"]
    assert sorted((t["Key"], t["Value"]) for t in tags) == [("t1", "v1"), ("t2", "v2")]


def test_response_overrides(s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"x", ContentType="text/plain")
    got = s3.get_object(
        Bucket=bucket,
        Key="k",
        ResponseContentType="application/json",
        ResponseContentDisposition="inline",
        ResponseCacheControl="no-cache",
    )
    assert got["ContentType"] == "application/json"
    assert got["ContentDisposition"] == "inline"
    assert got["CacheControl"] == "no-cache"


def test_missing_key_and_bucket(s3: Any, bucket: str) -> None:
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="nope")
    assert error_code(e) == "NoSuchKey"
    assert e.value.response["Error"]["Key"] == "nope"
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=bucket, Key="nope")
    assert status(e) == 404
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket="no-such-bucket-here", Key="k")
    assert error_code(e) == "NoSuchBucket"
    assert e.value.response["ResponseMetadata"]["HTTPHeaders"]["x-amz-request-id"]


def test_conditional_writes(s3: Any, bucket: str) -> None:
    first = s3.put_object(Bucket=bucket, Key="k", Body=b"one", IfNoneMatch="*")
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="k", Body=b"two", IfNoneMatch="*")
    assert error_code(e) == "PreconditionFailed"
    with pytest.raises(ClientError) as e:
        s3.put_object(
            Bucket=bucket, Key="k", Body=b"two", IfMatch='"0123456789abcdef0123456789abcdef"'
        )
    assert error_code(e) == "PreconditionFailed"
    s3.put_object(Bucket=bucket, Key="k", Body=b"three", IfMatch=first["ETag"])
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"three"


def test_conditional_reads(s3: Any, bucket: str) -> None:
    put = s3.put_object(Bucket=bucket, Key="k", Body=b"data")
    etag = put["ETag"]
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="k", IfNoneMatch=etag)
    assert status(e) == 304
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="k", IfMatch='"ffffffffffffffffffffffffffffffff"')
    assert status(e) == 412
    future = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=1)
    past = datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC)
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="k", IfModifiedSince=future)
    assert status(e) == 304
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=bucket, Key="k", IfUnmodifiedSince=past)
    assert status(e) == 412
    assert s3.get_object(Bucket=bucket, Key="k", IfMatch=etag)["Body"].read() == b"data"


def test_range_reads_at_random_offsets(s3: Any, bucket: str, rng: random.Random) -> None:
    body = rng.randbytes(7 * ENTRY_SIZE_BYTES + 333)
    s3.put_object(Bucket=bucket, Key="k", Body=body)
    size = len(body)
    boundaries = [i * ENTRY_SIZE_BYTES for i in range(1, 8)]
    cases: list[tuple[int, ...]] = [(b - 1, b) for b in boundaries]
    cases += [(0, 0), (size - 1, size - 1), (0, size - 1)]
    cases += [tuple(sorted((rng.randrange(size), rng.randrange(size)))) for _ in range(20)]
    for first, last in cases:
        got = s3.get_object(Bucket=bucket, Key="k", Range=f"bytes={first}-{last}")
        assert got["Body"].read() == body[first : last + 1], (first, last)
        assert got["ContentRange"] == f"bytes {first}-{last}/{size}"
    assert s3.get_object(Bucket=bucket, Key="k", Range="bytes=-100")["Body"].read() == body[-100:]
    assert (
        s3.get_object(Bucket=bucket, Key="k", Range=f"bytes={size - 5}-")["Body"].read()
        == body[-5:]
    )
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="k", Range=f"bytes={size}-")
    assert error_code(e) == "InvalidRange"
    assert status(e) == 416


def test_delete_objects(s3: Any, bucket: str) -> None:
    for index in range(5):
        s3.put_object(Bucket=bucket, Key=f"k{index}", Body=b"x")
    response = s3.delete_objects(
        Bucket=bucket, Delete={"Objects": [{"Key": "k0"}, {"Key": "k1"}, {"Key": "missing"}]}
    )
    assert sorted(d["Key"] for d in response["Deleted"]) == ["k0", "k1", "missing"]
    quiet = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "k2"}], "Quiet": True})
    assert "Deleted" not in quiet
    remaining = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]
    assert remaining == ["k3", "k4"]
    with pytest.raises(ClientError) as e:
        s3.delete_objects(
            Bucket=bucket, Delete={"Objects": [{"Key": f"x{i}"} for i in range(1001)]}
        )
    assert error_code(e) == "MalformedXML"


def test_copy_object(s3: Any, bucket: str, bucket_name: Any, rng: random.Random) -> None:
    body = rng.randbytes(3 * ENTRY_SIZE_BYTES + 9)
    put = s3.put_object(Bucket=bucket, Key="src", Body=body, Metadata={"m": "1"}, ContentType="a/b")
    target = bucket_name()
    s3.create_bucket(Bucket=target)
    copied = s3.copy_object(Bucket=target, Key="dst", CopySource={"Bucket": bucket, "Key": "src"})
    assert copied["CopyObjectResult"]["ETag"] == put["ETag"]
    got = s3.get_object(Bucket=target, Key="dst")
    assert got["Body"].read() == body
    assert got["Metadata"] == {"m": "1"}
    assert got["ContentType"] == "a/b"
    s3.copy_object(
        Bucket=bucket,
        Key="src",
        CopySource={"Bucket": bucket, "Key": "src"},
        MetadataDirective="REPLACE",
        Metadata={"m": "2"},
        ContentType="c/d",
    )
    head = s3.head_object(Bucket=bucket, Key="src")
    assert head["Metadata"] == {"m": "2"}
    assert head["ContentType"] == "c/d"
    assert s3.get_object(Bucket=target, Key="dst")["Metadata"] == {"m": "1"}
    with pytest.raises(ClientError) as e:
        s3.copy_object(Bucket=bucket, Key="src", CopySource={"Bucket": bucket, "Key": "src"})
    assert error_code(e) == "InvalidRequest"
    with pytest.raises(ClientError) as e:
        s3.copy_object(
            Bucket=bucket,
            Key="x",
            CopySource={"Bucket": bucket, "Key": "src"},
            CopySourceIfMatch='"00000000000000000000000000000000"',
        )
    assert error_code(e) == "PreconditionFailed"
    with pytest.raises(ClientError) as e:
        s3.copy_object(Bucket=bucket, Key="x", CopySource={"Bucket": bucket, "Key": "missing"})
    assert error_code(e) == "NoSuchKey"
    # The source may be overwritten and deleted: the copy keeps its bytes.
    s3.put_object(Bucket=bucket, Key="src", Body=b"new")
    s3.delete_object(Bucket=bucket, Key="src")
    assert s3.get_object(Bucket=target, Key="dst")["Body"].read() == body


def test_object_tagging(s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    assert s3.get_object_tagging(Bucket=bucket, Key="k")["TagSet"] == []
    s3.put_object_tagging(Bucket=bucket, Key="k", Tagging={"TagSet": [{"Key": "a", "Value": "b"}]})
    assert s3.get_object_tagging(Bucket=bucket, Key="k")["TagSet"] == [{"Key": "a", "Value": "b"}]
    s3.delete_object_tagging(Bucket=bucket, Key="k")
    assert s3.get_object_tagging(Bucket=bucket, Key="k")["TagSet"] == []
    with pytest.raises(ClientError) as e:
        s3.put_object_tagging(
            Bucket=bucket,
            Key="k",
            Tagging={"TagSet": [{"Key": f"k{i}", "Value": "v"} for i in range(11)]},
        )
    assert error_code(e) == "InvalidTag"
    with pytest.raises(ClientError) as e:
        s3.get_object_tagging(Bucket=bucket, Key="missing")
    assert error_code(e) == "NoSuchKey"


def test_get_object_attributes(s3: Any, bucket: str) -> None:
    put = s3.put_object(Bucket=bucket, Key="k", Body=b"12345", ChecksumAlgorithm="SHA256")
    attributes = s3.get_object_attributes(
        Bucket=bucket, Key="k", ObjectAttributes=["ETag", "ObjectSize", "StorageClass", "Checksum"]
    )
    assert attributes["ETag"] == put["ETag"].strip('"')
    assert attributes["ObjectSize"] == 5
    assert attributes["StorageClass"] == "STANDARD"
    assert (
        attributes["Checksum"]["ChecksumSHA256"]
        == base64.b64encode(hashlib.sha256(b"12345").digest()).decode()
    )


def test_integrity_checks_refuse_bad_bodies(s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"original")
    wrong_md5 = base64.b64encode(hashlib.md5(b"other").digest()).decode()
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="k", Body=b"replacement", ContentMD5=wrong_md5)
    assert error_code(e) == "BadDigest"
    wrong_crc = base64.b64encode(b"\x00\x00\x00\x01").decode()
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="k", Body=b"replacement", ChecksumCRC32=wrong_crc)
    assert error_code(e) == "BadDigest"
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"original"
    good_md5 = base64.b64encode(hashlib.md5(b"replacement").digest()).decode()
    s3.put_object(Bucket=bucket, Key="k", Body=b"replacement", ContentMD5=good_md5)
    got = s3.get_object(Bucket=bucket, Key="k", ChecksumMode="ENABLED")
    assert got["Body"].read() == b"replacement"


def test_limits(s3: Any, bucket: str) -> None:
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="k" * 1025, Body=b"x")
    assert error_code(e) == "KeyTooLongError"
    s3.put_object(Bucket=bucket, Key="k" * 1024, Body=b"x")
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="m", Body=b"x", Metadata={"big": "v" * 2100})
    assert error_code(e) == "MetadataTooLarge"


def test_entity_too_large_is_refused_before_the_body(gateway: Any, bucket: str) -> None:
    import http.client
    from urllib.parse import urlsplit

    url = urlsplit(
        gateway.client().generate_presigned_url(
            "put_object", Params={"Bucket": bucket, "Key": "huge"}
        )
    )
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    connection.putrequest("PUT", f"{url.path}?{url.query}")
    connection.putheader("Content-Length", str(5 * 1024**3 + 1))
    connection.putheader("Expect", "100-continue")
    connection.endheaders()
    response = connection.getresponse()
    assert response.status == 400
    assert b"<Code>EntityTooLarge</Code>" in response.read()
    connection.close()


def test_unsupported_subresource_is_not_implemented(s3: Any, bucket: str, gateway: Any) -> None:
    with pytest.raises(ClientError) as e:
        s3.put_bucket_logging(Bucket=bucket, BucketLoggingStatus={})
    assert error_code(e) == "NotImplemented"
    with pytest.raises(ClientError) as e:
        s3.get_bucket_inventory_configuration(Bucket=bucket, Id="x")
    assert error_code(e) == "NotImplemented"
    # As in S3, authentication comes first: a forged or anonymous request is refused.
    with pytest.raises(ClientError) as e:
        gateway.client(secret_key="not-the-secret").get_bucket_acl(Bucket=bucket)
    assert error_code(e) == "SignatureDoesNotMatch"
    import urllib.error
    import urllib.request

    with pytest.raises(urllib.error.HTTPError) as anonymous:
        urllib.request.urlopen(f"{gateway.endpoint}/{bucket}?inventory", timeout=30)
    assert anonymous.value.code == 403
    assert b"<Code>AccessDenied</Code>" in anonymous.value.read()


def test_details_as_s3_answers_them(s3: Any, bucket: str) -> None:
    """Smaller points where S3's answer is the one clients are written against."""
    # If-Match on a key with no current version: NoSuchKey (404), not 412.
    for condition in ('"0123456789abcdef0123456789abcdef"', "*"):
        with pytest.raises(ClientError) as e:
            s3.put_object(Bucket=bucket, Key="absent", Body=b"x", IfMatch=condition)
        assert (error_code(e), status(e)) == ("NoSuchKey", 404)
    # A single PUT's object is its own part 1, read as a range (206); no other part.
    s3.put_object(Bucket=bucket, Key="one", Body=b"0123456789", StorageClass="STANDARD_IA")
    part = s3.get_object(Bucket=bucket, Key="one", PartNumber=1)
    assert part["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert part["ContentRange"] == "bytes 0-9/10"
    assert "PartsCount" not in part
    assert part["Body"].read() == b"0123456789"
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="one", PartNumber=2)
    assert (error_code(e), status(e)) == ("InvalidPartNumber", 416)
    # A copy without x-amz-storage-class is STANDARD, whatever the source's class.
    s3.copy_object(Bucket=bucket, Key="copy", CopySource={"Bucket": bucket, "Key": "one"})
    assert "StorageClass" not in s3.head_object(Bucket=bucket, Key="copy")  # STANDARD
    s3.copy_object(
        Bucket=bucket,
        Key="copy-ia",
        CopySource={"Bucket": bucket, "Key": "one"},
        StorageClass="STANDARD_IA",
    )
    assert s3.head_object(Bucket=bucket, Key="copy-ia")["StorageClass"] == "STANDARD_IA"
    # A version id no version can have is InvalidArgument (a well-formed unknown one:
    # NoSuchVersion for a read, nothing to do for a delete).
    for call in (s3.get_object, s3.head_object, s3.delete_object):
        with pytest.raises(ClientError) as e:
            call(Bucket=bucket, Key="one", VersionId="bogus")
        assert status(e) == 400
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="one", VersionId="0" * 24)
    assert error_code(e) == "NoSuchVersion"
    s3.delete_object(Bucket=bucket, Key="one", VersionId="0" * 24)
    assert s3.get_object(Bucket=bucket, Key="one")["Body"].read() == b"0123456789"
    # An empty one is not the absence of one: a delete with it must not delete the key.
    for call in (s3.get_object, s3.delete_object):
        with pytest.raises(ClientError) as e:
            call(Bucket=bucket, Key="one", VersionId="")
        assert error_code(e) == "InvalidArgument"
    with pytest.raises(ClientError) as e:
        s3.copy_object(
            Bucket=bucket, Key="c2", CopySource={"Bucket": bucket, "Key": "one", "VersionId": ""}
        )
    assert error_code(e) == "InvalidArgument"
    outcome = s3.delete_objects(
        Bucket=bucket,
        Delete={"Objects": [{"Key": "one", "VersionId": "bogus"}, {"Key": "one", "VersionId": ""}]},
    )
    assert [error["Code"] for error in outcome["Errors"]] == ["NoSuchVersion"] * 2
    assert "Deleted" not in outcome
    assert s3.get_object(Bucket=bucket, Key="one")["Body"].read() == b"0123456789"
    with pytest.raises(ClientError) as e:
        s3.list_object_versions(Bucket=bucket, KeyMarker="one", VersionIdMarker="zzz")
    assert error_code(e) == "InvalidArgument"
    # The reserved aws: tag prefix, through the header as through the tagging API.
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="tagged", Body=b"x", Tagging="aws%3Ax=1")
    assert error_code(e) == "InvalidTag"


def test_delete_objects_names_a_removed_delete_marker(s3: Any, bucket: str) -> None:
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    marker = s3.delete_object(Bucket=bucket, Key="k")["VersionId"]
    listed = s3.list_object_versions(Bucket=bucket, Prefix="k")
    (version,), (listed_marker,) = listed["Versions"], listed["DeleteMarkers"]
    assert listed_marker["VersionId"] == marker
    assert listed_marker["Owner"]["ID"] == version["Owner"]["ID"] != ""  # the requester
    result = s3.delete_objects(
        Bucket=bucket, Delete={"Objects": [{"Key": "k", "VersionId": marker}]}
    )
    (deleted,) = result["Deleted"]
    assert deleted["VersionId"] == marker
    assert deleted["DeleteMarker"] is True
    assert deleted["DeleteMarkerVersionId"] == marker
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"x"


def test_writes_of_the_null_version_name_no_version(s3: Any, bucket: str) -> None:
    """In a suspended bucket a write makes the null version: its answer names none (as
    S3), while reads of it name "null"."""
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Suspended"})
    assert "VersionId" not in s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    copied = s3.copy_object(Bucket=bucket, Key="c", CopySource={"Bucket": bucket, "Key": "k"})
    assert "VersionId" not in copied
    upload = s3.create_multipart_upload(Bucket=bucket, Key="m")["UploadId"]
    part = s3.upload_part(Bucket=bucket, Key="m", UploadId=upload, PartNumber=1, Body=b"y")
    done = s3.complete_multipart_upload(
        Bucket=bucket,
        Key="m",
        UploadId=upload,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]},
    )
    assert "VersionId" not in done
    for key in ("k", "c", "m"):
        assert s3.head_object(Bucket=bucket, Key=key)["VersionId"] == "null"
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    assert s3.put_object(Bucket=bucket, Key="k", Body=b"z")["VersionId"] != "null"


def test_conditional_deletes(s3: Any, bucket: str) -> None:
    """DeleteObject's If-Match and DeleteObjects' per-key ETag, as S3's conditional
    deletes: checked against the key's current version in the delete's own
    compare-and-set; a mismatch is 412 and deletes nothing, a key without a current
    version is NoSuchKey. The conditions S3 takes only in directory buckets are refused."""
    etag = s3.put_object(Bucket=bucket, Key="k", Body=b"one")["ETag"]
    with pytest.raises(ClientError) as e:
        s3.delete_object(Bucket=bucket, Key="k", IfMatch='"0123456789abcdef0123456789abcdef"')
    assert (error_code(e), status(e)) == ("PreconditionFailed", 412)
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"one"
    s3.delete_object(Bucket=bucket, Key="k", IfMatch=etag)
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=bucket, Key="k")
    assert status(e) == 404
    for condition in (etag, "*"):
        with pytest.raises(ClientError) as e:
            s3.delete_object(Bucket=bucket, Key="k", IfMatch=condition)
        assert (error_code(e), status(e)) == ("NoSuchKey", 404)
    s3.put_object(Bucket=bucket, Key="k", Body=b"two")
    s3.delete_object(Bucket=bucket, Key="k", IfMatch="*")
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket, Prefix="k")
    s3.put_object(Bucket=bucket, Key="k", Body=b"three")
    for extra in ({"IfMatchSize": 5}, {"IfMatchLastModifiedTime": datetime.datetime(2026, 1, 1)}):
        with pytest.raises(ClientError) as e:
            s3.delete_object(Bucket=bucket, Key="k", **extra)
        assert (error_code(e), status(e)) == ("NotImplemented", 501)
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"three"

    bodies = {"match": b"m", "mismatch": b"x", "any": b"a"}
    etags = {key: s3.put_object(Bucket=bucket, Key=key, Body=body)["ETag"] for key, body in bodies.items()}  # fmt: skip
    result = s3.delete_objects(
        Bucket=bucket,
        Delete={
            "Objects": [
                {"Key": "match", "ETag": etags["match"]},
                {"Key": "mismatch", "ETag": etags["match"]},
                {"Key": "any", "ETag": "*"},
                {"Key": "absent", "ETag": "*"},
            ]
        },
    )
    assert sorted(d["Key"] for d in result["Deleted"]) == ["any", "match"]
    assert {e["Key"]: e["Code"] for e in result["Errors"]} == {
        "mismatch": "PreconditionFailed",
        "absent": "NoSuchKey",
    }
    assert s3.get_object(Bucket=bucket, Key="mismatch")["Body"].read() == b"x"
    # A weak tag names the same ETag; a list is refused whole, as If-Match's is.
    weak = s3.delete_objects(
        Bucket=bucket, Delete={"Objects": [{"Key": "mismatch", "ETag": "W/" + etags["mismatch"]}]}
    )
    assert [d["Key"] for d in weak["Deleted"]] == ["mismatch"] and not weak.get("Errors")
    s3.put_object(Bucket=bucket, Key="listed", Body=b"l")
    with pytest.raises(ClientError) as e:
        s3.delete_objects(
            Bucket=bucket, Delete={"Objects": [{"Key": "listed", "ETag": '"a", "b"'}]}
        )
    assert error_code(e) == "NotImplemented"
    assert s3.get_object(Bucket=bucket, Key="listed")["Body"].read() == b"l"


def test_conditional_delete_of_a_version(s3: Any, bucket: str) -> None:
    """In a versioned bucket the condition is the current version's, whichever version
    the request deletes (S3: conditional deletes apply to the current version)."""
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    first = s3.put_object(Bucket=bucket, Key="v", Body=b"1")
    second = s3.put_object(Bucket=bucket, Key="v", Body=b"2")
    with pytest.raises(ClientError) as e:
        s3.delete_object(
            Bucket=bucket, Key="v", VersionId=first["VersionId"], IfMatch=first["ETag"]
        )
    assert error_code(e) == "PreconditionFailed"
    s3.delete_object(Bucket=bucket, Key="v", VersionId=first["VersionId"], IfMatch=second["ETag"])
    versions = s3.list_object_versions(Bucket=bucket, Prefix="v")["Versions"]
    assert [v["VersionId"] for v in versions] == [second["VersionId"]]
    marker = s3.delete_object(Bucket=bucket, Key="v", IfMatch=second["ETag"])
    assert marker["DeleteMarker"] is True
    with pytest.raises(ClientError) as e:  # the current version is a delete marker now
        s3.delete_object(Bucket=bucket, Key="v", IfMatch="*")
    assert error_code(e) == "NoSuchKey"


def test_website_redirect_location(s3: Any, bucket: str) -> None:
    """x-amz-website-redirect-location is kept with the object and shown by GET and HEAD,
    as S3 keeps it; a value S3 refuses is refused. A copy takes the request's value, not
    the source's (S3: it is never copied), and a copy onto itself may change only it."""
    s3.put_object(Bucket=bucket, Key="page", Body=b"<html>", WebsiteRedirectLocation="/other")
    assert s3.head_object(Bucket=bucket, Key="page")["WebsiteRedirectLocation"] == "/other"
    got = s3.get_object(Bucket=bucket, Key="page")
    assert got["WebsiteRedirectLocation"] == "/other" and got["Body"].read() == b"<html>"
    for bad in ("other", "ftp://x/y", "/" + "x" * 2048):
        with pytest.raises(ClientError) as e:
            s3.put_object(Bucket=bucket, Key="bad", Body=b"x", WebsiteRedirectLocation=bad)
        assert (error_code(e), status(e)) == ("InvalidRedirectLocation", 400)
    copied = {"Bucket": bucket, "Key": "page"}
    s3.copy_object(Bucket=bucket, Key="copy", CopySource=copied)
    assert "WebsiteRedirectLocation" not in s3.head_object(Bucket=bucket, Key="copy")
    s3.copy_object(
        Bucket=bucket, Key="page", CopySource=copied, WebsiteRedirectLocation="https://e.x/"
    )
    head = s3.head_object(Bucket=bucket, Key="page")
    assert head["WebsiteRedirectLocation"] == "https://e.x/"
