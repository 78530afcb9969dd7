"""Request heads that repeat Content-Length with one value are accepted, as S3 accepts
them: rclone before 1.59 sent every single-part upload as a presigned PUT with the field
twice (and 1.59+ still does with --s3-use-presigned-request). Repeats that disagree are
still refused, and only the head is ever changed, never a body."""

from __future__ import annotations

import socket
import time
import urllib.parse
from typing import Any

import pytest
from botocore.exceptions import ClientError

from s3api.http_protocol import collapse_content_length
from tests.cluster.gateway import GatewayProcess
from tests.s3.conftest import S3Cluster


def test_collapse_content_length_keeps_one_of_equal_fields() -> None:
    head = (
        b"PUT /b/k HTTP/1.1\r\nHost: h\r\nContent-Length: 12\r\nx-a: 1\r\n"
        b"content-length:12 \r\nCONTENT-LENGTH:\t12\r\n\r\n"
    )
    assert collapse_content_length(head) == (
        b"PUT /b/k HTTP/1.1\r\nHost: h\r\nContent-Length: 12\r\nx-a: 1\r\n\r\n"
    )
    for unchanged in (
        b"PUT /b/k HTTP/1.1\r\nHost: h\r\nContent-Length: 12\r\n\r\n",
        b"PUT /b/k HTTP/1.1\r\nContent-Length: 12\r\ncontent-length: 13\r\n\r\n",
        b"PUT /b/k HTTP/1.1\r\nContent-Length: -1\r\ncontent-length: -1\r\n\r\n",
        b"PUT /b/k HTTP/1.1\r\nContent-Length: 1,1\r\ncontent-length: 1,1\r\n\r\n",
        b"PUT /b/k HTTP/1.1\r\nx-content-length: 1\r\nContent-Length: 1\r\n\r\n",
    ):
        assert collapse_content_length(unchanged) == unchanged


def read_response(sock: socket.socket, buffered: bytearray) -> tuple[int, bytes]:
    """One HTTP/1.1 response (Content-Length framed) from `sock`."""
    while b"\r\n\r\n" not in buffered:
        chunk = sock.recv(65536)
        assert chunk, "connection closed before a response"
        buffered += chunk
    end = buffered.index(b"\r\n\r\n")
    head = bytes(buffered[:end]).decode("latin-1").split("\r\n")
    status = int(head[0].split()[1])
    length = 0
    for line in head[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    while len(buffered) < end + 4 + length:
        chunk = sock.recv(65536)
        assert chunk, "connection closed inside a response body"
        buffered += chunk
    body = bytes(buffered[end + 4 : end + 4 + length])
    del buffered[: end + 4 + length]
    return status, body


def presigned_put(s3: Any, bucket: str, key: str) -> str:
    url = s3.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": key})
    parts = urllib.parse.urlsplit(url)
    return f"{parts.path}?{parts.query}"


def put_head(target: str, port: int, *length_fields: str) -> bytes:
    fields = "".join(f"{field}\r\n" for field in length_fields)
    return f"PUT {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{fields}\r\n".encode()


@pytest.fixture
def connection(gateway: GatewayProcess) -> Any:
    sock = socket.create_connection(("127.0.0.1", gateway.port), timeout=30)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    yield sock
    sock.close()


def test_repeated_equal_content_length_is_accepted(
    gateway: GatewayProcess, s3: Any, bucket: str, connection: socket.socket
) -> None:
    buffered = bytearray()
    # The body holds what looks like head fields: bodies are never touched.
    body = b"data\r\ncontent-length: 9\r\ncontent-length: 9\r\n\r\nmore"
    length = f"Content-Length: {len(body)}"
    target = presigned_put(s3, bucket, "twice")
    connection.sendall(put_head(target, gateway.port, length, length.lower()) + body)
    assert read_response(connection, buffered)[0] == 200
    assert s3.get_object(Bucket=bucket, Key="twice")["Body"].read() == body

    # The next request on the same connection, its head and body in several sends.
    target = presigned_put(s3, bucket, "thrice")
    message = put_head(
        target, gateway.port, "Content-Length: 3", "content-length: 3", "CONTENT-LENGTH:3"
    )
    message += b"abc"
    for start in range(0, len(message), 40):
        connection.sendall(message[start : start + 40])
        time.sleep(0.01)
    assert read_response(connection, buffered)[0] == 200
    assert s3.get_object(Bucket=bucket, Key="thrice")["Body"].read() == b"abc"

    # Still one request per head: an ordinary one follows.
    target = presigned_put(s3, bucket, "once")
    connection.sendall(put_head(target, gateway.port, "Content-Length: 2") + b"ok")
    assert read_response(connection, buffered)[0] == 200
    assert s3.get_object(Bucket=bucket, Key="once")["Body"].read() == b"ok"


def test_repeated_different_content_length_is_refused(
    gateway: GatewayProcess, s3: Any, bucket: str, connection: socket.socket
) -> None:
    target = presigned_put(s3, bucket, "ambiguous")
    connection.sendall(
        put_head(target, gateway.port, "Content-Length: 3", "Content-Length: 4") + b"abcd"
    )
    status, _ = read_response(connection, bytearray())
    assert status == 400
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0


def test_a_head_trickling_in_byte_by_byte_is_read_whole(
    gateway: GatewayProcess, s3: Any, bucket: str, connection: socket.socket
) -> None:
    """Every split of the head's end (CR LF CR LF) across reads is found."""
    target = presigned_put(s3, bucket, "trickle")
    message = put_head(target, gateway.port, "Content-Length: 3", "content-length: 3") + b"xyz"
    for index in range(len(message)):
        connection.sendall(message[index : index + 1])
    assert read_response(connection, bytearray())[0] == 200
    assert s3.get_object(Bucket=bucket, Key="trickle")["Body"].read() == b"xyz"


def test_a_head_ending_in_bare_line_feeds_is_answered_at_once(
    gateway: GatewayProcess, connection: socket.socket
) -> None:
    """Not held waiting for a CR LF CR LF that never comes: the parser answers it."""
    started = time.monotonic()
    connection.sendall(b"GET /health HTTP/1.1\nHost: 127.0.0.1\n\n")
    status, _ = read_response(connection, bytearray())
    assert status in (200, 400)
    assert time.monotonic() - started < 10


def test_a_stalled_body_is_answered_request_timeout_and_commits_nothing(
    s3_cluster: S3Cluster, s3: Any, bucket: str
) -> None:
    gateway = s3_cluster.start_gateway(
        "gateway-body-timeout", env={"BLOBSTORE_GATEWAY_BODY_IDLE_TIMEOUT_S": "1"}
    )
    signer = gateway.client()  # a presigned URL signs the Host it names
    sock = socket.create_connection(("127.0.0.1", gateway.port), timeout=30)
    try:
        # A body sent in pieces 0.6 s apart takes longer than the timeout in all, and
        # each wait is shorter: it is stored.
        target = presigned_put(signer, bucket, "slow")
        sock.sendall(put_head(target, gateway.port, "Content-Length: 12"))
        for piece in (b"abcd", b"efgh", b"ijkl"):
            time.sleep(0.6)
            sock.sendall(piece)
        assert read_response(sock, bytearray())[0] == 200
        assert s3.get_object(Bucket=bucket, Key="slow")["Body"].read() == b"abcdefghijkl"

        # A body that stops short waits one timeout, is refused, and is not stored.
        target = presigned_put(signer, bucket, "stalled")
        sock.sendall(put_head(target, gateway.port, "Content-Length: 100") + b"x" * 10)
        started = time.monotonic()
        buffered = bytearray()
        status, body = read_response(sock, buffered)
        assert time.monotonic() - started >= 0.9
        assert status == 400 and b"<Code>RequestTimeout</Code>" in body
        assert sock.recv(1) == b"", "the connection ends: the rest of the body is unread"
    finally:
        sock.close()
    listed = s3.list_objects_v2(Bucket=bucket)["Contents"]
    assert [entry["Key"] for entry in listed] == ["slow"]


def test_a_request_over_the_concurrency_limit_is_answered_slow_down_in_xml(
    s3_cluster: S3Cluster, bucket: str
) -> None:
    """Past `limit_concurrency` (connections or requests of a worker) uvicorn would answer
    503 in plain text; S3 clients expect S3's XML SlowDown, and retry it. (A limit of one
    is already reached by the request's own connection.)"""
    gateway = s3_cluster.start_gateway(
        "gateway-limit-one", env={"BLOBSTORE_GATEWAY_LIMIT_CONCURRENCY": "1"}
    )
    with pytest.raises(ClientError) as refused:
        gateway.client(retries={"max_attempts": 1}).head_bucket(Bucket=bucket)
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
    sock = socket.create_connection(("127.0.0.1", gateway.port), timeout=30)
    try:
        sock.sendall(f"GET /{bucket} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        answer = b""
        while chunk := sock.recv(65536):  # until the gateway closes the connection
            answer += chunk
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503 ")
        assert b"\r\nx-amz-request-id: " in head.lower()
        assert b"\r\ncontent-type: application/xml" in head.lower()
        assert b"<Code>SlowDown</Code>" in body and b"<RequestId>" in body
    finally:
        sock.close()
        gateway.stop()
