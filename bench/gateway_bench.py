"""Gateway micro benchmark: the per-byte work of one PUT body and one read answer, in
process, with no network and no bookies.

    .venv/bin/python -m bench.gateway_bench [--mib 16] [--rounds 5]

PUT: a body of `--mib` MiB goes through `PayloadReader` in 64 KiB pieces (what uvicorn
hands the gateway), as boto3 sends it over HTTPS (aws-chunked, 1 MiB chunks, the CRC32
in an unsigned trailer), as boto3 sends it over plain HTTP (a declared SHA-256 and a
CRC32 header), in signed 64 KiB chunks (the AWS SDK for Java and minio-go over plain
HTTP) and unsigned (UNSIGNED-PAYLOAD, no checksum: the gateway adds its default
CRC64NVME). Each line gives MB/s and the CPU per MiB of the event loop's thread (the
request's critical path) and of the whole process (the hashing threads too).

GET: a 1 MiB READ_ENTRY answer cut from a receive buffer and decoded into its entry
(`bookie_client._cut_frame`, `Entry.decode`), as answers per second.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import functools
import hashlib
import hmac
import os
import time
import zlib
from collections.abc import AsyncIterator, Callable, Sequence

from blobstore.ledger.bookie_client import _cut_frame
from blobstore.wire import protocol
from s3api.aws_chunked import PayloadReader
from s3api.sigv4 import PAYLOAD_SHA256, STREAMING_SIGNED, AuthContext, derive_signing_key

MIB = 1 << 20
PIECE_BYTES = 64 * 1024
CHUNK_BYTES = MIB  # botocore's aws-chunked chunk size


def chunked_body(data: bytes) -> bytes:
    """data aws-chunked as botocore frames it, with an unsigned CRC32 trailer."""
    parts = []
    for start in range(0, len(data), CHUNK_BYTES):
        chunk = data[start : start + CHUNK_BYTES]
        parts.append(b"%x\r\n%s\r\n" % (len(chunk), chunk))
    crc = base64.b64encode(zlib.crc32(data).to_bytes(4, "big"))
    parts.append(b"0\r\nx-amz-checksum-crc32:%s\r\n\r\n" % crc)
    return b"".join(parts)


def signed_chunked_body(data: bytes, auth: AuthContext) -> bytes:
    """data in signed aws-chunked chunks of 64 KiB (as the AWS SDKs for Java and minio-go
    send it over plain HTTP)."""
    empty = hashlib.sha256(b"").hexdigest()
    previous = auth.seed_signature
    parts = []
    for start in [*range(0, len(data), PIECE_BYTES), len(data)]:
        chunk = data[start : start + PIECE_BYTES]
        string_to_sign = "\n".join(
            (
                "AWS4-HMAC-SHA256-PAYLOAD",
                auth.timestamp,
                auth.scope,
                previous,
                empty,
                hashlib.sha256(chunk).hexdigest(),
            )
        )
        previous = hmac.new(auth.signing_key, string_to_sign.encode(), "sha256").hexdigest()
        parts.append(b"%x;chunk-signature=%s\r\n%s" % (len(chunk), previous.encode(), chunk))
        parts.append(b"\r\n")  # after the data, or the end of the (empty) trailer
    return b"".join(parts)


def put_cases(data: bytes) -> dict[str, tuple[dict[str, str], bytes]]:
    crc = base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()
    return {
        "PUT aws-chunked, signed 64 KiB chunks": (
            {
                "x-amz-content-sha256": STREAMING_SIGNED,
                "x-amz-decoded-content-length": str(len(data)),
            },
            signed_chunked_body(data, signed_auth(STREAMING_SIGNED, None)),
        ),
        "PUT aws-chunked, CRC32 trailer": (
            {
                "x-amz-content-sha256": "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
                "x-amz-trailer": "x-amz-checksum-crc32",
                "x-amz-decoded-content-length": str(len(data)),
            },
            chunked_body(data),
        ),
        "PUT SHA-256 declared, CRC32 header": (
            {
                "x-amz-content-sha256": hashlib.sha256(data).hexdigest(),
                "x-amz-checksum-crc32": crc,
                "content-length": str(len(data)),
            },
            data,
        ),
        "PUT UNSIGNED-PAYLOAD, no checksum": ({"content-length": str(len(data))}, data),
    }


async def pieces(body: bytes) -> AsyncIterator[bytes]:
    for start in range(0, len(body), PIECE_BYTES):
        yield body[start : start + PIECE_BYTES]
        await asyncio.sleep(0)  # a receive: the loop runs other work meanwhile


def signed_auth(payload_mode: str, declared_sha256: str | None) -> AuthContext:
    """A request authenticated in payload_mode (a declared SHA-256 as boto3 signs over
    plain HTTP, or signed chunks)."""
    secret = "bench-secret"
    return AuthContext(
        access_key="bench-access",
        secret_key=secret,
        signing_key=derive_signing_key(secret, "20260101", "us-east-1", "s3"),
        date="20260101",
        region="us-east-1",
        service="s3",
        timestamp="20260101T000000Z",
        seed_signature="0" * 64,
        payload_mode=payload_mode,
        declared_payload_hash=declared_sha256,
        presigned=False,
        signed_headers=("host",),
    )


async def read_body(headers: dict[str, str], body: bytes) -> int:
    declared = headers.get("x-amz-content-sha256", "")
    auth = None
    if declared == STREAMING_SIGNED:
        auth = signed_auth(STREAMING_SIGNED, None)
    elif len(declared) == 64:
        auth = signed_auth(PAYLOAD_SHA256, declared)
    reader = PayloadReader(auth, headers, pieces(body))
    size = 0
    async for piece in reader:
        size += len(piece)
    assert reader.digest is not None
    return size


def timed(run: Callable[[], int]) -> tuple[float, float, float, int]:
    """(wall s, this thread's CPU s, the process's CPU s, bytes) of one run."""
    wall, thread, process = time.perf_counter(), time.thread_time(), time.process_time()
    moved = run()
    return (
        time.perf_counter() - wall,
        time.thread_time() - thread,
        time.process_time() - process,
        moved,
    )


def put_lines(mib: int, rounds: int) -> list[str]:
    data = os.urandom(mib * MIB)
    lines = []
    for name, (headers, body) in put_cases(data).items():
        run = functools.partial(lambda h, b: asyncio.run(read_body(h, b)), headers, body)
        results = [timed(run) for _ in range(rounds)]
        lines.append(put_line(name, results))
    return lines


def put_line(name: str, results: Sequence[tuple[float, float, float, int]]) -> str:
    wall = sum(r[0] for r in results)
    loop_cpu = sum(r[1] for r in results)
    cpu = sum(r[2] for r in results)
    mib = sum(r[3] for r in results) / MIB
    return (
        f"{name:58s} {mib * MIB / wall / 1e6:8.0f} MB/s  loop {loop_cpu * 1e3 / mib:5.2f} ms/MiB"
        f"  process {cpu * 1e3 / mib:5.2f} ms/MiB"
    )


def get_line(rounds: int) -> str:
    entry = protocol.Entry(1, 1, 0, MIB, os.urandom(MIB)).encode()
    frame = protocol.encode_frame(
        protocol.Op.READ_ENTRY,
        protocol.Status.OK,
        7,
        protocol.ReadResponse(1, 1, 0, entry).encode(),
    )
    buffer = bytearray(frame)
    start, count = protocol.FRAME_LENGTH.size, 200 * rounds

    def run() -> int:
        for _ in range(count):
            answer = _cut_frame(buffer, start, len(buffer))
            assert answer.read_response is not None
            protocol.Entry.decode(answer.read_response.entry)
        return count * MIB

    wall, loop_cpu, _, moved = timed(run)
    return (
        f"{'GET 1 MiB READ_ENTRY answer cut and decoded':58s} {count / wall:8.0f} /s    "
        f"loop {loop_cpu * 1e3 / (moved / MIB):5.2f} ms/MiB"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=16, help="PUT body size")
    parser.add_argument("--rounds", type=int, default=5, help="runs of each case")
    args = parser.parse_args(argv)
    for line in (*put_lines(args.mib, args.rounds), get_line(args.rounds)):
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
