"""Multipart uploads through boto3: every operation and its errors, part copies that
share entries or copy bytes, and range reads across parts of unequal sizes."""

from __future__ import annotations

import hashlib
import random
import urllib.request
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.cluster.gateway import GatewayProcess
from tests.s3.conftest import ENTRY_SIZE_BYTES, PART_BYTES_MIN
from tests.s3.test_objects import error_code


def upload_parts(
    s3: Any, bucket: str, key: str, datas: list[bytes]
) -> tuple[str, list[dict[str, Any]]]:
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    parts = []
    for number, data in enumerate(datas, start=1):
        etag = s3.upload_part(
            Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=data
        )["ETag"]
        parts.append({"PartNumber": number, "ETag": etag})
    return upload_id, parts


def test_range_reads_across_unequal_parts(s3: Any, bucket: str, rng: random.Random) -> None:
    sizes = [
        PART_BYTES_MIN + 3 * ENTRY_SIZE_BYTES + 11,
        PART_BYTES_MIN + 1,
        PART_BYTES_MIN * 2 - 7,
        5,
    ]
    datas = [rng.randbytes(size) for size in sizes]
    upload_id, parts = upload_parts(s3, bucket, "m", datas)
    s3.complete_multipart_upload(
        Bucket=bucket, Key="m", UploadId=upload_id, MultipartUpload={"Parts": parts}
    )
    whole = b"".join(datas)
    part_ends = [sum(sizes[: i + 1]) for i in range(len(sizes))]
    cases = [(end - 1, end) for end in part_ends[:-1]] + [(0, len(whole) - 1)]
    cases += [
        tuple(sorted((rng.randrange(len(whole)), rng.randrange(len(whole))))) for _ in range(25)
    ]
    for first, last in cases:
        got = s3.get_object(Bucket=bucket, Key="m", Range=f"bytes={first}-{last}")["Body"].read()
        assert got == whole[first : last + 1], (first, last)
    for number, data in enumerate(datas, start=1):
        part = s3.get_object(Bucket=bucket, Key="m", PartNumber=number)
        assert part["Body"].read() == data
    head = s3.head_object(Bucket=bucket, Key="m", PartNumber=2)
    assert head["ContentLength"] == sizes[1]
    assert head["PartsCount"] == 4


def test_complete_errors(s3: Any, bucket: str, rng: random.Random) -> None:
    datas = [rng.randbytes(1000), rng.randbytes(PART_BYTES_MIN)]
    upload_id, parts = upload_parts(s3, bucket, "k", datas)
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(
            Bucket=bucket, Key="k", UploadId=upload_id, MultipartUpload={"Parts": parts}
        )
    assert error_code(e) == "EntityTooSmall"
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(
            Bucket=bucket, Key="k", UploadId=upload_id, MultipartUpload={"Parts": parts[::-1]}
        )
    assert error_code(e) == "InvalidPartOrder"
    bad = [{"PartNumber": 1, "ETag": '"00000000000000000000000000000000"'}]
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(
            Bucket=bucket, Key="k", UploadId=upload_id, MultipartUpload={"Parts": bad}
        )
    assert error_code(e) == "InvalidPart"
    missing = [{"PartNumber": 3, "ETag": parts[0]["ETag"]}]
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(
            Bucket=bucket, Key="k", UploadId=upload_id, MultipartUpload={"Parts": missing}
        )
    assert error_code(e) == "InvalidPart"
    # A failed completion leaves the upload usable: re-upload part 1 big enough.
    etag = s3.upload_part(
        Bucket=bucket, Key="k", UploadId=upload_id, PartNumber=1, Body=rng.randbytes(PART_BYTES_MIN)
    )["ETag"]
    parts[0]["ETag"] = etag
    s3.complete_multipart_upload(
        Bucket=bucket, Key="k", UploadId=upload_id, MultipartUpload={"Parts": parts}
    )
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(
            Bucket=bucket, Key="k", UploadId=upload_id, MultipartUpload={"Parts": parts}
        )
    assert error_code(e) == "NoSuchUpload"


def test_abort_list_parts_and_uploads(s3: Any, bucket: str, rng: random.Random) -> None:
    upload_id, parts = upload_parts(
        s3, bucket, "dir/a", [rng.randbytes(10), rng.randbytes(20), rng.randbytes(30)]
    )
    other = s3.create_multipart_upload(Bucket=bucket, Key="dir/b")["UploadId"]
    listed = s3.list_parts(Bucket=bucket, Key="dir/a", UploadId=upload_id, MaxParts=2)
    assert [p["PartNumber"] for p in listed["Parts"]] == [1, 2]
    assert listed["IsTruncated"]
    rest = s3.list_parts(
        Bucket=bucket,
        Key="dir/a",
        UploadId=upload_id,
        PartNumberMarker=listed["NextPartNumberMarker"],
    )
    assert [(p["PartNumber"], p["Size"]) for p in rest["Parts"]] == [(3, 30)]
    uploads = s3.list_multipart_uploads(Bucket=bucket)["Uploads"]
    assert sorted((u["Key"], u["UploadId"]) for u in uploads) == sorted(
        [("dir/a", upload_id), ("dir/b", other)]
    )
    with pytest.raises(ClientError) as e:
        s3.delete_bucket(Bucket=bucket)
    assert error_code(e) == "BucketNotEmpty"
    s3.abort_multipart_upload(Bucket=bucket, Key="dir/a", UploadId=upload_id)
    s3.abort_multipart_upload(Bucket=bucket, Key="dir/b", UploadId=other)
    assert "Uploads" not in s3.list_multipart_uploads(Bucket=bucket)
    with pytest.raises(ClientError) as e:
        s3.list_parts(Bucket=bucket, Key="dir/a", UploadId=upload_id)
    assert error_code(e) == "NoSuchUpload"
    with pytest.raises(ClientError) as e:
        s3.upload_part(Bucket=bucket, Key="dir/a", UploadId=upload_id, PartNumber=1, Body=b"x")
    assert error_code(e) == "NoSuchUpload"
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket)
    s3.delete_bucket(Bucket=bucket)


def part_copies(gateway: GatewayProcess) -> dict[str, float]:
    with urllib.request.urlopen(f"{gateway.endpoint}/metrics", timeout=10) as response:
        text = response.read().decode()
    counts = {"shared": 0.0, "copied": 0.0}
    for line in text.splitlines():
        for mode in counts:
            if line.startswith(f'blobstore_part_copies_total{{mode="{mode}"}}'):
                counts[mode] = float(line.split()[-1])
    return counts


def test_upload_part_copy(
    s3: Any, gateway: GatewayProcess, bucket: str, rng: random.Random
) -> None:
    before = part_copies(gateway)
    source = rng.randbytes(PART_BYTES_MIN + 5 * ENTRY_SIZE_BYTES + 99)
    s3.put_object(Bucket=bucket, Key="src", Body=source)
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key="dst")["UploadId"]
    aligned_end = PART_BYTES_MIN + 2 * ENTRY_SIZE_BYTES - 1  # cuts on entry boundaries
    unaligned = (17, 17 + PART_BYTES_MIN)  # cuts inside entries: bytes are copied
    ranges = [(0, aligned_end), unaligned, (aligned_end + 1, len(source) - 1)]
    parts = []
    for number, (first, last) in enumerate(ranges, start=1):
        response = s3.upload_part_copy(
            Bucket=bucket,
            Key="dst",
            UploadId=upload_id,
            PartNumber=number,
            CopySource={"Bucket": bucket, "Key": "src"},
            CopySourceRange=f"bytes={first}-{last}",
        )
        etag = response["CopyPartResult"]["ETag"]
        assert etag == f'"{hashlib.md5(source[first : last + 1]).hexdigest()}"'
        parts.append({"PartNumber": number, "ETag": etag})
    s3.complete_multipart_upload(
        Bucket=bucket, Key="dst", UploadId=upload_id, MultipartUpload={"Parts": parts}
    )
    expected = b"".join(source[first : last + 1] for first, last in ranges)
    assert s3.get_object(Bucket=bucket, Key="dst")["Body"].read() == expected
    after = part_copies(gateway)
    assert after["shared"] - before["shared"] == 2, "entry-aligned ranges share entries"
    assert after["copied"] - before["copied"] == 1, "an unaligned range copies bytes"
    with pytest.raises(ClientError) as e:
        s3.upload_part_copy(
            Bucket=bucket,
            Key="dst2",
            UploadId=s3.create_multipart_upload(Bucket=bucket, Key="dst2")["UploadId"],
            PartNumber=1,
            CopySource={"Bucket": bucket, "Key": "src"},
            CopySourceRange=f"bytes=0-{len(source)}",
        )
    assert error_code(e) == "InvalidRequest"


@pytest.fixture(scope="module")
def small_record_gateway(s3_cluster: Any) -> GatewayProcess:
    """A gateway whose index records hold ~35 parts (instead of ~2,800)."""
    return s3_cluster.start_gateway(
        "gateway-small-records", env={"BLOBSTORE_CATALOG_RECORD_BYTES_MAX": "2048"}
    )


def test_more_parts_than_a_record_holds_is_refused_and_the_upload_stays_open(
    small_record_gateway: GatewayProcess, rng: random.Random
) -> None:
    """An object whose part list does not fit in its index record: CompleteMultipartUpload
    says so (InvalidRequest), nothing is committed, and the upload can still be completed
    with fewer parts."""
    s3 = small_record_gateway.client()
    bucket = f"many-parts-{rng.randrange(1 << 30)}"
    s3.create_bucket(Bucket=bucket)
    datas = [rng.randbytes(PART_BYTES_MIN) for _ in range(60)]
    upload_id, parts = upload_parts(s3, bucket, "many", datas)
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(
            Bucket=bucket, Key="many", UploadId=upload_id, MultipartUpload={"Parts": parts}
        )
    assert error_code(e) == "InvalidRequest"
    assert "fewer, larger parts" in e.value.response["Error"]["Message"]
    assert s3.list_objects_v2(Bucket=bucket).get("KeyCount") == 0
    assert len(s3.list_parts(Bucket=bucket, Key="many", UploadId=upload_id)["Parts"]) == 60
    s3.complete_multipart_upload(
        Bucket=bucket, Key="many", UploadId=upload_id, MultipartUpload={"Parts": parts[:10]}
    )
    assert s3.get_object(Bucket=bucket, Key="many")["Body"].read() == b"".join(datas[:10])
