"""Server-side encryption request headers (s3api.sse_request), with S3's rules: each mode,
the conflicts S3 refuses, SSE-C's key, MD5 and TLS checks, and the KMS context."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest

from s3api.errors import S3Error
from s3api.sse_request import (
    COPY_SOURCE_PREFIX,
    SSE_C,
    customer_key_md5,
    parse_customer_key,
    parse_sse,
)

KEY = bytes(range(32))
KEY_B64 = base64.b64encode(KEY).decode()
KEY_MD5 = base64.b64encode(hashlib.md5(KEY).digest()).decode()
SSE_C_HEADERS = {
    "x-amz-server-side-encryption-customer-algorithm": "AES256",
    "x-amz-server-side-encryption-customer-key": KEY_B64,
    "x-amz-server-side-encryption-customer-key-md5": KEY_MD5,
}


def _code(headers: dict[str, str], secure: bool = True) -> tuple[str, str]:
    with pytest.raises(S3Error) as e:
        parse_sse(headers, secure=secure, allow_insecure=False)
    return e.value.code, str(e.value.message)


def test_each_mode() -> None:
    assert parse_sse({}, secure=False, allow_insecure=False).mode == ""
    assert (
        parse_sse(
            {"x-amz-server-side-encryption": "AES256"}, secure=False, allow_insecure=False
        ).mode
        == "AES256"
    )
    context = {"team": "photos"}
    kms = parse_sse(
        {
            "x-amz-server-side-encryption": "aws:kms",
            "x-amz-server-side-encryption-aws-kms-key-id": "alias/photos",
            "x-amz-server-side-encryption-context": base64.b64encode(
                json.dumps(context).encode()
            ).decode(),
        },
        secure=False,
        allow_insecure=False,
    )
    assert (kms.mode, kms.kms_key_id, dict(kms.context)) == ("aws:kms", "alias/photos", context)
    customer = parse_sse(SSE_C_HEADERS, secure=True, allow_insecure=False)
    assert (customer.mode, customer.customer_key, customer_key_md5(customer.customer_key)) == (
        SSE_C,
        KEY,
        KEY_MD5,
    )
    assert KEY_B64 not in repr(customer) and str(KEY) not in repr(customer)


def test_conflicts_and_unknown_methods_are_invalid_arguments() -> None:
    for headers in (
        {**SSE_C_HEADERS, "x-amz-server-side-encryption": "AES256"},
        {**SSE_C_HEADERS, "x-amz-server-side-encryption": "aws:kms"},
        {
            "x-amz-server-side-encryption": "AES256",
            "x-amz-server-side-encryption-aws-kms-key-id": "k",
        },
        {"x-amz-server-side-encryption-aws-kms-key-id": "k"},
        {"x-amz-server-side-encryption": "aes:kms"},
        {"x-amz-server-side-encryption": "aws:kms", "x-amz-server-side-encryption-context": "e30"},
        {
            "x-amz-server-side-encryption": "aws:kms",
            "x-amz-server-side-encryption-context": base64.b64encode(b"[1]").decode(),
        },
    ):
        assert _code(headers)[0] == "InvalidArgument", headers


def test_customer_keys_follow_s3s_rules() -> None:
    without = dict(SSE_C_HEADERS)
    del without["x-amz-server-side-encryption-customer-key-md5"]
    assert "MD5 of the secret key" in _code(without)[1]
    del without["x-amz-server-side-encryption-customer-key"]
    assert "appropriate secret key" in _code(without)[1]
    only_key = {k: v for k, v in SSE_C_HEADERS.items() if not k.endswith("algorithm")}
    assert "valid encryption algorithm" in _code(only_key)[1]
    wrong_md5 = {
        **SSE_C_HEADERS,
        "x-amz-server-side-encryption-customer-key-md5": "AAAAAAAAAAAAAAAAAAAAAA==",
    }
    assert "did not match" in _code(wrong_md5)[1]
    short = {
        **SSE_C_HEADERS,
        "x-amz-server-side-encryption-customer-key": base64.b64encode(b"x" * 16).decode(),
    }
    assert "invalid for the specified algorithm" in _code(short)[1]
    other = {**SSE_C_HEADERS, "x-amz-server-side-encryption-customer-algorithm": "AES128"}
    assert _code(other)[0] == "InvalidArgument"
    # Over plain HTTP: refused, unless the gateway allows it (tests).
    assert _code(SSE_C_HEADERS, secure=False)[0] == "InvalidRequest"
    assert parse_sse(SSE_C_HEADERS, secure=False, allow_insecure=True).customer_key == KEY


def test_a_copy_sources_key_has_its_own_headers() -> None:
    source = {COPY_SOURCE_PREFIX + k.removeprefix("x-amz-"): v for k, v in SSE_C_HEADERS.items()}
    assert "x-amz-copy-source-server-side-encryption-customer-key" in source
    got = parse_customer_key(source, COPY_SOURCE_PREFIX, secure=True, allow_insecure=False)
    assert got is not None and got.customer_key == KEY
    assert (
        parse_customer_key(SSE_C_HEADERS, COPY_SOURCE_PREFIX, secure=True, allow_insecure=False)
        is None
    )
    assert parse_sse(source, secure=True, allow_insecure=False).mode == ""
