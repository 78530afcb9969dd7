"""Transitions to an S3 tier whose remote is a second, separately started blobstore (its
own ZooKeeper root, bookie and gateway), end to end through boto3 and the real
`blobstore maintain` (GET, a range, the listing's classes, RestoreObject); then the
remote is stopped: GETs of tiered objects answer 503 naming the tier, objects on the
bookies are served as before, and the job reports the tier's failure and moves the
versions due at its next run, once the tier is back. Deleting every tiered object frees
the remote's segments at the next run.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from blobstore.cli.zookeeper_server import ZooKeeperServer
from blobstore.runtime.sealing import write_cluster_key_file
from tests.cluster.gateway import ACCESS_KEY, SECRET_KEY, GatewayProcess
from tests.cluster.processes import BookieProcess, ProcessReaper
from tests.maintenance.conftest import ROOT, MaintenanceCluster
from tests.maintenance.test_tiering import BUCKET, PART_BYTES, later_text

TIER_BUCKET = "tier-bucket"
RULES = [
    {
        "ID": "to-archive",
        "Status": "Enabled",
        "Filter": {"Prefix": "old/"},
        "Transitions": [{"Days": 1, "StorageClass": "DEEP_ARCHIVE"}],
    }
]
SINGLE_COPY = {
    "BLOBSTORE_ENSEMBLE_SIZE": "1",
    "BLOBSTORE_WRITE_QUORUM": "1",
    "BLOBSTORE_ACK_QUORUM": "1",
    "BLOBSTORE_ALLOW_SINGLE_COPY": "1",
}


def remote_blobstore(
    zk_server: ZooKeeperServer, reaper: ProcessReaper, root: Path
) -> GatewayProcess:
    """Another cluster: a ZooKeeper root of its own, one bookie, one gateway."""
    zk = zk_server.chroot(f"/remote-{uuid.uuid4().hex[:12]}", 15.0)
    BookieProcess(index=0, zk=zk, root=root / "remote-bookie", reaper=reaper).start()
    gateway = GatewayProcess(
        name="remote", zk=zk, root=root / "remote", reaper=reaper, env=SINGLE_COPY
    )
    return gateway.start()


def read(s3: Any, key: str, **extra: Any) -> bytes:
    body: bytes = s3.get_object(Bucket=BUCKET, Key=key, **extra)["Body"].read()
    return body


def add_s3_tier(cluster: MaintenanceCluster, remote: GatewayProcess, env: dict[str, str]) -> None:
    """`admin tier add ARCHIVE s3://...` on the remote, bound to DEEP_ARCHIVE."""
    command = [sys.executable, "-m", "blobstore.cli", "admin", "--zk", cluster.zk, "tier"]
    command += ["add", "ARCHIVE", f"s3://{TIER_BUCKET}/blobstore", "--endpoint", remote.endpoint]
    command += ["--access-key", ACCESS_KEY, "--storage-class", "DEEP_ARCHIVE"]
    added = subprocess.run(
        command,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env, "BLOBSTORE_TIER_SECRET_KEY": SECRET_KEY},
    )
    assert added.returncode == 0, added.stderr


def check_outage(
    cluster: MaintenanceCluster, s3: Any, remote: GatewayProcess, env: dict[str, str], now: str
) -> None:
    """The tier goes away: tiered objects answer 503 naming it, the rest is served; the
    job reports the tier's failure, and moves what is due once it is back."""
    remote.kill()
    s3_once = cluster.gateway.client(retries={"max_attempts": 1, "mode": "standard"})
    with pytest.raises(ClientError) as caught:
        read(s3_once, "old/0")
    error = caught.value.response
    assert error["ResponseMetadata"]["HTTPStatusCode"] == 503, error
    assert "ARCHIVE" in error["Error"]["Message"], error
    assert read(s3_once, "hot") == b"hot bytes"
    s3.put_object(Bucket=BUCKET, Key="old/late", Body=b"late bytes")
    failed = cluster.maintain("--grace", "0", "--now", now, env=env, check=False)
    assert failed.returncode == 1, failed.stderr[-3000:]
    down = json.loads(failed.stdout)
    assert down["objects_tiered"] == 0 and any("ARCHIVE" in e for e in down["errors"]), down
    assert down["restores_expired"] == 1, down  # old/1's copy: the bookies need no tier
    assert read(s3, "old/late") == b"late bytes"
    remote.start()
    back = cluster.report("--grace", "0", "--now", now, env=env)
    assert back["objects_tiered"] == 1 and back["errors"] == [], back
    assert read(s3, "old/late") == b"late bytes"


def test_s3_tier_round_trip_and_outage(
    cluster: MaintenanceCluster,
    zk_server: ZooKeeperServer,
    reaper: ProcessReaper,
    tmp_path: Path,
) -> None:
    rng = random.Random(7)
    key_file = tmp_path / "cluster.key"
    write_cluster_key_file(key_file)
    env = {"BLOBSTORE_CLUSTER_KEY_FILE": str(key_file)}
    remote = remote_blobstore(zk_server, reaper, tmp_path)
    remote.client().create_bucket(Bucket=TIER_BUCKET)
    cluster.bookies.extend(cluster.start_bookies(3))
    cluster.start_gateway("gateway", {**env, "BLOBSTORE_PART_BYTES_MIN": str(PART_BYTES)})
    s3 = cluster.s3()
    s3.create_bucket(Bucket=BUCKET)
    add_s3_tier(cluster, remote, env)
    bodies = {f"old/{n}": rng.randbytes(rng.choice([1, 3000, 300_000])) for n in range(5)}
    etags = {k: s3.put_object(Bucket=BUCKET, Key=k, Body=b)["ETag"] for k, b in bodies.items()}
    s3.put_object(Bucket=BUCKET, Key="hot", Body=b"hot bytes")
    s3.put_bucket_lifecycle_configuration(Bucket=BUCKET, LifecycleConfiguration={"Rules": RULES})

    now = later_text()
    report = cluster.report("--grace", "0", "--now", now, env=env)
    assert report["objects_tiered"] == len(bodies), report
    assert report["errors"] == [], report["errors"]
    stored = remote.client().list_objects_v2(Bucket=TIER_BUCKET, Prefix="blobstore/segments/")
    assert stored["KeyCount"] == 1, stored
    for key, body in bodies.items():
        assert read(s3, key) == body, key
        assert s3.head_object(Bucket=BUCKET, Key=key)["ETag"] == etags[key], key
        for _ in range(2 if len(body) > 1 else 0):
            first = rng.randrange(len(body))
            last = rng.randrange(first, len(body))
            assert read(s3, key, Range=f"bytes={first}-{last}") == body[first : last + 1]
    listed = {o["Key"]: o["StorageClass"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"]}
    assert listed == {**{k: "DEEP_ARCHIVE" for k in bodies}, "hot": "STANDARD"}
    restored = s3.restore_object(Bucket=BUCKET, Key="old/1", RestoreRequest={"Days": 1})
    assert restored["ResponseMetadata"]["HTTPStatusCode"] == 202, restored
    assert read(s3, "old/1") == bodies["old/1"]

    check_outage(cluster, s3, remote, env, now)
    assert read(s3, "old/0") == bodies["old/0"]

    # Every tiered object deleted: the next run removes both segments from the remote.
    for key in [*bodies, "old/late"]:
        s3.delete_object(Bucket=BUCKET, Key=key)
    freed = cluster.report("--grace", "0", "--now", now, env=env)
    assert freed["segments_removed"] == 2, freed
    left = remote.client().list_objects_v2(Bucket=TIER_BUCKET, Prefix="blobstore/segments/")
    # pyarrow may leave a directory marker (an empty object whose key ends with "/").
    assert [o["Key"] for o in left.get("Contents", []) if not o["Key"].endswith("/")] == []
