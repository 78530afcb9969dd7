"""A delete-heavy workload fills the bookies until they turn read-only (disk full), and
one `blobstore maintain --grace 0` gives them their space back: they turn writable, PUTs
succeed again, and every acknowledged object reads back byte-identical.

The bookies get a small disk quota (`--disk-capacity-bytes`, docs/bookie.md "Garbage
collection, compaction, read-only"): the workload overwrites a few keys and writes and
deletes many more until the gateway answers PUTs with 503 (too few writable bookies).
Writes go on while one bookie is read-only (new ledgers shrink to the two left, docs/
operations.md "Writes with bookies down") and stop at the second, so the bookies still
writable are then restarted on a disk their data fills too: all three are read-only. Deleting objects needs no bookie,
so the workload deletes more once they are full. Then the run deletes the ledgers
nothing references and asks the bookies for a GC pass; the partly live ledgers stay for
a later run, since compaction copies into new ledgers and no read-only bookie takes a
write.
"""

from __future__ import annotations

import json
import random
import re
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from tests.cluster.processes import BookieProcess
from tests.maintenance.conftest import MaintenanceCluster
from tests.waiting import wait_until

OBJECT_BYTES = 256 * 1024
LIVE_KEYS = 8
CAPACITY_BYTES = 24 * 1024 * 1024
READ_ONLY_AT = 0.75  # 18 MiB of journal and entry logs per bookie
WRITABLE_UNDER = 0.5  # 12 MiB
BOOKIE_ARGS = (
    "--disk-capacity-bytes",
    str(CAPACITY_BYTES),
    "--disk-usage-threshold",
    str(READ_ONLY_AT),
    "--disk-usage-warn-threshold",
    str(WRITABLE_UNDER),
    "--disk-check-interval-s",
    "0.2",
    "--checkpoint-interval-s",
    "0.3",
    # Journal files small and not zeroed ahead, so the journal holds little beyond what
    # the last checkpoints have not covered yet.
    "--journal-file-bytes-max",
    str(256 * 1024),
    "--journal-zero-ahead-bytes",
    "0",
)
GATEWAY_ENV = {"BLOBSTORE_LEDGER_ENSEMBLE_CHANGE_TIMEOUT_S": "10"}
# Every byte is on two of the three bookies: more than this many rounds would write
# the quota twice over without any bookie turning read-only.
ROUNDS_MAX = 3 * CAPACITY_BYTES // OBJECT_BYTES
WRITABLE_TIMEOUT_S = 60.0
READ_ONLY_TIMEOUT_S = 60.0
FULL_RATIO = 0.9  # of a restarted bookie's disk its data fills
BUCKET = "full"
COMPACTION_REFUSED = re.compile(r"compaction of ledger \d+: NotEnoughBookiesError: ")


@dataclass
class Acknowledged:
    """What S3 acknowledged: live objects, and keys whose deletion it acknowledged."""

    objects: dict[str, bytes] = field(default_factory=dict)
    deleted: set[str] = field(default_factory=set)

    def problems(self, s3: Any) -> list[str]:
        bad = [f"{key}: differs" for key, body in self.objects.items() if read(s3, key) != body]
        return bad + [f"{key}: deleted but readable" for key in self.deleted if read(s3, key)]


def read(s3: Any, key: str) -> bytes | None:
    try:
        body: bytes = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    except ClientError as e:
        if e.response["Error"]["Code"] == "NoSuchKey":
            return None
        raise
    return body


def accepted_put(s3: Any, key: str, body: bytes) -> bool:
    """Whether a PUT is stored; a refusal may only be 503 ServiceUnavailable."""
    try:
        s3.put_object(Bucket=BUCKET, Key=key, Body=body)
    except ClientError as e:
        assert e.response["Error"]["Code"] == "ServiceUnavailable", e.response
        return False
    return True


def fill(s3: Any, rng: random.Random, acked: Acknowledged) -> int:
    """Overwrite a few keys and write-then-delete others until a PUT is refused; the
    number of rounds it took."""
    for round_index in range(ROUNDS_MAX):
        key = f"live/{round_index % LIVE_KEYS}"
        body = rng.randbytes(OBJECT_BYTES)
        if not accepted_put(s3, key, body):
            return round_index
        acked.objects[key] = body
        scratch = f"scratch/{round_index:04d}"
        if not accepted_put(s3, scratch, rng.randbytes(OBJECT_BYTES)):
            return round_index
        s3.delete_object(Bucket=BUCKET, Key=scratch)
        acked.deleted.add(scratch)
    raise AssertionError(f"no PUT refused after {ROUNDS_MAX} rounds")


def delete_half(s3: Any, acked: Acknowledged) -> None:
    """Deletions need no writable bookie."""
    for key in sorted(acked.objects)[::2]:
        s3.delete_object(Bucket=BUCKET, Key=key)
        del acked.objects[key]
        acked.deleted.add(key)


def bookie_info(bookie: BookieProcess) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{bookie.http_port}/info", timeout=10) as r:
        info: dict[str, Any] = json.loads(r.read())
    return info


def read_only(cluster: MaintenanceCluster) -> list[bool]:
    return [bool(bookie_info(bookie)["read_only"]) for bookie in cluster.bookies]


def usage(cluster: MaintenanceCluster) -> list[float]:
    return [round(float(bookie_info(b)["disk_usage_ratio"]), 3) for b in cluster.bookies]


def fill_the_others(cluster: MaintenanceCluster) -> None:
    """PUTs stop once one writable bookie is left (two copies need two), before the
    bookies still writable reach their threshold: restart them on a disk their data fills
    to FULL_RATIO, as if theirs had filled too."""
    for bookie in cluster.bookies:
        info = bookie_info(bookie)
        if info["read_only"]:
            continue
        used_bytes = float(info["disk_usage_ratio"]) * CAPACITY_BYTES
        bookie.stop()
        capacity = ("--disk-capacity-bytes", str(int(used_bytes / FULL_RATIO)))
        bookie.extra_args = (*BOOKIE_ARGS, *capacity)  # the last one wins
        bookie.start()
    wait_until(
        lambda: all(read_only(cluster)),
        READ_ONLY_TIMEOUT_S,
        message=lambda: f"bookies not all read-only: {read_only(cluster)} {usage(cluster)}",
    )


class CompactionTriedOnFullBookiesError(Exception):
    """The run counted compaction's failures to write to read-only bookies as errors."""


def test_maintenance_frees_read_only_bookies(cluster: MaintenanceCluster) -> None:
    cluster.bookies.extend(cluster.start_bookies(3, extra_args=BOOKIE_ARGS))
    gateway = cluster.start_gateway("gateway", GATEWAY_ENV)
    s3 = gateway.client(retries={"total_max_attempts": 1, "mode": "standard"})
    s3.create_bucket(Bucket=BUCKET)
    acked = Acknowledged()
    rounds = fill(s3, random.Random(11), acked)
    assert rounds > LIVE_KEYS, rounds  # every live key written, most of it garbage
    print(f"refused after {rounds} rounds: read-only {read_only(cluster)}, usage {usage(cluster)}")
    fill_the_others(cluster)
    delete_half(s3, acked)

    done = cluster.maintain("--grace", "0", check=False)

    assert done.stdout, done.stderr[-4000:]
    report = json.loads(done.stdout)
    assert report["outcome"] == "ok", done.stderr[-4000:]
    assert report["ledgers_deleted"] > 0 and report["bookie_bytes_freed"] > 0, report
    wait_until(
        lambda: not any(read_only(cluster)),
        WRITABLE_TIMEOUT_S,
        message=lambda: f"bookies still read-only: {read_only(cluster)}, usage {usage(cluster)}",
    )
    assert accepted_put(s3, "after", b"y" * OBJECT_BYTES)
    acked.objects["after"] = b"y" * OBJECT_BYTES
    assert acked.problems(s3) == []
    unexpected = [e for e in report["errors"] if not COMPACTION_REFUSED.match(e)]
    assert unexpected == [], report["errors"]
    if done.returncode != 0 or report["errors"]:
        raise CompactionTriedOnFullBookiesError(f"exit {done.returncode}: {report['errors']}")
