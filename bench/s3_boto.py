"""boto3 as a user runs it: the benchmark's second client, beside the load generator of
`bench/s3_load.py`.

One boto3 client per phase with its default settings (checksums `when_supported`, so a
PutObject carries a CRC32 and a GetObject asks for and checks one; retries `legacy`), except
a connection pool as large as the phase's concurrency, shared by that many threads. Over
plain HTTP botocore signs the payload (SHA-256 of the body in `x-amz-content-sha256`) and
sends the CRC32 in a header; over HTTPS it sends the body aws-chunked with the CRC32 in a
trailer. `request_mode` records which one a client actually sent.

    result = run_phase("put 16MiB", target_client, put_op("bucket", 16 << 20), 4, 5.0)

An operation is `op(sequence) -> bytes moved`, made per thread by `factory(client)`; object
number n is `object_key(prefix, n)`, the generator's naming, so the two clients read the
same objects. Failed requests are counted and sampled, never retried by this module.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
import botocore.parsers
import botocore.session
from botocore.config import Config

from bench.s3_load import ERROR_SAMPLES_MAX, PhaseResult, object_key

MIB = 1 << 20
BOTO_POOL_CONNECTIONS_MIN = 10  # botocore's default max_pool_connections

BotoClient = Any  # boto3's clients are generated at run time
BotoOp = Callable[[int], int]
BotoOpFactory = Callable[[BotoClient], BotoOp]


def make_client(endpoint: str, access_key: str, secret_key: str, concurrency: int) -> BotoClient:
    """A boto3 S3 client with default settings and a pool for `concurrency` threads."""
    config = Config(max_pool_connections=max(BOTO_POOL_CONNECTIONS_MIN, concurrency))
    return boto3.session.Session().client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        region_name="us-east-1",
        config=config,
    )


def request_mode(client: BotoClient, bucket: str) -> str:
    """How this client sends a PutObject body: one small PUT, headers seen before sending."""
    seen: dict[str, str] = {}

    def capture(request: Any, **_: object) -> None:
        for name, value in request.headers.items():
            text = value.decode() if isinstance(value, bytes) else str(value)
            seen[str(name).lower()] = text

    client.meta.events.register("before-send.s3.PutObject", capture)
    try:
        client.put_object(Bucket=bucket, Key="boto-request-mode", Body=b"x" * 1024)
    finally:
        client.meta.events.unregister("before-send.s3.PutObject", capture)
    return describe_request_mode(seen)


def describe_request_mode(headers: dict[str, str]) -> str:
    """A PutObject's body encoding, payload hash and checksum, from its headers."""
    payload = headers.get("x-amz-content-sha256", "")
    if len(payload) == 64:
        payload = "the payload's SHA-256 (signed payload)"
    checksums = ", ".join(sorted(name for name in headers if name.startswith("x-amz-checksum-")))
    if "aws-chunked" in headers.get("content-encoding", ""):
        trailer = headers.get("x-amz-trailer", "none")
        return f"aws-chunked body, trailer {trailer}, x-amz-content-sha256 {payload}"
    return f"plain body, x-amz-content-sha256 {payload}, header {checksums or 'no checksum'}"


def server_side_encryption(client: BotoClient, bucket: str, key: str) -> str:
    """The object's `x-amz-server-side-encryption` as a HEAD reports it ("" for none)."""
    return str(client.head_object(Bucket=bucket, Key=key).get("ServerSideEncryption", ""))


def warm(client: BotoClient, bucket: str, key: str) -> None:
    """Load the models of the operations the phases use (botocore does it on first use)."""
    client.get_object(Bucket=bucket, Key=key, Range="bytes=0-0")["Body"].read()
    client.list_objects_v2(Bucket=bucket, MaxKeys=1)


# --------------------------------------------------------------------------- operations


def put_op(
    bucket: str, size: int, prefix: str, extra: dict[str, str] | None = None
) -> BotoOpFactory:
    """PutObject of object number `sequence` (one random body shared by all), with the
    `extra` parameters, e.g. `{"ServerSideEncryption": "AES256"}`."""
    body = random.Random(size).randbytes(size)
    parameters = dict(extra or {})

    def factory(client: BotoClient) -> BotoOp:
        def op(sequence: int) -> int:
            key = object_key(prefix, sequence)
            client.put_object(Bucket=bucket, Key=key, Body=body, **parameters)
            return size

        return op

    return factory


def get_op(
    bucket: str, object_count: int, prefix: str, range_bytes: int = 0, object_bytes: int = 0
) -> BotoOpFactory:
    """GetObject of an object picked at random (each thread its own seeded sequence), whole
    or, given `range_bytes`, a random range of that many bytes, aligned on `range_bytes`,
    within its first `object_bytes`."""
    ranges = object_bytes // range_bytes if range_bytes else 0
    seeds = itertools.count(1)

    def factory(client: BotoClient) -> BotoOp:
        rng = random.Random(next(seeds))

        def op(sequence: int) -> int:
            key = object_key(prefix, rng.randrange(object_count))
            if not range_bytes:
                return len(client.get_object(Bucket=bucket, Key=key)["Body"].read())
            start = rng.randrange(ranges) * range_bytes
            header = f"bytes={start}-{start + range_bytes - 1}"
            return len(client.get_object(Bucket=bucket, Key=key, Range=header)["Body"].read())

        return op

    return factory


def list_op(bucket: str, prefix: str, page_keys: int = 1000) -> BotoOpFactory:
    """One ListObjectsV2 page per operation, walking the listing and starting over at its
    end (moves no object bytes: the report counts keys from the pages)."""

    def factory(client: BotoClient) -> BotoOp:
        token: list[str] = []

        def op(sequence: int) -> int:
            extra = {"ContinuationToken": token[0]} if token else {}
            page = client.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=page_keys, **extra)
            token[:] = [page["NextContinuationToken"]] if page.get("IsTruncated") else []
            return 0

        return op

    return factory


# --------------------------------------------------------------------------- runner


class PhaseRecorder:
    """What the threads of one phase record, under one lock."""

    def __init__(self, duration_s: float) -> None:
        self.lock = threading.Lock()
        self.next_sequence = 0
        self.latencies: list[float] = []
        self.moved = 0
        self.errors = 0
        self.samples: list[str] = []
        self.started = time.perf_counter()
        self.deadline = self.started + duration_s

    def take(self) -> int | None:
        """The next operation's sequence number, or None once the phase is over."""
        with self.lock:
            if time.perf_counter() >= self.deadline:
                return None
            self.next_sequence += 1
            return self.next_sequence - 1

    def done(self, latency_s: float, moved: int) -> None:
        with self.lock:
            self.latencies.append(latency_s)
            self.moved += moved

    def failed(self, error: Exception) -> None:
        with self.lock:
            self.errors += 1
            if len(self.samples) < ERROR_SAMPLES_MAX:
                self.samples.append(f"{type(error).__name__}: {error}")


def _worker(recorder: PhaseRecorder, op: BotoOp) -> None:
    while (sequence := recorder.take()) is not None:
        began = time.perf_counter()
        try:
            moved = op(sequence)
        except Exception as error:  # counted and sampled: a load run keeps going
            recorder.failed(error)
            continue
        recorder.done(time.perf_counter() - began, moved)


def run_phase(
    name: str, client: BotoClient, factory: BotoOpFactory, concurrency: int, duration_s: float
) -> PhaseResult:
    """`concurrency` threads sharing `client` (its pool at least as large), each sending its next request when the last
    one is answered, until `duration_s` passed (the requests in flight then finish)."""
    ops = [factory(client) for _ in range(concurrency)]
    cpu_started = time.process_time()
    recorder = PhaseRecorder(duration_s)
    with ThreadPoolExecutor(concurrency, thread_name_prefix="boto") as pool:
        for future in [pool.submit(_worker, recorder, op) for op in ops]:
            future.result()
    seconds = time.perf_counter() - recorder.started
    return phase_result(name, concurrency, recorder, seconds, time.process_time() - cpu_started)


def phase_result(
    name: str, concurrency: int, recorder: PhaseRecorder, seconds: float, cpu_seconds: float
) -> PhaseResult:
    ordered = sorted(recorder.latencies)

    def percentile_ms(fraction: float) -> float:
        return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] * 1e3 if ordered else 0

    return PhaseResult(
        name=name,
        ops=len(ordered),
        bytes=recorder.moved,
        seconds=seconds,
        ops_per_s=len(ordered) / seconds if seconds else 0.0,
        mb_per_s=recorder.moved / MIB / seconds if seconds else 0.0,
        p50_ms=percentile_ms(0.50),
        p99_ms=percentile_ms(0.99),
        errors=recorder.errors,
        concurrency=concurrency,
        client_cpu_s=cpu_seconds,
        error_samples=tuple(recorder.samples),
    )


def empty_bucket(client: BotoClient, bucket: str, batch_keys: int = 1000) -> int:
    """Delete every object of `bucket` (DeleteObjects, `batch_keys` keys at a time, at
    most S3's 1,000): how many. Keys deleted as they are listed: the walk is bounded by
    the bucket's size, each request by `batch_keys`."""
    batch: list[dict[str, str]] = []
    deleted = 0
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for item in page.get("Contents", []):
            batch.append({"Key": item["Key"]})
            if len(batch) == batch_keys:
                deleted += _delete_batch(client, bucket, batch)
                batch = []
    if batch:
        deleted += _delete_batch(client, bucket, batch)
    return deleted


def _delete_batch(client: BotoClient, bucket: str, batch: list[dict[str, str]]) -> int:
    answer = client.delete_objects(Bucket=bucket, Delete={"Objects": batch, "Quiet": True})
    errors = answer.get("Errors", [])
    if errors:
        raise RuntimeError(f"{bucket}: {len(errors)} keys not deleted, e.g. {errors[0]}")
    return len(batch)


# --------------------------------------------------------------------------- listing parse

# One key of a ListObjectsV2 page as blobstore writes it for an object boto3 uploaded
# (S3's elements, in S3's order); `listing_parse_ms` takes elements out to price them.
LISTED_KEY_ELEMENTS = {
    "LastModified": "<LastModified>2026-11-29T17:08:52.596Z</LastModified>",
    "ETag": "<ETag>&quot;9dd4e461268c8034f5c8564e155c67a6&quot;</ETag>",
    "Checksum": "<ChecksumAlgorithm>CRC32</ChecksumAlgorithm>"
    "<ChecksumType>FULL_OBJECT</ChecksumType>",
    "Size": "<Size>16777216</Size>",
    "StorageClass": "<StorageClass>STANDARD</StorageClass>",
}


def listing_page(keys: int, without: frozenset[str] = frozenset()) -> bytes:
    """A ListObjectsV2 answer of `keys` keys, each with LISTED_KEY_ELEMENTS but `without`."""
    fields = "".join(text for name, text in LISTED_KEY_ELEMENTS.items() if name not in without)
    head = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
        "<Name>bench</Name><Prefix></Prefix><MaxKeys>1000</MaxKeys>"
        f"<EncodingType>url</EncodingType><KeyCount>{keys}</KeyCount>"
        "<IsTruncated>true</IsTruncated><NextContinuationToken>t</NextContinuationToken>"
    )
    contents = "".join(
        f"<Contents><Key>list/key-{n:08d}</Key>{fields}</Contents>" for n in range(keys)
    )
    return (head + contents + "</ListBucketResult>").encode()


def listing_parse_ms(without: frozenset[str] = frozenset(), keys: int = 1000) -> float:
    """botocore's own parse of a `keys`-key ListObjectsV2 page (best of 5, ms on one
    core): what boto3 spends per page whatever the server, before HTTP and signing."""
    shape = botocore.session.get_session().get_service_model("s3")
    output = shape.operation_model("ListObjectsV2").output_shape
    response = {"body": listing_page(keys, without), "headers": {}, "status_code": 200}
    parser = botocore.parsers.RestXMLParser()
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        parser.parse(response, output)
        best = min(best, time.perf_counter() - started)
    return best * 1000
