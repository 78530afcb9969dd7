"""Regressions real clients met, each against the real gateway: a continuation token
beside StartAfter, URL-encoded listings, non-ASCII metadata, a Content-Encoding list, a
part resent while its first upload is in flight, checksum mismatches and ChecksumType,
a tagging header with an empty value, and the bound on a request's header section."""

from __future__ import annotations

import base64
import email.header
import hashlib
import socket
import zlib
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit
from xml.etree import ElementTree

import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from s3api.xml_responses import NAMESPACE
from tests.cluster.gateway import ACCESS_KEY, SECRET_KEY, GatewayProcess
from tests.s3.conftest import PART_BYTES_MIN, S3Cluster

NS = {"s3": NAMESPACE}


def error_code(e: pytest.ExceptionInfo[ClientError]) -> str:
    return str(e.value.response["Error"]["Code"])


class UnsignedPayloadAuth(S3SigV4Auth):  # type: ignore[misc]  # botocore has no types
    """SigV4 of a request whose body is not hashed (sent after the head, or slowly)."""

    def __init__(self, payload: str) -> None:
        super().__init__(Credentials(ACCESS_KEY, SECRET_KEY), "s3", "us-east-1")
        self.declared_payload = payload

    def payload(self, request: AWSRequest) -> str:
        return self.declared_payload


def signed_head(
    gateway: GatewayProcess,
    method: str,
    path: str,
    headers: dict[str, str],
    length: int,
    payload: str = "UNSIGNED-PAYLOAD",
) -> bytes:
    """A SigV4-signed request head whose body (`length` bytes) is not hashed."""
    request = AWSRequest(
        method=method,
        url=f"{gateway.endpoint}{path}",
        headers={**headers, "Content-Length": str(length)},
    )
    UnsignedPayloadAuth(payload).add_auth(request)
    url = urlsplit(request.url)
    target = url.path + (f"?{url.query}" if url.query else "")
    lines = [f"{method} {target} HTTP/1.1", f"Host: 127.0.0.1:{gateway.port}"]
    lines += [f"{name}: {value}" for name, value in request.headers.items()]
    # Header values go out UTF-8 encoded, the bytes the signature covers.
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8")


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One Content-Length framed response."""
    buffered = b""
    while b"\r\n\r\n" not in buffered:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before a response: {buffered!r}"
        buffered += chunk
    head, _, rest = buffered.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        assert chunk, "connection closed inside a response body"
        rest += chunk
    return int(lines[0].split()[1]), headers, rest[:length]


def raw_request(
    gateway: GatewayProcess,
    method: str,
    path: str,
    headers: dict[str, str],
    body: bytes = b"",
    payload: str = "UNSIGNED-PAYLOAD",
) -> tuple[int, dict[str, str], bytes]:
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=30) as sock:
        sock.sendall(signed_head(gateway, method, path, headers, len(body), payload) + body)
        return read_response(sock)


# ---------------------------------------------------------------------- listings


def test_continuation_token_wins_over_start_after(s3: Any, bucket: str) -> None:
    keys = [f"k{i:02d}" for i in range(7)]
    for key in keys:
        s3.put_object(Bucket=bucket, Key=key, Body=b"")
    first = s3.list_objects_v2(Bucket=bucket, MaxKeys=3)
    token = first["NextContinuationToken"]
    # Beside a token, start-after is ignored: whether it lies before the token's
    # position, after it, or is the token itself (what minio-py sends).
    for start_after in ("k00", "k05", token):
        page = s3.list_objects_v2(
            Bucket=bucket, MaxKeys=3, ContinuationToken=token, StartAfter=start_after
        )
        assert [o["Key"] for o in page["Contents"]] == keys[3:6], start_after
    alone = s3.list_objects_v2(Bucket=bucket, StartAfter="k04")
    assert [o["Key"] for o in alone["Contents"]] == keys[5:]


ODD_KEYS = ["a b/c d", "a+b/x", "100%/y", "gr\u00fc\u00dfe/z", "t\tab", "plain"]


def test_url_encoded_object_listings(s3: Any, bucket: str) -> None:
    for key in ODD_KEYS:
        s3.put_object(Bucket=bucket, Key=key, Body=b"")
    # Asked for explicitly, botocore leaves the values as the gateway wrote them: a
    # space is %20 (never '+', which a decoder may keep), '+' is %2B.
    v2 = s3.list_objects_v2(Bucket=bucket, EncodingType="url", Delimiter="/", StartAfter="a b")
    assert v2["EncodingType"] == "url"
    assert v2["StartAfter"] == "a%20b"
    assert [p["Prefix"] for p in v2["CommonPrefixes"]] == [
        "a%20b/",
        "a%2Bb/",
        "gr%C3%BC%C3%9Fe/",
    ]
    assert [o["Key"] for o in v2["Contents"]] == ["plain", "t%09ab"]
    under = s3.list_objects_v2(Bucket=bucket, EncodingType="url", Prefix="a b/")
    assert under["Prefix"] == "a%20b/"
    assert [o["Key"] for o in under["Contents"]] == ["a%20b/c%20d"]
    v1 = s3.list_objects(Bucket=bucket, EncodingType="url", Delimiter="/", Marker="a b", MaxKeys=1)
    assert (v1["Marker"], v1["NextMarker"]) == ("a%20b", "a%20b/")
    assert [p["Prefix"] for p in v1["CommonPrefixes"]] == ["a%20b/"]
    spaced = s3.list_objects(Bucket=bucket, EncodingType="url", Delimiter=" ", Prefix="a")
    assert (spaced["Delimiter"], spaced["Prefix"]) == ("%20", "a")
    assert [p["Prefix"] for p in spaced["CommonPrefixes"]] == ["a%20"]
    # Left to botocore (it asks for url encoding itself), every value reads back as sent.
    decoded = s3.list_objects_v2(Bucket=bucket, Prefix="a b/", Delimiter=" ")
    assert (decoded["Prefix"], decoded["Delimiter"]) == ("a b/", " ")
    assert [p["Prefix"] for p in decoded["CommonPrefixes"]] == ["a b/c "]
    everything = s3.list_objects_v2(Bucket=bucket)
    assert [o["Key"] for o in everything["Contents"]] == sorted(ODD_KEYS)
    paged = s3.list_objects(Bucket=bucket, Delimiter="/", MaxKeys=2)
    assert paged["NextMarker"] == "a b/"
    rest = s3.list_objects(Bucket=bucket, Delimiter="/", Marker=paged["NextMarker"])
    assert [p["Prefix"] for p in rest["CommonPrefixes"]] == ["a+b/", "gr\u00fc\u00dfe/"]


def test_url_encoded_versions_and_uploads(s3: Any, bucket: str) -> None:
    for key in ODD_KEYS[:3]:
        s3.put_object(Bucket=bucket, Key=key, Body=b"")
        s3.create_multipart_upload(Bucket=bucket, Key=key)
    versions = s3.list_object_versions(Bucket=bucket, EncodingType="url", KeyMarker="2", MaxKeys=1)
    assert versions["KeyMarker"] == "2"
    assert [v["Key"] for v in versions["Versions"]] == ["a%20b/c%20d"]
    assert versions["NextKeyMarker"] == "a%20b/c%20d"
    uploads = s3.list_multipart_uploads(Bucket=bucket, EncodingType="url", Prefix="a ")
    assert uploads["Prefix"] == "a%20"
    assert [u["Key"] for u in uploads["Uploads"]] == ["a%20b/c%20d"]
    grouped = s3.list_multipart_uploads(Bucket=bucket, EncodingType="url", Delimiter="/")
    assert [p["Prefix"] for p in grouped["CommonPrefixes"]] == ["100%25/", "a%20b/", "a%2Bb/"]
    decoded = s3.list_object_versions(Bucket=bucket, Prefix="a b")
    assert decoded["Prefix"] == "a b"
    assert [v["Key"] for v in decoded["Versions"]] == ["a b/c d"]


# ---------------------------------------------------------------------- headers


def _words(text: str) -> str:
    return f"=?UTF-8?B?{base64.b64encode(text.encode()).decode()}?="


def _decoded(value: str) -> str:
    return str(email.header.make_header(email.header.decode_header(value)))


def test_non_ascii_metadata_is_rfc2047(gateway: GatewayProcess, s3: Any, bucket: str) -> None:
    text = "gr\u00fc\u00dfe \u65e5\u672c"
    s3.put_object(
        Bucket=bucket,
        Key="m",
        Body=b"",
        Metadata={
            "b": _words(text),
            "q": "=?ISO-8859-1?Q?caf=E9?=",
            "ascii": "plain value",
        },
    )
    head = s3.head_object(Bucket=bucket, Key="m")["Metadata"]
    # Stored decoded; returned as one UTF-8 encoded-word, which decodes to the text.
    assert head["b"] == _words(text)
    assert head["q"] == _words("caf\u00e9")
    assert _decoded(head["q"]) == "caf\u00e9"
    assert head["ascii"] == "plain value"
    # Raw bytes outside US-ASCII are ISO-8859-1 characters, as S3 reads them: UTF-8
    # sent raw comes back as the encoded-word of what those bytes spell in ISO-8859-1.
    status, _, body = raw_request(
        gateway, "PUT", f"/{bucket}/raw", {"x-amz-meta-r": "\u00e9t\u00e9"}
    )
    assert status == 200, body
    status, headers, _ = raw_request(gateway, "HEAD", f"/{bucket}/raw", {})
    assert status == 200
    assert headers["x-amz-meta-r"] == _words("\u00e9t\u00e9".encode().decode("latin-1"))
    copied = s3.copy_object(
        Bucket=bucket,
        Key="m2",
        CopySource={"Bucket": bucket, "Key": "m"},
        MetadataDirective="REPLACE",
        Metadata={"b": _words("\u00fc")},
    )
    assert copied["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert s3.head_object(Bucket=bucket, Key="m2")["Metadata"]["b"] == _words("\u00fc")


def test_content_encoding_list_kept_as_sent(s3: Any, bucket: str) -> None:
    body = zlib.compress(b"x" * 100)
    s3.put_object(Bucket=bucket, Key="z", Body=body, ContentEncoding="deflate, gzip")
    assert s3.head_object(Bucket=bucket, Key="z")["ContentEncoding"] == "deflate, gzip"
    got = s3.get_object(Bucket=bucket, Key="z")
    assert got["ContentEncoding"] == "deflate, gzip"
    assert got["Body"].read() == body


@pytest.mark.parametrize(
    ("header", "tags"),
    [("a=&b=2", {"a": "", "b": "2"}), ("a", {"a": ""}), ("a&b=x%20y", {"a": "", "b": "x y"})],
)
def test_tagging_header_with_empty_values(
    s3: Any, bucket: str, header: str, tags: dict[str, str]
) -> None:
    s3.put_object(Bucket=bucket, Key="t", Body=b"", Tagging=header)
    got = s3.get_object_tagging(Bucket=bucket, Key="t")["TagSet"]
    assert {t["Key"]: t["Value"] for t in got} == tags


# ---------------------------------------------------------------------- multipart


@pytest.fixture
def slow_part(gateway: GatewayProcess) -> Iterator[socket.socket]:
    sock = socket.create_connection(("127.0.0.1", gateway.port), timeout=30)
    yield sock
    sock.close()


def test_resent_part_whose_first_upload_finishes_last(
    gateway: GatewayProcess, s3: Any, bucket: str, slow_part: socket.socket
) -> None:
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key="r")["UploadId"]
    first, second = b"A" * PART_BYTES_MIN, b"B" * PART_BYTES_MIN
    path = f"/{bucket}/r?partNumber=1&uploadId={upload_id}"
    # The first upload: its head and half its body, then it waits ...
    slow_part.sendall(signed_head(gateway, "PUT", path, {}, len(first)))
    slow_part.sendall(first[: len(first) // 2])
    # ... while the part is resent and answered ...
    resent = s3.upload_part(Bucket=bucket, Key="r", UploadId=upload_id, PartNumber=1, Body=second)
    assert resent["ETag"] == f'"{hashlib.md5(second).hexdigest()}"'
    # ... and finishes last: it is the part.
    slow_part.sendall(first[len(first) // 2 :])
    status, headers, body = read_response(slow_part)
    assert status == 200, body
    assert headers["etag"] == f'"{hashlib.md5(first).hexdigest()}"'
    listed = s3.list_parts(Bucket=bucket, Key="r", UploadId=upload_id)["Parts"]
    assert [(p["PartNumber"], p["ETag"]) for p in listed] == [(1, headers["etag"])]
    # The client lists both answers, in the order it got them (S3 takes the last).
    both = [
        {"PartNumber": 1, "ETag": resent["ETag"]},
        {"PartNumber": 1, "ETag": headers["etag"]},
        {
            "PartNumber": 2,
            "ETag": s3.upload_part(
                Bucket=bucket, Key="r", UploadId=upload_id, PartNumber=2, Body=b"end"
            )["ETag"],
        },
    ]
    s3.complete_multipart_upload(
        Bucket=bucket, Key="r", UploadId=upload_id, MultipartUpload={"Parts": both}
    )
    assert s3.get_object(Bucket=bucket, Key="r")["Body"].read() == first + b"end"
    assert "Uploads" not in s3.list_multipart_uploads(Bucket=bucket)
    # Out of order is still refused.
    again = s3.create_multipart_upload(Bucket=bucket, Key="o")["UploadId"]
    etags = [
        s3.upload_part(Bucket=bucket, Key="o", UploadId=again, PartNumber=n, Body=first)["ETag"]
        for n in (1, 2)
    ]
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(
            Bucket=bucket,
            Key="o",
            UploadId=again,
            MultipartUpload={
                "Parts": [{"PartNumber": 2, "ETag": etags[1]}, {"PartNumber": 1, "ETag": etags[0]}]
            },
        )
    assert error_code(e) == "InvalidPartOrder"


# ---------------------------------------------------------------------- checksums


def _crc32(data: bytes) -> str:
    return base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


def test_checksum_mismatch_is_bad_digest(gateway: GatewayProcess, s3: Any, bucket: str) -> None:
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="c", Body=b"data", ChecksumCRC32=_crc32(b"other"))
    assert error_code(e) == "BadDigest"
    assert e.value.response["Error"]["Message"] == (
        "The CRC32 you specified did not match the calculated checksum."
    )
    # The checksum in an aws-chunked trailer, as SDKs send it by default.
    trailer = f"x-amz-checksum-crc32:{_crc32(b'other')}"
    status, _, body = raw_request(
        gateway,
        "PUT",
        f"/{bucket}/c",
        {
            "Content-Encoding": "aws-chunked",
            "x-amz-decoded-content-length": "4",
            "x-amz-trailer": "x-amz-checksum-crc32",
        },
        f"4\r\ndata\r\n0\r\n{trailer}\r\n\r\n".encode(),
        payload="STREAMING-UNSIGNED-PAYLOAD-TRAILER",
    )
    assert status == 400, body
    root = ElementTree.fromstring(body)
    assert root.findtext("Code") == "BadDigest", body
    assert root.findtext("Message") == (
        "The CRC32 you specified did not match the calculated checksum."
    )
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key="c", ChecksumAlgorithm="CRC32")[
        "UploadId"
    ]
    with pytest.raises(ClientError) as e:
        s3.upload_part(
            Bucket=bucket,
            Key="c",
            UploadId=upload_id,
            PartNumber=1,
            Body=b"data",
            ChecksumCRC32=_crc32(b"other"),
        )
    assert error_code(e) == "BadDigest"


@pytest.mark.parametrize(
    ("checksum_type", "algorithm"), [("COMPOSITE", "SHA256"), ("FULL_OBJECT", "CRC32")]
)
def test_multipart_responses_carry_checksum_type(
    s3: Any, bucket: str, checksum_type: str, algorithm: str
) -> None:
    created = s3.create_multipart_upload(
        Bucket=bucket, Key="t", ChecksumAlgorithm=algorithm, ChecksumType=checksum_type
    )
    assert created["ChecksumType"] == checksum_type
    upload_id = created["UploadId"]
    part = s3.upload_part(
        Bucket=bucket,
        Key="t",
        UploadId=upload_id,
        PartNumber=1,
        Body=b"part",
        ChecksumAlgorithm=algorithm,
    )
    listed = s3.list_parts(Bucket=bucket, Key="t", UploadId=upload_id)
    assert (listed["ChecksumAlgorithm"], listed["ChecksumType"]) == (algorithm, checksum_type)
    uploads = s3.list_multipart_uploads(Bucket=bucket)["Uploads"]
    assert [(u["ChecksumAlgorithm"], u["ChecksumType"]) for u in uploads] == [
        (algorithm, checksum_type)
    ]
    completed = s3.complete_multipart_upload(
        Bucket=bucket,
        Key="t",
        UploadId=upload_id,
        MultipartUpload={
            "Parts": [
                {
                    "PartNumber": 1,
                    "ETag": part["ETag"],
                    f"Checksum{algorithm}": part[f"Checksum{algorithm}"],
                }
            ]
        },
    )
    assert completed["ChecksumType"] == checksum_type
    head = s3.head_object(Bucket=bucket, Key="t", ChecksumMode="ENABLED")
    assert head["ChecksumType"] == checksum_type
    assert head[f"Checksum{algorithm}"] == completed[f"Checksum{algorithm}"]
    # One part: a COMPOSITE object names the part's own checksum; under FULL_OBJECT the
    # part is the whole object, and so is its checksum.
    one = s3.head_object(Bucket=bucket, Key="t", PartNumber=1, ChecksumMode="ENABLED")
    assert one["ChecksumType"] == checksum_type
    expected = part if checksum_type == "COMPOSITE" else completed
    assert one[f"Checksum{algorithm}"] == expected[f"Checksum{algorithm}"]
    whole = s3.get_object(Bucket=bucket, Key="t", Range="bytes=0-3", ChecksumMode="ENABLED")
    assert (whole["ChecksumType"], whole["Body"].read()) == (checksum_type, b"part")
    attributes = s3.get_object_attributes(
        Bucket=bucket, Key="t", ObjectAttributes=["Checksum", "ObjectParts"]
    )
    assert attributes["Checksum"]["ChecksumType"] == checksum_type


# ---------------------------------------------------------------------- header bound


def _header_head(port: int, header_bytes: int) -> bytes:
    filler = "x" * max(0, header_bytes - len("X-Filler: \r\n") - len(f"Host: 127.0.0.1:{port}\r\n"))
    return f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Filler: {filler}\r\n\r\n".encode()


def _answer(gateway: GatewayProcess, head: bytes) -> tuple[int, bytes]:
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=30) as sock:
        sock.sendall(head)
        status, _, body = read_response(sock)
    return status, body


def _too_large(body: bytes) -> str:
    root = ElementTree.fromstring(body)
    assert root.findtext("Code") == "RequestHeaderSectionTooLarge", body
    assert root.findtext("Message") == (
        "Your request header section exceeds the maximum allowed size."
    )
    assert root.findtext("RequestId")
    return root.findtext("MaxSizeAllowed") or ""


def test_header_section_over_the_bound_is_refused(gateway: GatewayProcess, s3: Any) -> None:
    # Under the bound: handled (an anonymous request, refused as such).
    status, body = _answer(gateway, _header_head(gateway.port, 8000))
    assert status == 403, body
    for size in (8300, 200_000):
        status, body = _answer(gateway, _header_head(gateway.port, size))
        assert status == 400, body
        assert _too_large(body) == "8192"
    # In pieces: refused once the bound is passed, before the head ends.
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=30) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: h\r\n")
        for _ in range(10):
            sock.sendall(b"X-Piece: " + b"y" * 1000 + b"\r\n")
        status, _, body = read_response(sock)
    assert status == 400
    assert _too_large(body) == "8192"
    assert s3.list_buckets()["ResponseMetadata"]["HTTPStatusCode"] == 200


def test_header_section_bound_is_configurable(s3_cluster: S3Cluster) -> None:
    gateway = s3_cluster.start_gateway(
        "gateway-headers", env={"BLOBSTORE_MAX_HEADER_BYTES": "16384"}
    )
    try:
        status, body = _answer(gateway, _header_head(gateway.port, 12_000))
        assert status == 403, body
        status, body = _answer(gateway, _header_head(gateway.port, 17_000))
        assert status == 400, body
        assert _too_large(body) == "16384"
        client = gateway.client()
        assert client.list_buckets()["ResponseMetadata"]["HTTPStatusCode"] == 200
    finally:
        gateway.stop()
