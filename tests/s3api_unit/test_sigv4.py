"""SigV4 verification against botocore's own signer and AWS's published examples."""

from __future__ import annotations

import calendar
import hashlib
import time
from collections.abc import Iterator
from urllib.parse import parse_qsl, urlencode, urlsplit

import pytest

from s3api import sigv4
from s3api.errors import S3Error
from s3api.sigv4 import authenticate
from tests.s3api_unit.helpers import (
    ACCESS_KEY,
    SECRETS,
    CaptureClient,
    CapturedRequest,
)

KEYS = [
    "simple.txt",
    "a b/c+d=e&f",
    "ünïcödé/ключ/鍵.bin",
    "weird !'()*~@$;:,[]",
    "percent%2Fliteral%20",
    "dir//double//slash/",
    "./dots/../x",
    "tab\tand\nnewline",
    "tilde~under_score-dash.dot",
]


@pytest.fixture(scope="module")
def capture() -> Iterator[CaptureClient]:
    yield CaptureClient(signature_version="s3v4")


def verify(
    request: CapturedRequest, now: float | None = None, **kwargs: object
) -> sigv4.AuthContext:
    context = authenticate(
        request.method,
        request.raw_path,
        request.query_string,
        request.headers,
        SECRETS.get,
        time.time() if now is None else now,
        **kwargs,  # type: ignore[arg-type]
    )
    assert context is not None
    return context


@pytest.mark.parametrize("key", KEYS)
def test_put_object_signed_by_botocore_verifies(capture: CaptureClient, key: str) -> None:
    request = capture.capture(
        lambda c: c.put_object(
            Bucket="bucket-1", Key=key, Body=b"hello", Metadata={"colour": "blue  green"}
        )
    )
    context = verify(request)
    assert context.access_key == ACCESS_KEY
    assert context.region == "us-east-1"
    assert context.service == "s3"
    assert not context.presigned
    assert len(context.seed_signature) == 64


@pytest.mark.parametrize("key", KEYS)
def test_head_object_with_version_verifies(capture: CaptureClient, key: str) -> None:
    request = capture.capture(
        lambda c: c.head_object(Bucket="bucket-1", Key=key, VersionId="v+1/=", Range="bytes=0-9")
    )
    context = verify(request)
    assert context.payload_mode == sigv4.PAYLOAD_SHA256
    assert context.declared_payload_hash == sigv4.EMPTY_SHA256


def test_list_objects_query_parameters_verify(capture: CaptureClient) -> None:
    capture.response_body = (
        b'<?xml version="1.0"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
        b"<Name>b</Name><IsTruncated>false</IsTruncated></ListBucketResult>"
    )
    try:
        request = capture.capture(
            lambda c: c.list_objects_v2(
                Bucket="bucket-1",
                Prefix="a b+c/ü*~",
                Delimiter="/",
                StartAfter="x=y&z",
                MaxKeys=7,
                EncodingType="url",
            )
        )
    finally:
        capture.response_body = b""
    assert b"list-type=2" in request.query_string
    verify(request)


def test_streaming_trailer_mode_is_reported(capture: CaptureClient) -> None:
    request = capture.capture(lambda c: c.put_object(Bucket="bucket-1", Key="k", Body=b"x" * 1000))
    context = verify(request)
    assert context.payload_mode == sigv4.STREAMING_UNSIGNED_TRAILER
    assert context.declared_payload_hash is None


def test_unsigned_payload_mode_over_https() -> None:
    client = CaptureClient(
        s3={"addressing_style": "path", "payload_signing_enabled": False},
        request_checksum_calculation="when_required",
    )
    request = client.capture(lambda c: c.put_object(Bucket="b-1", Key="k", Body=b"abc"))
    context = verify(request)
    assert context.payload_mode == sigv4.UNSIGNED_PAYLOAD
    signed = CaptureClient(request_checksum_calculation="when_required")
    request = signed.capture(lambda c: c.put_object(Bucket="b-1", Key="k", Body=b"abc"))
    context = verify(request)
    assert context.payload_mode == sigv4.PAYLOAD_SHA256
    assert context.declared_payload_hash == hashlib.sha256(b"abc").hexdigest()


@pytest.mark.parametrize(
    "tamper",
    [
        lambda r: CapturedRequest("DELETE", r.raw_path, r.query_string, r.headers, r.body),
        lambda r: CapturedRequest(r.method, r.raw_path + b"x", r.query_string, r.headers, r.body),
        lambda r: CapturedRequest(r.method, r.raw_path, b"acl=", r.headers, r.body),
        lambda r: r.replace_header("x-amz-meta-colour", "red"),
        lambda r: r.replace_header("host", "other.test:8443"),
        lambda r: r.replace_header("x-amz-content-sha256", sigv4.UNSIGNED_PAYLOAD),
        lambda r: r.replace_header(
            "authorization",
            (r.header("authorization") or "")[:-4] + "0000",
        ),
    ],
    ids=["method", "path", "query", "header", "host", "payload-hash", "signature"],
)
def test_tampered_requests_are_rejected(capture: CaptureClient, tamper: object) -> None:
    request = capture.capture(
        lambda c: c.put_object(
            Bucket="bucket-1", Key="k e y", Body=b"hello", Metadata={"colour": "blue"}
        )
    )
    verify(request)
    with pytest.raises(S3Error) as caught:
        verify(tamper(request))  # type: ignore[operator]
    assert caught.value.code == "SignatureDoesNotMatch"
    assert caught.value.status == 403


def test_unknown_key_time_skew_and_region(capture: CaptureClient) -> None:
    request = capture.capture(lambda c: c.head_object(Bucket="bucket-1", Key="k"))
    with pytest.raises(S3Error) as caught:
        authenticate(
            request.method,
            request.raw_path,
            request.query_string,
            request.headers,
            lambda key: None,
            time.time(),
        )
    assert caught.value.code == "InvalidAccessKeyId"
    for skew in (16 * 60, -16 * 60):
        with pytest.raises(S3Error) as caught:
            verify(request, now=time.time() + skew)
        assert caught.value.code == "RequestTimeTooSkewed"
        assert caught.value.status == 403
    verify(request, now=time.time() + 14 * 60)
    verify(request, region="us-east-1")
    with pytest.raises(S3Error) as caught:
        verify(request, region="eu-west-1")
    assert caught.value.code == "AuthorizationHeaderMalformed"
    assert caught.value.fields["Region"] == "eu-west-1"


def test_unsigned_amz_header_is_refused(capture: CaptureClient) -> None:
    request = capture.capture(lambda c: c.head_object(Bucket="bucket-1", Key="k"))
    with pytest.raises(S3Error) as caught:
        verify(request.replace_header("x-amz-meta-sneaky", "1"))
    assert caught.value.code == "AccessDenied"
    assert caught.value.fields["HeadersNotSigned"] == "x-amz-meta-sneaky"


def test_anonymous_request_is_none() -> None:
    assert authenticate("GET", b"/b/k", b"", [(b"host", b"h")], SECRETS.get, time.time()) is None


@pytest.mark.parametrize(
    ("authorization", "code"),
    [
        ("AWS AKID:c2lnbmF0dXJl", "AccessDenied"),
        ("AWS4-HMAC-SHA512 Credential=x", "AuthorizationHeaderMalformed"),
        (
            "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws4_request",
            "AuthorizationHeaderMalformed",
        ),
        ("AWS4-HMAC-SHA256 garbage", "AuthorizationHeaderMalformed"),
        (
            "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/ec2/aws4_request, "
            "SignedHeaders=host;x-amz-date, Signature=" + "0" * 64,
            "AuthorizationHeaderMalformed",
        ),
        (
            "AWS4-HMAC-SHA256 Credential=AK/20130525/us-east-1/s3/aws4_request, "
            "SignedHeaders=host;x-amz-date, Signature=" + "0" * 64,
            "AuthorizationHeaderMalformed",
        ),
        (
            "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws4_request, "
            "SignedHeaders=x-amz-date, Signature=" + "0" * 64,
            "AccessDenied",
        ),
        (
            "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws4_request, "
            "Signature=" + "1" * 64 + ", SignedHeaders=host;x-amz-date, Signature=" + "0" * 64,
            "AuthorizationHeaderMalformed",
        ),
        (
            "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws4_request, "
            "SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature=" + "0" * 63,
            "InvalidAccessKeyId",
        ),
    ],
)
def test_malformed_authorization(authorization: str, code: str) -> None:
    headers = [
        (b"host", b"h"),
        (b"x-amz-date", b"20130524T000000Z"),
        (b"x-amz-content-sha256", sigv4.EMPTY_SHA256.encode()),
        (b"authorization", authorization.encode()),
    ]
    now = calendar.timegm((2013, 5, 24, 0, 0, 0))
    # Twice: the second time the parsed parts of the header may come from the caches of
    # `_parse_authorization`, and a failure must be found again, never cached.
    for _ in range(2):
        with pytest.raises(S3Error) as caught:
            authenticate("GET", b"/b/k", b"", headers, SECRETS.get, now)
        assert caught.value.code == code


def test_parsed_authorization_head_is_reused_with_each_signature(capture: CaptureClient) -> None:
    request = capture.capture(lambda c: c.head_object(Bucket="bucket-1", Key="k"))
    verify(request)
    authorization = dict(request.headers)[b"authorization"].decode()
    head, _, signature = authorization.rpartition("Signature=")
    forged = "0" * 64 if signature != "0" * 64 else "1" * 64
    with pytest.raises(S3Error) as caught:
        verify(request.replace_header("authorization", head + "Signature=" + forged))
    assert caught.value.code == "SignatureDoesNotMatch"
    assert verify(request).access_key == ACCESS_KEY


def test_missing_and_bad_content_sha256(capture: CaptureClient) -> None:
    request = capture.capture(lambda c: c.head_object(Bucket="bucket-1", Key="k"))
    stripped = CapturedRequest(
        request.method,
        request.raw_path,
        request.query_string,
        [(k, v) for k, v in request.headers if k != b"x-amz-content-sha256"],
        b"",
    )
    with pytest.raises(S3Error) as caught:
        verify(stripped)
    assert caught.value.code == "InvalidRequest"
    with pytest.raises(S3Error) as caught:
        verify(request.replace_header("x-amz-content-sha256", "not-a-hash"))
    assert caught.value.code == "InvalidArgument"


def test_both_mechanisms_refused(capture: CaptureClient) -> None:
    request = capture.capture(lambda c: c.head_object(Bucket="bucket-1", Key="k"))
    with pytest.raises(S3Error) as caught:
        verify(
            CapturedRequest(
                request.method,
                request.raw_path,
                b"X-Amz-Algorithm=AWS4-HMAC-SHA256",
                request.headers,
                b"",
            )
        )
    assert caught.value.code == "InvalidArgument"


# ------------------------------------------------------------------ presigned URLs


def presigned(
    capture: CaptureClient, method: str, params: dict[str, str], expires: int
) -> CapturedRequest:
    url = capture.client.generate_presigned_url(method, Params=params, ExpiresIn=expires)
    parts = urlsplit(url)
    http_method = {"get_object": "GET", "put_object": "PUT", "head_object": "HEAD"}[method]
    return CapturedRequest(
        http_method,
        parts.path.encode(),
        parts.query.encode(),
        [(b"host", parts.netloc.encode())],
        b"",
    )


@pytest.mark.parametrize("key", KEYS)
def test_presigned_urls_verify(capture: CaptureClient, key: str) -> None:
    request = presigned(capture, "get_object", {"Bucket": "bucket-1", "Key": key}, 3600)
    context = verify(request)
    assert context.presigned
    assert context.payload_mode == sigv4.UNSIGNED_PAYLOAD
    put = presigned(
        capture, "put_object", {"Bucket": "bucket-1", "Key": key, "ContentType": "a/b"}, 60
    )
    verify(put.replace_header("content-type", "a/b"))


def test_presigned_refuses_unsigned_amz_headers(capture: CaptureClient) -> None:
    request = presigned(capture, "put_object", {"Bucket": "bucket-1", "Key": "k"}, 60)
    verify(request)
    for name in ("x-amz-copy-source", "x-amz-meta-a", "x-amz-tagging"):
        with pytest.raises(S3Error) as caught:
            verify(request.replace_header(name, "b/k"))
        assert caught.value.code == "AccessDenied"
        assert caught.value.fields["HeadersNotSigned"] == name


def test_presigned_with_response_overrides(capture: CaptureClient) -> None:
    request = presigned(
        capture,
        "get_object",
        {
            "Bucket": "bucket-1",
            "Key": "k",
            "ResponseContentDisposition": 'attachment; filename="a b.txt"',
            "VersionId": "3/+=",
        },
        600,
    )
    verify(request)
    query = dict(parse_qsl(request.query_string.decode()))
    query["response-content-disposition"] = "inline"
    tampered = CapturedRequest(
        request.method, request.raw_path, urlencode(query).encode(), request.headers, b""
    )
    with pytest.raises(S3Error) as caught:
        verify(tampered)
    assert caught.value.code == "SignatureDoesNotMatch"


def test_presigned_expiry(capture: CaptureClient) -> None:
    request = presigned(capture, "get_object", {"Bucket": "bucket-1", "Key": "k"}, 60)
    verify(request, now=time.time() + 50)
    with pytest.raises(S3Error) as caught:
        verify(request, now=time.time() + 120)
    assert caught.value.code == "AccessDenied"
    assert caught.value.message == "Request has expired"
    assert caught.value.status == 403
    with pytest.raises(S3Error) as caught:
        verify(request, now=time.time() - 3600)
    assert caught.value.code == "AccessDenied"


def test_presigned_expires_beyond_a_week(capture: CaptureClient) -> None:
    request = presigned(capture, "get_object", {"Bucket": "bucket-1", "Key": "k"}, 604801)
    with pytest.raises(S3Error) as caught:
        verify(request)
    assert caught.value.code == "AuthorizationQueryParametersError"
    verify(presigned(capture, "get_object", {"Bucket": "bucket-1", "Key": "k"}, 604800))


def test_presigned_tampered(capture: CaptureClient) -> None:
    request = presigned(capture, "get_object", {"Bucket": "bucket-1", "Key": "k"}, 60)
    for replace in ((b"/k", b"/j"), (b"X-Amz-Expires=60", b"X-Amz-Expires=61")):
        tampered = CapturedRequest(
            request.method,
            request.raw_path.replace(*replace),
            request.query_string.replace(*replace),
            request.headers,
            b"",
        )
        with pytest.raises(S3Error) as caught:
            verify(tampered)
        assert caught.value.code == "SignatureDoesNotMatch"
    with pytest.raises(S3Error) as caught:
        verify(CapturedRequest("PUT", request.raw_path, request.query_string, request.headers, b""))
    assert caught.value.code == "SignatureDoesNotMatch"


# ------------------------------------------------------------------ AWS's published examples

AWS_ACCESS_KEY = "AKIAIOSFODNN7EXAMPLE"
AWS_SECRET_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
AWS_EXAMPLE_TIME = calendar.timegm((2013, 5, 24, 0, 0, 0))


def aws_lookup(key: str) -> str | None:
    return AWS_SECRET_KEY if key == AWS_ACCESS_KEY else None


def test_aws_documented_get_object_example() -> None:
    headers = [
        (b"host", b"examplebucket.s3.amazonaws.com"),
        (b"range", b"bytes=0-9"),
        (b"x-amz-content-sha256", sigv4.EMPTY_SHA256.encode()),
        (b"x-amz-date", b"20130524T000000Z"),
        (
            b"authorization",
            b"AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
            b"SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
            b"Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41",
        ),
    ]
    context = authenticate("GET", b"/test.txt", b"", headers, aws_lookup, AWS_EXAMPLE_TIME)
    assert context is not None
    assert context.seed_signature.startswith("f0e8bdb8")


def test_aws_documented_presigned_example() -> None:
    query = (
        b"X-Amz-Algorithm=AWS4-HMAC-SHA256"
        b"&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request"
        b"&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host"
        b"&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404"
    )
    headers = [(b"host", b"examplebucket.s3.amazonaws.com")]
    context = authenticate("GET", b"/test.txt", query, headers, aws_lookup, AWS_EXAMPLE_TIME + 60)
    assert context is not None and context.presigned
    with pytest.raises(S3Error) as caught:
        authenticate("GET", b"/test.txt", query, headers, aws_lookup, AWS_EXAMPLE_TIME + 86401)
    assert caught.value.message == "Request has expired"


def test_aws_documented_streaming_seed_signature() -> None:
    headers = [
        (b"host", b"s3.amazonaws.com"),
        (b"x-amz-date", b"20130524T000000Z"),
        (b"x-amz-storage-class", b"REDUCED_REDUNDANCY"),
        (b"x-amz-content-sha256", sigv4.STREAMING_SIGNED.encode()),
        (b"content-encoding", b"aws-chunked"),
        (b"x-amz-decoded-content-length", b"66560"),
        (b"content-length", b"66824"),
        (
            b"authorization",
            b"AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
            b"SignedHeaders=content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;"
            b"x-amz-decoded-content-length;x-amz-storage-class,"
            b"Signature=4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9",
        ),
    ]
    context = authenticate(
        "PUT", b"/examplebucket/chunkObject.txt", b"", headers, aws_lookup, AWS_EXAMPLE_TIME
    )
    assert context is not None
    assert context.payload_mode == sigv4.STREAMING_SIGNED
    assert context.seed_signature == (
        "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9"
    )


def test_signing_key_is_cached() -> None:
    sigv4.derive_signing_key.cache_clear()
    first = sigv4.derive_signing_key("secret", "20130524", "us-east-1", "s3")
    second = sigv4.derive_signing_key("secret", "20130524", "us-east-1", "s3")
    assert first == second
    assert sigv4.derive_signing_key.cache_info().hits == 1


# ------------------------------------------------------------------ legacy Signature V2


@pytest.fixture(scope="module")
def capture_v2() -> Iterator[CaptureClient]:
    yield CaptureClient(signature_version="s3")


@pytest.mark.parametrize("key", KEYS)
def test_v2_header_requests_verify(capture_v2: CaptureClient, key: str) -> None:
    request = capture_v2.capture(
        lambda c: c.put_object(
            Bucket="bucket-1",
            Key=key,
            Body=b"hello",
            ContentType="text/plain",
            Metadata={"colour": "blue"},
        )
    )
    assert (request.header("authorization") or "").startswith("AWS ")
    context = verify(request)
    assert context.signature_version == 2
    assert context.payload_mode == sigv4.UNSIGNED_PAYLOAD
    for tampered in (
        request.replace_header("x-amz-meta-colour", "red"),
        request.replace_header("content-type", "text/html"),
        CapturedRequest("POST", request.raw_path, request.query_string, request.headers, b""),
    ):
        with pytest.raises(S3Error) as caught:
            verify(tampered)
        assert caught.value.code == "SignatureDoesNotMatch"
    with pytest.raises(S3Error) as caught:
        verify(request, now=time.time() + 3600)
    assert caught.value.code == "RequestTimeTooSkewed"


def test_v2_subresources_verify(capture_v2: CaptureClient) -> None:
    request = capture_v2.capture(
        lambda c: c.head_object(Bucket="bucket-1", Key="k", VersionId="a/b+c", PartNumber=2)
    )
    verify(request)
    tampered = CapturedRequest(
        request.method,
        request.raw_path,
        request.query_string.replace(b"partNumber=2", b"partNumber=3"),
        request.headers,
        b"",
    )
    with pytest.raises(S3Error):
        verify(tampered)


def test_boto3_default_presigned_urls_are_v2(key: str = "dir/a b+c.txt") -> None:
    client = CaptureClient()
    request = presigned(client, "get_object", {"Bucket": "bucket-1", "Key": key}, 60)
    assert b"AWSAccessKeyId=" in request.query_string
    context = verify(request)
    assert context.presigned and context.signature_version == 2
    with pytest.raises(S3Error) as caught:
        verify(request, now=time.time() + 120)
    assert caught.value.message == "Request has expired"
    put = presigned(
        client, "put_object", {"Bucket": "bucket-1", "Key": key, "ContentType": "a/b"}, 60
    )
    verify(put.replace_header("content-type", "a/b"))
    with pytest.raises(S3Error) as caught:
        verify(put.replace_header("content-type", "c/d"))
    assert caught.value.code == "SignatureDoesNotMatch"


def test_v2_virtual_hosted_requests() -> None:
    client = CaptureClient(signature_version="s3", s3={"addressing_style": "virtual"})
    request = client.capture(lambda c: c.head_object(Bucket="bucket-1", Key="k/é"))
    assert request.header("host") == "bucket-1.gateway.test:8443"
    verify(request, virtual_host_bucket="bucket-1")
    with pytest.raises(S3Error):
        verify(request)


@pytest.mark.parametrize(
    "date",
    [
        b"Fri, 27 Nov 2026 08:00:00 GMT",
        b"Fri, 27 Nov 2026 08:00:00 -0000",  # RFC 2822's "zone unknown": botocore writes it
        b"Fri Nov 27 08:00:00 2026",  # asctime, which HTTP dates may still be
        b"Fri, 27 Nov 2026 09:00:00 +0100",
    ],
)
def test_a_date_header_of_each_form_is_a_time_in_gmt(date: bytes) -> None:
    assert sigv4._amz_timestamp({"date": [date]}) == "20261127T080000Z"


def test_an_authorization_scheme_not_aws_is_invalid_argument() -> None:
    with pytest.raises(S3Error) as caught:
        authenticate(
            "GET", b"/b/k", b"", [(b"authorization", b"Bearer abc")], SECRETS.get, time.time()
        )
    assert caught.value.code == "InvalidArgument"
    assert caught.value.fields["ArgumentName"] == "Authorization"
