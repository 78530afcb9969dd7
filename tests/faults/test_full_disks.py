"""Bookies whose disks are full turn read-only, and the gateway says so.

Three bookies start with a disk-usage threshold this machine's disk is already over, so
each registers read-only. A PUT then finds no replacement for its ledger's bookies: the
client gets 503 ServiceUnavailable (SDKs retry it) whose message says how many bookies
are read-only, not S3's rate-limit text, and the gateway's log names them. Reads of what was
stored before still work, and once the bookies are writable again (restarted with the
default threshold) PUTs succeed.
"""

from __future__ import annotations

import random
from typing import Any

from botocore.exceptions import ClientError

from tests.faults.conftest import BOOKIE_ARGS, FaultCluster
from tests.waiting import wait_until

FULL = ("--disk-usage-threshold", "0.000001", "--disk-usage-warn-threshold", "0.0000005")
READ_ONLY_WAIT_S = 30.0


def _refused_put(s3: Any, key: str, body: bytes) -> ClientError | None:
    """The error a PUT of `key` is refused with, or None if it is stored."""
    try:
        s3.put_object(Bucket="full", Key=key, Body=body)
    except ClientError as e:
        return e
    return None


def _accepted_put(s3: Any, key: str, body: bytes) -> bool:
    """Whether a PUT of `key` is stored; a refusal may only be ServiceUnavailable."""
    try:
        s3.put_object(Bucket="full", Key=key, Body=body)
    except ClientError as e:
        assert e.response["Error"]["Code"] == "ServiceUnavailable", e.response
        return False
    return True


def test_put_names_the_read_only_bookies(cluster: FaultCluster, rng: random.Random) -> None:
    bookies = cluster.add_bookies(3)
    gateway = cluster.start_gateway("gateway")
    s3 = gateway.client(retries={"total_max_attempts": 1, "mode": "standard"}, read_timeout=60)
    s3.create_bucket(Bucket="full")
    before = rng.randbytes(10_000)
    s3.put_object(Bucket="full", Key="before", Body=before)

    for bookie in bookies:
        bookie.stop()
        bookie.extra_args = (*BOOKIE_ARGS, *FULL)
        bookie.start()
    # The gateway hears of each bookie's new state through its registration's watch.
    refusal = wait_until(
        lambda: _refused_put(s3, "refused", b"x" * 100),
        READ_ONLY_WAIT_S,
        message="PUTs still succeed on read-only bookies",
        interval_s=0.5,
    )
    error = refusal.response["Error"]
    status = refusal.response["ResponseMetadata"]["HTTPStatusCode"]
    assert (status, error["Code"]) == (503, "ServiceUnavailable"), error
    message = error["Message"]
    assert "too few writable bookies: 3 read-only (disk full or failing)" in message, message
    # The client is told how many, the gateway's log which (and why the request failed).
    log = gateway.log_text()
    assert "error=ServiceUnavailable" in log
    for bookie in bookies:
        assert bookie.bookie_id not in message, message
        assert bookie.bookie_id in log

    assert s3.get_object(Bucket="full", Key="before")["Body"].read() == before
    try:
        s3.head_object(Bucket="full", Key="refused")
        raise AssertionError("the refused PUT's object is visible")
    except ClientError as e:
        assert e.response["Error"]["Code"] == "404"

    for bookie in bookies:
        bookie.stop()
        bookie.extra_args = BOOKIE_ARGS
        bookie.start()
    wait_until(
        lambda: _accepted_put(s3, "after", b"y" * 100),
        READ_ONLY_WAIT_S,
        message="PUTs still refused on writable bookies",
        interval_s=0.5,
    )
    assert s3.get_object(Bucket="full", Key="after")["Body"].read() == b"y" * 100
