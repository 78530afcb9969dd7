"""PyArrow against the gateway: `pyarrow.fs.S3FileSystem` (the AWS SDK for C++ underneath)
creates buckets and directories, writes a partitioned Parquet dataset with
`pyarrow.dataset.write_dataset` and reads it back, lists with selectors, reads a
multi-MiB object at random offsets, writes an object large enough for a multipart upload,
copies, moves and deletes, and reads a CSV written by boto3. Values are compared, not
only calls."""

from __future__ import annotations

import gzip
import hashlib
import random
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from botocore.exceptions import ClientError

from tests.cluster.gateway import ACCESS_KEY, SECRET_KEY, GatewayProcess

MIB = 1024 * 1024
REGIONS = ["africa", "americas", "asia", "europe"]


def s3_filesystem(gateway: GatewayProcess, **options: Any) -> pafs.S3FileSystem:
    return pafs.S3FileSystem(
        access_key=ACCESS_KEY,
        secret_key=SECRET_KEY,
        region="us-east-1",
        scheme="http",
        endpoint_override=f"127.0.0.1:{gateway.port}",
        connect_timeout=10,
        request_timeout=60,
        **options,
    )


@pytest.fixture(scope="module")
def fs(gateway: GatewayProcess) -> Iterator[pafs.S3FileSystem]:
    # The AWS SDK must not look for credentials or a region on an instance metadata
    # service: everything it needs is given, and nothing but the gateway is reachable.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AWS_EC2_METADATA_DISABLED", "true")
        yield s3_filesystem(gateway, allow_bucket_creation=True, allow_bucket_deletion=True)


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


def test_partitioned_parquet_dataset_round_trip(
    gateway: GatewayProcess, fs: pafs.S3FileSystem, s3: Any, bucket: str, rng: random.Random
) -> None:
    table = sample_table(20_000, rng)
    base = f"{bucket}/warehouse/events"
    ds.write_dataset(
        table,
        base,
        filesystem=fs,
        format="parquet",
        partitioning=["region"],
        partitioning_flavor="hive",
        max_rows_per_file=2_000,
        max_rows_per_group=500,
        basename_template="part-{i}.parquet",
    )

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
