"""Checksums against published vectors, zlib/hashlib, and the multipart forms S3 uses."""

from __future__ import annotations

import base64
import hashlib
import os
import random
import zlib

import pytest
from awscrt import checksums as crt

from s3api.checksums import (
    ALGORITHMS,
    BodyHasher,
    RequestChecksums,
    combine_full_object,
    composite_checksum,
    decode_checksum_value,
    header_name,
    multipart_etag,
    new_checksum,
    parse_algorithm,
    parse_checksum_type,
    parse_content_md5,
)
from s3api.errors import S3Error

SEED = os.environ.get("BLOBSTORE_TEST_SEED", "20261120")
CHECK = b"123456789"


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


@pytest.mark.parametrize(
    ("algorithm", "digest"),
    [
        ("CRC32", (0xCBF43926).to_bytes(4, "big")),
        ("CRC32C", (0xE3069283).to_bytes(4, "big")),
        ("CRC64NVME", (0xAE8B14860A799888).to_bytes(8, "big")),
        ("SHA1", hashlib.sha1(CHECK).digest()),
        ("SHA256", hashlib.sha256(CHECK).digest()),
    ],
)
def test_check_vectors(algorithm: str, digest: bytes) -> None:
    checksum = new_checksum(algorithm)
    checksum.update(CHECK[:4])
    checksum.update(memoryview(CHECK)[4:])
    assert checksum.digest() == digest
    assert checksum.b64() == b64(digest)


def test_crc32_matches_zlib_incrementally() -> None:
    print(f"BLOBSTORE_TEST_SEED={SEED}")
    rng = random.Random(SEED)
    data = rng.randbytes(1 << 20)
    checksum = new_checksum("CRC32")
    position = 0
    while position < len(data):
        step = rng.randint(1, 100_000)
        checksum.update(data[position : position + step])
        position += step
    assert int.from_bytes(checksum.digest(), "big") == zlib.crc32(data)


def test_empty_digests() -> None:
    assert new_checksum("CRC32").b64() == "AAAAAA=="
    assert new_checksum("CRC64NVME").b64() == "AAAAAAAAAAA="


def test_header_and_algorithm_parsing() -> None:
    assert header_name("CRC64NVME") == "x-amz-checksum-crc64nvme"
    assert parse_algorithm(" crc32c ") == "CRC32C"
    with pytest.raises(S3Error) as caught:
        parse_algorithm("md5")
    assert caught.value.code == "InvalidRequest"
    assert parse_checksum_type("CRC32", None) == "COMPOSITE"
    assert parse_checksum_type("CRC64NVME", None) == "FULL_OBJECT"
    assert parse_checksum_type("CRC32C", "full_object") == "FULL_OBJECT"
    assert parse_checksum_type(None, None) is None
    for algorithm, value in (
        ("SHA256", "FULL_OBJECT"),
        ("CRC64NVME", "COMPOSITE"),
        (None, "COMPOSITE"),
    ):
        with pytest.raises(S3Error) as caught:
            parse_checksum_type(algorithm, value)
        assert caught.value.code == "InvalidRequest"


def test_value_decoding() -> None:
    assert decode_checksum_value("CRC32", "AAAAAA==") == b"\0\0\0\0"
    for bad in ("AAAA", "!!!!!!==", "AAAAAAAAAAA=", ""):
        with pytest.raises(S3Error) as caught:
            decode_checksum_value("CRC32", bad)
        assert caught.value.code == "InvalidRequest"
        assert caught.value.message == "Value for x-amz-checksum-crc32 header is invalid."
    assert parse_content_md5(b64(hashlib.md5(b"").digest())) == hashlib.md5(b"").digest()
    for bad in ("", "abc", b64(b"x" * 15), "@@@@"):
        with pytest.raises(S3Error) as caught:
            parse_content_md5(bad)
        assert caught.value.code == "InvalidDigest"


def test_request_checksums_from_headers() -> None:
    assert RequestChecksums.from_headers({}) == RequestChecksums()
    plan = RequestChecksums.from_headers(
        {"x-amz-checksum-sha256": b64(b"\1" * 32), "x-amz-sdk-checksum-algorithm": "SHA256"}
    )
    assert plan.algorithm == "SHA256" and plan.expected == b"\1" * 32 and not plan.in_trailer
    plan = RequestChecksums.from_headers({"x-amz-trailer": "x-amz-checksum-crc64nvme"})
    assert plan.algorithm == "CRC64NVME" and plan.in_trailer
    assert plan.trailer_name() == "x-amz-checksum-crc64nvme"
    for bad in (
        {"x-amz-trailer": "x-amz-meta-a"},
        {"x-amz-trailer": "x-amz-checksum-crc32,x-amz-checksum-sha1"},
        {"x-amz-trailer": "x-amz-checksum-crc32", "x-amz-checksum-crc32": "AAAAAA=="},
        {"x-amz-trailer": "x-amz-checksum-crc32", "x-amz-sdk-checksum-algorithm": "SHA1"},
        {"x-amz-checksum-crc32": "AAAAAA==", "x-amz-sdk-checksum-algorithm": "SHA1"},
    ):
        with pytest.raises(S3Error) as caught:
            RequestChecksums.from_headers(bad)
        assert caught.value.code == "InvalidRequest", bad


def test_body_hasher_trailer_and_header() -> None:
    data = b"The quick brown fox"
    crc = b64(crt.crc32(data).to_bytes(4, "big"))
    hasher = BodyHasher(RequestChecksums.from_headers({"x-amz-trailer": "x-amz-checksum-crc32"}))
    hasher.update(data)
    digest = hasher.finish({"x-amz-checksum-crc32": crc})
    assert digest.checksums == {"CRC32": crc}
    assert digest.md5_hex == hashlib.md5(data).hexdigest()
    hasher = BodyHasher(RequestChecksums.from_headers({"x-amz-trailer": "x-amz-checksum-crc32"}))
    hasher.update(data)
    with pytest.raises(S3Error) as caught:
        hasher.finish({})
    assert caught.value.code == "InvalidRequest"
    hasher = BodyHasher(RequestChecksums.from_headers({"x-amz-checksum-crc32": "AAAAAA=="}))
    hasher.update(data)
    with pytest.raises(S3Error) as caught:
        hasher.finish()
    assert caught.value.code == "BadDigest"
    assert caught.value.message == "The CRC32 you specified did not match the calculated checksum."


def test_multipart_etag() -> None:
    parts = [b"a" * 10, b"b" * 20]
    md5s = [hashlib.md5(p).hexdigest() for p in parts]
    expected = hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest()
    assert multipart_etag(md5s) == f"{expected}-2"


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_composite_checksum(algorithm: str) -> None:
    parts = [b"x" * 100, b"y" * 7, b"z"]
    values = []
    for part in parts:
        checksum = new_checksum(algorithm)
        checksum.update(part)
        values.append(checksum.b64())
    combined = new_checksum(algorithm)
    for value in values:
        combined.update(base64.b64decode(value))
    assert composite_checksum(algorithm, values) == f"{combined.b64()}-3"


@pytest.mark.parametrize("algorithm", ["CRC32", "CRC32C", "CRC64NVME"])
def test_full_object_combination(algorithm: str) -> None:
    print(f"BLOBSTORE_TEST_SEED={SEED}")
    rng = random.Random(SEED)
    parts = [rng.randbytes(rng.randint(0, 5000)) for _ in range(6)]
    listed = []
    for part in parts:
        checksum = new_checksum(algorithm)
        checksum.update(part)
        listed.append((checksum.b64(), len(part)))
    whole = new_checksum(algorithm)
    whole.update(b"".join(parts))
    assert combine_full_object(algorithm, listed) == whole.b64()
