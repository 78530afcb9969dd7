"""Lifecycle transitions to a file tier, end to end: boto3 through the real gateway, the
real `blobstore maintain` (local Spark), the real `blobstore admin tier`.

Objects of several sizes (one of many entries, a multipart one, an empty one; encrypted
with SSE-S3 and SSE-C, whose sealed bytes the job moves without any key) are moved to a
tier named by an S3 class bound to it; then GET, HEAD, random range GETs and
listings show them unchanged but for their storage class, and the bookies no longer
hold their ledgers. RestoreObject copies one back to the bookies; deleting the others
makes the segment sparse: the next run drops the expired copy and rewrites the segment;
deleting the last removes every segment at the run after.
"""

from __future__ import annotations

import datetime
import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from blobstore.runtime.sealing import CLUSTER_KEY_FILE_ENV, write_cluster_key_file
from tests.maintenance.conftest import ROOT, MaintenanceCluster
from tests.waiting import wait_until

DAY_S = 86_400
BUCKET = "cold-data"
PART_BYTES = 256 * 1024
GATEWAY_ENV = {
    "BLOBSTORE_PART_BYTES_MIN": str(PART_BYTES),
    "BLOBSTORE_LEDGER_AGE_S_MAX": "1",
    "BLOBSTORE_GATEWAY_SSE_C_OVER_HTTP": "1",
}
CUSTOMER_KEY = bytes(range(32))
# What a read of each key must send besides bucket and key (an SSE-C object's key).
READ_ARGS: dict[str, dict[str, Any]] = {
    "secret": {"SSECustomerAlgorithm": "AES256", "SSECustomerKey": CUSTOMER_KEY}
}


def admin(cluster: MaintenanceCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "blobstore.cli", "admin", "--zk", cluster.zk, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def key_env(cluster: MaintenanceCluster) -> dict[str, str]:
    """The cluster key, for every process of a cluster that encrypts: the gateway opens
    the key service's master keys with it, and every process derives the ledgers'
    passwords from it (the maintenance job too)."""
    key_file = cluster.root / "cluster.key"
    if not key_file.exists():
        write_cluster_key_file(key_file)
    return {CLUSTER_KEY_FILE_ENV: str(key_file)}


def start(cluster: MaintenanceCluster, *, cluster_key: bool = False) -> Any:
    cluster.bookies.extend(cluster.start_bookies(3))
    cluster.start_gateway("gateway", {**GATEWAY_ENV, **(key_env(cluster) if cluster_key else {})})
    s3 = cluster.s3()
    s3.create_bucket(Bucket=BUCKET)
    return s3


def put_objects(s3: Any, rng: random.Random) -> dict[str, bytes]:
    bodies = {
        "small": rng.randbytes(1000),
        "empty": b"",
        "entries": rng.randbytes(700_000),  # eleven 64 KiB entries
        "logs/a": rng.randbytes(5000),
    }
    for key, body in bodies.items():
        sealed = {"ServerSideEncryption": "AES256"} if key == "entries" else {}
        s3.put_object(Bucket=BUCKET, Key=key, Body=body, **sealed)
    bodies["secret"] = rng.randbytes(300_000)
    s3.put_object(Bucket=BUCKET, Key="secret", Body=bodies["secret"], **READ_ARGS["secret"])
    parts = [rng.randbytes(PART_BYTES), rng.randbytes(PART_BYTES), rng.randbytes(1234)]
    upload = s3.create_multipart_upload(Bucket=BUCKET, Key="multi", ServerSideEncryption="AES256")
    done = [
        {
            "PartNumber": n,
            "ETag": s3.upload_part(
                Bucket=BUCKET, Key="multi", UploadId=upload["UploadId"], PartNumber=n, Body=body
            )["ETag"],
        }
        for n, body in enumerate(parts, 1)
    ]
    s3.complete_multipart_upload(
        Bucket=BUCKET, Key="multi", UploadId=upload["UploadId"], MultipartUpload={"Parts": done}
    )
    bodies["multi"] = b"".join(parts)
    return bodies


def read(s3: Any, key: str) -> bytes:
    body: bytes = s3.get_object(Bucket=BUCKET, Key=key, **READ_ARGS.get(key, {}))["Body"].read()
    return body


def ledgers(cluster: MaintenanceCluster) -> list[dict[str, Any]]:
    result = admin(cluster, "ledgers", "--json")
    assert result.returncode == 0, result.stderr
    found: list[dict[str, Any]] = json.loads(result.stdout)
    return found


TIER_RULES = [
    {
        "ID": "to-cold",
        "Status": "Enabled",
        "Filter": {},
        "Transitions": [{"Days": 1, "StorageClass": "GLACIER"}],
    }
]


def later_text(days: int = 3) -> str:
    """A --now past every transition the rules set on objects written now."""
    later = datetime.datetime.fromtimestamp(time.time() + days * DAY_S, datetime.UTC)
    return later.strftime("%Y-%m-%dT%H:%M:%SZ")


def add_file_tier(cluster: MaintenanceCluster, tier_dir: Path) -> None:
    added = admin(
        cluster, "tier", "add", "COLD", f"file://{tier_dir}", "--storage-class", "GLACIER"
    )
    assert added.returncode == 0, added.stderr


def check_du(cluster: MaintenanceCluster, bodies: dict[str, bytes], segment_bytes: int) -> None:
    """`admin du` shows the tier: versions and live bytes, the segment and its bytes."""
    du = admin(cluster, "du", "--json")
    assert du.returncode == 0, du.stderr
    (tier_row,) = json.loads(du.stdout)["total"]["tiers"]
    assert tier_row["tier"] == "COLD" and tier_row["versions"] == len(bodies), tier_row
    assert tier_row["live_bytes"] == sum(len(b) for b in bodies.values()), tier_row
    assert (tier_row["segments"], tier_row["segment_bytes"]) == (1, segment_bytes), tier_row


def check_tiered_reads(
    s3: Any, bodies: dict[str, bytes], heads: dict[str, Any], rng: random.Random
) -> None:
    """GET, HEAD, random ranges and the listing: the same bytes and ETags, the new class."""
    for key, body in bodies.items():
        args = READ_ARGS.get(key, {})
        got = s3.get_object(Bucket=BUCKET, Key=key, **args)
        assert got["Body"].read() == body, key
        assert got["StorageClass"] == "GLACIER", key
        head = s3.head_object(Bucket=BUCKET, Key=key, **args)
        assert head["ETag"] == heads[key]["ETag"], key
        assert head["StorageClass"] == "GLACIER", key
        for _ in range(3 if body else 0):
            first = rng.randrange(len(body))
            last = rng.randrange(first, len(body))
            ranged = s3.get_object(Bucket=BUCKET, Key=key, Range=f"bytes={first}-{last}", **args)
            assert ranged["Body"].read() == body[first : last + 1], (key, first, last)
    listed = s3.list_objects_v2(Bucket=BUCKET)["Contents"]
    assert {o["Key"]: o["StorageClass"] for o in listed} == {k: "GLACIER" for k in bodies}


def check_tiered_copies(s3: Any, bodies: dict[str, bytes]) -> None:
    """CopyObject and UploadPartCopy of versions whose bytes are on the tier only: the
    bytes are read from the tier (opened with the source's key) and the copy lands on
    the bookies, in STANDARD. The copies are deleted after (later runs count objects)."""
    copy_source_key = {
        "CopySourceSSECustomerAlgorithm": "AES256",
        "CopySourceSSECustomerKey": CUSTOMER_KEY,
    }
    for key in ("small", "entries", "secret", "multi"):
        source_args = copy_source_key if key == "secret" else {}
        sealed = {"ServerSideEncryption": "AES256"} if key == "entries" else {}
        copied = s3.copy_object(
            Bucket=BUCKET,
            Key=f"copies/{key}",
            CopySource={"Bucket": BUCKET, "Key": key},
            **source_args,
            **sealed,
        )
        head = s3.head_object(Bucket=BUCKET, Key=f"copies/{key}")
        assert head.get("StorageClass", "STANDARD") == "STANDARD", head
        assert head["ETag"] == copied["CopyObjectResult"]["ETag"]
        assert read(s3, f"copies/{key}") == bodies[key], key
    assert head_etag(s3, "copies/small") == head_etag(s3, "small")  # the bytes' MD5
    upload = s3.create_multipart_upload(Bucket=BUCKET, Key="copies/part")
    part = s3.upload_part_copy(
        Bucket=BUCKET,
        Key="copies/part",
        UploadId=upload["UploadId"],
        PartNumber=1,
        CopySource={"Bucket": BUCKET, "Key": "entries"},
        CopySourceRange="bytes=1000-300999",
    )
    done = [{"PartNumber": 1, "ETag": part["CopyPartResult"]["ETag"]}]
    s3.complete_multipart_upload(
        Bucket=BUCKET,
        Key="copies/part",
        UploadId=upload["UploadId"],
        MultipartUpload={"Parts": done},
    )
    assert read(s3, "copies/part") == bodies["entries"][1000:301000]
    for key in ("small", "entries", "secret", "multi", "part"):
        s3.delete_object(Bucket=BUCKET, Key=f"copies/{key}")


def head_etag(s3: Any, key: str) -> str:
    etag: str = s3.head_object(Bucket=BUCKET, Key=key)["ETag"]
    return etag


def check_restore(s3: Any, key: str, body: bytes, etag: str) -> None:
    """RestoreObject copies a tiered version back to the bookies until its days are over
    (202; 200 when a copy is there already), and HEAD says so."""
    restored = s3.restore_object(Bucket=BUCKET, Key=key, RestoreRequest={"Days": 1})
    assert restored["ResponseMetadata"]["HTTPStatusCode"] == 202, restored
    head = s3.head_object(Bucket=BUCKET, Key=key)
    assert 'ongoing-request="false", expiry-date=' in head["Restore"], head
    assert head["StorageClass"] == "GLACIER" and head["ETag"] == etag
    assert read(s3, key) == body
    again = s3.restore_object(Bucket=BUCKET, Key=key, RestoreRequest={"Days": 1})
    assert again["ResponseMetadata"]["HTTPStatusCode"] == 200, again


def test_transition_to_a_file_tier_and_back_out(
    cluster: MaintenanceCluster, tmp_path: Path
) -> None:
    rng = random.Random(20261129)
    s3 = start(cluster, cluster_key=True)
    env = key_env(cluster)
    tier_dir = tmp_path / "cold"
    added = admin(
        cluster, "tier", "add", "COLD", f"file://{tier_dir}", "--storage-class", "GLACIER"
    )
    assert added.returncode == 0, added.stderr
    bodies = put_objects(s3, rng)
    heads = {
        key: s3.head_object(Bucket=BUCKET, Key=key, **READ_ARGS.get(key, {})) for key in bodies
    }
    s3.put_bucket_lifecycle_configuration(
        Bucket=BUCKET,
        LifecycleConfiguration={"Rules": TIER_RULES},
    )
    # The writer ledgers close once idle (1 s): closed ledgers can be deleted.
    wait_until(
        lambda: all(entry["state"] == "CLOSED" for entry in ledgers(cluster)),
        30,
        message="writer ledgers closed",
    )
    now = later_text()
    report = cluster.report("--grace", "0", "--now", now, env=env)
    assert report["objects_tiered"] == len(bodies), report
    assert report["segments_written"] == 1, report
    assert report["tier_bytes_written"] >= sum(len(b) for b in bodies.values())
    assert report["errors"] == [], report["errors"]
    segments = list((tier_dir / "segments").iterdir())
    assert len(segments) == 1, segments
    segment_bytes = segments[0].stat().st_size
    check_du(cluster, bodies, segment_bytes)

    check_tiered_reads(s3, bodies, heads, rng)
    check_tiered_copies(s3, bodies)
    # The copies' writer ledgers closed (all garbage now) before the restore writes: a
    # ledger shared with the restored copy would be compacted, not deleted, below.
    wait_until(
        lambda: all(entry["state"] == "CLOSED" for entry in ledgers(cluster)),
        30,
        message="writer ledgers closed",
    )

    # RestoreObject, on the version kept below.
    kept = "entries"
    check_restore(s3, kept, bodies[kept], heads[kept]["ETag"])

    # Most objects deleted: the next run (two days on) drops the expired restored copy
    # and rewrites the sparse segment (its live version moves to a new one).
    for key in bodies:
        if key != kept:
            s3.delete_object(Bucket=BUCKET, Key=key)
    rewritten = cluster.report("--grace", "0", "--now", now, env=env)
    assert rewritten["restores_expired"] == 1, rewritten
    assert rewritten["segments_rewritten"] == 1, rewritten
    assert rewritten["objects_rewritten"] == 1 and rewritten["objects_tiered"] == 0, rewritten
    assert read(s3, kept) == bodies[kept]
    assert "Restore" not in s3.head_object(Bucket=BUCKET, Key=kept)
    assert len(list((tier_dir / "segments").iterdir())) == 2

    # The last one deleted: the next run removes both segments (no record names them)
    # and its scan finds that the bookies hold none of the objects' bytes.
    s3.delete_object(Bucket=BUCKET, Key=kept)
    freed = cluster.report("--grace", "0", "--now", now, env=env)
    assert freed["ledger_bytes"] == 0, freed
    assert freed["segments_removed"] == 2, freed
    assert freed["tier_bytes_freed"] >= segment_bytes, freed
    assert list((tier_dir / "segments").iterdir()) == []


def test_restore_of_an_object_on_the_bookies_is_refused(cluster: MaintenanceCluster) -> None:
    s3 = start(cluster)
    s3.put_object(Bucket=BUCKET, Key="hot", Body=b"x")
    with pytest.raises(ClientError) as caught:
        s3.restore_object(Bucket=BUCKET, Key="hot", RestoreRequest={"Days": 1})
    assert caught.value.response["Error"]["Code"] == "InvalidObjectState"
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
