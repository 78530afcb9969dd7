"""A delete-heavy workload through boto3, and the check that what it left reads back."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

OBJECT_BYTES = 96 * 1024


@dataclass
class Expected:
    """What each key must read back as (bucket -> key -> bytes)."""

    objects: dict[str, dict[str, bytes]] = field(default_factory=dict)

    def put(self, s3: Any, bucket: str, key: str, body: bytes) -> None:
        s3.put_object(Bucket=bucket, Key=key, Body=body)
        self.objects.setdefault(bucket, {})[key] = body

    def live_bytes(self) -> int:
        """Bytes of distinct live data (a copy shares its source's entries)."""
        return sum(len(b) for keys in self.objects.values() for b in keys.values())

    def mismatches(self, s3: Any) -> list[str]:
        bad = []
        for bucket, keys in self.objects.items():
            for key, body in keys.items():
                if s3.get_object(Bucket=bucket, Key=key)["Body"].read() != body:
                    bad.append(f"{bucket}/{key}")
        return bad


def delete_heavy(s3: Any, bucket: str, rng: random.Random, count: int) -> Expected:
    """Put `count` objects, overwrite half, delete a quarter, copy some, abort uploads."""
    expected = Expected()
    s3.create_bucket(Bucket=bucket)
    for i in range(count):
        expected.put(s3, bucket, f"obj/{i:05d}", rng.randbytes(OBJECT_BYTES))
    for i in range(0, count, 2):
        expected.put(s3, bucket, f"obj/{i:05d}", rng.randbytes(OBJECT_BYTES))
    for i in range(1, count, 4):
        s3.delete_object(Bucket=bucket, Key=f"obj/{i:05d}")
        del expected.objects[bucket][f"obj/{i:05d}"]
    for i in range(0, count, 8):
        source = f"obj/{i:05d}"
        s3.copy_object(
            Bucket=bucket, Key=f"copy/{i:05d}", CopySource={"Bucket": bucket, "Key": source}
        )
        expected.objects[bucket][f"copy/{i:05d}"] = expected.objects[bucket][source]
    for i in range(3):
        upload = s3.create_multipart_upload(Bucket=bucket, Key=f"aborted/{i}")
        s3.upload_part(
            Bucket=bucket,
            Key=f"aborted/{i}",
            UploadId=upload["UploadId"],
            PartNumber=1,
            Body=rng.randbytes(5 * 1024 * 1024),
        )
        s3.abort_multipart_upload(Bucket=bucket, Key=f"aborted/{i}", UploadId=upload["UploadId"])
    return expected


def shared_copies_bytes(expected: Expected) -> int:
    """Bytes counted twice by live_bytes because a copy shares its source's entries."""
    return sum(
        len(body)
        for keys in expected.objects.values()
        for key, body in keys.items()
        if key.startswith("copy/")
    )
