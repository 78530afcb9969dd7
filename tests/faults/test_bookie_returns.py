"""A bookie that died and came back is a valid replacement again.

Scenario (E3/WQ2/AQ2, four bookies, one writer ledger):
  1. the writer ledger's ensemble is {A, B, C}; D is the spare;
  2. A is killed: the writer replaces it with D (ensemble {D, B, C});
  3. A restarts and registers as writable again;
  4. B is killed: A is the only writable bookie outside the ensemble.
The PUT at step 4 must succeed by replacing B with A. A ledger handle that never
considers a once-failed bookie again stalls for the whole ensemble change timeout and
fails the PUT (SlowDown) although a writable replacement exists.
"""

from __future__ import annotations

import json
import random

import pytest
from kazoo.client import KazooClient

from tests.faults.conftest import ENTRY_SIZE_BYTES, FaultCluster


def _writer_ledger_ensemble(zk: KazooClient) -> list[str]:
    open_ledgers = []
    stack = ["/ledgers/meta"]
    while stack:
        path = stack.pop()
        for child in zk.get_children(path):
            child_path = f"{path}/{child}"
            if child.startswith("L"):
                metadata = json.loads(zk.get(child_path)[0])
                if metadata["state"] == "OPEN":
                    open_ledgers.append(metadata)
            else:
                stack.append(child_path)
    (metadata,) = open_ledgers
    last = metadata["ensembles"][-1]
    return list(last[1] if isinstance(last, list) else last["bookies"])


@pytest.mark.xfail(
    strict=True,
    reason="LedgerHandle._bad_bookies (blobstore/ledger/ledger_handle.py) never forgets a "
    "failed bookie: a restarted bookie is never chosen as a replacement by that handle",
)
def test_restarted_bookie_is_a_replacement_again(cluster: FaultCluster, rng: random.Random) -> None:
    cluster.add_bookies(4)
    gateway = cluster.start_gateway(
        "gateway",
        env={"BLOBSTORE_WRITER_LEDGERS_MAX": "1", "BLOBSTORE_LEDGER_AGE_S_MAX": "3600"},
    )
    s3 = gateway.client(retries={"total_max_attempts": 1, "mode": "standard"}, read_timeout=120)
    bucket = "returns"
    s3.create_bucket(Bucket=bucket)
    bodies = {"first": rng.randbytes(3 * ENTRY_SIZE_BYTES)}
    s3.put_object(Bucket=bucket, Key="first", Body=bodies["first"])
    zk = KazooClient(hosts=cluster.zk, timeout=15.0)
    zk.start(timeout=15.0)
    try:
        by_id = {b.bookie_id: b for b in cluster.bookies}
        ensemble = _writer_ledger_ensemble(zk)
        first_victim = by_id[ensemble[0]]
        first_victim.kill()
        bodies["second"] = rng.randbytes(6 * ENTRY_SIZE_BYTES)
        s3.put_object(Bucket=bucket, Key="second", Body=bodies["second"])
        changed = _writer_ledger_ensemble(zk)
        assert first_victim.bookie_id not in changed, "the writer replaced the dead bookie"
        first_victim.start()
        second_victim = by_id[changed[1] if changed[1] != first_victim.bookie_id else changed[2]]
        second_victim.kill()
        bodies["third"] = rng.randbytes(6 * ENTRY_SIZE_BYTES)
        s3.put_object(Bucket=bucket, Key="third", Body=bodies["third"])
        for key, body in bodies.items():
            assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == body, key
    finally:
        zk.stop()
        zk.close()
