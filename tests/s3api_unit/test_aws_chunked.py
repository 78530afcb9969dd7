"""aws-chunked decoding and body verification: AWS's published vectors, botocore's writer,
and every way a body can be cut, garbled or tampered with."""

from __future__ import annotations

import base64
import calendar
import dataclasses
import hashlib
import os
import random
from collections.abc import Iterator

import pytest
from awscrt import checksums as crt

from s3api import sigv4
from s3api.aws_chunked import (
    CHUNK_HEADER_BYTES_MAX,
    CHUNK_SIZE_MAX,
    ChunkedDecoder,
    PayloadReader,
    parse_decoded_content_length,
    strip_aws_chunked,
)
from s3api.errors import S3Error
from s3api.sigv4 import AuthContext, authenticate, derive_signing_key
from tests.s3api_unit.helpers import (
    SECRETS,
    CaptureClient,
    collect,
    pieces,
    sign_chunks,
)

SEED = os.environ.get("BLOBSTORE_TEST_SEED", "20261120")

AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
AWS_TIMESTAMP = "20130524T000000Z"
AWS_SCOPE = "20130524/us-east-1/s3/aws4_request"
CHUNK_1 = b"a" * 65536
CHUNK_2 = b"a" * 1024
EXAMPLE_1_SEED = "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9"
EXAMPLE_1_SIGS = (
    "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648",
    "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497",
    "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9",
)
EXAMPLE_2_SEED = "106e2a8a18243abcf37539882f36619c00e2dfc72633413f02d3b74544bfeb8e"
EXAMPLE_2_SIGS = (
    "b474d8862b1487a5145d686f57f013e54db672cee1c953b3010fb58501ef5aa2",
    "1c1344b170168f8e65b41376b44b20fe354e373826ccbbe2c1d40a8cae51e5c7",
    "2ca2aba2005185cf7159c6277faf83795951dd77a3a99e6e65d5c9f85863f992",
)
EXAMPLE_2_TRAILER = "x-amz-checksum-crc32c:sOO8/Q=="
EXAMPLE_2_TRAILER_SIG = "d81f82fc3505edab99d459891051a732e8730629a2e4a59689829ca17fe2e435"


@pytest.fixture
def rng() -> Iterator[random.Random]:
    print(f"BLOBSTORE_TEST_SEED={SEED}")
    yield random.Random(SEED)


def aws_auth(seed: str, mode: str) -> AuthContext:
    return AuthContext(
        access_key="AKIAIOSFODNN7EXAMPLE",
        secret_key=AWS_SECRET,
        signing_key=derive_signing_key(AWS_SECRET, "20130524", "us-east-1", "s3"),
        date="20130524",
        region="us-east-1",
        service="s3",
        timestamp=AWS_TIMESTAMP,
        seed_signature=seed,
        payload_mode=mode,
        declared_payload_hash=None,
        presigned=False,
        signed_headers=("host",),
    )


def example_body(sigs: tuple[str, str, str], trailer: str | None, trailer_sig: str | None) -> bytes:
    body = (
        f"10000;chunk-signature={sigs[0]}\r\n".encode()
        + CHUNK_1
        + b"\r\n"
        + f"400;chunk-signature={sigs[1]}\r\n".encode()
        + CHUNK_2
        + b"\r\n"
        + f"0;chunk-signature={sigs[2]}\r\n".encode()
    )
    if trailer is not None:
        body += f"{trailer}\r\nx-amz-trailer-signature:{trailer_sig}\r\n".encode()
    return body + b"\r\n"


def decode(decoder: ChunkedDecoder, body: bytes, piece_size: int) -> bytes:
    return collect(decoder.decode(pieces(body, piece_size)))


def example_1_decoder() -> ChunkedDecoder:
    return ChunkedDecoder(
        sigv4.STREAMING_SIGNED,
        auth=aws_auth(EXAMPLE_1_SEED, sigv4.STREAMING_SIGNED),
        decoded_length=66560,
    )


@pytest.mark.parametrize("piece_size", [1, 7, 100, 65536, 70000, 1 << 20])
def test_aws_published_signed_chunks(piece_size: int) -> None:
    body = example_body(EXAMPLE_1_SIGS, None, None)
    decoder = example_1_decoder()
    assert decode(decoder, body, piece_size) == CHUNK_1 + CHUNK_2
    assert decoder.done
    assert decoder.trailers == {}


@pytest.mark.parametrize("piece_size", [1, 13, 65536, 1 << 20])
def test_aws_published_signed_trailer(piece_size: int) -> None:
    body = example_body(EXAMPLE_2_SIGS, EXAMPLE_2_TRAILER, EXAMPLE_2_TRAILER_SIG)
    decoder = ChunkedDecoder(
        sigv4.STREAMING_SIGNED_TRAILER,
        auth=aws_auth(EXAMPLE_2_SEED, sigv4.STREAMING_SIGNED_TRAILER),
        decoded_length=66560,
        trailer_names=["x-amz-checksum-crc32c"],
    )
    assert decode(decoder, body, piece_size) == CHUNK_1 + CHUNK_2
    assert decoder.trailers == {"x-amz-checksum-crc32c": "sOO8/Q=="}
    crc = crt.crc32c(CHUNK_1 + CHUNK_2).to_bytes(4, "big")
    assert base64.b64encode(crc).decode() == "sOO8/Q=="


def chunk(data: bytes, sig: str) -> bytes:
    return f"{len(data):x};chunk-signature={sig}\r\n".encode() + data + b"\r\n"


FINAL = f"0;chunk-signature={EXAMPLE_1_SIGS[2]}\r\n\r\n".encode()
GOOD = example_body(EXAMPLE_1_SIGS, None, None)


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (GOOD.replace(b"a\r\n400;", b"b\r\n400;", 1), "SignatureDoesNotMatch"),
        (GOOD.replace(EXAMPLE_1_SIGS[1].encode(), b"0" * 64, 1), "SignatureDoesNotMatch"),
        (
            GOOD.replace(f"400;chunk-signature={EXAMPLE_1_SIGS[1]}".encode(), b"400", 1),
            "SignatureDoesNotMatch",
        ),
        (
            GOOD.replace(EXAMPLE_1_SIGS[2].encode(), EXAMPLE_1_SIGS[1].encode()),
            "SignatureDoesNotMatch",
        ),
        (
            chunk(CHUNK_2, EXAMPLE_1_SIGS[1]) + chunk(CHUNK_1, EXAMPLE_1_SIGS[0]) + FINAL,
            "SignatureDoesNotMatch",
        ),
        (chunk(CHUNK_1, EXAMPLE_1_SIGS[0]) + FINAL, "SignatureDoesNotMatch"),
        (GOOD[:-2] + b"x-amz-checksum-crc32:NSRBwg==\r\n\r\n", "InvalidRequest"),
        (GOOD + b"extra", "InvalidRequest"),
        (GOOD[:-1], "IncompleteBody"),
        (GOOD[:66000], "IncompleteBody"),
        (GOOD[:10], "IncompleteBody"),
        (b"", "IncompleteBody"),
        (GOOD.replace(b"\r\n400;", b"\r\r400;", 1), "InvalidRequest"),
        (GOOD.replace(b"10000;", b"zz000;", 1), "InvalidRequest"),
        (GOOD.replace(b"10000;", b"10000 ;", 1), "InvalidRequest"),
        (b"1" * (CHUNK_HEADER_BYTES_MAX + 10), "InvalidRequest"),
        (f"{CHUNK_SIZE_MAX + 1:x};chunk-signature={'0' * 64}\r\n".encode(), "InvalidRequest"),
        (b"1" * 17 + b";chunk-signature=" + b"0" * 64 + b"\r\n", "InvalidRequest"),
    ],
    ids=[
        "data-byte",
        "chunk-signature",
        "signature-missing",
        "final-signature",
        "reordered",
        "dropped-chunk",
        "unsigned-trailer-added",
        "data-after-end",
        "truncated-last-byte",
        "truncated-mid-chunk",
        "truncated-header",
        "empty",
        "missing-crlf",
        "size-not-hex",
        "size-with-space",
        "header-too-long",
        "chunk-too-large",
        "size-too-many-digits",
    ],
)
def test_signed_chunks_reject_bad_bodies(body: bytes, code: str) -> None:
    for piece_size in (3, 1 << 20):
        with pytest.raises(S3Error) as caught:
            decode(example_1_decoder(), body, piece_size)
        assert caught.value.code == code, (piece_size, caught.value)


def test_decoded_length_is_enforced() -> None:
    for declared, code in ((66561, "IncompleteBody"), (66559, "InvalidRequest")):
        decoder = ChunkedDecoder(
            sigv4.STREAMING_SIGNED,
            auth=aws_auth(EXAMPLE_1_SEED, sigv4.STREAMING_SIGNED),
            decoded_length=declared,
        )
        with pytest.raises(S3Error) as caught:
            decode(decoder, GOOD, 4096)
        assert caught.value.code == code
    with pytest.raises(S3Error) as caught:
        ChunkedDecoder(
            sigv4.STREAMING_SIGNED,
            auth=aws_auth(EXAMPLE_1_SEED, sigv4.STREAMING_SIGNED),
            decoded_length=100,
            size_max=10,
        )
    assert caught.value.code == "EntityTooLarge"


@pytest.mark.parametrize(
    "tamper",
    [
        lambda b: b.replace(b"sOO8/Q==", b"AAAAAA=="),
        lambda b: b.replace(
            EXAMPLE_2_TRAILER.encode() + b"\r\n",
            EXAMPLE_2_TRAILER.encode() + b"\r\nx-amz-meta-extra:1\r\n",
        ),
        lambda b: b.replace(EXAMPLE_2_TRAILER.encode() + b"\r\n", b""),
        lambda b: b.replace(EXAMPLE_2_TRAILER_SIG.encode(), EXAMPLE_2_SEED.encode()),
        lambda b: b.replace(f"x-amz-trailer-signature:{EXAMPLE_2_TRAILER_SIG}\r\n".encode(), b""),
    ],
    ids=["checksum", "trailer-added", "trailer-dropped", "signature", "signature-missing"],
)
def test_signed_trailer_tampering(tamper: object) -> None:
    body = tamper(example_body(EXAMPLE_2_SIGS, EXAMPLE_2_TRAILER, EXAMPLE_2_TRAILER_SIG))  # type: ignore[operator]
    decoder = ChunkedDecoder(
        sigv4.STREAMING_SIGNED_TRAILER,
        auth=aws_auth(EXAMPLE_2_SEED, sigv4.STREAMING_SIGNED_TRAILER),
        decoded_length=66560,
        trailer_names=["x-amz-checksum-crc32c"],
    )
    with pytest.raises(S3Error) as caught:
        decode(decoder, body, 1000)
    assert caught.value.code == "SignatureDoesNotMatch"


def test_signed_streaming_round_trip_random(rng: random.Random) -> None:
    auth = aws_auth(EXAMPLE_1_SEED, sigv4.STREAMING_SIGNED_TRAILER)
    for _ in range(20):
        chunks = [rng.randbytes(rng.choice((8192, 70000))) for _ in range(rng.randint(0, 4))]
        chunks.append(rng.randbytes(rng.choice((0, 1, 100, 9000))))  # the last may be small
        chunks = [chunk for chunk in chunks if chunk]
        data = b"".join(chunks)
        crc = base64.b64encode(crt.crc32(data).to_bytes(4, "big")).decode()
        body = sign_chunks(
            auth.signing_key,
            AWS_TIMESTAMP,
            AWS_SCOPE,
            EXAMPLE_1_SEED,
            chunks,
            trailer=[("x-amz-checksum-crc32", crc)],
        )
        decoder = ChunkedDecoder(
            sigv4.STREAMING_SIGNED_TRAILER,
            auth=auth,
            decoded_length=len(data),
            trailer_names=["x-amz-checksum-crc32"],
        )
        assert decode(decoder, body, rng.randint(1, 100000)) == data
        assert decoder.trailers == {"x-amz-checksum-crc32": crc}


def test_small_signed_chunks_only_last() -> None:
    auth = aws_auth(EXAMPLE_1_SEED, sigv4.STREAMING_SIGNED)
    body = sign_chunks(
        auth.signing_key, AWS_TIMESTAMP, AWS_SCOPE, EXAMPLE_1_SEED, [b"a" * 100, b"b" * 9000]
    )
    decoder = ChunkedDecoder(sigv4.STREAMING_SIGNED, auth=auth, decoded_length=9100)
    with pytest.raises(S3Error) as caught:
        decode(decoder, body, 4096)
    assert caught.value.code == "InvalidChunkSizeError"
    assert caught.value.fields == {"Chunk": "1", "BadChunkSize": "100"}


def test_signed_mode_needs_auth_and_forbids_trailer_declaration() -> None:
    with pytest.raises(S3Error) as caught:
        ChunkedDecoder(sigv4.STREAMING_SIGNED, auth=None, decoded_length=0)
    assert caught.value.code == "AccessDenied"
    with pytest.raises(S3Error) as caught:
        ChunkedDecoder(
            sigv4.STREAMING_SIGNED,
            auth=aws_auth(EXAMPLE_1_SEED, sigv4.STREAMING_SIGNED),
            decoded_length=0,
            trailer_names=["x-amz-checksum-crc32"],
        )
    assert caught.value.code == "InvalidRequest"


# ------------------------------------------------------------------ unsigned trailers


def unsigned_decoder(
    decoded_length: int | None, names: tuple[str, ...] = ("x-amz-checksum-crc32",)
) -> ChunkedDecoder:
    return ChunkedDecoder(
        sigv4.STREAMING_UNSIGNED_TRAILER,
        auth=None,
        decoded_length=decoded_length,
        trailer_names=names,
    )


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"3\r\nabc\r\n0\r\n\r\n", "IncompleteBody"),  # declared trailer missing
        (b"3\r\nabc\r\n0\r\nx-amz-checksum-crc32:AAAAAA==\r\n", "IncompleteBody"),
        (b"3\r\nabc\r\n0\r\nx-amz-checksum-sha1:AAAAAA==\r\n\r\n", "InvalidRequest"),
        (b"3\r\nabc\r\n0\r\nno-colon\r\n\r\n", "InvalidRequest"),
        (b"3\r\nabcd\r\n0\r\n\r\n", "InvalidRequest"),
        (
            b"3\r\nabc\r\n0\r\n" + b"x-amz-checksum-crc32:" + b"A" * 20000 + b"\r\n\r\n",
            "InvalidRequest",
        ),
        (
            b"3\r\nabc\r\n0\r\n" + b"x-amz-checksum-crc32:AAAAAA==\r\n" * 2 + b"\r\n",
            "InvalidRequest",
        ),
    ],
    ids=["no-trailer", "unterminated", "other-name", "garbled", "long-data", "huge", "twice"],
)
def test_unsigned_trailer_rejects(body: bytes, code: str) -> None:
    with pytest.raises(S3Error) as caught:
        decode(unsigned_decoder(3), body, 2)
    assert caught.value.code == code


@pytest.fixture(scope="module")
def capture() -> Iterator[CaptureClient]:
    yield CaptureClient()


def botocore_put(capture: CaptureClient, body: bytes, **kwargs: object):  # type: ignore[no-untyped-def]
    request = capture.capture(
        lambda c: c.put_object(Bucket="bucket-1", Key="k", Body=body, **kwargs)
    )
    auth = authenticate(
        request.method,
        request.raw_path,
        request.query_string,
        request.headers,
        SECRETS.get,
        __import__("time").time(),
    )
    return request, auth


@pytest.mark.parametrize("algorithm", ["CRC32", "CRC32C", "CRC64NVME", "SHA1", "SHA256"])
def test_botocore_unsigned_trailer_bodies(
    capture: CaptureClient, algorithm: str, rng: random.Random
) -> None:
    data = rng.randbytes(300_000)
    request, auth = botocore_put(capture, data, ChecksumAlgorithm=algorithm)
    assert auth is not None and auth.payload_mode == sigv4.STREAMING_UNSIGNED_TRAILER
    assert request.header("content-encoding") == "aws-chunked"
    reader = PayloadReader(auth, request.header_map(), pieces(request.body, 65536))
    assert collect(reader) == data
    assert reader.digest is not None
    assert reader.digest.size == len(data)
    assert reader.digest.md5_hex == hashlib.md5(data).hexdigest()
    name = f"x-amz-checksum-{algorithm.lower()}"
    assert reader.trailers[name] == reader.digest.checksums[algorithm]
    # The same body with one data byte flipped fails the trailer checksum.
    flipped = bytearray(request.body)
    flipped[100] ^= 1
    reader = PayloadReader(auth, request.header_map(), pieces(bytes(flipped), 65536))
    with pytest.raises(S3Error) as caught:
        collect(reader)
    assert caught.value.code == "BadDigest"
    assert caught.value.message == (
        f"The {algorithm} you specified did not match the calculated checksum."
    )


def test_botocore_empty_body_trailer(capture: CaptureClient) -> None:
    request, auth = botocore_put(capture, b"", ChecksumAlgorithm="CRC32")
    reader = PayloadReader(auth, request.header_map(), pieces(request.body, 10))
    assert collect(reader) == b""
    assert reader.digest is not None and reader.digest.checksums["CRC32"] == "AAAAAA=="


# ------------------------------------------------------------------ plain bodies


def plain_auth(declared: str | None) -> AuthContext:
    auth = aws_auth(EXAMPLE_1_SEED, sigv4.PAYLOAD_SHA256 if declared else sigv4.UNSIGNED_PAYLOAD)
    return dataclasses.replace(auth, declared_payload_hash=declared)


def test_plain_body_sha256_verified() -> None:
    data = b"x" * 100_000
    good = hashlib.sha256(data).hexdigest()
    reader = PayloadReader(plain_auth(good), {"content-length": str(len(data))}, pieces(data, 4096))
    assert collect(reader) == data
    assert reader.digest is not None and reader.digest.size == len(data)
    bad = hashlib.sha256(b"other").hexdigest()
    reader = PayloadReader(plain_auth(bad), {"content-length": str(len(data))}, pieces(data, 4096))
    with pytest.raises(S3Error) as caught:
        collect(reader)
    assert caught.value.code == "XAmzContentSHA256Mismatch"


@pytest.mark.parametrize(
    ("headers", "code"),
    [
        ({"content-length": "5"}, "IncompleteBody"),
        ({"content-length": "3"}, "InvalidRequest"),
        ({"content-length": "x"}, "InvalidArgument"),
        ({"content-md5": base64.b64encode(hashlib.md5(b"nope").digest()).decode()}, "BadDigest"),
        ({"content-md5": "not base64!"}, "InvalidDigest"),
        ({"content-md5": base64.b64encode(b"short").decode()}, "InvalidDigest"),
        ({"x-amz-checksum-crc32": "AAAAAA=="}, "BadDigest"),
        ({"x-amz-checksum-crc32": "AAAA"}, "InvalidRequest"),
        ({"x-amz-checksum-crc32": "AAAAAA==", "x-amz-checksum-sha1": "x"}, "InvalidRequest"),
        ({"x-amz-sdk-checksum-algorithm": "CRC32"}, "InvalidRequest"),
        (
            {"x-amz-sdk-checksum-algorithm": "MD4", "x-amz-checksum-crc32": "AAAAAA=="},
            "InvalidRequest",
        ),
    ],
)
def test_plain_body_failures(headers: dict[str, str], code: str) -> None:
    with pytest.raises(S3Error) as caught:
        collect(PayloadReader(plain_auth(None), headers, pieces(b"abcd", 2)))
    assert caught.value.code == code


def test_plain_body_checksum_header_and_size_limit() -> None:
    data = b"hello world"
    crc = base64.b64encode(crt.crc32c(data).to_bytes(4, "big")).decode()
    reader = PayloadReader(
        plain_auth(None),
        {
            "x-amz-checksum-crc32c": crc,
            "content-md5": base64.b64encode(hashlib.md5(data).digest()).decode(),
        },
        pieces(data, 3),
        extra_algorithms=["SHA256"],
    )
    assert collect(reader) == data
    assert reader.digest is not None
    assert reader.digest.checksums == {
        "CRC32C": crc,
        "SHA256": base64.b64encode(hashlib.sha256(data).digest()).decode(),
    }
    with pytest.raises(S3Error) as caught:
        PayloadReader(plain_auth(None), {"content-length": "11"}, pieces(data, 3), size_max=10)
    assert caught.value.code == "EntityTooLarge"
    with pytest.raises(S3Error) as caught:
        collect(PayloadReader(plain_auth(None), {}, pieces(data, 3), size_max=10))
    assert caught.value.code == "EntityTooLarge"


def test_anonymous_reader_and_helpers() -> None:
    reader = PayloadReader(None, {}, pieces(b"abc", 1))
    assert collect(reader) == b"abc"
    assert parse_decoded_content_length({}) is None
    assert parse_decoded_content_length({"x-amz-decoded-content-length": "42"}) == 42
    with pytest.raises(S3Error):
        parse_decoded_content_length({"x-amz-decoded-content-length": "-1"})
    assert strip_aws_chunked("aws-chunked") is None
    assert strip_aws_chunked("gzip,aws-chunked") == "gzip"
    assert strip_aws_chunked("aws-chunked, br") == "br"
    assert strip_aws_chunked(None) is None


def test_aws_example_through_payload_reader() -> None:
    headers = {
        "x-amz-decoded-content-length": "66560",
        "content-encoding": "aws-chunked",
        "x-amz-content-sha256": sigv4.STREAMING_SIGNED,
    }
    reader = PayloadReader(
        aws_auth(EXAMPLE_1_SEED, sigv4.STREAMING_SIGNED), headers, pieces(GOOD, 5000)
    )
    assert collect(reader) == CHUNK_1 + CHUNK_2
    assert reader.digest is not None
    assert reader.digest.md5_hex == hashlib.md5(CHUNK_1 + CHUNK_2).hexdigest()
    assert calendar.timegm((2013, 5, 24, 0, 0, 0)) > 0


def test_mutated_bodies_never_decode_to_other_data(
    rng: random.Random, capture: CaptureClient
) -> None:
    """Any single-byte change either fails with an S3 error or leaves the data intact."""
    data = rng.randbytes(12000)
    auth = aws_auth(EXAMPLE_1_SEED, sigv4.STREAMING_SIGNED_TRAILER)
    crc = base64.b64encode(crt.crc32(data).to_bytes(4, "big")).decode()
    signed = sign_chunks(
        auth.signing_key,
        AWS_TIMESTAMP,
        AWS_SCOPE,
        EXAMPLE_1_SEED,
        [data[:9000], data[9000:]],
        trailer=[("x-amz-checksum-crc32", crc)],
    )
    signed_headers = {
        "x-amz-decoded-content-length": str(len(data)),
        "x-amz-trailer": "x-amz-checksum-crc32",
    }
    request, unsigned_auth = botocore_put(capture, data, ChecksumAlgorithm="CRC32")
    cases = [(signed, auth, signed_headers), (request.body, unsigned_auth, request.header_map())]
    assert collect(PayloadReader(auth, signed_headers, pieces(signed, 5000))) == data
    for body, case_auth, headers in cases:
        for _ in range(150):
            mutated = bytearray(body)
            position = rng.randrange(len(mutated))
            mutated[position] = rng.choice([b for b in range(256) if b != mutated[position]])
            reader = PayloadReader(case_auth, headers, pieces(bytes(mutated), rng.randint(1, 6000)))
            try:
                decoded = collect(reader)
            except S3Error:
                continue
            assert decoded == data, position
