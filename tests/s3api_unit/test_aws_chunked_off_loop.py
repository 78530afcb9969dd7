"""Large request bodies are hashed in a thread, a batch at a time, and still verified in
full before the iteration ends: MD5, checksums (header or trailer) and a declared SHA-256."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import random
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest
from awscrt import checksums as crt

from s3api import sigv4
from s3api.aws_chunked import PayloadReader
from s3api.checksums import HASH_BATCH_BYTES, OffLoopHashing, new_checksum, shared_hash_executor
from s3api.errors import S3Error
from s3api.sigv4 import AuthContext, authenticate, derive_signing_key
from tests.s3api_unit.helpers import SECRETS, CaptureClient, collect, pieces, sign_chunks

LARGE_BYTES = 6 * HASH_BATCH_BYTES + 12345


class CountingExecutor(ThreadPoolExecutor):
    """A thread pool that counts the jobs given to it."""

    def __init__(self) -> None:
        super().__init__(2, thread_name_prefix="test-hash")
        self.submitted = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.submitted += 1
        return super().submit(fn, *args, **kwargs)


@pytest.fixture
def executor() -> Iterator[CountingExecutor]:
    pool = CountingExecutor()
    yield pool
    pool.shutdown()


@pytest.fixture(scope="module")
def capture() -> Iterator[CaptureClient]:
    yield CaptureClient()


@pytest.fixture(scope="module")
def data() -> bytes:
    return random.Random(39).randbytes(LARGE_BYTES)


def botocore_trailer_put(capture: CaptureClient, body: bytes) -> tuple[Any, AuthContext]:
    """What boto3 sends over HTTPS: aws-chunked, unsigned, the CRC32 in a trailer."""
    request = capture.capture(
        lambda c: c.put_object(Bucket="bucket-1", Key="k", Body=body, ChecksumAlgorithm="CRC32")
    )
    auth = authenticate(
        request.method,
        request.raw_path,
        request.query_string,
        request.headers,
        SECRETS.get,
        time.time(),
    )
    assert auth is not None and auth.payload_mode == sigv4.STREAMING_UNSIGNED_TRAILER
    return request, auth


def crc32_b64(data: bytes) -> str:
    return base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


def test_trailer_body_hashed_in_the_thread_and_verified(
    capture: CaptureClient, executor: CountingExecutor, data: bytes
) -> None:
    request, auth = botocore_trailer_put(capture, data)
    reader = PayloadReader(
        auth, request.header_map(), pieces(request.body, 65536), hash_executor=executor
    )
    assert collect(reader) == data
    assert reader.digest is not None
    assert reader.digest.md5_hex == hashlib.md5(data).hexdigest()
    assert reader.digest.checksums == {"CRC32": crc32_b64(data)}
    assert executor.submitted >= LARGE_BYTES // HASH_BATCH_BYTES


@pytest.mark.parametrize("position", [100, LARGE_BYTES - 1])
def test_trailer_body_with_a_flipped_byte_is_refused(
    capture: CaptureClient, executor: CountingExecutor, data: bytes, position: int
) -> None:
    request, auth = botocore_trailer_put(capture, data)
    flipped = bytearray(request.body)
    flipped[flipped.index(data[:64]) + position] ^= 1
    reader = PayloadReader(
        auth, request.header_map(), pieces(bytes(flipped), 65536), hash_executor=executor
    )
    with pytest.raises(S3Error) as caught:
        collect(reader)
    assert caught.value.code == "BadDigest"
    assert reader.digest is None
    assert executor.submitted >= LARGE_BYTES // HASH_BATCH_BYTES


def plain_auth(declared: str | None, mode: str | None = None) -> AuthContext:
    secret = "plain-secret"
    if mode is None:
        mode = sigv4.PAYLOAD_SHA256 if declared else sigv4.UNSIGNED_PAYLOAD
    return AuthContext(
        access_key="plain-access",
        secret_key=secret,
        signing_key=derive_signing_key(secret, "20260101", "us-east-1", "s3"),
        date="20260101",
        region="us-east-1",
        service="s3",
        timestamp="20260101T000000Z",
        seed_signature="0" * 64,
        payload_mode=mode,
        declared_payload_hash=declared,
        presigned=False,
        signed_headers=("host",),
    )


def md5_b64(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data).digest()).decode()


@pytest.mark.parametrize(
    ("declared", "headers", "code"),
    [
        (None, {"content-md5": md5_b64(b"other")}, "BadDigest"),
        (None, {"x-amz-checksum-crc32": crc32_b64(b"other")}, "BadDigest"),
        (hashlib.sha256(b"other").hexdigest(), {}, "XAmzContentSHA256Mismatch"),
    ],
)
def test_plain_body_mismatches_are_refused(
    executor: CountingExecutor,
    data: bytes,
    declared: str | None,
    headers: dict[str, str],
    code: str,
) -> None:
    reader = PayloadReader(
        plain_auth(declared),
        {"content-length": str(len(data)), **headers},
        pieces(data, 100_000),
        hash_executor=executor,
    )
    with pytest.raises(S3Error) as caught:
        collect(reader)
    assert caught.value.code == code
    assert executor.submitted >= LARGE_BYTES // HASH_BATCH_BYTES


def test_plain_body_all_declared_hashes_match(executor: CountingExecutor, data: bytes) -> None:
    reader = PayloadReader(
        plain_auth(hashlib.sha256(data).hexdigest()),
        {
            "content-length": str(len(data)),
            "content-md5": md5_b64(data),
            "x-amz-checksum-crc32": crc32_b64(data),
        },
        pieces(data, 100_000),
        hash_executor=executor,
    )
    assert collect(reader) == data
    assert reader.digest is not None and reader.digest.checksums == {"CRC32": crc32_b64(data)}
    assert executor.submitted >= LARGE_BYTES // HASH_BATCH_BYTES


def hashed_threads(
    body: bytes, piece_bytes: int, executor: CountingExecutor
) -> tuple[int, set[int]]:
    """(the loop's thread, the threads that hashed body's pieces); the pieces must
    arrive in order."""
    seen: list[tuple[int, bytes]] = []

    def record(piece: object) -> None:
        assert isinstance(piece, bytes)
        seen.append((threading.get_ident(), piece))

    async def feed() -> int:
        hashing = OffLoopHashing((record,), executor)
        for start in range(0, len(body), piece_bytes):
            await hashing.update(body[start : start + piece_bytes])
        await hashing.flush()
        return threading.get_ident()

    loop_thread = asyncio.run(feed())
    assert b"".join(piece for _, piece in seen) == body
    return loop_thread, {thread for thread, _ in seen}


def test_large_body_is_hashed_in_order_off_the_loop(
    executor: CountingExecutor, data: bytes
) -> None:
    loop_thread, threads = hashed_threads(data, 65536, executor)
    assert loop_thread not in threads, "a large body was hashed on the event loop"


def test_small_body_is_hashed_on_the_loop(executor: CountingExecutor, data: bytes) -> None:
    loop_thread, threads = hashed_threads(data[: HASH_BATCH_BYTES - 1], 65536, executor)
    assert threads == {loop_thread}
    assert executor.submitted == 0


def test_crc32_matches_awscrt_over_pieces(data: bytes) -> None:
    checksum = new_checksum("CRC32")
    for start in range(0, len(data), 70_000):
        checksum.update(memoryview(data)[start : start + 70_000])
    assert checksum.digest() == crt.crc32(data).to_bytes(4, "big")


def test_forked_child_hashes_with_its_own_threads() -> None:
    parent_pool = shared_hash_executor()
    assert parent_pool.submit(int, "1").result(timeout=10) == 1  # its threads are started
    pid = os.fork()
    if pid == 0:  # the child: the parent's threads are not here
        code = 1
        try:
            pool = shared_hash_executor()
            if pool is not parent_pool and pool.submit(int, "2").result(timeout=10) == 2:
                code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert shared_hash_executor() is parent_pool


SIGNED_CHUNK_BYTES = 64 * 1024


def signed_body(data: bytes, chunks: list[bytes] | None = None) -> tuple[AuthContext, bytes]:
    """data as signed 64 KiB chunks (STREAMING-AWS4-HMAC-SHA256-PAYLOAD, no checksum: the
    chunk signatures alone protect it)."""
    auth = plain_auth(None, sigv4.STREAMING_SIGNED)
    if chunks is None:
        chunks = [
            data[start : start + SIGNED_CHUNK_BYTES]
            for start in range(0, len(data), SIGNED_CHUNK_BYTES)
        ]
    body = sign_chunks(auth.signing_key, auth.timestamp, auth.scope, auth.seed_signature, chunks)
    return auth, body


def read_signed(
    auth: AuthContext, body: bytes, size: int, executor: CountingExecutor
) -> PayloadReader:
    headers = {
        "x-amz-decoded-content-length": str(size),
        "content-encoding": "aws-chunked",
        "x-amz-content-sha256": sigv4.STREAMING_SIGNED,
    }
    return PayloadReader(auth, headers, pieces(body, 65536), hash_executor=executor)


def test_signed_chunks_are_checked_in_the_thread(executor: CountingExecutor, data: bytes) -> None:
    auth, body = signed_body(data)
    reader = read_signed(auth, body, len(data), executor)
    assert collect(reader) == data
    assert reader.digest is not None
    assert reader.digest.md5_hex == hashlib.md5(data).hexdigest()
    assert executor.submitted >= LARGE_BYTES // HASH_BATCH_BYTES


def flip_data_byte(body: bytes, data: bytes, offset: int) -> bytes:
    mutated = bytearray(body)
    chunk_index, within = divmod(offset, SIGNED_CHUNK_BYTES)
    chunk = data[chunk_index * SIGNED_CHUNK_BYTES : (chunk_index + 1) * SIGNED_CHUNK_BYTES]
    mutated[body.index(chunk) + within] ^= 1
    return bytes(mutated)


def flip_signature(body: bytes, chunk_index: int) -> bytes:
    mutated = bytearray(body)
    position = -1
    for _ in range(chunk_index + 1):
        position = body.index(b";chunk-signature=", position + 1)
    digit = position + len(b";chunk-signature=") + 10
    mutated[digit] = ord("0") if mutated[digit] != ord("0") else ord("1")
    return bytes(mutated)


def swap_first_chunks(body: bytes) -> bytes:
    """The first two chunks, each with its own signature, in the other order."""
    second = body.index(b";chunk-signature=", body.index(b";chunk-signature=") + 1)
    second -= len(b"%x" % SIGNED_CHUNK_BYTES)
    third = body.index(b";chunk-signature=", second + 20) - len(b"%x" % SIGNED_CHUNK_BYTES)
    return body[second:third] + body[:second] + body[third:]


@pytest.mark.parametrize(
    "mutate",
    [
        lambda body, data: flip_data_byte(body, data, 5),
        lambda body, data: flip_data_byte(body, data, 3 * HASH_BATCH_BYTES + 7),
        lambda body, data: flip_data_byte(body, data, len(data) - 1),
        lambda body, data: flip_signature(body, 1),
        lambda body, data: flip_signature(body, len(data) // SIGNED_CHUNK_BYTES - 1),
        lambda body, data: swap_first_chunks(body),
    ],
    ids=["data-first", "data-middle", "data-last", "signature-2nd", "signature-last", "swapped"],
)
def test_signed_chunk_tampering_is_refused_before_the_end(
    executor: CountingExecutor, data: bytes, mutate: Callable[[bytes, bytes], bytes]
) -> None:
    auth, body = signed_body(data)
    mutated = mutate(body, data)
    assert mutated != body
    with pytest.raises(S3Error) as caught:
        collect(read_signed(auth, mutated, len(data), executor))
    assert caught.value.code == "SignatureDoesNotMatch"
