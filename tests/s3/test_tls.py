"""HTTPS: boto3 streams uploads as aws-chunked with a CRC trailer by default; the
trailer is verified and stored as the checksum, never as object data."""

from __future__ import annotations

import base64
import random
import zlib

from tests.cluster.gateway import GatewayProcess
from tests.s3.conftest import ENTRY_SIZE_BYTES, PART_BYTES_MIN


def test_https_put_get_with_trailer_checksum(
    tls_gateway: GatewayProcess, rng: random.Random
) -> None:
    s3 = tls_gateway.client()
    s3.create_bucket(Bucket="tls-bucket")
    body = rng.randbytes(5 * ENTRY_SIZE_BYTES + 17)
    put = s3.put_object(Bucket="tls-bucket", Key="k", Body=body)
    crc = base64.b64encode(zlib.crc32(body).to_bytes(4, "big")).decode()
    assert put["ChecksumCRC32"] == crc
    got = s3.get_object(Bucket="tls-bucket", Key="k", ChecksumMode="ENABLED")
    data = got["Body"].read()
    assert data == body, (
        "the stored object holds exactly the payload (no chunk framing, no trailer)"
    )
    assert got["ChecksumCRC32"] == crc
    head = s3.head_object(Bucket="tls-bucket", Key="k")
    assert head["ContentLength"] == len(body)


def test_https_multipart_with_checksums(tls_gateway: GatewayProcess, rng: random.Random) -> None:
    s3 = tls_gateway.client()
    s3.create_bucket(Bucket="tls-multipart")
    upload = s3.create_multipart_upload(Bucket="tls-multipart", Key="m", ChecksumAlgorithm="CRC32")
    datas = [rng.randbytes(PART_BYTES_MIN + 1), rng.randbytes(1000)]
    parts = []
    for number, data in enumerate(datas, start=1):
        response = s3.upload_part(
            Bucket="tls-multipart",
            Key="m",
            UploadId=upload["UploadId"],
            PartNumber=number,
            Body=data,
            ChecksumAlgorithm="CRC32",
        )
        parts.append(
            {
                "PartNumber": number,
                "ETag": response["ETag"],
                "ChecksumCRC32": response["ChecksumCRC32"],
            }
        )
    done = s3.complete_multipart_upload(
        Bucket="tls-multipart",
        Key="m",
        UploadId=upload["UploadId"],
        MultipartUpload={"Parts": parts},
    )
    part_crcs = b"".join(zlib.crc32(d).to_bytes(4, "big") for d in datas)
    composite = base64.b64encode(zlib.crc32(part_crcs).to_bytes(4, "big")).decode() + "-2"
    assert done["ChecksumCRC32"] == composite
    got = s3.get_object(Bucket="tls-multipart", Key="m")
    assert got["Body"].read() == b"".join(datas)
