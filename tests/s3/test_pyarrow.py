"""PyArrow against the gateway: `pyarrow.fs.S3FileSystem` (the AWS SDK for C++ underneath)
creates buckets and directories, writes a partitioned Parquet dataset with
`pyarrow.dataset.write_dataset` and reads it back, lists with selectors, reads a
multi-MiB object at random offsets, writes an object large enough for a multipart upload,
copies, moves and deletes, and reads a CSV written by boto3. The same client over https
(the gateway's self-signed certificate given as `tls_ca_file_path`) writes objects
through both upload paths and a Parquet dataset: the SDK frames every body as
aws-chunked with a CRC64NVME trailer, and the stored objects must hold exactly the bytes
written, with the checksums the trailers carried. Values are compared, not only calls."""

from __future__ import annotations

import base64
import gzip
import hashlib
import http.client
import random
import ssl
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from awscrt import checksums as crt
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from tests.cluster.gateway import ACCESS_KEY, SECRET_KEY, GatewayProcess, access_log

MIB = 1024 * 1024
REGIONS = ["africa", "americas", "asia", "europe"]


def s3_filesystem(gateway: GatewayProcess, **options: Any) -> pafs.S3FileSystem:
    if gateway.tls:
        # The gateway's self-signed certificate is its own CA.
        options.setdefault("tls_ca_file_path", str(gateway.tls[0]))
    return pafs.S3FileSystem(
        access_key=ACCESS_KEY,
        secret_key=SECRET_KEY,
        region="us-east-1",
        scheme=gateway.scheme,
        endpoint_override=f"127.0.0.1:{gateway.port}",
        connect_timeout=10,
        request_timeout=60,
        **options,
    )


@contextmanager
def no_metadata_service() -> Iterator[None]:
    # The AWS SDK must not look for credentials or a region on an instance metadata
    # service: everything it needs is given, and nothing but the gateway is reachable.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AWS_EC2_METADATA_DISABLED", "true")
        yield


@pytest.fixture(scope="module")
def fs(gateway: GatewayProcess) -> Iterator[pafs.S3FileSystem]:
    with no_metadata_service():
        yield s3_filesystem(gateway, allow_bucket_creation=True, allow_bucket_deletion=True)


@pytest.fixture(scope="module")
def tls_fs(tls_gateway: GatewayProcess) -> Iterator[pafs.S3FileSystem]:
    with no_metadata_service():
        yield s3_filesystem(tls_gateway, allow_bucket_creation=True, allow_bucket_deletion=True)


def keys(s3: Any, bucket: str, prefix: str = "") -> list[str]:
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=prefix)
    assert not listed["IsTruncated"]
    return [o["Key"] for o in listed.get("Contents", [])]


def sample_table(rows: int, rng: random.Random) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(rows), pa.int64()),
            "region": pa.array([REGIONS[i % len(REGIONS)] for i in range(rows)]),
            "name": pa.array([f"name-{rng.randrange(1 << 30):08x}" for _ in range(rows)]),
            "value": pa.array([rng.uniform(-1e6, 1e6) for _ in range(rows)], pa.float64()),
            "flag": pa.array([i % 3 == 0 for i in range(rows)]),
        }
    )


def test_create_dir_creates_buckets_and_directory_markers(
    gateway: GatewayProcess, fs: pafs.S3FileSystem, s3: Any, bucket_name: Callable[[], str]
) -> None:
    name = bucket_name()
    assert fs.get_file_info(name).type == pafs.FileType.NotFound

    fs.create_dir(name)
    s3.head_bucket(Bucket=name)
    assert fs.get_file_info(name).type == pafs.FileType.Directory
    fs.create_dir(name)  # again: the bucket is already the caller's

    fs.create_dir(f"{name}/tables/raw")
    assert fs.get_file_info(f"{name}/tables").type == pafs.FileType.Directory
    assert fs.get_file_info(f"{name}/tables/raw").type == pafs.FileType.Directory
    assert sorted(keys(s3, name)) == ["tables/", "tables/raw/"]
    marker = s3.head_object(Bucket=name, Key="tables/raw/")
    assert marker["ContentLength"] == 0

    # Without allow_bucket_creation a missing bucket is an error, not a new bucket.
    strict = s3_filesystem(gateway)
    other = bucket_name()
    with pytest.raises(OSError, match="allow_bucket_creation"):
        strict.create_dir(other)
    with pytest.raises(ClientError) as missing:
        s3.head_bucket(Bucket=other)
    assert missing.value.response["Error"]["Code"] == "404"

    # Deleting the bucket as a directory removes its contents and the bucket.
    fs.delete_dir(name)
    assert fs.get_file_info(name).type == pafs.FileType.NotFound
    with pytest.raises(ClientError) as gone:
        s3.head_bucket(Bucket=name)
    assert gone.value.response["Error"]["Code"] == "404"


def write_events(
    fs: pafs.S3FileSystem, base: str, table: pa.Table, *, rows_per_file: int, rows_per_group: int
) -> None:
    """`table` as a hive-partitioned Parquet dataset (by region) under `base`."""
    ds.write_dataset(
        table,
        base,
        filesystem=fs,
        format="parquet",
        partitioning=["region"],
        partitioning_flavor="hive",
        max_rows_per_file=rows_per_file,
        max_rows_per_group=rows_per_group,
        basename_template="part-{i}.parquet",
    )


def test_partitioned_parquet_dataset_round_trip(
    gateway: GatewayProcess, fs: pafs.S3FileSystem, s3: Any, bucket: str, rng: random.Random
) -> None:
    table = sample_table(20_000, rng)
    base = f"{bucket}/warehouse/events"
    write_events(fs, base, table, rows_per_file=2_000, rows_per_group=500)

    written = keys(s3, bucket, "warehouse/events/")
    data_files = [key for key in written if key.endswith(".parquet")]
    # Besides the data files, only the directory markers PyArrow creates as it goes.
    markers = sorted(set(written) - set(data_files))
    assert markers == ["warehouse/events/"] + [f"warehouse/events/region={r}/" for r in REGIONS]
    by_region = {
        region: [key for key in data_files if f"/region={region}/" in key] for region in REGIONS
    }
    assert sorted(by_region) == REGIONS
    assert all(len(files) >= 3 for files in by_region.values()), by_region
    assert sum(len(files) for files in by_region.values()) == len(data_files)

    dataset = ds.dataset(base, filesystem=fs, format="parquet", partitioning="hive")
    assert sorted(dataset.files) == sorted(f"{bucket}/{key}" for key in data_files)
    back = dataset.to_table().select(table.column_names).sort_by("id")
    assert back.equals(table)

    asia = dataset.to_table(filter=pc.field("region") == "asia").select(table.column_names)
    expected = table.filter(pc.field("region") == "asia")
    assert asia.sort_by("id").equals(expected)
    assert dataset.count_rows(filter=pc.field("flag")) == sum(
        1 for i in range(20_000) if i % 3 == 0
    )

    # One partition directory read as a Parquet dataset on its own, through a URI.
    uri = (
        f"s3://{ACCESS_KEY}:{SECRET_KEY}@{base}/region=europe"
        f"?scheme=http&endpoint_override=127.0.0.1:{gateway.port}&region=us-east-1"
    )
    europe = pq.read_table(uri).sort_by("id")
    assert europe.column("id").to_pylist() == list(range(3, 20_000, 4))
    assert europe.column("name").equals(table.filter(pc.field("region") == "europe").column("name"))


def test_keys_and_partition_values_that_need_escaping(
    fs: pafs.S3FileSystem, s3: Any, bucket: str
) -> None:
    # Hive partition values are percent-encoded into the keys, so keys hold '%' too.
    cities = ["São Paulo", "a b/c", "x=y", "50%", "plus+", "日本"]
    table = pa.table({"city": cities, "v": pa.array(range(len(cities)), pa.int64())})
    ds.write_dataset(
        table,
        f"{bucket}/cities",
        filesystem=fs,
        format="parquet",
        partitioning=["city"],
        partitioning_flavor="hive",
    )
    assert "cities/city=50%25/part-0.parquet" in keys(s3, bucket, "cities/")
    back = ds.dataset(f"{bucket}/cities", filesystem=fs, partitioning="hive").to_table()
    assert sorted(zip(back["city"].to_pylist(), back["v"].to_pylist(), strict=True)) == sorted(
        zip(cities, range(len(cities)), strict=True)
    )

    names = [
        "sp ace",
        "plus+",
        "pct%41",
        "eq=amp&",
        "ünï-日本",
        "tilde~star*",
        "q?hash#",
        "(1)!'$@:;,",
    ]
    for name in names:
        path = f"{bucket}/odd {name}/file {name}.txt"
        with fs.open_output_stream(path) as out:
            out.write(name.encode())
        fs.copy_file(path, f"{path}.copy")
    for name in names:
        path = f"{bucket}/odd {name}/file {name}.txt"
        with fs.open_input_stream(f"{path}.copy") as copied:
            assert copied.read() == name.encode()
        assert fs.get_file_info(path).size == len(name.encode())
        assert fs.get_file_info(f"{bucket}/odd {name}").type == pafs.FileType.Directory
        body = s3.get_object(Bucket=bucket, Key=f"odd {name}/file {name}.txt")["Body"].read()
        assert body == name.encode()
    listed = fs.get_file_info(pafs.FileSelector(bucket))
    assert sorted(info.base_name for info in listed) == sorted(
        ["cities", *(f"odd {n}" for n in names)]
    )


def test_parquet_row_groups_are_read_by_range(
    fs: pafs.S3FileSystem, s3: Any, bucket: str, rng: random.Random
) -> None:
    table = sample_table(60_000, rng)
    path = f"{bucket}/single/table.parquet"
    pq.write_table(table, path, filesystem=fs, row_group_size=10_000, compression="none")
    size = s3.head_object(Bucket=bucket, Key="single/table.parquet")["ContentLength"]
    assert fs.get_file_info(path).size == size > MIB

    with fs.open_input_file(path) as source:
        parquet = pq.ParquetFile(source)
        assert parquet.metadata.num_rows == 60_000
        assert parquet.metadata.num_row_groups == 6
        fourth = parquet.read_row_group(3, columns=["id", "name"])
    assert fourth.column("id").to_pylist() == list(range(30_000, 40_000))
    assert fourth.column("name").equals(table.column("name").slice(30_000, 10_000))
    assert pq.read_table(path, filesystem=fs).equals(table)


def test_get_file_info_and_selectors(fs: pafs.S3FileSystem, s3: Any, bucket: str) -> None:
    bodies = {
        "top.txt": b"top",
        "a/1.txt": b"one!",
        "a/2.txt": b"two!!",
        "a/b/3.txt": b"three!",
        "ab.txt": b"sibling of a/",
    }
    for key, body in bodies.items():
        s3.put_object(Bucket=bucket, Key=key, Body=body)
    fs.create_dir(f"{bucket}/empty")
    _assert_file_info_of_paths(fs, s3, bucket)
    _assert_selectors_list(fs, bucket)


def _assert_file_info_of_paths(fs: pafs.S3FileSystem, s3: Any, bucket: str) -> None:
    """Files, directories (implied by keys, or made empty) and paths that are neither."""
    infos = fs.get_file_info(
        [
            f"{bucket}/top.txt",
            f"{bucket}/a",
            f"{bucket}/a/b",
            f"{bucket}/a/b/3.txt",
            f"{bucket}/empty",
            f"{bucket}/nope",
            f"{bucket}/a/nope.txt",
            f"{bucket}/a/1",
            f"{bucket}/a/b/3.txt/x",
            bucket,
        ]
    )
    assert [info.type for info in infos] == [
        pafs.FileType.File,
        pafs.FileType.Directory,
        pafs.FileType.Directory,
        pafs.FileType.File,
        pafs.FileType.Directory,
        pafs.FileType.NotFound,
        pafs.FileType.NotFound,
        pafs.FileType.NotFound,
        pafs.FileType.NotFound,
        pafs.FileType.Directory,
    ]
    assert infos[0].size == 3
    assert infos[3].size == 6
    assert infos[3].base_name == "3.txt"
    modified = s3.head_object(Bucket=bucket, Key="a/b/3.txt")["LastModified"]
    assert abs(infos[3].mtime.timestamp() - modified.timestamp()) < 1.0


def _assert_selectors_list(fs: pafs.S3FileSystem, bucket: str) -> None:
    """One level or recursive, from a directory or the bucket; a missing one only when
    allowed."""

    def listed(selector: pafs.FileSelector) -> list[tuple[str, pafs.FileType, int | None]]:
        return sorted(
            (info.path, info.type, info.size if info.type == pafs.FileType.File else None)
            for info in fs.get_file_info(selector)
        )

    assert listed(pafs.FileSelector(f"{bucket}/a")) == [
        (f"{bucket}/a/1.txt", pafs.FileType.File, 4),
        (f"{bucket}/a/2.txt", pafs.FileType.File, 5),
        (f"{bucket}/a/b", pafs.FileType.Directory, None),
    ]
    assert listed(pafs.FileSelector(f"{bucket}/a", recursive=True)) == [
        (f"{bucket}/a/1.txt", pafs.FileType.File, 4),
        (f"{bucket}/a/2.txt", pafs.FileType.File, 5),
        (f"{bucket}/a/b", pafs.FileType.Directory, None),
        (f"{bucket}/a/b/3.txt", pafs.FileType.File, 6),
    ]
    assert listed(pafs.FileSelector(bucket)) == [
        (f"{bucket}/a", pafs.FileType.Directory, None),
        (f"{bucket}/ab.txt", pafs.FileType.File, 13),
        (f"{bucket}/empty", pafs.FileType.Directory, None),
        (f"{bucket}/top.txt", pafs.FileType.File, 3),
    ]
    assert [path for path, _, _ in listed(pafs.FileSelector(bucket, recursive=True))] == [
        f"{bucket}/a",
        f"{bucket}/a/1.txt",
        f"{bucket}/a/2.txt",
        f"{bucket}/a/b",
        f"{bucket}/a/b/3.txt",
        f"{bucket}/ab.txt",
        f"{bucket}/empty",
        f"{bucket}/top.txt",
    ]
    assert listed(pafs.FileSelector(f"{bucket}/empty", recursive=True)) == []
    assert listed(pafs.FileSelector(f"{bucket}/nope", allow_not_found=True)) == []
    with pytest.raises(FileNotFoundError):
        fs.get_file_info(pafs.FileSelector(f"{bucket}/nope"))


def test_random_access_reads_of_a_multi_mib_object(
    fs: pafs.S3FileSystem, s3: Any, bucket: str, rng: random.Random
) -> None:
    body = rng.randbytes(6 * MIB + 12_345)
    s3.put_object(Bucket=bucket, Key="blob.bin", Body=body)
    path = f"{bucket}/blob.bin"

    with fs.open_input_file(path) as f:
        assert f.size() == len(body)
        for _ in range(40):
            offset = rng.randrange(len(body))
            length = rng.randrange(1, 300_000)
            assert f.read_at(length, offset) == body[offset : offset + length]
        assert f.read_at(10, len(body) - 4) == body[-4:]
        assert f.read_at(10, len(body)) == b""

        f.seek(5 * MIB - 7)
        assert f.read(100) == body[5 * MIB - 7 : 5 * MIB + 93]
        assert f.tell() == 5 * MIB + 93
        f.seek(-16, 2)
        assert f.read() == body[-16:]
        f.seek(0)
        assert hashlib.sha256(f.read()).digest() == hashlib.sha256(body).digest()

    with fs.open_input_stream(path) as stream:
        chunks = []
        while chunk := stream.read(MIB + 1):
            chunks.append(chunk)
    assert b"".join(chunks) == body

    with pytest.raises(FileNotFoundError):
        fs.open_input_file(f"{bucket}/missing.bin")


def test_output_stream_large_object_uses_multipart_upload(
    fs: pafs.S3FileSystem, s3: Any, bucket: str, rng: random.Random
) -> None:
    body = rng.randbytes(36 * MIB + 777)
    path = f"{bucket}/out/big.bin"
    with fs.open_output_stream(path, metadata={"Content-Type": "application/x-blob"}) as out:
        view = memoryview(body)
        position = 0
        while position < len(body):
            step = rng.randrange(1, 3 * MIB)
            out.write(view[position : position + step])
            position += step

    head = s3.head_object(Bucket=bucket, Key="out/big.bin")
    assert head["ContentLength"] == len(body)
    assert head["ContentType"] == "application/x-blob"
    etag = head["ETag"].strip('"')
    assert "-" in etag, "expected a multipart upload"
    parts = int(etag.rsplit("-", 1)[1])
    assert parts >= 3
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    got = s3.get_object(Bucket=bucket, Key="out/big.bin")["Body"].read()
    assert hashlib.sha256(got).digest() == hashlib.sha256(body).digest()
    assert fs.get_file_info(path).size == len(body)

    # A small stream is one part (PyArrow opens the upload before knowing the size).
    with fs.open_output_stream(f"{bucket}/out/small.txt") as out:
        out.write(b"small and simple\n")
    small = s3.get_object(Bucket=bucket, Key="out/small.txt")
    assert small["Body"].read() == b"small and simple\n"
    assert small["ContentLength"] == 17

    # An empty stream is an empty object.
    with fs.open_output_stream(f"{bucket}/out/empty"):
        pass
    assert s3.head_object(Bucket=bucket, Key="out/empty")["ContentLength"] == 0


def test_copy_move_and_delete_files(fs: pafs.S3FileSystem, s3: Any, bucket: str) -> None:
    body = b"".join(i.to_bytes(4, "big") for i in range(50_000))  # 200 KB, many entries
    s3.put_object(Bucket=bucket, Key="src/data.bin", Body=body, Metadata={"origin": "boto3"})

    fs.copy_file(f"{bucket}/src/data.bin", f"{bucket}/copies/data.bin")
    assert s3.get_object(Bucket=bucket, Key="copies/data.bin")["Body"].read() == body
    assert s3.get_object(Bucket=bucket, Key="src/data.bin")["Body"].read() == body

    fs.move(f"{bucket}/copies/data.bin", f"{bucket}/moved/renamed.bin")
    assert fs.get_file_info(f"{bucket}/copies/data.bin").type == pafs.FileType.NotFound
    with fs.open_input_stream(f"{bucket}/moved/renamed.bin") as moved:
        assert moved.read() == body

    fs.delete_file(f"{bucket}/moved/renamed.bin")
    assert fs.get_file_info(f"{bucket}/moved/renamed.bin").type == pafs.FileType.NotFound
    with pytest.raises(FileNotFoundError):
        fs.delete_file(f"{bucket}/moved/renamed.bin")
    with pytest.raises(OSError, match="NO_SUCH_KEY"):
        fs.copy_file(f"{bucket}/nope.bin", f"{bucket}/other.bin")
    # PyArrow keeps the parent directories of what it moved or deleted as markers.
    assert sorted(keys(s3, bucket)) == ["copies/", "moved/", "src/data.bin"]


def test_delete_dir_and_delete_dir_contents(fs: pafs.S3FileSystem, s3: Any, bucket: str) -> None:
    layout = [
        "tree/x.txt",
        "tree/sub/y.txt",
        "tree/sub/deeper/z.txt",
        "treehouse/keep.txt",
        "other/keep.txt",
    ]
    for key in layout:
        s3.put_object(Bucket=bucket, Key=key, Body=key.encode())
    # Enough objects under one directory that deleting them takes several listing pages
    # and DeleteObjects calls.
    for index in range(1_200):
        s3.put_object(Bucket=bucket, Key=f"many/{index:05d}", Body=b"")

    fs.delete_dir_contents(f"{bucket}/tree")
    assert fs.get_file_info(f"{bucket}/tree").type == pafs.FileType.Directory
    assert fs.get_file_info(pafs.FileSelector(f"{bucket}/tree", recursive=True)) == []
    assert sorted(keys(s3, bucket, "tree")) == ["tree/", "treehouse/keep.txt"]

    fs.delete_dir(f"{bucket}/tree")
    assert fs.get_file_info(f"{bucket}/tree").type == pafs.FileType.NotFound
    assert keys(s3, bucket, "tree") == ["treehouse/keep.txt"]

    fs.delete_dir(f"{bucket}/many")
    assert keys(s3, bucket, "many") == []

    fs.delete_dir_contents(f"{bucket}/missing", missing_dir_ok=True)
    with pytest.raises(FileNotFoundError):
        fs.delete_dir_contents(f"{bucket}/missing")
    assert sorted(keys(s3, bucket)) == ["other/keep.txt", "treehouse/keep.txt"]


def test_read_csv_written_by_boto3(fs: pafs.S3FileSystem, s3: Any, bucket: str) -> None:
    people = [("ada", 36, 1815), ("grace", 85, 1906), ("linus", 54, 1969), ("barbara", 79, 1939)]
    csv = "name,age,born\n" + "".join(f"{n},{a},{b}\n" for n, a, b in people)
    s3.put_object(Bucket=bucket, Key="input/people.csv", Body=csv.encode(), ContentType="text/csv")

    with fs.open_input_stream(f"{bucket}/input/people.csv") as source:
        table = pa_csv.read_csv(source)
    assert table.schema.names == ["name", "age", "born"]
    assert table.column("age").type == pa.int64()
    assert [tuple(row.values()) for row in table.to_pylist()] == people

    s3.put_object(Bucket=bucket, Key="input/more/people.csv.gz", Body=gzip.compress(csv.encode()))
    dataset = ds.dataset(f"{bucket}/input", filesystem=fs, format="csv")
    assert sorted(dataset.files) == [
        f"{bucket}/input/more/people.csv.gz",
        f"{bucket}/input/people.csv",
    ]
    rows = [tuple(row.values()) for row in dataset.to_table().to_pylist()]
    assert sorted(rows) == sorted(people * 2)


# ---------------------------------------------------------------------------- https
#
# What PyArrow 26 (AWS SDK for C++ 1.11) sends, seen on the wire: every body it uploads,
# PutObject and UploadPart alike, goes with `Content-Encoding: aws-chunked`,
# `Transfer-Encoding: chunked`, `x-amz-content-sha256: STREAMING-UNSIGNED-PAYLOAD-TRAILER`,
# `x-amz-decoded-content-length` and `x-amz-trailer: x-amz-checksum-crc64nvme`: 64 KiB
# aws-chunked chunks, then the CRC64NVME of the body as a trailer. An empty PutObject
# (a directory marker, an empty file) has no body to frame and sends
# `x-amz-checksum-crc64nvme: AAAAAAAAAAA=` as a header instead. CreateMultipartUpload
# names no checksum algorithm, and CompleteMultipartUpload lists ETags only. GETs ask
# for checksums (`x-amz-checksum-mode: enabled`).


def crc64nvme(data: bytes) -> str:
    return base64.b64encode(crt.crc64nvme(data, 0).to_bytes(8, "big")).decode()


def multipart_etag(parts: list[bytes]) -> str:
    joined = b"".join(hashlib.md5(part).digest() for part in parts)
    return f"{hashlib.md5(joined).hexdigest()}-{len(parts)}"


def assert_framed_upload(line: dict[str, str], decoded_bytes: int) -> None:
    """The request body held more than the data: aws-chunked framing and the trailer."""
    trailer = len("x-amz-checksum-crc64nvme:") + len(crc64nvme(b""))
    assert int(line["bytes_in"]) > decoded_bytes + trailer, (line, decoded_bytes)


class StreamingTrailerAuth(S3SigV4Auth):  # type: ignore[misc]  # botocore has no types
    """SigV4 declaring the payload as the SDK does: unsigned, with a trailer."""

    def __init__(self) -> None:
        super().__init__(Credentials(ACCESS_KEY, SECRET_KEY), "s3", "us-east-1")

    def payload(self, request: AWSRequest) -> str:
        return "STREAMING-UNSIGNED-PAYLOAD-TRAILER"


def sdk_framed_put(
    gateway: GatewayProcess, target: str, data: bytes, trailer_crc64nvme: str
) -> tuple[int, bytes]:
    """A PUT framed as the AWS SDK for C++ frames it (above), over https: aws-chunked in
    64 KiB chunks with the given CRC64NVME trailer, sent with chunked transfer encoding."""
    headers = {
        "Content-Encoding": "aws-chunked",
        "x-amz-decoded-content-length": str(len(data)),
        "x-amz-trailer": "x-amz-checksum-crc64nvme",
    }
    request = AWSRequest(method="PUT", url=f"{gateway.endpoint}{target}", headers=headers)
    StreamingTrailerAuth().add_auth(request)
    chunks = [
        b"%X\r\n%s\r\n" % (len(piece), piece)
        for piece in (data[i : i + 65536] for i in range(0, len(data), 65536))
    ]
    chunks.append(b"0\r\nx-amz-checksum-crc64nvme:%s\r\n\r\n" % trailer_crc64nvme.encode())
    assert gateway.tls is not None
    context = ssl.create_default_context(cafile=str(gateway.tls[0]))
    connection = http.client.HTTPSConnection("127.0.0.1", gateway.port, context=context, timeout=30)
    try:
        # No Content-Length and an iterable body: Transfer-Encoding: chunked.
        connection.request("PUT", target, body=iter(chunks), headers=dict(request.headers.items()))
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_https_sdk_framed_trailers_are_verified(
    tls_gateway: GatewayProcess, bucket_name: Callable[[], str], rng: random.Random
) -> None:
    """The trailer is checked against the decoded bytes before anything is committed."""
    s3 = tls_gateway.client()
    bucket = bucket_name()
    s3.create_bucket(Bucket=bucket)
    data = rng.randbytes(200_000)
    other = rng.randbytes(150_000)
    status, content = sdk_framed_put(tls_gateway, f"/{bucket}/k", data, crc64nvme(data))
    assert status == 200, content
    stored = s3.get_object(Bucket=bucket, Key="k", ChecksumMode="ENABLED")
    assert stored["Body"].read() == data
    assert stored["ChecksumCRC64NVME"] == crc64nvme(data)

    # A trailer that does not match the body: BadDigest, and the object is unchanged.
    status, content = sdk_framed_put(tls_gateway, f"/{bucket}/k", other, crc64nvme(data))
    assert status == 400, content
    assert b"<Code>BadDigest</Code>" in content, content
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == data

    # The same for UploadPart: a refused part is not kept, a good one is.
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key="m")["UploadId"]
    target = f"/{bucket}/m?partNumber=1&uploadId={upload_id}"
    status, content = sdk_framed_put(tls_gateway, target, other, crc64nvme(data))
    assert status == 400, content
    assert b"<Code>BadDigest</Code>" in content, content
    assert s3.list_parts(Bucket=bucket, Key="m", UploadId=upload_id).get("Parts", []) == []
    status, content = sdk_framed_put(tls_gateway, target, other, crc64nvme(other))
    assert status == 200, content
    [part] = s3.list_parts(Bucket=bucket, Key="m", UploadId=upload_id)["Parts"]
    assert (part["Size"], part["ChecksumCRC64NVME"]) == (len(other), crc64nvme(other))
    assert part["ETag"].strip('"') == hashlib.md5(other).hexdigest()
    s3.abort_multipart_upload(Bucket=bucket, Key="m", UploadId=upload_id)


def test_https_needs_the_gateway_certificate(
    tls_gateway: GatewayProcess, tls_fs: pafs.S3FileSystem, bucket_name: Callable[[], str]
) -> None:
    name = bucket_name()
    tls_fs.create_dir(name)
    assert tls_fs.get_file_info(name).type == pafs.FileType.Directory
    # Without the certificate the SDK refuses the gateway: the connection really is TLS,
    # verified against the file given.
    with no_metadata_service():
        unverified = s3_filesystem(
            tls_gateway,
            tls_ca_file_path=None,
            retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=1),
        )
        with pytest.raises(OSError, match="certificate"):
            unverified.get_file_info(name)


def _assert_small_stream_is_one_upload_part(
    tls_gateway: GatewayProcess, tls_fs: pafs.S3FileSystem, s3: Any, bucket: str
) -> None:
    """An output stream opens a multipart upload before it knows the size: a small object
    is one UploadPart, its body framed with the trailer."""
    small = b"small and simple, over https\n"
    with tls_fs.open_output_stream(f"{bucket}/small.txt") as out:
        out.write(small)
    got = s3.get_object(Bucket=bucket, Key="small.txt", ChecksumMode="ENABLED")
    assert got["Body"].read() == small
    assert got["ContentLength"] == len(small)
    assert got["ETag"].strip('"') == multipart_etag([small])
    # The part's trailer checksum, combined: the object's FULL_OBJECT checksum; its one
    # part, read by number, is the whole object and carries that checksum.
    assert got["ChecksumCRC64NVME"] == crc64nvme(small)
    part = s3.head_object(Bucket=bucket, Key="small.txt", PartNumber=1, ChecksumMode="ENABLED")
    assert part["ContentLength"] == len(small)
    assert (part["ChecksumCRC64NVME"], part["ChecksumType"]) == (crc64nvme(small), "FULL_OBJECT")
    [upload] = access_log(tls_gateway, "UploadPart", f"/{bucket}/small.txt", 1)
    assert_framed_upload(upload, len(small))


def _write_with_delayed_open(tls_gateway: GatewayProcess, bucket: str, put_body: bytes) -> None:
    """put.bin holding `put_body`, and empty.bin, each written as one PutObject."""
    with no_metadata_service():
        delayed = s3_filesystem(tls_gateway, allow_delayed_open=True)
        with delayed.open_output_stream(f"{bucket}/put.bin") as out:
            out.write(put_body)
        with delayed.open_output_stream(f"{bucket}/empty.bin"):
            pass


def _assert_put_object_stored(
    tls_gateway: GatewayProcess, tls_fs: pafs.S3FileSystem, s3: Any, bucket: str, put_body: bytes
) -> None:
    """A small stream is one PutObject, framed like an UploadPart; its trailer becomes
    the object's full-object checksum."""
    for head in (
        s3.head_object(Bucket=bucket, Key="put.bin", ChecksumMode="ENABLED"),
        s3.get_object(Bucket=bucket, Key="put.bin", ChecksumMode="ENABLED"),
    ):
        assert head["ContentLength"] == len(put_body)
        assert head["ETag"].strip('"') == hashlib.md5(put_body).hexdigest()
        assert head["ChecksumCRC64NVME"] == crc64nvme(put_body)
        assert head["ChecksumType"] == "FULL_OBJECT"
        assert "ContentEncoding" not in head  # aws-chunked is not stored
    assert s3.get_object(Bucket=bucket, Key="put.bin")["Body"].read() == put_body
    with tls_fs.open_input_stream(f"{bucket}/put.bin") as stream:
        assert stream.read() == put_body
    [put] = access_log(tls_gateway, "PutObject", f"/{bucket}/put.bin", 1)
    assert_framed_upload(put, len(put_body))


def _assert_empty_put_object_stored(tls_gateway: GatewayProcess, s3: Any, bucket: str) -> None:
    """The empty file: no body, the checksum as a header."""
    empty = s3.head_object(Bucket=bucket, Key="empty.bin", ChecksumMode="ENABLED")
    assert empty["ContentLength"] == 0
    assert empty["ChecksumCRC64NVME"] == crc64nvme(b"") == "AAAAAAAAAAA="
    [put_empty] = access_log(tls_gateway, "PutObject", f"/{bucket}/empty.bin", 1)
    assert put_empty["bytes_in"] == "0"


def _write_in_uneven_pieces(
    tls_fs: pafs.S3FileSystem, path: str, body: bytes, rng: random.Random
) -> None:
    """A large stream, written in pieces of up to 3 MiB: several UploadParts in the
    background."""
    with tls_fs.open_output_stream(path) as out:
        view = memoryview(body)
        position = 0
        while position < len(body):
            step = rng.randrange(1, 3 * MIB)
            out.write(view[position : position + step])
            position += step


def _assert_stored_in_parts(s3: Any, bucket: str, key: str, body: bytes) -> list[bytes]:
    """The object holds `body` in two or more parts, with the multipart ETag and S3's
    default checksum; the parts' bytes, in order."""
    head = s3.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    assert head["ContentLength"] == len(body)
    count = int(head["ETag"].strip('"').rsplit("-", 1)[1])
    assert count >= 2, head
    parts: list[bytes] = []
    for number in range(1, count + 1):
        part = s3.head_object(Bucket=bucket, Key=key, PartNumber=number, ChecksumMode="ENABLED")
        start = sum(map(len, parts))
        data = body[start : start + part["ContentLength"]]
        assert part["PartsCount"] == count
        # Each part carries its own checksum, of its bytes, as FULL_OBJECT.
        assert part["ChecksumCRC64NVME"] == crc64nvme(data), number
        assert part["ChecksumType"] == "FULL_OBJECT", number
        parts.append(data)
    assert b"".join(parts) == body
    assert head["ETag"].strip('"') == multipart_etag(parts)
    # The upload named no checksum algorithm: the object gets S3's default one, the
    # CRC64NVME of the whole object combined from its parts' (each from its trailer).
    assert head["ChecksumCRC64NVME"] == crc64nvme(body)
    assert head["ChecksumType"] == "FULL_OBJECT"
    return parts


def _assert_reads_whole_and_across_a_part_boundary(
    tls_fs: pafs.S3FileSystem, s3: Any, bucket: str, key: str, parts: list[bytes]
) -> None:
    body = b"".join(parts)
    got_body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    assert hashlib.sha256(got_body).digest() == hashlib.sha256(body).digest()
    with tls_fs.open_input_file(f"{bucket}/{key}") as f:
        assert f.size() == len(body)
        boundary = len(parts[0])
        assert f.read_at(1000, boundary - 500) == body[boundary - 500 : boundary + 500]
        f.seek(0)
        assert hashlib.sha256(f.read()).digest() == hashlib.sha256(body).digest()


def _assert_upload_parts_framed(
    tls_gateway: GatewayProcess, bucket: str, key: str, parts: list[bytes]
) -> None:
    """Each UploadPart body is longer than its part (paired by size: framing only adds)."""
    uploads = access_log(tls_gateway, "UploadPart", f"/{bucket}/{key}", len(parts))
    for line, data in zip(
        sorted(uploads, key=lambda line: int(line["bytes_in"])),
        sorted(parts, key=len),
        strict=True,
    ):
        assert_framed_upload(line, len(data))


def test_https_uploads_store_the_bytes_without_framing_or_trailer(
    tls_gateway: GatewayProcess,
    tls_fs: pafs.S3FileSystem,
    bucket_name: Callable[[], str],
    rng: random.Random,
) -> None:
    s3 = tls_gateway.client()
    bucket = bucket_name()
    tls_fs.create_dir(bucket)
    _assert_small_stream_is_one_upload_part(tls_gateway, tls_fs, s3, bucket)

    put_body = rng.randbytes(200_000)
    _write_with_delayed_open(tls_gateway, bucket, put_body)
    _assert_put_object_stored(tls_gateway, tls_fs, s3, bucket, put_body)
    _assert_empty_put_object_stored(tls_gateway, s3, bucket)

    body = rng.randbytes(26 * MIB + 777)
    _write_in_uneven_pieces(tls_fs, f"{bucket}/big.bin", body, rng)
    parts = _assert_stored_in_parts(s3, bucket, "big.bin", body)
    _assert_reads_whole_and_across_a_part_boundary(tls_fs, s3, bucket, "big.bin", parts)
    _assert_upload_parts_framed(tls_gateway, bucket, "big.bin", parts)
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_https_parquet_dataset_round_trip(
    tls_gateway: GatewayProcess,
    tls_fs: pafs.S3FileSystem,
    bucket_name: Callable[[], str],
    rng: random.Random,
) -> None:
    s3 = tls_gateway.client()
    bucket = bucket_name()
    tls_fs.create_dir(bucket)
    table = sample_table(8_000, rng)
    base = f"{bucket}/warehouse/events"
    write_events(tls_fs, base, table, rows_per_file=1_000, rows_per_group=250)

    data_files = [key for key in keys(s3, bucket, "warehouse/") if key.endswith(".parquet")]
    assert len(data_files) == 8, data_files
    rows = 0
    for key in data_files:
        stored = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        # A Parquet file begins and ends with its magic: nothing was appended.
        assert stored[:4] == stored[-4:] == b"PAR1", key
        rows += pq.read_table(pa.BufferReader(stored)).num_rows
        head = s3.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
        assert head["ContentLength"] == len(stored)
        assert head["ChecksumCRC64NVME"] == crc64nvme(stored), key
        assert tls_fs.get_file_info(f"{bucket}/{key}").size == len(stored)
    assert rows == table.num_rows

    dataset = ds.dataset(base, filesystem=tls_fs, format="parquet", partitioning="hive")
    assert sorted(dataset.files) == sorted(f"{bucket}/{key}" for key in data_files)
    assert dataset.to_table().select(table.column_names).sort_by("id").equals(table)
    americas = dataset.to_table(filter=pc.field("region") == "americas")
    expected = table.filter(pc.field("region") == "americas")
    assert americas.select(table.column_names).sort_by("id").equals(expected)
