"""Multipart uploads through boto3: every operation and its errors, part copies that
share entries or copy bytes, and range reads across parts of unequal sizes."""

from __future__ import annotations

import base64
import hashlib
import random
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.cluster.gateway import GatewayProcess
from tests.s3.conftest import ENTRY_SIZE_BYTES, PART_BYTES_MIN, S3Cluster
from tests.s3.test_default_checksum import crc64nvme
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
    cases: list[tuple[int, ...]] = [(end - 1, end) for end in part_ends[:-1]]
    cases += [(0, len(whole) - 1)]
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
    details = e.value.response["Error"]
    assert (details["ProposedSize"], details["MinSizeAllowed"]) == ("1000", str(PART_BYTES_MIN))
    assert (details["PartNumber"], details["UploadId"]) == ("1", upload_id)
    assert f'"{details["ETag"]}"' == parts[0]["ETag"]
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
    details = e.value.response["Error"]
    assert (details["UploadId"], details["PartNumber"], details["ETag"]) == (
        upload_id,
        "1",
        "0" * 32,
    )
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
    with pytest.raises(ClientError) as e:  # completed: no more parts
        s3.upload_part(Bucket=bucket, Key="k", UploadId=upload_id, PartNumber=3, Body=b"x")
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


MANIFESTS_WRITTEN = 'blobstore_object_manifests_total{op="written"}'


@pytest.fixture(scope="module")
def manifest_gateway(s3_cluster: S3Cluster) -> GatewayProcess:
    """A gateway keeping any part list over 1 KiB (~20 parts) in a manifest, whose index
    records hold at most 2 KiB (~35 parts inline: 60 fit only through a manifest)."""
    return s3_cluster.start_gateway(
        "gateway-manifests",
        env={"BLOBSTORE_MANIFEST_BYTES_MIN": "1024", "BLOBSTORE_CATALOG_RECORD_BYTES_MAX": "2048"},
    )


def _upload_sha256_parts(
    s3: Any, bucket: str, key: str, datas: list[bytes]
) -> tuple[str, list[dict[str, Any]]]:
    """An upload of `datas` as parts with SHA256 checksums: its id and the part list."""
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key=key, ChecksumAlgorithm="SHA256")[
        "UploadId"
    ]
    parts = []
    for number, data in enumerate(datas, start=1):
        response = s3.upload_part(
            Bucket=bucket,
            Key=key,
            UploadId=upload_id,
            PartNumber=number,
            Body=data,
            ChecksumAlgorithm="SHA256",
        )
        parts.append(
            {
                "PartNumber": number,
                "ETag": response["ETag"],
                "ChecksumSHA256": response["ChecksumSHA256"],
            }
        )
    return upload_id, parts


def _assert_reads_need_the_part_list(
    client: Any, bucket: str, datas: list[bytes], parts: list[dict[str, Any]], rng: random.Random
) -> None:
    """Whole and ranged GETs, GET and HEAD by part number of the 60-part "big"."""
    whole = b"".join(datas)
    assert client.get_object(Bucket=bucket, Key="big")["Body"].read() == whole
    first = rng.randrange(len(whole) // 2)
    last = first + 3 * PART_BYTES_MIN
    ranged = client.get_object(Bucket=bucket, Key="big", Range=f"bytes={first}-{last}")
    assert ranged["Body"].read() == whole[first : last + 1]
    part = client.get_object(Bucket=bucket, Key="big", PartNumber=37, ChecksumMode="ENABLED")
    assert part["Body"].read() == datas[36]
    assert part["PartsCount"] == 60
    assert part["ChecksumSHA256"] == parts[36]["ChecksumSHA256"]
    assert client.head_object(Bucket=bucket, Key="big", PartNumber=60)["ContentLength"] == 777


def _assert_part_attributes_page(client: Any, bucket: str, datas: list[bytes]) -> None:
    """GetObjectAttributes: 25 parts after part 30, of the 60."""
    attributes = client.get_object_attributes(
        Bucket=bucket,
        Key="big",
        ObjectAttributes=["ObjectParts", "ObjectSize"],
        MaxParts=25,
        PartNumberMarker=30,
    )
    shown = attributes["ObjectParts"]
    assert shown["TotalPartsCount"] == 60 and shown["IsTruncated"] is True
    assert [p["PartNumber"] for p in shown["Parts"]] == list(range(31, 56))
    assert [p["Size"] for p in shown["Parts"]] == [len(d) for d in datas[30:55]]
    assert attributes["ObjectSize"] == sum(len(d) for d in datas)


def _assert_copy_with_another_checksum(
    s3: Any, other: Any, bucket: str, datas: list[bytes]
) -> None:
    """A copy asked for another algorithm: a whole-object CRC64NVME read through the
    manifest; its parts, read by number, then carry no checksum of their own."""
    recrc = s3.copy_object(
        Bucket=bucket,
        Key="crc",
        CopySource={"Bucket": bucket, "Key": "big"},
        ChecksumAlgorithm="CRC64NVME",
    )
    assert recrc["CopyObjectResult"]["ChecksumCRC64NVME"] == crc64nvme(b"".join(datas))
    part = other.get_object(Bucket=bucket, Key="crc", PartNumber=37, ChecksumMode="ENABLED")
    assert part["Body"].read() == datas[36]
    assert "ChecksumSHA256" not in part and "ChecksumCRC64NVME" not in part


def _assert_tags_change(s3: Any, bucket: str) -> None:
    s3.put_object_tagging(
        Bucket=bucket, Key="big", Tagging={"TagSet": [{"Key": "tier", "Value": "cold"}]}
    )
    assert s3.get_object_tagging(Bucket=bucket, Key="big")["TagSet"] == [
        {"Key": "tier", "Value": "cold"}
    ]


def _assert_part_copy_across_part_boundaries(s3: Any, bucket: str, datas: list[bytes]) -> None:
    """A part copied out of the middle of "big", across part boundaries."""
    whole = b"".join(datas)
    start = sum(len(d) for d in datas[:10]) - 5
    end = start + PART_BYTES_MIN + ENTRY_SIZE_BYTES
    target = s3.create_multipart_upload(Bucket=bucket, Key="slice")["UploadId"]
    copied = s3.upload_part_copy(
        Bucket=bucket,
        Key="slice",
        UploadId=target,
        PartNumber=1,
        CopySource={"Bucket": bucket, "Key": "big"},
        CopySourceRange=f"bytes={start}-{end}",
    )
    s3.complete_multipart_upload(
        Bucket=bucket,
        Key="slice",
        UploadId=target,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": copied["CopyPartResult"]["ETag"]}]},
    )
    assert s3.get_object(Bucket=bucket, Key="slice")["Body"].read() == whole[start : end + 1]


def test_a_long_part_list_lives_in_a_manifest(
    s3_cluster: Any, manifest_gateway: GatewayProcess, gateway: GatewayProcess, rng: random.Random
) -> None:
    """60 parts with SHA256 part checksums: the part list goes to a manifest. Every read
    that needs it (whole and ranged GETs, partNumber, GetObjectAttributes, UploadPartCopy)
    works, through this gateway and another process; a copy shares the manifest; tags
    change by compare-and-swap of the small record."""
    s3 = manifest_gateway.client()
    other = gateway.client()
    bucket = f"manifests-{rng.randrange(1 << 30)}"
    s3.create_bucket(Bucket=bucket)
    datas = [rng.randbytes(PART_BYTES_MIN + rng.randrange(ENTRY_SIZE_BYTES)) for _ in range(59)]
    datas.append(rng.randbytes(777))
    upload_id, parts = _upload_sha256_parts(s3, bucket, "big", datas)
    written = manifest_gateway.metric(MANIFESTS_WRITTEN)
    s3.complete_multipart_upload(
        Bucket=bucket, Key="big", UploadId=upload_id, MultipartUpload={"Parts": parts}
    )
    assert manifest_gateway.metric(MANIFESTS_WRITTEN) == written + 1
    for client in (s3, other):
        _assert_reads_need_the_part_list(client, bucket, datas, parts, rng)
    _assert_part_attributes_page(other, bucket, datas)

    # A copy shares the manifest (none is written) and outlives the source.
    s3.copy_object(Bucket=bucket, Key="copy", CopySource={"Bucket": bucket, "Key": "big"})
    assert manifest_gateway.metric(MANIFESTS_WRITTEN) == written + 1
    _assert_copy_with_another_checksum(s3, other, bucket, datas)
    _assert_tags_change(s3, bucket)
    _assert_part_copy_across_part_boundaries(s3, bucket, datas)
    s3.delete_object(Bucket=bucket, Key="big")
    # Read by a process that never saw the source (nothing cached).
    fresh = s3_cluster.start_gateway("gateway-manifest-reader").client()
    assert fresh.get_object(Bucket=bucket, Key="copy")["Body"].read() == b"".join(datas)
    part = fresh.get_object(Bucket=bucket, Key="copy", PartNumber=60)
    assert part["Body"].read() == datas[59] and part["PartsCount"] == 60


@pytest.fixture(scope="module")
def tiny_parts_gateway(s3_cluster: S3Cluster) -> GatewayProcess:
    """A gateway taking parts of any size, so that 10,000 parts fit in a test."""
    return s3_cluster.start_gateway("gateway-tiny-parts", env={"BLOBSTORE_PART_BYTES_MIN": "1"})


def test_an_object_of_10000_parts(tiny_parts_gateway: GatewayProcess, rng: random.Random) -> None:
    """S3's limit: 10,000 parts, listed, completed in one request, read whole and by part."""
    s3 = tiny_parts_gateway.client(max_pool_connections=16)
    bucket = f"parts-{rng.randrange(1 << 30)}"
    s3.create_bucket(Bucket=bucket)
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key="k")["UploadId"]
    datas = [rng.randbytes(rng.randrange(1, 9)) for _ in range(10_000)]

    def upload(number: int) -> dict[str, Any]:
        etag = s3.upload_part(
            Bucket=bucket, Key="k", UploadId=upload_id, PartNumber=number, Body=datas[number - 1]
        )["ETag"]
        return {"PartNumber": number, "ETag": etag}

    with ThreadPoolExecutor(12) as pool:
        parts = list(pool.map(upload, range(1, 10_001)))
    listed = [
        p["PartNumber"]
        for page in s3.get_paginator("list_parts").paginate(
            Bucket=bucket, Key="k", UploadId=upload_id
        )
        for p in page["Parts"]
    ]
    assert listed == list(range(1, 10_001))
    with pytest.raises(ClientError) as e:
        s3.upload_part(Bucket=bucket, Key="k", UploadId=upload_id, PartNumber=10_001, Body=b"x")
    assert error_code(e) == "InvalidArgument"
    done = s3.complete_multipart_upload(
        Bucket=bucket, Key="k", UploadId=upload_id, MultipartUpload={"Parts": parts}
    )
    assert done["ETag"].endswith('-10000"')
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"".join(datas)
    for number in (1, 5_000, 10_000):
        part = s3.get_object(Bucket=bucket, Key="k", PartNumber=number)
        assert part["Body"].read() == datas[number - 1] and part["PartsCount"] == 10_000
    attributes = s3.get_object_attributes(Bucket=bucket, Key="k", ObjectAttributes=["ObjectParts"])
    assert attributes["ObjectParts"]["TotalPartsCount"] == 10_000
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_a_completion_past_the_keys_versions_limit_is_invalid_request(
    manifest_gateway: GatewayProcess, rng: random.Random
) -> None:
    """All versions of a key share one index line (at most twice record_bytes_max: 4 KiB
    on this gateway). A completion that would pass it is refused as InvalidRequest (the
    part list itself is never the cause: it goes to a manifest), and commits nothing."""
    s3 = manifest_gateway.client()
    bucket = f"versions-{rng.randrange(1 << 30)}"
    s3.create_bucket(Bucket=bucket)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    pad = {"pad": "x" * 1500}
    for _ in range(2):
        s3.put_object(Bucket=bucket, Key="k", Body=b"v", Metadata=pad)
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key="k", Metadata=pad)["UploadId"]
    etag = s3.upload_part(Bucket=bucket, Key="k", UploadId=upload_id, PartNumber=1, Body=b"p")
    parts = [{"PartNumber": 1, "ETag": etag["ETag"]}]
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(
            Bucket=bucket, Key="k", UploadId=upload_id, MultipartUpload={"Parts": parts}
        )
    assert error_code(e) == "InvalidRequest", e.value.response
    assert "delete old versions" in e.value.response["Error"]["Message"]
    assert len(s3.list_object_versions(Bucket=bucket)["Versions"]) == 2
    s3.abort_multipart_upload(Bucket=bucket, Key="k", UploadId=upload_id)


def test_a_manifest_whose_completion_fails_is_counted_abandoned(
    manifest_gateway: GatewayProcess, rng: random.Random
) -> None:
    """The manifest is written before the commit; a completion refused there (If-None-Match
    on a key that exists) leaves it unreferenced, counted as an abandoned write."""
    s3 = manifest_gateway.client()
    bucket = f"abandoned-{rng.randrange(1 << 30)}"
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="taken", Body=b"first")
    datas = [rng.randbytes(PART_BYTES_MIN) for _ in range(40)]
    upload_id, parts = upload_parts(s3, bucket, "taken", datas)
    written = manifest_gateway.metric(MANIFESTS_WRITTEN)
    abandoned = manifest_gateway.metric("blobstore_object_writes_abandoned_total")
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(
            Bucket=bucket,
            Key="taken",
            UploadId=upload_id,
            MultipartUpload={"Parts": parts},
            IfNoneMatch="*",
        )
    assert error_code(e) == "PreconditionFailed"
    assert manifest_gateway.metric(MANIFESTS_WRITTEN) == written + 1
    assert manifest_gateway.metric("blobstore_object_writes_abandoned_total") == abandoned + 1
    assert s3.get_object(Bucket=bucket, Key="taken")["Body"].read() == b"first"


def test_a_repeated_completion_is_answered_as_the_first(
    s3: Any, bucket: str, rng: random.Random
) -> None:
    """A client that lost the answer to its CompleteMultipartUpload and sends it again
    gets the same answer (S3 does; SDKs retry), while the key's current version is the one
    the completion made; once the key is overwritten, or for an aborted upload, the upload
    is gone (NoSuchUpload)."""
    datas = [rng.randbytes(PART_BYTES_MIN), rng.randbytes(100)]
    upload_id, parts = upload_parts(s3, bucket, "again", datas)
    request = {"Bucket": bucket, "Key": "again", "UploadId": upload_id}
    first = s3.complete_multipart_upload(**request, MultipartUpload={"Parts": parts})
    second = s3.complete_multipart_upload(**request, MultipartUpload={"Parts": parts})
    for field in ("ETag", "Location", "Bucket", "Key", "ChecksumCRC64NVME", "ChecksumType"):
        assert second.get(field) == first.get(field), field
    assert s3.get_object(Bucket=bucket, Key="again")["Body"].read() == b"".join(datas)
    # Another upload id of the same key is not this completion's.
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(
            Bucket=bucket, Key="again", UploadId="0" * 32, MultipartUpload={"Parts": parts}
        )
    assert error_code(e) == "NoSuchUpload"
    s3.put_object(Bucket=bucket, Key="again", Body=b"newer")
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(**request, MultipartUpload={"Parts": parts})
    assert error_code(e) == "NoSuchUpload"
    aborted = s3.create_multipart_upload(Bucket=bucket, Key="aborted")["UploadId"]
    s3.abort_multipart_upload(Bucket=bucket, Key="aborted", UploadId=aborted)
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(
            Bucket=bucket, Key="aborted", UploadId=aborted, MultipartUpload={"Parts": parts}
        )
    assert error_code(e) == "NoSuchUpload"


def test_completion_checks_what_the_request_declares(
    s3: Any, bucket: str, rng: random.Random
) -> None:
    """The whole object's checksum (composite too), its checksum type and size
    (x-amz-mp-object-size), when the request states them; a part's checksum of another
    algorithm than the upload's is refused, as S3 does."""
    data = rng.randbytes(1000)
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key="c", ChecksumAlgorithm="SHA256")[
        "UploadId"
    ]
    request = {"Bucket": bucket, "Key": "c", "UploadId": upload_id}
    with pytest.raises(ClientError) as e:
        s3.upload_part(**request, PartNumber=1, Body=data, ChecksumAlgorithm="CRC32")
    assert error_code(e) == "InvalidRequest"
    assert "expected checksum Type: sha256, actual checksum Type: crc32" in str(e.value)
    part = s3.upload_part(**request, PartNumber=1, Body=data, ChecksumAlgorithm="SHA256")
    # A composite checksum is made of the parts': the completion must name each one.
    bare = {"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]}
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(**request, MultipartUpload=bare)
    assert error_code(e) == "InvalidRequest"
    assert "must include the checksum for each part. It was missing for part 1" in str(e.value)
    parts = {
        "Parts": [{"PartNumber": 1, "ETag": part["ETag"], "ChecksumSHA256": part["ChecksumSHA256"]}]
    }
    composite = base64.b64encode(hashlib.sha256(hashlib.sha256(data).digest()).digest()).decode()
    wrong = base64.b64encode(hashlib.sha256(b"other").digest()).decode()
    refused: list[tuple[dict[str, Any], str]] = [
        ({"ChecksumSHA256": f"{wrong}-1"}, "BadDigest"),
        ({"ChecksumSHA256": f"{composite}-2"}, "BadDigest"),
        ({"ChecksumCRC32": "AAAAAA=="}, "InvalidRequest"),
        ({"ChecksumType": "FULL_OBJECT"}, "InvalidRequest"),
        ({"MpuObjectSize": 999}, "InvalidRequest"),
    ]
    for extra, code in refused:
        with pytest.raises(ClientError) as e:
            s3.complete_multipart_upload(**request, MultipartUpload=parts, **extra)
        assert error_code(e) == code, extra
    done = s3.complete_multipart_upload(
        **request,
        MultipartUpload=parts,
        ChecksumSHA256=f"{composite}-1",
        ChecksumType="COMPOSITE",
        MpuObjectSize=len(data),
    )
    assert done["ChecksumSHA256"] == f"{composite}-1"
    assert s3.get_object(Bucket=bucket, Key="c")["Body"].read() == data


def test_concurrent_completions_of_one_upload_answer_alike(
    s3: Any, bucket: str, rng: random.Random
) -> None:
    """Two completions of one upload at once (a client's retry that overlaps its first
    try): whichever finds the upload gone, or its parts gone, answers as the completion
    that made the key's current version did."""
    for attempt in range(4):
        key = f"race-{attempt}"
        datas = [rng.randbytes(PART_BYTES_MIN), rng.randbytes(10)]
        upload_id, parts = upload_parts(s3, bucket, key, datas)
        request = {
            "Bucket": bucket,
            "Key": key,
            "UploadId": upload_id,
            "MultipartUpload": {"Parts": parts},
        }
        with ThreadPoolExecutor(2) as pool:
            calls = [pool.submit(s3.complete_multipart_upload, **request) for _ in range(2)]
            first, second = (call.result() for call in calls)
        assert first["ETag"] == second["ETag"], (first, second)
        assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == b"".join(datas)


def test_completed_location_is_a_uri(s3: Any, bucket: str) -> None:
    """CompleteMultipartUpload's Location names the object as a URI: its key
    percent-encoded, as S3 sends it (SDKs hand it to applications as a URL)."""
    key = "dir/small mp+x%?#é"
    upload_id, parts = upload_parts(s3, bucket, key, [b"tail"])
    done = s3.complete_multipart_upload(
        Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts}
    )
    location = done["Location"]
    assert location.endswith(f"/{bucket}/dir%2Fsmall%20mp%2Bx%25%3F%23%C3%A9"), location
    assert " " not in location
