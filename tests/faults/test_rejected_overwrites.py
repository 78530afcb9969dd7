"""Overwrites that must not happen leave the old version whole: a client that hangs up
mid-body, a body whose Content-MD5 or x-amz-checksum-* does not match, and a
multi-entry body cut short. Every case sends more than an entry, so the gateway has
already appended entries when it refuses the commit.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import random
import socket
from typing import Any
from urllib.parse import urlsplit

import pytest
from botocore.exceptions import ClientError

from tests.cluster.gateway import GatewayProcess
from tests.faults.conftest import ENTRY_SIZE_BYTES, FaultCluster
from tests.waiting import wait_until

ABANDON_DEADLINE_S = 30.0


def _abandoned(gateway: GatewayProcess) -> float:
    return gateway.metric("blobstore_object_writes_abandoned_total")


def _wait_abandoned(gateway: GatewayProcess, count: int) -> None:
    """Wait until the gateway has given up the write (so a wrong commit would be seen)."""
    wait_until(
        lambda: _abandoned(gateway) >= count,
        ABANDON_DEADLINE_S,
        message="the gateway never gave up the refused write",
        interval_s=0.05,
    )


def _assert_old(s3: Any, bucket: str, old: bytes) -> None:
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == old
    listed = s3.list_objects_v2(Bucket=bucket)["Contents"]
    assert [(o["Key"], o["Size"]) for o in listed] == [("k", len(old))]


def test_refused_overwrites_keep_the_old_version(cluster: FaultCluster, rng: random.Random) -> None:
    cluster.add_bookies(3)
    gateway = cluster.start_gateway("gateway")
    s3 = gateway.client(retries={"total_max_attempts": 1, "mode": "standard"})
    bucket = "refused"
    s3.create_bucket(Bucket=bucket)
    old = rng.randbytes(2 * ENTRY_SIZE_BYTES + 9)
    s3.put_object(Bucket=bucket, Key="k", Body=old)
    new = rng.randbytes(8 * ENTRY_SIZE_BYTES + 5)

    wrong_md5 = base64.b64encode(hashlib.md5(new + b"x").digest()).decode()
    with pytest.raises(ClientError) as refused:
        s3.put_object(Bucket=bucket, Key="k", Body=new, ContentMD5=wrong_md5)
    assert refused.value.response["Error"]["Code"] == "BadDigest"
    _wait_abandoned(gateway, 1)
    _assert_old(s3, bucket, old)

    wrong_crc = base64.b64encode(b"\x00\x00\x00\x01").decode()
    with pytest.raises(ClientError) as refused:
        s3.put_object(Bucket=bucket, Key="k", Body=new, ChecksumCRC32=wrong_crc)
    assert refused.value.response["Error"]["Code"] in ("BadDigest", "InvalidRequest")
    _wait_abandoned(gateway, 2)
    _assert_old(s3, bucket, old)

    # A client that hangs up after most of the body (abortive close: RST).
    url = urlsplit(
        s3.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "k"}, ExpiresIn=60)
    )
    for index, abortive in enumerate((True, False)):
        connection = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
        connection.putrequest("PUT", f"{url.path}?{url.query}", skip_accept_encoding=True)
        connection.putheader("Content-Length", str(len(new)))
        connection.endheaders()
        connection.send(new[: len(new) - ENTRY_SIZE_BYTES // 2])
        assert connection.sock is not None
        if abortive:
            connection.sock.setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
            )
        else:
            connection.sock.shutdown(socket.SHUT_WR)  # a clean end of a short body
        connection.close()
        _wait_abandoned(gateway, 3 + index)
        _assert_old(s3, bucket, old)

    # The key still takes a good overwrite.
    s3.put_object(Bucket=bucket, Key="k", Body=new)
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == new
