"""POST Object (browser-form uploads) against a real gateway: boto3's presigned POST
(Signature V4), a hand-built Signature V2 form, and raw forms for what a browser could
send: expired, tampered and unmet policies, content-length-range, redirects, the 201
document, ${filename}, broken forms, and a large file streamed through bounded memory."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import uuid
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import httpx
import pytest
from botocore.exceptions import ClientError

from tests.cluster.gateway import ACCESS_KEY, SECRET_KEY, GatewayProcess
from tests.s3.conftest import OTHER_ACCESS_KEY, OTHER_SECRET_KEY

Fields = Sequence[tuple[str, str]]
FAR_FUTURE = "2099-01-01T00:00:00.000Z"


def encoded_form(
    fields: Fields,
    file: bytes | Iterable[bytes] | None,
    *,
    filename: str = "hello.txt",
    after: Fields = (),
) -> tuple[str, Iterator[bytes]]:
    """(Content-Type, body pieces) of a multipart/form-data form: fields, the file (none
    for None), then the fields `after` it."""
    boundary = f"----form{uuid.uuid4().hex}"

    def field(name: str, value: str) -> bytes:
        return (
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode()
            + value.encode()
            + b"\r\n"
        )

    def pieces() -> Iterator[bytes]:
        yield b"".join(field(name, value) for name, value in fields)
        if file is None:
            yield f"--{boundary}--\r\n".encode()
            return
        yield (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
            f'filename="{filename}"\r\nContent-Type: application/octet-stream\r\n\r\n'
        ).encode()
        if isinstance(file, bytes):
            yield file
        else:
            yield from file
        yield b"\r\n" + b"".join(field(name, value) for name, value in after)
        yield f"--{boundary}--\r\n".encode()

    return f"multipart/form-data; boundary={boundary}", pieces()


def post(
    url: str,
    fields: Fields,
    file: bytes | Iterable[bytes] | None = b"file body",
    *,
    headers: dict[str, str] | None = None,
    **form: Any,
) -> httpx.Response:
    content_type, pieces = encoded_form(fields, file, **form)
    streamed = file is not None and not isinstance(file, bytes)
    body: bytes | Iterator[bytes] = pieces if streamed else b"".join(pieces)
    return httpx.post(
        url,
        content=body,
        headers={"Content-Type": content_type, **(headers or {})},
        timeout=120,
    )


def error_of(response: httpx.Response) -> tuple[str, str]:
    document = ElementTree.fromstring(response.content)
    return document.findtext("Code") or "", document.findtext("Message") or ""


def v2_form(
    bucket: str,
    key: str,
    conditions: list[Any],
    *,
    expiration: str = FAR_FUTURE,
    secret: str = SECRET_KEY,
    access_key: str = ACCESS_KEY,
    extra: Fields = (),
) -> Fields:
    """A Signature V2 form, as a page built by hand would carry it."""
    document = {"expiration": expiration, "conditions": [{"bucket": bucket}, *conditions]}
    policy = base64.b64encode(json.dumps(document).encode()).decode()
    signature = base64.b64encode(hmac.digest(secret.encode(), policy.encode(), "sha1")).decode()
    return [
        ("key", key),
        ("AWSAccessKeyId", access_key),
        ("policy", policy),
        ("signature", signature),
        *extra,
    ]


def bucket_url(gateway: GatewayProcess, bucket: str) -> str:
    return f"{gateway.endpoint}/{bucket}"


def keys(s3: Any, bucket: str) -> list[str]:
    return [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]


# ---------------------------------------------------------------------- uploads


def test_boto3_presigned_post_stores_the_file(s3: Any, bucket: str) -> None:
    presigned = s3.generate_presigned_post(
        bucket,
        "uploads/${filename}",
        Fields={
            "Content-Type": "text/plain",
            "x-amz-meta-color": "blue",
            "success_action_status": "201",
        },
        Conditions=[
            {"Content-Type": "text/plain"},
            {"x-amz-meta-color": "blue"},
            {"success_action_status": "201"},
            ["content-length-range", 1, 1024],
        ],
        ExpiresIn=300,
    )
    assert "x-amz-signature" in presigned["fields"]
    body = b"hello from a browser form"
    response = post(presigned["url"], list(presigned["fields"].items()), body, filename="a.txt")
    assert response.status_code == 201, response.text
    document = ElementTree.fromstring(response.content)
    etag = f'"{hashlib.md5(body).hexdigest()}"'
    assert document.tag == "PostResponse"
    assert document.findtext("Bucket") == bucket
    assert document.findtext("Key") == "uploads/a.txt"
    assert document.findtext("ETag") == etag
    assert document.findtext("Location", "").endswith(f"/{bucket}/uploads/a.txt")
    assert response.headers["ETag"] == etag
    stored = s3.get_object(Bucket=bucket, Key="uploads/a.txt", ChecksumMode="ENABLED")
    assert stored["Body"].read() == body
    assert stored["ContentType"] == "text/plain"
    assert stored["Metadata"] == {"color": "blue"}
    assert stored["ETag"] == etag
    assert stored["ChecksumCRC64NVME"]  # S3's default checksum, as PutObject gets


def test_signature_v2_form_with_tagging_and_checksum(s3: Any, bucket: str, gateway: Any) -> None:
    body = b"v2 signed body"
    sha256 = base64.b64encode(hashlib.sha256(body).digest()).decode()
    tagging = "<Tagging><TagSet><Tag><Key>team</Key><Value>web</Value></Tag></TagSet></Tagging>"
    fields = v2_form(
        bucket,
        "v2/object",
        [
            ["eq", "$key", "v2/object"],
            ["starts-with", "$tagging", ""],
            ["starts-with", "$x-amz-checksum-sha256", ""],
            {"acl": "private"},
        ],
        extra=[("tagging", tagging), ("x-amz-checksum-sha256", sha256), ("acl", "private")],
    )
    response = post(bucket_url(gateway, bucket), fields, body)
    assert response.status_code == 204, response.text
    assert response.content == b""
    assert response.headers["x-amz-checksum-sha256"] == sha256
    stored = s3.get_object(Bucket=bucket, Key="v2/object", ChecksumMode="ENABLED")
    assert stored["Body"].read() == body
    assert stored["ChecksumSHA256"] == sha256
    tags = s3.get_object_tagging(Bucket=bucket, Key="v2/object")["TagSet"]
    assert tags == [{"Key": "team", "Value": "web"}]
    wrong = base64.b64encode(hashlib.sha256(b"other").digest()).decode()
    fields = v2_form(
        bucket,
        "v2/bad",
        [{"key": "v2/bad"}, ["starts-with", "$x-amz-checksum-sha256", ""]],
        extra=[("x-amz-checksum-sha256", wrong)],
    )
    response = post(bucket_url(gateway, bucket), fields, body)
    assert response.status_code == 400
    assert keys(s3, bucket) == ["v2/object"]


def test_success_status_redirect_and_fields_after_the_file(
    s3: Any, bucket: str, gateway: Any
) -> None:
    url = bucket_url(gateway, bucket)
    fields = v2_form(bucket, "status", [{"key": "status"}, {"success_action_status": "200"}])
    response = post(url, [*fields, ("success_action_status", "200")])
    assert (response.status_code, response.content) == (200, b"")
    fields = v2_form(bucket, "odd", [{"key": "odd"}, {"success_action_status": "404"}])
    response = post(url, [*fields, ("success_action_status", "404")])
    assert response.status_code == 204  # anything but 200 and 201 is the default
    target = "https://example.com/done?from=form"
    fields = v2_form(bucket, "a b/c", [{"key": "a b/c"}, {"success_action_redirect": target}])
    response = post(
        url,
        [*fields, ("success_action_redirect", target)],
        b"redirected",
        after=[("x-amz-meta-late", "ignored"), ("key", "not-this-one")],
    )
    assert response.status_code == 303, response.text
    location = urlsplit(response.headers["Location"])
    assert location.netloc == "example.com"
    assert dict(parse_qsl(location.query)) == {
        "from": "form",
        "bucket": bucket,
        "key": "a b/c",
        "etag": f'"{hashlib.md5(b"redirected").hexdigest()}"',
    }
    stored = s3.get_object(Bucket=bucket, Key="a b/c")
    assert stored["Body"].read() == b"redirected"
    assert stored["Metadata"] == {}  # fields after the file are ignored
    assert sorted(keys(s3, bucket)) == ["a b/c", "odd", "status"]


def test_filename_variable_and_starts_with(s3: Any, bucket: str, gateway: Any) -> None:
    url = bucket_url(gateway, bucket)
    conditions = [["starts-with", "$key", "user/"], ["starts-with", "$Content-Type", "image/"]]
    fields = v2_form(bucket, "user/${filename}", conditions, extra=[("Content-Type", "image/png")])
    response = post(url, fields, b"\x89PNG", filename="cat.png")
    assert response.status_code == 204, response.text
    assert s3.head_object(Bucket=bucket, Key="user/cat.png")["ContentType"] == "image/png"
    fields = v2_form(bucket, "other/x", conditions, extra=[("Content-Type", "image/png")])
    response = post(url, fields)
    assert response.status_code == 403
    assert error_of(response) == (
        "AccessDenied",
        'Invalid according to Policy: Policy Condition failed: ["starts-with", "$key", "user/"]',
    )
    fields = v2_form(bucket, "user/y", conditions, extra=[("Content-Type", "text/html")])
    assert error_of(post(url, fields))[0] == "AccessDenied"
    fields = v2_form(
        bucket,
        "user/z",
        conditions,
        extra=[("Content-Type", "image/png"), ("x-amz-meta-unsigned", "1")],
    )
    response = post(url, fields)
    assert error_of(response) == (
        "AccessDenied",
        "Invalid according to Policy: Extra input fields: x-amz-meta-unsigned",
    )
    assert keys(s3, bucket) == ["user/cat.png"]


def test_content_length_range(s3: Any, bucket: str, gateway: Any) -> None:
    url = bucket_url(gateway, bucket)
    conditions = [{"key": "sized"}, ["content-length-range", 10, 100]]
    response = post(url, v2_form(bucket, "sized", conditions), b"x" * 101)
    assert response.status_code == 400
    assert error_of(response)[0] == "EntityTooLarge"
    response = post(url, v2_form(bucket, "sized", conditions), b"x" * 9)
    assert response.status_code == 400
    assert error_of(response)[0] == "EntityTooSmall"
    assert keys(s3, bucket) == []
    response = post(url, v2_form(bucket, "sized", conditions), b"x" * 100)
    assert response.status_code == 204


def test_virtual_hosted_post(s3_cluster: Any, s3: Any, bucket: str) -> None:
    vhost = s3_cluster.start_gateway("gateway-post-vhost", extra_args=("--domain", "s3.localhost"))
    try:
        fields = v2_form(bucket, "vhost", [{"key": "vhost"}, {"success_action_status": "201"}])
        response = post(
            f"http://127.0.0.1:{vhost.port}/",
            [*fields, ("success_action_status", "201")],
            headers={"Host": f"{bucket}.s3.localhost:{vhost.port}"},
        )
        assert response.status_code == 201, response.text
        location = ElementTree.fromstring(response.content).findtext("Location")
        assert location == f"http://{bucket}.s3.localhost:{vhost.port}/vhost"
    finally:
        vhost.kill()
    assert s3.get_object(Bucket=bucket, Key="vhost")["Body"].read() == b"file body"


# ---------------------------------------------------------------------- refusals


def test_expired_and_tampered_policies(s3: Any, bucket: str, gateway: Any) -> None:
    url = bucket_url(gateway, bucket)
    expired = v2_form(bucket, "k", [{"key": "k"}], expiration="2020-01-01T00:00:00.000Z")
    response = post(url, expired)
    assert response.status_code == 403
    assert error_of(response) == ("AccessDenied", "Invalid according to Policy: Policy expired.")
    good = dict(v2_form(bucket, "k", [["starts-with", "$key", "safe/"]]))
    widened = {"expiration": FAR_FUTURE, "conditions": [{"bucket": bucket}, {"key": "k"}]}
    tampered = {**good, "policy": base64.b64encode(json.dumps(widened).encode()).decode()}
    response = post(url, list(tampered.items()))
    assert response.status_code == 403
    assert error_of(response)[0] == "SignatureDoesNotMatch"
    forged = {**good, "signature": base64.b64encode(b"0" * 20).decode()}
    assert error_of(post(url, list(forged.items())))[0] == "SignatureDoesNotMatch"
    wrong_secret = v2_form(bucket, "k", [{"key": "k"}], secret="not-the-secret")
    assert error_of(post(url, wrong_secret))[0] == "SignatureDoesNotMatch"
    unknown = {**good, "AWSAccessKeyId": "no-such-key"}
    response = post(url, list(unknown.items()))
    assert (response.status_code, error_of(response)[0]) == (403, "InvalidAccessKeyId")
    assert keys(s3, bucket) == []


def test_tampered_v4_form(s3: Any, bucket: str, gateway: Any) -> None:
    presigned = s3.generate_presigned_post(bucket, "k", ExpiresIn=300)
    fields = dict(presigned["fields"])
    signature = fields["x-amz-signature"]
    fields["x-amz-signature"] = ("0" if signature[0] != "0" else "1") + signature[1:]
    response = post(presigned["url"], list(fields.items()))
    assert response.status_code == 403
    assert error_of(response)[0] == "SignatureDoesNotMatch"
    fields = dict(presigned["fields"])
    fields["key"] = "elsewhere"  # the policy names the key
    response = post(presigned["url"], list(fields.items()))
    assert error_of(response) == (
        "AccessDenied",
        'Invalid according to Policy: Policy Condition failed: ["eq", "$key", "k"]',
    )
    expired = s3.generate_presigned_post(bucket, "k", ExpiresIn=-10)
    response = post(expired["url"], list(expired["fields"].items()))
    assert error_of(response)[1] == "Invalid according to Policy: Policy expired."
    assert keys(s3, bucket) == []


def test_refused_forms(s3: Any, bucket: str, gateway: Any, other_s3: Any) -> None:
    url = bucket_url(gateway, bucket)
    response = post(url, [("key", "anonymous")])
    assert (response.status_code, error_of(response)[0]) == (403, "AccessDenied")
    response = httpx.post(url, data={"key": "k"}, timeout=30)  # urlencoded, not multipart
    assert response.status_code == 412
    assert "multipart/form-data" in response.text
    too_much = v2_form(bucket, "k", [{"key": "k"}], extra=[("x-ignore-pad", "p" * 21_000)])
    response = post(url, too_much)
    assert error_of(response)[0] == "MaxPostPreDataLengthExceeded"
    content_type, _ = encoded_form([], b"")
    boundary_form = httpx.post(
        url,
        content=b"--nothing like the boundary\r\n",
        headers={"Content-Type": content_type},
        timeout=30,
    )
    assert error_of(boundary_form)[0] == "MalformedPOSTRequest"
    response = post(url, v2_form(bucket, "k", [{"key": "k"}]), None)
    assert error_of(response)[0] == "IncorrectNumberOfFilesInPostRequest"
    no_key = [(name, value) for name, value in v2_form(bucket, "k", []) if name != "key"]
    response = post(url, no_key)
    assert error_of(response)[0] == "InvalidArgument"
    assert "key" in error_of(response)[1]
    no_signature = [(n, v) for n, v in v2_form(bucket, "k", [{"key": "k"}]) if n != "signature"]
    assert error_of(post(url, no_signature))[0] == "InvalidArgument"
    injected = v2_form(
        bucket,
        "k",
        [{"key": "k"}, ["starts-with", "$x-amz-meta-note", ""]],
        extra=[("x-amz-meta-note", "line\r\nx-injected: 1")],
    )
    assert error_of(post(url, injected))[0] == "InvalidArgument"  # a header could not hold it
    other_bucket = f"other-{uuid.uuid4().hex[:12]}"
    other_s3.create_bucket(Bucket=other_bucket)
    # Signed by a user no policy lets write to the bucket: refused as its PUT would be.
    by_other = v2_form(
        bucket, "k", [{"key": "k"}], access_key=OTHER_ACCESS_KEY, secret=OTHER_SECRET_KEY
    )
    response = post(url, by_other)
    assert (response.status_code, error_of(response)[0]) == (403, "AccessDenied")
    response = post(url, v2_form(other_bucket, "k", [{"key": "k"}]))  # policy of another bucket
    assert error_of(response)[1].startswith("Invalid according to Policy: Policy Condition failed")
    assert keys(s3, bucket) == []
    with pytest.raises(ClientError):
        other_s3.head_object(Bucket=other_bucket, Key="k")


# ---------------------------------------------------------------------- streaming


def _memory_kib(pid: int, field: str) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(rf"^{field}:\s+(\d+) kB$", status, re.M)
    assert match is not None, status
    return int(match.group(1))


def test_large_file_streams_through_bounded_memory(
    s3: Any, bucket: str, gateway: GatewayProcess
) -> None:
    """64 MiB uploaded by POST: the gateway worker's peak resident memory grows by far
    less than the file (it would hold the whole file if it buffered it)."""
    worker = int(json.loads(gateway.ready_file.read_text())["pid"])
    size = 64 << 20
    piece = bytes(range(256)) * 4096  # 1 MiB
    Path(f"/proc/{worker}/clear_refs").write_text("5")  # the peak starts again from now
    resident_before = _memory_kib(worker, "VmRSS")
    fields = v2_form(bucket, "large", [{"key": "large"}])
    response = post(bucket_url(gateway, bucket), fields, (piece for _ in range(size >> 20)))
    assert response.status_code == 204, response.text
    peak_growth_kib = _memory_kib(worker, "VmHWM") - resident_before
    assert peak_growth_kib < 24 << 10, f"peak grew {peak_growth_kib} KiB for a 64 MiB file"
    head = s3.head_object(Bucket=bucket, Key="large")
    assert head["ContentLength"] == size
    expected = hashlib.md5()
    for _ in range(size >> 20):
        expected.update(piece)
    assert head["ETag"] == f'"{expected.hexdigest()}"'
