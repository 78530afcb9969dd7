"""Flip one byte of an entry in one bookie's entry log (bit rot, a bad sector): GET
through the gateway still returns the exact bytes (the digest check rejects the bad
replica and the read falls back to another). With the good replica gone too, the GET
fails; it never returns wrong bytes.

The ledger-level variant lives in tests/ledger/test_ledger_faults.py; this one goes
through S3, entry logs written by a real checkpoint and a fresh gateway (no cache).
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from tests.cluster.processes import BookieProcess
from tests.faults.conftest import ENTRY_SIZE_BYTES, FaultCluster
from tests.waiting import wait_until

CHECKPOINT_DEADLINE_S = 30.0
MARKER_BYTES = 64


def _entry_logs(bookie: BookieProcess) -> list[Path]:
    return sorted((bookie.ledger_dir / "current").glob("*.log"))


def _find(bookie: BookieProcess, marker: bytes) -> tuple[Path, int] | None:
    for path in _entry_logs(bookie):
        offset = path.read_bytes().find(marker)
        if offset >= 0:
            return path, offset
    return None


def _holders(cluster: FaultCluster, marker: bytes, count_min: int) -> dict[int, tuple[Path, int]]:
    """bookie index -> where its entry logs hold `marker`; empty while fewer than
    `count_min` bookies hold it."""
    holders = {b.index: found for b in cluster.bookies if (found := _find(b, marker))}
    return holders if len(holders) >= count_min else {}


def test_corrupt_replica_is_never_served(cluster: FaultCluster, rng: random.Random) -> None:
    cluster.add_bookies(3)
    # No repair of what reads find: the corrupt replica must stay for the last GET.
    gateway = cluster.start_gateway("gateway", {"BLOBSTORE_REPLICA_REPAIR": "0"})
    s3 = gateway.client(retries={"total_max_attempts": 1, "mode": "standard"})
    bucket = "corrupt"
    s3.create_bucket(Bucket=bucket)
    body = rng.randbytes(4 * ENTRY_SIZE_BYTES + 100)
    s3.put_object(Bucket=bucket, Key="k", Body=body)
    # A marker inside the second entry's payload.
    marker_at = ENTRY_SIZE_BYTES + ENTRY_SIZE_BYTES // 2
    marker = body[marker_at : marker_at + MARKER_BYTES]

    # Wait until a checkpoint wrote the entry to the entry logs of its replicas.
    holders = wait_until(
        lambda: _holders(cluster, marker, 2),
        CHECKPOINT_DEADLINE_S,
        message=lambda: f"entry never checkpointed: {_holders(cluster, marker, 0)}",
        interval_s=0.1,
    )
    victim_index, (path, offset) = sorted(holders.items())[0]
    fd = os.open(path, os.O_RDWR)
    try:
        original = os.pread(fd, 1, offset + 7)
        os.pwrite(fd, bytes([original[0] ^ 0x40]), offset + 7)
    finally:
        os.close(fd)

    # A fresh gateway: nothing cached in the reader.
    gateway.kill()
    gateway.start()
    s3 = gateway.client(retries={"total_max_attempts": 1, "mode": "standard"})
    # The bookie may still hold the entry in its read cache: restart it (kill -9, so
    # nothing is rewritten from memory), then read many times so both replicas serve.
    cluster.bookies[victim_index].kill()
    cluster.bookies[victim_index].start()
    for _ in range(6):
        assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == body
    ranged = s3.get_object(
        Bucket=bucket, Key="k", Range=f"bytes={marker_at - 10}-{marker_at + 200}"
    )["Body"].read()
    assert ranged == body[marker_at - 10 : marker_at + 201]

    # Only the corrupt replica left: the GET fails rather than serving wrong bytes.
    for index in holders:
        if index != victim_index:
            cluster.bookies[index].kill()
    gateway.kill()
    gateway.start()
    s3 = gateway.client(retries={"total_max_attempts": 1, "mode": "standard"}, read_timeout=60)
    with pytest.raises(Exception) as failure:  # noqa: PT011 - any failure, never wrong bytes
        got = s3.get_object(Bucket=bucket, Key="k")["Body"].read()
        assert got == body, "a GET served bytes that differ from what was PUT"
        raise AssertionError("GET succeeded though only a corrupt replica was left")
    print(f"GET with only a corrupt replica failed: {failure.value!r}")
    assert "differ from what was PUT" not in str(failure.value), failure.value
    assert "GET succeeded" not in str(failure.value), failure.value
