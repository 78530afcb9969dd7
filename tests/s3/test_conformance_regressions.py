"""Behaviours a conformance run of the S3 suite found apart from S3's, each against the
real gateway: DeleteBucket with uploads in progress, Signature V2 of path-style bucket
requests and its dates, V2 requests with a wrong or malformed Authorization or without a
date, If-None-Match with an ETag, CreateBucket of one's own bucket, an empty continuation
token, ListObjects' Prefix with encoding-type=url, HEAD of a deleted key, lifecycle rules
without an ID, the order of tags, bytes past a body, a completion's malformed checksum,
X-Amz-Expires out of range, a path not in UTF-8, a partNumber past the last part and a
part's own checksum under FULL_OBJECT."""

from __future__ import annotations

import base64
import email.utils
import hashlib
import hmac
import socket
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from botocore.auth import S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from tests.cluster.gateway import ACCESS_KEY, SECRET_KEY, GatewayProcess
from tests.s3.test_client_regressions import signed_head
from tests.s3.test_objects import error_code, status

# ---------------------------------------------------------------------- DeleteBucket


def test_delete_bucket_aborts_its_uploads_in_progress(
    s3: Any, bucket_name: Callable[[], str]
) -> None:
    name = bucket_name()
    s3.create_bucket(Bucket=name)
    with_part = s3.create_multipart_upload(Bucket=name, Key="big")["UploadId"]
    s3.upload_part(Bucket=name, Key="big", UploadId=with_part, PartNumber=1, Body=b"x" * 100)
    s3.create_multipart_upload(Bucket=name, Key="other/empty")
    s3.delete_bucket(Bucket=name)
    with pytest.raises(ClientError) as e:
        s3.head_bucket(Bucket=name)
    assert status(e) == 404
    # The uploads went with the bucket: a bucket of the same name starts without them.
    s3.create_bucket(Bucket=name)
    assert s3.list_multipart_uploads(Bucket=name).get("Uploads", []) == []
    with pytest.raises(ClientError) as e:
        s3.list_parts(Bucket=name, Key="big", UploadId=with_part)
    assert error_code(e) == "NoSuchUpload"
    s3.delete_bucket(Bucket=name)


def test_delete_bucket_with_objects_keeps_its_uploads(s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    upload = s3.create_multipart_upload(Bucket=bucket, Key="big")["UploadId"]
    with pytest.raises(ClientError) as e:
        s3.delete_bucket(Bucket=bucket)
    assert error_code(e) == "BucketNotEmpty"
    assert [u["UploadId"] for u in s3.list_multipart_uploads(Bucket=bucket)["Uploads"]] == [upload]


# ---------------------------------------------------------------------- Signature V2


def test_signature_v2_path_style_bucket_requests(
    gateway: GatewayProcess, bucket_name: Callable[[], str]
) -> None:
    """botocore's V2 signer signs a path-style bucket request as `/bucket/`."""
    v2 = gateway.client(signature_version="s3")
    name = bucket_name()
    v2.create_bucket(Bucket=name)
    v2.put_object(Bucket=name, Key="k", Body=b"v2")
    assert [o["Key"] for o in v2.list_objects(Bucket=name)["Contents"]] == ["k"]
    assert v2.get_object(Bucket=name, Key="k")["Body"].read() == b"v2"
    v2.delete_object(Bucket=name, Key="k")
    v2.delete_bucket(Bucket=name)
    with pytest.raises(ClientError) as e:
        v2.head_bucket(Bucket=name)
    assert status(e) == 404


def _v2_request(gateway: GatewayProcess, path: str, headers: dict[str, str]) -> str:
    """The status and error code of a V2-signed GET of `path` (x-amz-date signed as sent)."""
    amz = "".join(f"{k}:{v}\n" for k, v in sorted(headers.items()) if k.startswith("x-amz-"))
    date = "" if "x-amz-date" in headers else headers.get("Date", "")
    string_to_sign = f"GET\n\n\n{date}\n{amz}{path}".encode()
    signature = base64.b64encode(
        hmac.new(SECRET_KEY.encode(), string_to_sign, hashlib.sha1).digest()
    ).decode()
    request = urllib.request.Request(
        gateway.endpoint + path,
        headers={**headers, "Authorization": f"AWS {ACCESS_KEY}:{signature}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return str(response.status)
    except urllib.error.HTTPError as e:
        code = e.read().split(b"<Code>")[1].split(b"</Code>")[0].decode()
        return f"{e.code} {code}"


def test_signature_v2_dates_s3_cannot_read_are_access_denied(
    gateway: GatewayProcess, bucket: str
) -> None:
    now = email.utils.formatdate(usegmt=True)
    assert _v2_request(gateway, f"/{bucket}", {"Date": now}) == "200"
    # An x-amz-date header is the date even when empty: no falling back to Date.
    empty = _v2_request(gateway, f"/{bucket}", {"Date": now, "x-amz-date": ""})
    assert empty == "403 AccessDenied"
    before_epoch = "Tue, 07 Jul 1950 21:53:04 GMT"
    assert _v2_request(gateway, f"/{bucket}", {"x-amz-date": before_epoch}) == "403 AccessDenied"


def _answer(request: urllib.request.Request) -> tuple[int, str]:
    """Status and body of a request sent as it is."""
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _element(body: str, name: str) -> str:
    return body.split(f"<{name}>")[1].split(f"</{name}>")[0] if f"<{name}>" in body else ""


def _v2_put(gateway: GatewayProcess, path: str, headers: dict[str, str]) -> tuple[int, str]:
    """Status and error code of a PUT of `path` with a 3-byte text/plain body, sent
    with `headers` as they are (an Authorization among them, or none)."""
    request = urllib.request.Request(
        gateway.endpoint + path,
        data=b"bar",
        headers={"Content-Type": "text/plain", **headers},
        method="PUT",
    )
    code, body = _answer(request)
    return code, _element(body, "Code")


def _v2_authorization(string_to_sign: str) -> str:
    digest = hmac.new(SECRET_KEY.encode(), string_to_sign.encode(), hashlib.sha1).digest()
    return f"AWS {ACCESS_KEY}:{base64.b64encode(digest).decode()}"


def test_signature_v2_wrong_malformed_or_undated_requests_are_refused(
    gateway: GatewayProcess, s3: Any, bucket: str
) -> None:
    """A V2 request is served only with its own signature and a date: a wrong signature
    is SignatureDoesNotMatch, an Authorization without `key:signature` InvalidArgument,
    a signed request without Date or x-amz-date AccessDenied, and none of them writes."""
    path = f"/{bucket}/k"
    now = email.utils.formatdate(usegmt=True)
    good = _v2_authorization(f"PUT\n\ntext/plain\n{now}\n{path}")
    assert _v2_put(gateway, path, {"Date": now, "Authorization": good}) == (200, "")
    s3.delete_object(Bucket=bucket, Key="k")
    wrong = f"AWS {ACCESS_KEY}:FWeDfwojDSdS2Ztmpfeubhd9isU="
    refused = [
        ({"Date": now, "Authorization": wrong}, (403, "SignatureDoesNotMatch")),
        ({"Date": now, "Authorization": "AWS HAHAHA"}, (400, "InvalidArgument")),
        (
            {"Authorization": _v2_authorization(f"PUT\n\ntext/plain\n\n{path}")},
            (403, "AccessDenied"),
        ),
    ]
    for headers, expected in refused:
        assert _v2_put(gateway, path, headers) == expected, headers
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=bucket, Key="k")
    assert status(e) == 404


def test_headers_set_before_botocore_signs_do_not_reach_the_wire(
    gateway: GatewayProcess, bucket: str
) -> None:
    """The suite's V2 header tests set Authorization, or remove the date, in a
    `before-call` hook: botocore's signer runs later and writes both again, so the
    request sent is a valid one (why those tests see no error on any server)."""
    v2 = gateway.client(signature_version="s3")
    sent: dict[str, str] = {}

    def tamper(params: dict[str, Any], **_: Any) -> None:
        params["headers"]["Authorization"] = "AWS HAHAHA"
        params["headers"].pop("Date", None)

    def record(request: Any, **_: Any) -> None:
        sent.update(
            {k: v.decode() if isinstance(v, bytes) else v for k, v in request.headers.items()}
        )

    v2.meta.events.register("before-call.s3.PutObject", tamper)
    v2.meta.events.register("before-send.s3.PutObject", record)
    v2.put_object(Bucket=bucket, Key="k", Body=b"bar")
    assert sent["Authorization"].startswith(f"AWS {ACCESS_KEY}:")
    assert "Date" in sent


# ---------------------------------------------------------------------- conditional writes


def test_if_none_match_with_an_etag(s3: Any, bucket: str) -> None:
    first = s3.put_object(Bucket=bucket, Key="k", Body=b"one")["ETag"]
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="k", Body=b"two", IfNoneMatch=first)
    assert (status(e), error_code(e)) == (412, "PreconditionFailed")
    second = s3.put_object(Bucket=bucket, Key="k", Body=b"two", IfNoneMatch='"0badetag"')["ETag"]
    s3.put_object(Bucket=bucket, Key="k", Body=b"three", IfNoneMatch=first)  # not current
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"three"
    assert second != first
    # A missing key matches no ETag.
    s3.put_object(Bucket=bucket, Key="new", Body=b"x", IfNoneMatch=first)
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="gone", Body=b"x", IfMatch=first)
    assert (status(e), error_code(e)) == (404, "NoSuchKey")


def test_complete_multipart_upload_if_none_match_with_an_etag(s3: Any, bucket: str) -> None:
    current = s3.put_object(Bucket=bucket, Key="k", Body=b"one")["ETag"]

    def complete(**condition: str) -> Any:
        upload = s3.create_multipart_upload(Bucket=bucket, Key="k")["UploadId"]
        etag = s3.upload_part(
            Bucket=bucket, Key="k", UploadId=upload, PartNumber=1, Body=b"p" * 10
        )["ETag"]
        parts = {"Parts": [{"ETag": etag, "PartNumber": 1}]}
        return s3.complete_multipart_upload(
            Bucket=bucket, Key="k", UploadId=upload, MultipartUpload=parts, **condition
        )

    with pytest.raises(ClientError) as e:
        complete(IfNoneMatch=current)
    assert (status(e), error_code(e)) == (412, "PreconditionFailed")
    done = complete(IfNoneMatch='"0badetag"')
    assert s3.head_object(Bucket=bucket, Key="k")["ETag"] == done["ETag"]


# ---------------------------------------------------------------------- CreateBucket


def test_create_bucket_again_in_us_east_1_keeps_it(
    s3: Any, other_s3: Any, bucket_name: Callable[[], str]
) -> None:
    name = bucket_name()
    s3.create_bucket(Bucket=name)
    s3.put_object(Bucket=name, Key="kept", Body=b"x")
    again = s3.create_bucket(Bucket=name)
    assert again["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=name)["Contents"]] == ["kept"]
    # Asking for another ACL is not asking for the bucket as it is.
    with pytest.raises(ClientError) as e:
        s3.create_bucket(Bucket=name, ACL="public-read")
    assert (status(e), error_code(e)) == (409, "BucketAlreadyExists")
    # Another user's, whatever the region.
    with pytest.raises(ClientError) as e:
        other_s3.create_bucket(Bucket=name)
    assert error_code(e) == "BucketAlreadyExists"


def test_create_bucket_again_elsewhere_is_already_owned(
    s3: Any, bucket_name: Callable[[], str]
) -> None:
    name = bucket_name()
    west = {"LocationConstraint": "eu-west-1"}
    s3.create_bucket(Bucket=name, CreateBucketConfiguration=west)
    with pytest.raises(ClientError) as e:
        s3.create_bucket(Bucket=name, CreateBucketConfiguration=west)
    assert (status(e), error_code(e)) == (409, "BucketAlreadyOwnedByYou")


# ---------------------------------------------------------------------- listings


def test_empty_continuation_token_lists_from_the_start(s3: Any, bucket: str) -> None:
    for key in ("a", "b"):
        s3.put_object(Bucket=bucket, Key=key, Body=b"")
    listed = s3.list_objects_v2(Bucket=bucket, ContinuationToken="")
    assert listed["ContinuationToken"] == ""
    assert [o["Key"] for o in listed["Contents"]] == ["a", "b"]
    assert not listed["IsTruncated"]


def test_list_objects_v1_prefix_is_not_url_encoded(s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="a b/c", Body=b"")
    s3.put_object(Bucket=bucket, Key="\n", Body=b"")
    # botocore asks for encoding-type=url and decodes what S3 encodes in v1 listings:
    # keys, markers, delimiters and common prefixes, not the top-level Prefix.
    spaced = s3.list_objects(Bucket=bucket, Prefix="a b")
    assert spaced["Prefix"] == "a b"
    assert [o["Key"] for o in spaced["Contents"]] == ["a b/c"]
    newline = s3.list_objects(Bucket=bucket, Prefix="\n")
    assert newline["Prefix"] == "\n"
    assert [o["Key"] for o in newline["Contents"]] == ["\n"]
    assert s3.list_objects_v2(Bucket=bucket, Prefix="a b")["Prefix"] == "a b"


# ---------------------------------------------------------------------- objects


def test_head_of_a_deleted_key_says_it_is_no_delete_marker(s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    s3.delete_object(Bucket=bucket, Key="k")
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=bucket, Key="k")
    assert status(e) == 404
    assert e.value.response["ResponseMetadata"]["HTTPHeaders"]["x-amz-delete-marker"] == "false"
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    s3.delete_object(Bucket=bucket, Key="k")
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=bucket, Key="k")
    assert e.value.response["ResponseMetadata"]["HTTPHeaders"]["x-amz-delete-marker"] == "true"


def test_object_tags_come_back_by_key(s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"", Tagging="foo=bar&bar&abc=1")
    tags = s3.get_object_tagging(Bucket=bucket, Key="k")["TagSet"]
    assert tags == [
        {"Key": "abc", "Value": "1"},
        {"Key": "bar", "Value": ""},
        {"Key": "foo", "Value": "bar"},
    ]


def test_lifecycle_rules_without_id_get_one(s3: Any, bucket: str) -> None:
    rules = [
        {"Expiration": {"Days": 31}, "Filter": {"Prefix": "a/"}, "Status": "Enabled"},
        {"ID": "mine", "Expiration": {"Days": 9}, "Filter": {"Prefix": "b/"}, "Status": "Enabled"},
        {"Expiration": {"Days": 120}, "Filter": {"Prefix": "c/"}, "Status": "Enabled"},
    ]
    s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": rules})
    got = s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
    ids = [rule["ID"] for rule in got]
    assert ids[1] == "mine"
    assert len(set(ids)) == 3 and all(ids)
    # Generated once: reading again gives the same IDs.
    again = s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
    assert [rule["ID"] for rule in again] == ids


def test_bytes_past_a_body_are_answered_after_its_request(
    gateway: GatewayProcess, bucket: str
) -> None:
    """A body longer than its Content-Length: the request is answered first (BadDigest:
    its Content-MD5 is of the whole body), then the bytes that follow (400 BadRequest,
    the connection closes), in order, as HTTP/1.1 requires."""
    md5 = base64.b64encode(hashlib.md5(b"bar").digest()).decode()
    head = signed_head(gateway, "PUT", f"/{bucket}/k", {"Content-MD5": md5}, 2)
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=30) as sock:
        sock.sendall(head + b"bar")
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    first, _, rest = received.partition(b"\r\n\r\n")
    assert first.startswith(b"HTTP/1.1 400"), received
    assert b"<Code>BadDigest</Code>" in rest.split(b"HTTP/1.1")[0], received
    assert b"<Code>BadRequest</Code>" in rest, received


# ---------------------------------------------------------------------- multipart checksums


def test_completion_with_a_malformed_whole_object_checksum_is_bad_digest(
    s3: Any, bucket: str
) -> None:
    """CompleteMultipartUpload's x-amz-checksum-* header that cannot be the upload's
    checksum is BadDigest, S3's answer to a completion's checksum that does not match,
    whether the parts name their checksums or not; the upload stays to be completed."""
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key="m", ChecksumAlgorithm="SHA256")[
        "UploadId"
    ]
    request = {"Bucket": bucket, "Key": "m", "UploadId": upload_id}
    part = s3.upload_part(**request, PartNumber=1, Body=b"a" * 1024, ChecksumAlgorithm="SHA256")
    named = {"PartNumber": 1, "ETag": part["ETag"], "ChecksumSHA256": part["ChecksumSHA256"]}
    bare = {"PartNumber": 1, "ETag": part["ETag"]}
    for parts in ([named], [bare]):
        with pytest.raises(ClientError) as e:
            s3.complete_multipart_upload(
                **request, ChecksumSHA256="bad", MultipartUpload={"Parts": parts}
            )
        assert (status(e), error_code(e)) == (400, "BadDigest"), parts
    done = s3.complete_multipart_upload(**request, MultipartUpload={"Parts": [named]})
    assert done["ChecksumType"] == "COMPOSITE"
    # A FULL_OBJECT checksum has no part count: a composite-looking value cannot match.
    full = s3.create_multipart_upload(
        Bucket=bucket, Key="f", ChecksumAlgorithm="CRC32", ChecksumType="FULL_OBJECT"
    )["UploadId"]
    one = s3.upload_part(
        Bucket=bucket, Key="f", UploadId=full, PartNumber=1, Body=b"x", ChecksumAlgorithm="CRC32"
    )
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(
            Bucket=bucket,
            Key="f",
            UploadId=full,
            ChecksumCRC32=f"{one['ChecksumCRC32']}-1",
            MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": one["ETag"]}]},
        )
    assert (status(e), error_code(e)) == (400, "BadDigest")


# ---------------------------------------------------------------------- presigned URLs


def test_x_amz_expires_out_of_range_says_which_bound(s3: Any, bucket: str) -> None:
    """X-Amz-Expires below 0 or above a week is 400 AuthorizationQueryParametersError
    with S3's message for each bound (checked before the signature); a week is valid, and
    0 is a URL expired as soon as it is signed (403)."""
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    url = s3.generate_presigned_url(
        "get_object", Params={"Bucket": bucket, "Key": "k"}, ExpiresIn=60
    )
    assert "X-Amz-Expires=60&" in url

    def get(expires: int) -> tuple[int, str]:
        presigned = url.replace("X-Amz-Expires=60&", f"X-Amz-Expires={expires}&")
        code, body = _answer(urllib.request.Request(presigned))
        return code, _element(body, "Message")

    assert get(-7) == (400, "X-Amz-Expires must be non-negative")
    assert get(609901) == (
        400,
        "X-Amz-Expires must be less than a week (in seconds); that is, the given "
        "X-Amz-Expires must be less than 604800 seconds",
    )
    week = s3.generate_presigned_url(
        "get_object", Params={"Bucket": bucket, "Key": "k"}, ExpiresIn=604800
    )
    assert _answer(urllib.request.Request(week)) == (200, "x")
    code, body = _answer(urllib.request.Request(_presigned_now(s3, f"/{bucket}/k", 0)))
    assert (code, _element(body, "Message")) == (403, "Request has expired")


def _presigned_now(s3: Any, path: str, expires: int) -> str:
    """A GET of `path` presigned by botocore's own SigV4 query signer (which, unlike the
    client's, signs any X-Amz-Expires)."""
    request = AWSRequest(method="GET", url=s3.meta.endpoint_url + path)
    S3SigV4QueryAuth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", "us-east-1", expires).add_auth(
        request
    )
    return str(request.url)


def test_a_path_not_in_utf8_is_an_invalid_uri(
    s3: Any, bucket: str, gateway: GatewayProcess
) -> None:
    """S3 answers a path whose percent-decoded bytes are not UTF-8 with InvalidURI."""
    code, body = _answer(urllib.request.Request(f"{gateway.endpoint}/{bucket}/%AE%8A-"))
    assert (code, _element(body, "Code")) == (400, "InvalidURI")
    assert _element(body, "Message") == "Couldn't parse the specified URI."


# ---------------------------------------------------------------------- GetObject partNumber


def test_a_part_number_past_the_last_names_the_part_count(s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="single", Body=b"body")
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="single", PartNumber=2)
    assert (status(e), error_code(e)) == (416, "InvalidPartNumber")
    assert e.value.response["Error"]["PartNumberRequested"] == "2"
    assert e.value.response["Error"]["ActualPartCount"] == "1"
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key="multi")["UploadId"]
    parts = [
        {
            "PartNumber": number,
            "ETag": s3.upload_part(
                Bucket=bucket, Key="multi", UploadId=upload_id, PartNumber=number, Body=body
            )["ETag"],
        }
        for number, body in ((1, b"p" * 5 * 1024 * 1024), (2, b"tail"))
    ]
    s3.complete_multipart_upload(
        Bucket=bucket, Key="multi", UploadId=upload_id, MultipartUpload={"Parts": parts}
    )
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=bucket, Key="multi", PartNumber=3)
    assert status(e) == 416
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="multi", PartNumber=3)
    assert (status(e), error_code(e)) == (416, "InvalidPartNumber")
    assert e.value.response["Error"]["ActualPartCount"] == "2"


def test_a_part_of_a_full_object_checksum_upload_reads_with_its_own_checksum(
    s3: Any, bucket: str
) -> None:
    """GET ?partNumber of a FULL_OBJECT upload answers the part's own checksum (of the
    bytes it carries, so the client checks them) under the object's checksum type."""
    upload_id = s3.create_multipart_upload(
        Bucket=bucket, Key="full", ChecksumAlgorithm="CRC32", ChecksumType="FULL_OBJECT"
    )["UploadId"]
    bodies = (b"a" * 5 * 1024 * 1024, b"tail")
    uploaded = [
        s3.upload_part(
            Bucket=bucket, Key="full", UploadId=upload_id, PartNumber=n, Body=body,
            ChecksumAlgorithm="CRC32",
        )
        for n, body in enumerate(bodies, start=1)
    ]  # fmt: skip
    parts = [
        {"PartNumber": n, "ETag": part["ETag"], "ChecksumCRC32": part["ChecksumCRC32"]}
        for n, part in enumerate(uploaded, start=1)
    ]
    completed = s3.complete_multipart_upload(
        Bucket=bucket, Key="full", UploadId=upload_id, MultipartUpload={"Parts": parts}
    )
    for n, (body, part) in enumerate(zip(bodies, uploaded, strict=True), start=1):
        got = s3.get_object(Bucket=bucket, Key="full", PartNumber=n, ChecksumMode="ENABLED")
        assert got["Body"].read() == body
        assert (got["ChecksumType"], got["ChecksumCRC32"]) == ("FULL_OBJECT", part["ChecksumCRC32"])
        assert got["ChecksumCRC32"] != completed["ChecksumCRC32"]
    whole = s3.head_object(Bucket=bucket, Key="full", ChecksumMode="ENABLED")
    assert (whole["ChecksumType"], whole["ChecksumCRC32"]) == (
        "FULL_OBJECT",
        completed["ChecksumCRC32"],
    )
