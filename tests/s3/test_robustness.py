"""Nothing a client sends may crash a worker: signed requests with malformed XML,
encodings, ranges, part numbers, aws-chunked framing and headers all get S3 errors
(4xx/5xx with an S3 XML body), and the gateway keeps serving."""

from __future__ import annotations

import base64
import hashlib
import http.client
import socket
import urllib.request
from typing import Any
from urllib.parse import urlsplit

import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from tests.cluster.gateway import ACCESS_KEY, SECRET_KEY, GatewayProcess

CREDENTIALS = Credentials(ACCESS_KEY, SECRET_KEY)


class DeclaredPayloadAuth(S3SigV4Auth):  # type: ignore[misc]  # botocore has no types
    """SigV4 with whatever x-amz-content-sha256 the test declares."""

    def __init__(self, payload_hash: str | None) -> None:
        super().__init__(CREDENTIALS, "s3", "us-east-1")
        self.payload_hash = payload_hash

    def payload(self, request: AWSRequest) -> str:
        if self.payload_hash is not None:
            return self.payload_hash
        return str(super().payload(request))


def signed(
    gateway: GatewayProcess,
    method: str,
    path: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    payload_hash: str | None = None,
) -> tuple[int, dict[str, str], bytes]:
    request = AWSRequest(
        method=method, url=f"{gateway.endpoint}{path}", data=body, headers=headers or {}
    )
    DeclaredPayloadAuth(payload_hash).add_auth(request)
    url = urlsplit(request.url)
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    try:
        target = url.path + (f"?{url.query}" if url.query else "")
        connection.request(method, target, body=body, headers=dict(request.headers.items()))
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


MALFORMED_XML = [
    b"",
    b"<not-xml",
    b"<?xml version='1.0'?><!DOCTYPE x [<!ENTITY a 'b'>]><x>&a;</x>",
    b"\xff\xfe",
]


@pytest.mark.parametrize("body", MALFORMED_XML)
@pytest.mark.parametrize(
    "path_suffix",
    ["?delete", "?tagging", "?cors", "?lifecycle", "?versioning", "/k?uploadId=nope"],
)
def test_malformed_xml_bodies(
    gateway: GatewayProcess, bucket: str, body: bytes, path_suffix: str
) -> None:
    method = "POST" if path_suffix in ("?delete", "/k?uploadId=nope") else "PUT"
    status, headers, content = signed(gateway, method, f"/{bucket}{path_suffix}", body)
    assert 400 <= status < 500, (status, content)
    assert b"<Error><Code>" in content
    assert headers["x-amz-request-id"]


@pytest.mark.parametrize(
    ("method", "path", "headers"),
    [
        ("GET", "/{bucket}/k?partNumber=0", {}),
        ("GET", "/{bucket}/k?partNumber=abc", {}),
        ("GET", "/{bucket}/k?partNumber=99999", {}),
        ("GET", "/{bucket}/k", {"Range": "bytes=999999-"}),
        ("GET", "/{bucket}?list-type=2&max-keys=-1", {}),
        ("GET", "/{bucket}?list-type=2&continuation-token=%%%", {}),
        ("GET", "/{bucket}?list-type=2&encoding-type=base64", {}),
        ("GET", "/{bucket}/%C0%AF", {}),
        ("PUT", "/{bucket}/k?partNumber=1&uploadId=missing", {}),
        ("PUT", "/{bucket}/k", {"x-amz-copy-source": "nobucket"}),
        (
            "PUT",
            "/{bucket}/k",
            {"x-amz-copy-source": "/{bucket}/k", "x-amz-metadata-directive": "SOMETIMES"},
        ),
        ("PUT", "/{bucket}/k", {"x-amz-storage-class": "PLATINUM"}),
        ("PUT", "/{bucket}/k", {"x-amz-tagging": "a=1&a=2"}),
        ("PUT", "/{bucket}/k", {"Content-MD5": "not-base64"}),
        ("PUT", "/{bucket}/k", {"x-amz-checksum-crc32": "!!"}),
        ("PUT", "/{bucket}/k", {"x-amz-server-side-encryption": "aws:kmx"}),
        ("PUT", "/{bucket}/k", {"x-amz-server-side-encryption-customer-algorithm": "AES256"}),
        ("PUT", "/{bucket}/k", {"If-None-Match": '"a", "b"'}),
        ("PUT", "/{bucket}/k", {"If-None-Match": "*"}),
        ("POST", "/{bucket}/k?uploads", {"x-amz-checksum-algorithm": "MD4"}),
        ("PATCH", "/{bucket}/k", {}),
        ("GET", "/{bucket}/k?retention", {}),
        ("DELETE", "/{bucket}/k", {"If-Match": '"0123456789abcdef0123456789abcdef"'}),
        ("DELETE", "/{bucket}/k", {"If-None-Match": "*"}),
        ("DELETE", "/{bucket}/k", {"If-Match": '"a", "b"'}),
        ("PUT", "/{bucket}/k?acl", {"x-amz-acl": "public-read-write"}),
        ("PUT", "/{bucket}?acl", {}),
        ("GET", "/{bucket}?policy&website", {}),
    ],
)
def test_bad_parameters_get_s3_errors(
    gateway: GatewayProcess, s3: Any, bucket: str, method: str, path: str, headers: dict[str, str]
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"0123456789")
    status, response_headers, content = signed(
        gateway,
        method,
        path.format(bucket=bucket),
        b"",
        {k: v.format(bucket=bucket) for k, v in headers.items()},
    )
    assert 400 <= status < 500 or status == 501, (status, content)
    assert b"<Error><Code>" in content
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"0123456789"


def test_broken_aws_chunked_bodies(gateway: GatewayProcess, s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"original")
    good = b"3\r\nabc\r\n0\r\nx-amz-checksum-crc32:NSRBwg==\r\n\r\n"
    status, _, content = signed(
        gateway,
        "PUT",
        f"/{bucket}/chunked",
        good,
        {
            "Content-Encoding": "aws-chunked",
            "x-amz-decoded-content-length": "3",
            "x-amz-trailer": "x-amz-checksum-crc32",
        },
        payload_hash="STREAMING-UNSIGNED-PAYLOAD-TRAILER",
    )
    assert status == 200, content
    assert s3.get_object(Bucket=bucket, Key="chunked")["Body"].read() == b"abc"
    for body in (
        b"zz\r\nabc",
        b"5\r\nabc\r\n",
        b"3\r\nabcXX0\r\n\r\n",
        b"3\r\nabc\r\n0\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n",
    ):
        status, _, content = signed(
            gateway,
            "PUT",
            f"/{bucket}/k",
            body,
            {
                "Content-Encoding": "aws-chunked",
                "x-amz-decoded-content-length": "3",
                "x-amz-trailer": "x-amz-checksum-crc32",
            },
            payload_hash="STREAMING-UNSIGNED-PAYLOAD-TRAILER",
        )
        assert 400 <= status < 500, (body, status, content)
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"original"
    # Without x-amz-decoded-content-length the upload's length is unknown: S3 answers 411.
    status, _, content = signed(
        gateway,
        "PUT",
        f"/{bucket}/k",
        good,
        {"Content-Encoding": "aws-chunked", "x-amz-trailer": "x-amz-checksum-crc32"},
        payload_hash="STREAMING-UNSIGNED-PAYLOAD-TRAILER",
    )
    assert status == 411 and b"<Code>MissingContentLength</Code>" in content, content
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"original"


def test_payload_hash_mismatch(gateway: GatewayProcess, s3: Any, bucket: str) -> None:
    status, _, content = signed(gateway, "PUT", f"/{bucket}/k", b"body", payload_hash="0" * 64)
    assert status == 400
    assert b"XAmzContentSHA256Mismatch" in content
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket)


def test_delete_objects_needs_a_body_checksum(gateway: GatewayProcess, bucket: str) -> None:
    """As S3: a multi-object delete names its body's Content-MD5 or a checksum."""
    body = b"<Delete><Object><Key>k</Key></Object></Delete>"
    status, _, content = signed(gateway, "POST", f"/{bucket}?delete", body)
    assert status == 400 and b"<Code>InvalidRequest</Code>" in content, content
    md5 = base64.b64encode(hashlib.md5(body).digest()).decode()
    status, _, content = signed(gateway, "POST", f"/{bucket}?delete", body, {"Content-MD5": md5})
    assert status == 200 and b"<Deleted><Key>k</Key></Deleted>" in content, content


def test_a_bodiless_request_must_sign_the_empty_payload(
    gateway: GatewayProcess, bucket: str
) -> None:
    """GET, HEAD and DELETE read no body, so the declared payload hash is checked against
    the empty body's before the operation, as S3 does."""
    other = hashlib.sha256(b"x").hexdigest()
    for method in ("GET", "DELETE"):
        status, _, content = signed(gateway, method, f"/{bucket}/k", payload_hash=other)
        assert status == 400 and b"XAmzContentSHA256Mismatch" in content, (method, content)
    empty = hashlib.sha256(b"").hexdigest()
    status, _, _ = signed(gateway, "GET", f"/{bucket}?list-type=2", payload_hash=empty)
    assert status == 200


def test_an_unparsable_request_gets_an_s3_error(gateway: GatewayProcess) -> None:
    """Framing the parser refuses: S3's XML error with a request id, then the end of the
    connection (nothing after it can be framed)."""
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as connection:
        connection.sendall(
            b"PUT /b/k HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
            b"Transfer-Encoding: chunked\r\n\r\nzz\r\n"
        )
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 "), head
    assert b"x-amz-request-id: " in head.lower() and b"content-type: application/xml" in head
    assert b"<Code>BadRequest</Code>" in body and b"<RequestId>" in body
    with urllib.request.urlopen(f"{gateway.endpoint}/metrics", timeout=10) as response:
        exposition = response.read().decode()
    assert 's3_requests_total{operation="Unparsable",status="400"}' in exposition
