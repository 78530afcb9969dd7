"""What a request asks of server-side encryption, read from its headers with S3's rules
and errors (the encryption itself: blobstore/objects/sse.py; keys: blobstore/kms).

- SSE-S3: `x-amz-server-side-encryption: AES256`.
- SSE-KMS: `x-amz-server-side-encryption: aws:kms` (or `aws:kms:dsse`), with an optional
  `-aws-kms-key-id` (the bucket's default key without one) and `-context` (base64 of a
  JSON object of strings).
- SSE-C: `x-amz-server-side-encryption-customer-algorithm: AES256`, `-customer-key`
  (base64 of 32 bytes) and `-customer-key-MD5` (base64 of the key's MD5), all three; the
  copy source's own key in the `x-amz-copy-source-server-side-encryption-customer-*`
  headers. Only over TLS, unless the gateway allows it for tests.

Every mistake is 400 InvalidArgument (or S3's more precise code) naming the header.
The answer is the object layer's `SseSpec`; the customer's key is never logged: its repr
leaves the key out.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Mapping

from blobstore.objects.encryption import SseSpec
from s3api.errors import S3Error

SSE = "x-amz-server-side-encryption"
KMS_KEY_ID = f"{SSE}-aws-kms-key-id"
KMS_CONTEXT = f"{SSE}-context"
CUSTOMER_ALGORITHM = f"{SSE}-customer-algorithm"
CUSTOMER_KEY = f"{SSE}-customer-key"
CUSTOMER_KEY_MD5 = f"{SSE}-customer-key-md5"
COPY_SOURCE_PREFIX = "x-amz-copy-source-"
SSE_S3 = "AES256"
SSE_KMS = ("aws:kms", "aws:kms:dsse")
SSE_C = "SSE-C"
CUSTOMER_KEY_BYTES = 32
CONTEXT_BYTES_MAX = 8192


def customer_key_md5(key: bytes) -> str:
    """What S3 echoes in x-amz-server-side-encryption-customer-key-MD5."""
    return base64.b64encode(hashlib.md5(key).digest()).decode()


def _invalid(message: str, header: str, value: str = "") -> S3Error:
    return S3Error("InvalidArgument", message, ArgumentName=header, ArgumentValue=value)


def parse_sse(headers: Mapping[str, str], *, secure: bool, allow_insecure: bool) -> SseSpec:
    """The encryption a write asks for (`headers`: lowercase names). `secure`: the
    request came over TLS; `allow_insecure`: SSE-C over plain HTTP is taken anyway."""
    customer = parse_customer_key(headers, "", secure=secure, allow_insecure=allow_insecure)
    method = headers.get(SSE, "").strip()
    if customer is not None:
        if method or KMS_KEY_ID in headers:
            raise _invalid(
                "Server Side Encryption with Customer provided key is incompatible with the "
                "encryption method specified",
                SSE,
                method,
            )
        return customer
    if not method:
        if KMS_KEY_ID in headers or KMS_CONTEXT in headers:
            raise _invalid(
                "Server Side Encryption with AWS KMS managed key requires HTTP header "
                "x-amz-server-side-encryption : aws:kms",
                KMS_KEY_ID if KMS_KEY_ID in headers else KMS_CONTEXT,
            )
        return SseSpec()
    if method == SSE_S3:
        if KMS_KEY_ID in headers or KMS_CONTEXT in headers:
            raise _invalid(
                "Server Side Encryption with AWS KMS managed key requires HTTP header "
                "x-amz-server-side-encryption : aws:kms",
                KMS_KEY_ID if KMS_KEY_ID in headers else KMS_CONTEXT,
            )
        return SseSpec(SSE_S3)
    if method in SSE_KMS:
        return SseSpec(
            "aws:kms", headers.get(KMS_KEY_ID, "").strip(), parse_context(headers.get(KMS_CONTEXT))
        )
    raise _invalid("The encryption method specified is not supported", SSE, method)


def parse_context(value: str | None) -> dict[str, str]:
    """x-amz-server-side-encryption-context: base64 of a JSON object of strings."""
    if value is None:
        return {}
    message = "The provided encryption context is not valid: base64 of a JSON object of strings"
    if len(value) > CONTEXT_BYTES_MAX:
        raise _invalid(message, KMS_CONTEXT)
    try:
        context = json.loads(base64.b64decode(value.strip(), validate=True))
    except (binascii.Error, ValueError):
        raise _invalid(message, KMS_CONTEXT) from None
    if not isinstance(context, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in context.items()
    ):
        raise _invalid(message, KMS_CONTEXT)
    return context


def parse_customer_key(
    headers: Mapping[str, str], prefix: str, *, secure: bool, allow_insecure: bool
) -> SseSpec | None:
    """The SSE-C key of the request (`prefix` "") or of its copy source
    (COPY_SOURCE_PREFIX); None when none of its three headers is there."""
    # x-amz-server-side-encryption-customer-key, x-amz-copy-source-server-side-...
    names = [
        prefix + name.removeprefix("x-amz-") if prefix else name
        for name in (CUSTOMER_ALGORITHM, CUSTOMER_KEY, CUSTOMER_KEY_MD5)
    ]
    algorithm, key_b64, md5_b64 = (headers.get(name) for name in names)
    if algorithm is None and key_b64 is None and md5_b64 is None:
        return None
    if not secure and not allow_insecure:
        raise S3Error(
            "InvalidRequest",
            "Requests specifying Server Side Encryption with Customer provided keys must be "
            "made over a secure connection.",
        )
    if algorithm is None:
        raise _invalid(
            "Requests specifying Server Side Encryption with Customer provided keys must "
            "provide a valid encryption algorithm.",
            names[0],
        )
    if algorithm.strip() != SSE_S3:
        raise _invalid("The encryption algorithm specified is not valid.", names[0], algorithm)
    key = _customer_key(key_b64, names[1])
    _check_key_md5(key, md5_b64, names[2])
    return SseSpec(SSE_C, customer_key=key)


def _customer_key(value: str | None, header: str) -> bytes:
    if value is None:
        raise _invalid(
            "Requests specifying Server Side Encryption with Customer provided keys must "
            "provide an appropriate secret key.",
            header,
        )
    try:
        key = base64.b64decode(value.strip(), validate=True)
    except binascii.Error:
        key = b""
    if len(key) != CUSTOMER_KEY_BYTES:
        raise _invalid("The secret key was invalid for the specified algorithm.", header)
    return key


def _check_key_md5(key: bytes, value: str | None, header: str) -> None:
    if value is None:
        raise _invalid(
            "Requests specifying Server Side Encryption with Customer provided keys must "
            "provide the client calculated MD5 of the secret key.",
            header,
        )
    if value.strip() != customer_key_md5(key):
        raise _invalid(
            "The calculated MD5 hash of the key did not match the hash that was provided.",
            header,
        )
