"""SigV4 verification against the AWS Common Runtime signer (the one under the AWS CLI v2,
the Java SDK v2 CRT client and others), configured as those clients sign for S3."""

from __future__ import annotations

import datetime
import hashlib
import time

import pytest
from awscrt import auth, http

from s3api.errors import S3Error
from s3api.sigv4 import PAYLOAD_SHA256, UNSIGNED_PAYLOAD, authenticate

ACCESS_KEY = "AKIDCRTEXAMPLE"
SECRET_KEY = "crt/secret+key=="
SECRETS = {ACCESS_KEY: SECRET_KEY}

PATHS = [
    "/b/simple",
    "/b/a%20b/c%2Bd",
    "/b/raw!'()*",
    "/b/x?prefix=a%20b&list-type=2&delimiter=%2F",
    "/b/y?prefix=a+b",
    "/b/z?acl",
    "/b/%E2%82%AC?versionId=a%2Fb",
    "/b/k?uploadId=u1&partNumber=3",
]


def sign(
    method: str,
    path: str,
    headers: list[tuple[str, str]],
    body_value: str,
    query: bool = False,
) -> http.HttpRequest:
    request = http.HttpRequest(method, path, http.HttpHeaders(headers))
    config = auth.AwsSigningConfig(
        algorithm=auth.AwsSigningAlgorithm.V4,
        signature_type=auth.AwsSignatureType.HTTP_REQUEST_QUERY_PARAMS
        if query
        else auth.AwsSignatureType.HTTP_REQUEST_HEADERS,
        credentials_provider=auth.AwsCredentialsProvider.new_static(ACCESS_KEY, SECRET_KEY),
        region="us-east-1",
        service="s3",
        date=datetime.datetime.now(datetime.UTC),
        use_double_uri_encode=False,
        should_normalize_uri_path=False,
        signed_body_value=body_value,
        signed_body_header_type=auth.AwsSignedBodyHeaderType.NONE
        if query
        else auth.AwsSignedBodyHeaderType.X_AMZ_CONTENT_SHA_256,
        expiration_in_seconds=300 if query else None,
    )
    return auth.aws_sign_request(request, config).result(timeout=10)


def verify(request: http.HttpRequest, method: str | None = None) -> object:
    raw_path, _, query = request.path.partition("?")
    headers = [(name.lower().encode(), value.encode()) for name, value in request.headers]
    return authenticate(
        method or request.method,
        raw_path.encode(),
        query.encode(),
        headers,
        SECRETS.get,
        time.time(),
    )


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("query", [False, True], ids=["header", "presigned"])
def test_crt_signed_requests_verify(path: str, query: bool) -> None:
    request = sign("GET", path, [("host", "gw.test:9000")], UNSIGNED_PAYLOAD, query=query)
    context = verify(request)
    assert context is not None
    with pytest.raises(S3Error) as caught:
        verify(request, method="DELETE")
    assert caught.value.code == "SignatureDoesNotMatch"


def test_crt_signed_put_with_payload_hash_and_spaces() -> None:
    body_hash = hashlib.sha256(b"payload").hexdigest()
    request = sign(
        "PUT",
        "/b/key%20with%20spaces",
        [
            ("host", "gw.test"),
            ("content-type", "text/plain"),
            ("x-amz-meta-note", "  several   spaces  inside "),
        ],
        body_hash,
    )
    context = verify(request)
    assert context is not None
    assert context.payload_mode == PAYLOAD_SHA256  # type: ignore[attr-defined]
    assert context.declared_payload_hash == body_hash  # type: ignore[attr-defined]
