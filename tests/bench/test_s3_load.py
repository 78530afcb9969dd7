"""bench/s3_load.py: its SigV4 signatures equal botocore's; its HTTP client reads
Content-Length and chunked bodies and counts unexpected statuses (against its trivial
server); and every operation works against a real cluster (ZooKeeper, 3 bookies, the
gateway), checked with boto3.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import socket
from pathlib import Path

import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from bench import s3_load
from tests.cluster.gateway import ACCESS_KEY, SECRET_KEY, GatewayProcess
from tests.cluster.processes import ProcessReaper

NOW = 1_795_000_123.0  # a fixed signing time


def botocore_authorization(
    method: str,
    host: str,
    path: str,
    query: list[tuple[str, str]],
    headers: list[tuple[str, str]],
    amz_date: str,
    region: str,
) -> str:
    request = AWSRequest(
        method=method,
        url=f"http://{host}{path}",
        params=query,
        headers={
            "Host": host,
            "X-Amz-Date": amz_date,
            "X-Amz-Content-SHA256": "UNSIGNED-PAYLOAD",
            **dict(headers),
        },
    )
    request.context["timestamp"] = amz_date
    auth = S3SigV4Auth(
        Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"), "s3", region
    )
    canonical_request = auth.canonical_request(request)
    signature = auth.signature(auth.string_to_sign(request, canonical_request), request)
    auth._inject_signature_to_request(request, signature)
    return str(request.headers["Authorization"])


@pytest.mark.parametrize(
    ("method", "bucket", "key", "query", "headers", "region"),
    [
        ("PUT", "bucket", "obj-0000000001", [], [], "us-east-1"),
        ("GET", "bucket", "dir/a b+c=d&é~.txt", [], [("Range", "bytes=0-99")], "us-east-1"),
        (
            "GET",
            "bucket",
            None,
            [
                ("list-type", "2"),
                ("prefix", "a/b c"),
                ("max-keys", "7"),
                ("continuation-token", "x+y/z="),
            ],
            [],
            "eu-west-3",
        ),  # fmt: skip
        (
            "POST",
            "bucket",
            None,
            [("delete", "")],
            [("Content-MD5", "1B2M2Y8AsgTpgAmY7PhCfg=="), ("Content-Type", "application/xml")],
            "us-east-1",
        ),  # fmt: skip
        ("PUT", "bucket", "k", [("partNumber", "3"), ("uploadId", "u/1+2")], [], "us-east-1"),
    ],
)
def test_signature_matches_botocore(
    method: str,
    bucket: str,
    key: str | None,
    query: list[tuple[str, str]],
    headers: list[tuple[str, str]],
    region: str,
) -> None:
    signer = s3_load.SigV4Signer("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", region)
    path = s3_load.object_path(bucket, key)
    host = "127.0.0.1:9000"
    amz_date, authorization = signer.sign(
        method, path, s3_load.canonical_query(query), host, headers, now=NOW
    )
    assert amz_date == "20261118T110843Z"
    expected = botocore_authorization(method, host, path, query, headers, amz_date, region)
    assert authorization == expected


def test_signing_key_is_derived_once_per_day() -> None:
    signer = s3_load.SigV4Signer("a", "b")
    key = signer.signing_key("20261121")
    assert signer.signing_key("20261121") is key
    assert signer.signing_key("20261122") != key


def test_content_length_and_chunked_bodies_are_read_whole() -> None:
    for chunked in (False, True):
        with s3_load.trivial_server(10_000, chunked=chunked) as endpoint:
            result = s3_load.run_phase(
                "get", endpoint, "a", "b", s3_load.get_op("bucket", 3), concurrency=4, count=200
            )
        assert (result.ops, result.errors, result.bytes) == (200, 0, 200 * 10_000), result


def test_an_offered_rate_spreads_operations_over_their_schedule() -> None:
    """Open loop: operation i is due at i/rate, so 100 operations at 400/s cannot finish
    before the last is due (0.2475 s, less the millisecond by which uvloop's timers may
    fire early), however fast the server; every one still runs."""
    with s3_load.trivial_server(100) as endpoint:
        result = s3_load.run_phase(
            "get", endpoint, "a", "b", s3_load.get_op("bucket", 3), 8, count=100, rate=400.0
        )
        assert (result.ops, result.errors) == (100, 0), result
        assert result.seconds >= 99 / 400 - 0.002
        with pytest.raises(ValueError, match="rate"):
            s3_load.run_phase(
                "get", endpoint, "a", "b", s3_load.get_op("b", 1), 1, count=1, rate=0.0
            )


def test_connections_closed_by_the_server_are_reopened() -> None:
    with s3_load.trivial_server(1000, close_every=3) as endpoint:
        result = s3_load.run_phase(
            "get", endpoint, "a", "b", s3_load.get_op("bucket", 3), concurrency=4, count=100
        )
    assert (result.ops, result.errors, result.bytes) == (100, 0, 100 * 1000), result


def test_large_bodies_are_sent_in_slices() -> None:
    size = 3 * s3_load.WRITE_SLICE_BYTES + 12345
    with s3_load.trivial_server() as endpoint:
        result = s3_load.run_phase(
            "put", endpoint, "a", "b", s3_load.put_op("bucket", size), concurrency=2, count=6
        )
    assert (result.ops, result.errors, result.bytes) == (6, 0, 6 * size), result


def test_a_request_without_an_answer_times_out() -> None:
    with socket.socket() as listener:  # the kernel completes connections; nobody answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        endpoint = f"http://127.0.0.1:{listener.getsockname()[1]}"
        result = s3_load.run_phase(
            "get",
            endpoint,
            "a",
            "b",
            s3_load.get_op("bucket", 1),
            concurrency=1,
            count=1,
            request_timeout_s=1.0,
        )
    assert (result.ops, result.errors) == (0, 1)
    assert "TimeoutError" in result.error_samples[0], result.error_samples


def test_unexpected_status_is_an_error_with_a_sample() -> None:
    with s3_load.trivial_server(100) as endpoint:
        # A Range GET expects 206; the trivial server answers 200.
        result = s3_load.run_phase(
            "range",
            endpoint,
            "a",
            "b",
            s3_load.get_op("bucket", 1, byte_range=(0, 9)),
            concurrency=2,
            count=10,
        )
    assert (result.ops, result.errors) == (0, 10)
    assert "HTTP 200" in result.error_samples[0], result.error_samples


def test_ceiling_measurement_runs() -> None:
    result = s3_load.measure_ceiling("put", size=4096, concurrency=8, duration_s=1.0)
    print(
        f"ceiling: {result.ops_per_s:.0f} req/s, "
        f"{1e6 * result.client_cpu_s / max(result.ops, 1):.0f} us client CPU per request"
    )
    assert result.ops > 0 and result.errors == 0 and result.bytes == result.ops * 4096


def test_unreachable_endpoint_is_a_clear_error() -> None:
    with s3_load.trivial_server() as endpoint:
        pass  # stopped: its port is free now
    with pytest.raises(s3_load.S3LoadError, match="cannot connect"):
        s3_load.run_phase("put", endpoint, "a", "b", s3_load.put_op("b", 1), 1, count=1)


@pytest.fixture
def gateway(bookies, zk_connect: str, reaper: ProcessReaper, tmp_path: Path) -> GatewayProcess:  # type: ignore[no-untyped-def]
    bookies(3)
    return GatewayProcess(
        name="gateway",
        zk=zk_connect,
        root=tmp_path / "gateway",
        reaper=reaper,
        env={"BLOBSTORE_PART_BYTES_MIN": str(64 * 1024)},
    ).start()


def test_every_operation_against_a_real_gateway(gateway: GatewayProcess) -> None:
    seed = int(os.environ.get("BLOBSTORE_TEST_SEED", "20261121"))
    print(f"BLOBSTORE_TEST_SEED={seed}")
    rng = random.Random(seed)
    s3 = gateway.client()
    credentials = (gateway.endpoint, ACCESS_KEY, SECRET_KEY)
    bucket = "load"
    s3_load.create_bucket(*credentials, bucket)
    s3_load.create_bucket(*credentials, bucket)  # already owned: fine

    put = s3_load.put_op(bucket, 3000, prefix="o/")
    result = s3_load.run_phase("put", *credentials, put, concurrency=4, count=40)
    assert (result.ops, result.errors, result.bytes) == (40, 0, 40 * 3000), result.error_samples
    body = s3.get_object(Bucket=bucket, Key=s3_load.object_key("o/", 7))["Body"].read()
    assert len(body) == 3000

    get = s3_load.get_op(bucket, 40, prefix="o/")
    result = s3_load.run_phase("get", *credentials, get, concurrency=4, count=80)
    assert (result.ops, result.errors, result.bytes) == (80, 0, 80 * 3000), result.error_samples
    shuffled = s3_load.get_op(bucket, 40, prefix="o/", random_seed=5)
    result = s3_load.run_phase("get", *credentials, shuffled, concurrency=4, count=80)
    assert (result.ops, result.errors, result.bytes) == (80, 0, 80 * 3000), result.error_samples
    ranged = s3_load.get_op(bucket, 40, prefix="o/", byte_range=(100, 199))
    result = s3_load.run_phase("range", *credentials, ranged, concurrency=2, count=10)
    assert (result.ops, result.errors, result.bytes) == (10, 0, 10 * 100), result.error_samples

    # One worker walks the listing in pages of 7: 40 keys -> 6 pages, then starts over.
    result = s3_load.run_phase(
        "list", *credentials, s3_load.list_op(bucket, "o/", max_keys=7), concurrency=1, count=7
    )
    assert (result.ops, result.errors) == (7, 0), result.error_samples

    async def check_listing_and_range() -> tuple[list[str], bytes | None]:
        async with s3_load.S3Client(*credentials) as client:
            connection = await client.connect()
            keys = await client.list_all(connection, bucket, "o/")
            scanned = await client.list_objects_v2(
                connection, bucket, "o/", max_keys=7, parse_keys=False
            )
            assert (scanned.keys, scanned.key_count) == ([], 7)
            page = await client.list_objects_v2(connection, bucket, "o/", scanned.next_token, 7)
            assert page.keys == keys[7:14]
            response = await client.get_object(
                connection, bucket, s3_load.object_key("o/", 7), (10, 19), keep_body=True
            )
            return keys, response.body

    keys, chunk = s3_load.run_async(check_listing_and_range())
    assert keys == [s3_load.object_key("o/", number) for number in range(40)]
    assert chunk == body[10:20]

    # Multipart: 300 KiB in 64 KiB parts, 3 at a time; the object is the concatenation.
    size = 300 * 1024 + rng.randrange(1000)
    multipart = s3_load.multipart_op(bucket, size, 64 * 1024, part_concurrency=3, prefix="m/")
    result = s3_load.run_phase("multipart", *credentials, multipart, concurrency=2, count=2)
    assert (result.ops, result.errors, result.bytes) == (2, 0, 2 * size), result.error_samples
    first = s3.get_object(Bucket=bucket, Key=s3_load.object_key("m/", 0))["Body"].read()
    second = s3.get_object(Bucket=bucket, Key=s3_load.object_key("m/", 1))["Body"].read()
    assert len(first) == size and hashlib.sha256(first).digest() == hashlib.sha256(second).digest()

    # DeleteObjects of 30 keys (batches of 10 with Content-MD5), then DELETE the last 10.
    batch = s3_load.delete_objects_op(bucket, prefix="o/", batch=10)
    result = s3_load.run_phase("delete-objects", *credentials, batch, concurrency=3, count=3)
    assert (result.ops, result.errors) == (3, 0), result.error_samples
    remaining = [item["Key"] for item in s3.list_objects_v2(Bucket=bucket, Prefix="o/")["Contents"]]
    assert remaining == [s3_load.object_key("o/", number) for number in range(30, 40)]

    async def delete_rest() -> None:
        async with s3_load.S3Client(*credentials) as client:
            connection = await client.connect()
            for number in range(30, 40):
                await client.delete_object(connection, bucket, s3_load.object_key("o/", number))

    s3_load.run_async(delete_rest())
    assert s3.list_objects_v2(Bucket=bucket, Prefix="o/")["KeyCount"] == 0

    # Scattered keys: the same key for the same number in put, get and delete phases,
    # spread over the key space instead of sorting in write order.
    scattered = [s3_load.object_key("s/", number, scattered=True) for number in range(20)]
    assert len(set(scattered)) == 20 and scattered != sorted(scattered)
    put_scattered = s3_load.put_op(bucket, 100, prefix="s/", scattered=True)
    result = s3_load.run_phase("put", *credentials, put_scattered, concurrency=4, count=20)
    assert (result.ops, result.errors) == (20, 0), result.error_samples
    listed = [item["Key"] for item in s3.list_objects_v2(Bucket=bucket, Prefix="s/")["Contents"]]
    assert listed == sorted(scattered)
    get_scattered = s3_load.get_op(bucket, 20, prefix="s/", scattered=True)
    result = s3_load.run_phase("get", *credentials, get_scattered, concurrency=4, count=20)
    assert (result.ops, result.errors, result.bytes) == (20, 0, 2000), result.error_samples
    delete = s3_load.delete_op(bucket, prefix="s/", scattered=True)
    result = s3_load.run_phase("delete", *credentials, delete, concurrency=4, count=20)
    assert (result.ops, result.errors) == (20, 0), result.error_samples
    assert s3.list_objects_v2(Bucket=bucket, Prefix="s/")["KeyCount"] == 0

    # A missing key is a counted error, and the connection keeps working after it.
    result = s3_load.run_phase("get", *credentials, get, concurrency=1, count=3)
    assert (result.ops, result.errors) == (0, 3)
    assert "HTTP 404 NoSuchKey" in result.error_samples[0], result.error_samples


def test_get_op_orders() -> None:
    """Without a seed GETs cycle through the objects in key order; with one each object
    is picked at random (seeded: the same picks every run), not in a cycle."""

    class Recorder:
        def __init__(self) -> None:
            self.keys: list[str] = []

        async def get_object(
            self, connection: object, bucket: str, key: str, byte_range: object
        ) -> object:
            self.keys.append(key)
            return type("Response", (), {"body_bytes": 0})()

    def picks(**how: object) -> list[str]:
        recorder = Recorder()
        op = s3_load.get_op("b", 10, prefix="o/", **how)(recorder)  # type: ignore[arg-type]

        async def run() -> None:
            for sequence in range(100):
                await op(None, sequence)  # type: ignore[arg-type]

        asyncio.run(run())
        return recorder.keys

    in_order = [s3_load.object_key("o/", n % 10) for n in range(100)]
    assert picks() == in_order
    shuffled = picks(random_seed=1)
    assert shuffled == picks(random_seed=1) != picks(random_seed=2)
    assert shuffled != in_order and set(shuffled) == set(in_order)
