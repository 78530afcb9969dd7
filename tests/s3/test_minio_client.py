"""minio-py against the gateway: a listing past one page (minio-py sends its continuation
token and start-after together, the token standing), and a put/stat/get round trip."""

from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from minio import Minio

from tests.cluster.gateway import ACCESS_KEY, SECRET_KEY, GatewayProcess

KEY_COUNT = 2000


def minio_client(gateway: GatewayProcess) -> Minio:
    return Minio(
        f"127.0.0.1:{gateway.port}",
        access_key=ACCESS_KEY,
        secret_key=SECRET_KEY,
        secure=False,
        region="us-east-1",
    )


def test_listing_of_two_thousand_keys(gateway: GatewayProcess, s3: Any, bucket: str) -> None:
    # Keys that sort before their continuation tokens (base64 of the key): a token that
    # lost to start-after would end the listing after its first page.
    keys = [f"{i:05d}" for i in range(KEY_COUNT)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda key: s3.put_object(Bucket=bucket, Key=key, Body=b""), keys))
    client = minio_client(gateway)
    listed = [o.object_name for o in client.list_objects(bucket, recursive=True)]
    assert listed == keys
    after = [
        o.object_name for o in client.list_objects(bucket, recursive=True, start_after="00499")
    ]
    assert after == keys[500:]
    v1 = [o.object_name for o in client.list_objects(bucket, recursive=True, use_api_v1=True)]
    assert v1 == keys


def test_put_stat_get_round_trip(gateway: GatewayProcess, bucket: str) -> None:
    client = minio_client(gateway)
    data = bytes(range(256)) * 300
    written = client.put_object(
        bucket,
        "dir/with space+plus.bin",
        io.BytesIO(data),
        len(data),
        content_type="application/x-test",
        metadata={"x-amz-meta-colour": "blue"},
    )
    stat = client.stat_object(bucket, "dir/with space+plus.bin")
    assert (stat.size, stat.etag, stat.content_type) == (
        len(data),
        written.etag,
        "application/x-test",
    )
    assert stat.metadata is not None
    assert stat.metadata["x-amz-meta-colour"] == "blue"
    response = client.get_object(bucket, "dir/with space+plus.bin")
    try:
        assert response.read() == data
    finally:
        response.close()
        response.release_conn()
    listed = list(client.list_objects(bucket, prefix="dir/"))
    assert [o.object_name for o in listed] == ["dir/with space+plus.bin"]
