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
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

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


@dataclass
class LoadTarget:
    """One bucket on the gateway, driven by bench/s3_load.py and checked with boto3."""

    gateway: GatewayProcess
    bucket: str = "load"

    @property
    def credentials(self) -> tuple[str, str, str]:
        return (self.gateway.endpoint, ACCESS_KEY, SECRET_KEY)

    @cached_property
    def s3(self) -> Any:
        return self.gateway.client()

    def run(
        self, name: str, op: s3_load.OpFactory, concurrency: int, count: int
    ) -> s3_load.PhaseResult:
        return s3_load.run_phase(name, *self.credentials, op, concurrency=concurrency, count=count)

    def body(self, key: str) -> bytes:
        return bytes(self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read())

    def listed(self, prefix: str) -> list[str]:
        reply = self.s3.list_objects_v2(Bucket=self.bucket, Prefix=prefix)
        return [item["Key"] for item in reply["Contents"]]

    def key_count(self, prefix: str) -> int:
        return int(self.s3.list_objects_v2(Bucket=self.bucket, Prefix=prefix)["KeyCount"])


def _put_and_get_forty(target: LoadTarget) -> bytes:
    """40 objects of 3000 bytes under o/, read back in key order, shuffled and ranged;
    the body of o/ number 7."""
    put = s3_load.put_op(target.bucket, 3000, prefix="o/")
    result = target.run("put", put, concurrency=4, count=40)
    assert (result.ops, result.errors, result.bytes) == (40, 0, 40 * 3000), result.error_samples
    body = target.body(s3_load.object_key("o/", 7))
    assert len(body) == 3000

    get = s3_load.get_op(target.bucket, 40, prefix="o/")
    result = target.run("get", get, concurrency=4, count=80)
    assert (result.ops, result.errors, result.bytes) == (80, 0, 80 * 3000), result.error_samples
    shuffled = s3_load.get_op(target.bucket, 40, prefix="o/", random_seed=5)
    result = target.run("get", shuffled, concurrency=4, count=80)
    assert (result.ops, result.errors, result.bytes) == (80, 0, 80 * 3000), result.error_samples
    ranged = s3_load.get_op(target.bucket, 40, prefix="o/", byte_range=(100, 199))
    result = target.run("range", ranged, concurrency=2, count=10)
    assert (result.ops, result.errors, result.bytes) == (10, 0, 10 * 100), result.error_samples
    return body


def _list_and_read_a_range(target: LoadTarget, body: bytes) -> None:
    """One worker walks the listing in pages of 7: 40 keys -> 6 pages, then starts over;
    the client lists every key, scans a page without parsing it, and reads a range."""
    list_pages = s3_load.list_op(target.bucket, "o/", max_keys=7)
    result = target.run("list", list_pages, concurrency=1, count=7)
    assert (result.ops, result.errors) == (7, 0), result.error_samples

    async def check_listing_and_range() -> tuple[list[str], bytes | None]:
        async with s3_load.S3Client(*target.credentials) as client:
            connection = await client.connect()
            keys = await client.list_all(connection, target.bucket, "o/")
            scanned = await client.list_objects_v2(
                connection, target.bucket, "o/", max_keys=7, parse_keys=False
            )
            assert (scanned.keys, scanned.key_count) == ([], 7)
            page = await client.list_objects_v2(
                connection, target.bucket, "o/", scanned.next_token, 7
            )
            assert page.keys == keys[7:14]
            response = await client.get_object(
                connection, target.bucket, s3_load.object_key("o/", 7), (10, 19), keep_body=True
            )
            return keys, response.body

    keys, chunk = s3_load.run_async(check_listing_and_range())
    assert keys == [s3_load.object_key("o/", number) for number in range(40)]
    assert chunk == body[10:20]


def _upload_in_parts(target: LoadTarget, rng: random.Random) -> None:
    """300 KiB in 64 KiB parts, 3 at a time; the object is the concatenation."""
    size = 300 * 1024 + rng.randrange(1000)
    multipart = s3_load.multipart_op(
        target.bucket, size, 64 * 1024, part_concurrency=3, prefix="m/"
    )
    result = target.run("multipart", multipart, concurrency=2, count=2)
    assert (result.ops, result.errors, result.bytes) == (2, 0, 2 * size), result.error_samples
    first = target.body(s3_load.object_key("m/", 0))
    second = target.body(s3_load.object_key("m/", 1))
    assert len(first) == size and hashlib.sha256(first).digest() == hashlib.sha256(second).digest()


def _delete_the_forty(target: LoadTarget) -> None:
    """DeleteObjects of 30 keys (batches of 10 with Content-MD5), then DELETE the last 10."""
    batch = s3_load.delete_objects_op(target.bucket, prefix="o/", batch=10)
    result = target.run("delete-objects", batch, concurrency=3, count=3)
    assert (result.ops, result.errors) == (3, 0), result.error_samples
    assert target.listed("o/") == [s3_load.object_key("o/", number) for number in range(30, 40)]

    async def delete_rest() -> None:
        async with s3_load.S3Client(*target.credentials) as client:
            connection = await client.connect()
            for number in range(30, 40):
                key = s3_load.object_key("o/", number)
                await client.delete_object(connection, target.bucket, key)

    s3_load.run_async(delete_rest())
    assert target.key_count("o/") == 0


def _put_get_and_delete_scattered(target: LoadTarget) -> None:
    """Scattered keys: the same key for the same number in put, get and delete phases,
    spread over the key space instead of sorting in write order."""
    scattered = [s3_load.object_key("s/", number, scattered=True) for number in range(20)]
    assert len(set(scattered)) == 20 and scattered != sorted(scattered)
    put_scattered = s3_load.put_op(target.bucket, 100, prefix="s/", scattered=True)
    result = target.run("put", put_scattered, concurrency=4, count=20)
    assert (result.ops, result.errors) == (20, 0), result.error_samples
    assert target.listed("s/") == sorted(scattered)
    get_scattered = s3_load.get_op(target.bucket, 20, prefix="s/", scattered=True)
    result = target.run("get", get_scattered, concurrency=4, count=20)
    assert (result.ops, result.errors, result.bytes) == (20, 0, 2000), result.error_samples
    delete = s3_load.delete_op(target.bucket, prefix="s/", scattered=True)
    result = target.run("delete", delete, concurrency=4, count=20)
    assert (result.ops, result.errors) == (20, 0), result.error_samples
    assert target.key_count("s/") == 0


def _get_missing_keys(target: LoadTarget) -> None:
    """A missing key is a counted error, and the connection keeps working after it."""
    get = s3_load.get_op(target.bucket, 40, prefix="o/")
    result = target.run("get", get, concurrency=1, count=3)
    assert (result.ops, result.errors) == (0, 3)
    assert "HTTP 404 NoSuchKey" in result.error_samples[0], result.error_samples


def test_every_operation_against_a_real_gateway(gateway: GatewayProcess) -> None:
    seed = int(os.environ.get("BLOBSTORE_TEST_SEED", "20261121"))
    print(f"BLOBSTORE_TEST_SEED={seed}")
    rng = random.Random(seed)
    target = LoadTarget(gateway)
    s3_load.create_bucket(*target.credentials, target.bucket)
    s3_load.create_bucket(*target.credentials, target.bucket)  # already owned: fine
    body = _put_and_get_forty(target)
    _list_and_read_a_range(target, body)
    _upload_in_parts(target, rng)
    _delete_the_forty(target)
    _put_get_and_delete_scattered(target)
    _get_missing_keys(target)


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
