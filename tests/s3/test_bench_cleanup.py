"""The S3 benchmark deletes what it wrote: `s3_boto.empty_bucket` against a real
gateway, with batches smaller than the bucket so that several DeleteObjects run."""

from __future__ import annotations

from typing import Any

from bench import s3_boto


def test_the_benchmark_empties_its_bucket_in_bounded_batches(s3: Any, bucket: str) -> None:
    keys = [f"put-{n:03d}" for n in range(23)]
    for key in keys:
        s3.put_object(Bucket=bucket, Key=key, Body=key.encode())
    calls: list[int] = []
    real_delete = s3.delete_objects

    def counted_delete(**kwargs: Any) -> Any:
        calls.append(len(kwargs["Delete"]["Objects"]))
        return real_delete(**kwargs)

    s3.delete_objects = counted_delete
    assert s3_boto.empty_bucket(s3, bucket, batch_keys=10) == len(keys)
    assert calls == [10, 10, 3]
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0
    assert s3_boto.empty_bucket(s3, bucket) == 0  # an empty bucket: nothing to do
