"""PutObject, GetObject, ListObjectsV2 and multipart through boto3, end to end."""

from __future__ import annotations

import hashlib
import random
from typing import Any

from tests.s3.conftest import ENTRY_SIZE_BYTES, PART_BYTES_MIN


def test_put_get_list_delete(s3: Any, bucket: str, rng: random.Random) -> None:
    body = rng.randbytes(3 * ENTRY_SIZE_BYTES + 123)
    put = s3.put_object(Bucket=bucket, Key="dir/a b+c", Body=body, Metadata={"colour": "blue"})
    assert put["ETag"] == f'"{hashlib.md5(body).hexdigest()}"'
    got = s3.get_object(Bucket=bucket, Key="dir/a b+c")
    assert got["Body"].read() == body
    assert got["Metadata"] == {"colour": "blue"}
    assert got["ContentLength"] == len(body)
    s3.put_object(Bucket=bucket, Key="small", Body=b"hello")
    s3.put_object(Bucket=bucket, Key="empty", Body=b"")
    assert s3.get_object(Bucket=bucket, Key="empty")["Body"].read() == b""
    listed = s3.list_objects_v2(Bucket=bucket)
    assert [o["Key"] for o in listed["Contents"]] == ["dir/a b+c", "empty", "small"]
    by_dir = s3.list_objects_v2(Bucket=bucket, Delimiter="/")
    assert [p["Prefix"] for p in by_dir["CommonPrefixes"]] == ["dir/"]
    s3.delete_object(Bucket=bucket, Key="small")
    listed = s3.list_objects_v2(Bucket=bucket)
    assert [o["Key"] for o in listed["Contents"]] == ["dir/a b+c", "empty"]


def test_multipart_upload(s3: Any, bucket: str, rng: random.Random) -> None:
    parts_data = [
        rng.randbytes(PART_BYTES_MIN + 5000),
        rng.randbytes(PART_BYTES_MIN),
        rng.randbytes(777),
    ]
    upload = s3.create_multipart_upload(Bucket=bucket, Key="big")
    parts = []
    for number, data in enumerate(parts_data, start=1):
        response = s3.upload_part(
            Bucket=bucket, Key="big", UploadId=upload["UploadId"], PartNumber=number, Body=data
        )
        parts.append({"PartNumber": number, "ETag": response["ETag"]})
    done = s3.complete_multipart_upload(
        Bucket=bucket, Key="big", UploadId=upload["UploadId"], MultipartUpload={"Parts": parts}
    )
    expected_etag = hashlib.md5(b"".join(hashlib.md5(d).digest() for d in parts_data)).hexdigest()
    assert done["ETag"] == f'"{expected_etag}-3"'
    whole = b"".join(parts_data)
    assert s3.get_object(Bucket=bucket, Key="big")["Body"].read() == whole
    second = s3.get_object(Bucket=bucket, Key="big", PartNumber=2)
    assert second["Body"].read() == parts_data[1]
    assert second["PartsCount"] == 3
