"""S3's default checksum: an object uploaded without a checksum gets a CRC64NVME of its
bytes (FULL_OBJECT), recorded and returned like one the client sent; so does each part
of a multipart upload created without an algorithm (uploaded or copied), and the
completed object the combination of its parts'. Clients are set to send checksums only
when required, so the gateway sees requests without any (boto3's default would add a
CRC32)."""

from __future__ import annotations

import base64
import hashlib
import random
from typing import Any

import pytest
from awscrt import checksums as crt
from botocore.exceptions import ClientError

from tests.cluster.gateway import GatewayProcess
from tests.s3.conftest import ENTRY_SIZE_BYTES, PART_BYTES_MIN


def crc64nvme(data: bytes) -> str:
    return base64.b64encode(crt.crc64nvme(data).to_bytes(8, "big")).decode()


@pytest.fixture(scope="module")
def plain_s3(gateway: GatewayProcess) -> Any:
    return gateway.client(
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )


@pytest.fixture
def plain_bucket(plain_s3: Any, bucket: str) -> str:
    return bucket


def test_put_without_checksum_gets_crc64nvme(
    plain_s3: Any, plain_bucket: str, rng: random.Random
) -> None:
    data = rng.randbytes(3 * ENTRY_SIZE_BYTES + 5)
    put = plain_s3.put_object(Bucket=plain_bucket, Key="plain", Body=data)
    assert put["ChecksumCRC64NVME"] == crc64nvme(data)
    assert put["ChecksumType"] == "FULL_OBJECT"
    head = plain_s3.head_object(Bucket=plain_bucket, Key="plain", ChecksumMode="ENABLED")
    assert head["ChecksumCRC64NVME"] == crc64nvme(data)
    assert head["ChecksumType"] == "FULL_OBJECT"
    got = plain_s3.get_object(Bucket=plain_bucket, Key="plain", ChecksumMode="ENABLED")
    assert got["ChecksumCRC64NVME"] == crc64nvme(data)
    assert got["Body"].read() == data
    # Without the checksum mode, no checksum header (as S3).
    assert "ChecksumCRC64NVME" not in plain_s3.head_object(Bucket=plain_bucket, Key="plain")
    listed = plain_s3.list_objects_v2(Bucket=plain_bucket)["Contents"]
    assert listed[0]["ChecksumAlgorithm"] == ["CRC64NVME"]
    attributes = plain_s3.get_object_attributes(
        Bucket=plain_bucket, Key="plain", ObjectAttributes=["Checksum"]
    )
    assert attributes["Checksum"]["ChecksumCRC64NVME"] == crc64nvme(data)
    # An empty object has one too.
    empty = plain_s3.put_object(Bucket=plain_bucket, Key="empty", Body=b"")
    assert empty["ChecksumCRC64NVME"] == crc64nvme(b"") == "AAAAAAAAAAA="


def test_a_named_checksum_is_the_only_one(
    plain_s3: Any, plain_bucket: str, rng: random.Random
) -> None:
    data = rng.randbytes(1000)
    plain_s3.put_object(Bucket=plain_bucket, Key="crc32", Body=data, ChecksumAlgorithm="CRC32")
    head = plain_s3.head_object(Bucket=plain_bucket, Key="crc32", ChecksumMode="ENABLED")
    assert "ChecksumCRC32" in head
    assert "ChecksumCRC64NVME" not in head


def test_multipart_without_algorithm_gets_combined_crc64nvme(
    plain_s3: Any, plain_bucket: str, rng: random.Random
) -> None:
    datas = [rng.randbytes(PART_BYTES_MIN + 3 * ENTRY_SIZE_BYTES + 7), rng.randbytes(999)]
    upload_id = plain_s3.create_multipart_upload(Bucket=plain_bucket, Key="mp")["UploadId"]
    parts = []
    for number, data in enumerate(datas, start=1):
        answer = plain_s3.upload_part(
            Bucket=plain_bucket, Key="mp", UploadId=upload_id, PartNumber=number, Body=data
        )
        assert answer["ChecksumCRC64NVME"] == crc64nvme(data)
        parts.append({"PartNumber": number, "ETag": answer["ETag"]})
    listed = plain_s3.list_parts(Bucket=plain_bucket, Key="mp", UploadId=upload_id)["Parts"]
    assert [p["ChecksumCRC64NVME"] for p in listed] == [crc64nvme(d) for d in datas]
    done = plain_s3.complete_multipart_upload(
        Bucket=plain_bucket, Key="mp", UploadId=upload_id, MultipartUpload={"Parts": parts}
    )
    whole = b"".join(datas)
    assert done["ChecksumCRC64NVME"] == crc64nvme(whole)
    head = plain_s3.head_object(Bucket=plain_bucket, Key="mp", ChecksumMode="ENABLED")
    assert head["ChecksumCRC64NVME"] == crc64nvme(whole)
    assert head["ChecksumType"] == "FULL_OBJECT"


def test_boto3_defaults_validate_downloads_against_the_default_checksum(
    gateway: GatewayProcess, plain_s3: Any, plain_bucket: str, rng: random.Random
) -> None:
    """boto3's default client asks for checksums on GET and checks the body against
    them: objects uploaded without one are now checked too (CRC64NVME)."""
    data = rng.randbytes(2 * ENTRY_SIZE_BYTES + 1)
    plain_s3.put_object(Bucket=plain_bucket, Key="checked", Body=data)
    s3 = gateway.client()
    got = s3.get_object(Bucket=plain_bucket, Key="checked")
    assert got["ChecksumCRC64NVME"] == crc64nvme(data)
    assert got["Body"].read() == data


def test_multipart_with_a_copied_part_gets_the_default_checksum(
    plain_s3: Any, plain_bucket: str, rng: random.Random
) -> None:
    """A part copied from another object (its bytes read for its MD5 even where it
    shares the source's entries) has the default checksum too, and the object the
    combination; a declared whole-object checksum that differs is refused."""
    source = rng.randbytes(PART_BYTES_MIN + 10)
    plain_s3.put_object(Bucket=plain_bucket, Key="source", Body=source)
    upload_id = plain_s3.create_multipart_upload(Bucket=plain_bucket, Key="mixed")["UploadId"]
    copied = plain_s3.upload_part_copy(
        Bucket=plain_bucket,
        Key="mixed",
        UploadId=upload_id,
        PartNumber=1,
        CopySource={"Bucket": plain_bucket, "Key": "source"},
    )["CopyPartResult"]
    assert copied["ChecksumCRC64NVME"] == crc64nvme(source)
    tail = plain_s3.upload_part(
        Bucket=plain_bucket, Key="mixed", UploadId=upload_id, PartNumber=2, Body=b"tail"
    )
    parts = {
        "Parts": [
            {"PartNumber": 1, "ETag": copied["ETag"]},
            {"PartNumber": 2, "ETag": tail["ETag"]},
        ]
    }
    with pytest.raises(ClientError) as refused:
        plain_s3.complete_multipart_upload(
            Bucket=plain_bucket,
            Key="mixed",
            UploadId=upload_id,
            MultipartUpload=parts,
            ChecksumCRC64NVME=crc64nvme(b"something else"),
        )
    assert refused.value.response["Error"]["Code"] == "BadDigest"
    plain_s3.complete_multipart_upload(
        Bucket=plain_bucket,
        Key="mixed",
        UploadId=upload_id,
        MultipartUpload=parts,
        ChecksumCRC64NVME=crc64nvme(source + b"tail"),
    )
    head = plain_s3.head_object(Bucket=plain_bucket, Key="mixed", ChecksumMode="ENABLED")
    assert head["ChecksumCRC64NVME"] == crc64nvme(source + b"tail")
    # A part read by number carries its own checksum (the copied bytes'), as FULL_OBJECT.
    part = plain_s3.head_object(
        Bucket=plain_bucket, Key="mixed", PartNumber=1, ChecksumMode="ENABLED"
    )
    assert part["ChecksumCRC64NVME"] == crc64nvme(source)
    assert part["ChecksumType"] == "FULL_OBJECT"
    got = plain_s3.get_object(Bucket=plain_bucket, Key="mixed")["Body"].read()
    assert got == source + b"tail"


def test_copies_keep_or_compute_checksums_as_s3(
    plain_s3: Any, plain_bucket: str, rng: random.Random, gateway: GatewayProcess
) -> None:
    """CopyObject keeps the source's checksum; with x-amz-checksum-algorithm it computes
    that one over the source's bytes; a source without any checksum (a multipart object
    whose parts carried another algorithm) gets S3's default on its copy."""
    data = rng.randbytes(3 * ENTRY_SIZE_BYTES + 11)
    plain_s3.put_object(Bucket=plain_bucket, Key="src", Body=data, ChecksumAlgorithm="SHA256")
    source = {"Bucket": plain_bucket, "Key": "src"}
    kept = plain_s3.copy_object(Bucket=plain_bucket, Key="kept", CopySource=source)
    sha256 = base64.b64encode(hashlib.sha256(data).digest()).decode()
    assert kept["CopyObjectResult"]["ChecksumSHA256"] == sha256
    changed = plain_s3.copy_object(
        Bucket=plain_bucket, Key="crc", CopySource=source, ChecksumAlgorithm="CRC64NVME"
    )
    assert changed["CopyObjectResult"]["ChecksumCRC64NVME"] == crc64nvme(data)
    head = plain_s3.head_object(Bucket=plain_bucket, Key="crc", ChecksumMode="ENABLED")
    assert head["ChecksumCRC64NVME"] == crc64nvme(data) and "ChecksumSHA256" not in head

    # A conditional copy that would fail is refused before the source is read for its
    # checksum (the commit would refuse it too, after reading all of it).
    read_before = gateway.metric("blobstore_object_bytes_read_total")
    for conditions, code in (
        ({"IfNoneMatch": "*"}, "PreconditionFailed"),
        ({"IfMatch": '"0123456789abcdef0123456789abcdef"'}, "PreconditionFailed"),
        ({"IfMatch": "*", "Key": "absent"}, "NoSuchKey"),
    ):
        request = {"Bucket": plain_bucket, "Key": "crc", "CopySource": source, **conditions}
        with pytest.raises(ClientError) as refused:
            plain_s3.copy_object(**request, ChecksumAlgorithm="CRC32")
        assert refused.value.response["Error"]["Code"] == code, conditions
    assert gateway.metric("blobstore_object_bytes_read_total") == read_before
    crc = plain_s3.head_object(Bucket=plain_bucket, Key="crc")["ETag"]
    copied = plain_s3.copy_object(
        Bucket=plain_bucket, Key="crc", CopySource=source, ChecksumAlgorithm="CRC32", IfMatch=crc
    )
    assert "ChecksumCRC32" in copied["CopyObjectResult"]

    # An algorithm S3 does not know (botocore would refuse it: set on the wire).
    def unknown_algorithm(request: Any, **_: Any) -> None:
        request.headers["x-amz-checksum-algorithm"] = "MD4"

    plain_s3.meta.events.register_first("before-sign.s3.CopyObject", unknown_algorithm)
    try:
        with pytest.raises(ClientError) as refused:
            plain_s3.copy_object(Bucket=plain_bucket, Key="bad", CopySource=source)
    finally:
        plain_s3.meta.events.unregister("before-sign.s3.CopyObject", unknown_algorithm)
    assert refused.value.response["Error"]["Code"] == "InvalidRequest"

    upload_id = plain_s3.create_multipart_upload(Bucket=plain_bucket, Key="none")["UploadId"]
    part = plain_s3.upload_part(
        Bucket=plain_bucket,
        Key="none",
        UploadId=upload_id,
        PartNumber=1,
        Body=data,
        ChecksumAlgorithm="CRC32",
    )
    plain_s3.complete_multipart_upload(
        Bucket=plain_bucket,
        Key="none",
        UploadId=upload_id,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]},
    )
    bare = plain_s3.head_object(Bucket=plain_bucket, Key="none", ChecksumMode="ENABLED")
    assert not [k for k in bare if k.startswith("Checksum")], bare
    copy = plain_s3.copy_object(
        Bucket=plain_bucket, Key="none-copy", CopySource={"Bucket": plain_bucket, "Key": "none"}
    )
    assert copy["CopyObjectResult"]["ChecksumCRC64NVME"] == crc64nvme(data)
