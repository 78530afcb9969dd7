"""A bookie that died and came back is a valid replacement again.

Scenario (E3/WQ2/AQ2, four bookies, one writer ledger):
  1. the writer ledger's ensemble is {A, B, C}; D is the spare;
  2. A is killed: the writer replaces it with D (ensemble {D, B, C});
  3. A restarts and registers as writable again;
  4. B is killed: A is the only writable bookie outside the ensemble.
The PUT at step 4 must succeed by replacing B with A once A's quarantine
(`bad_bookie_quarantine_s`) has passed. A ledger handle that never considered a
once-failed bookie again would stall for the whole ensemble change timeout and fail the
PUT (SlowDown) although a writable replacement exists.
"""

from __future__ import annotations

import random

import pytest
from botocore.exceptions import ClientError

from tests.faults.conftest import ENTRY_SIZE_BYTES, FaultCluster, last_ensemble, ledger_metadata


def _writer_ledger_ensemble(zk_hosts: str) -> list[str]:
    (metadata,) = [m for m in ledger_metadata(zk_hosts).values() if m["state"] == "OPEN"]
    return last_ensemble(metadata)


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
    by_id = {b.bookie_id: b for b in cluster.bookies}
    ensemble = _writer_ledger_ensemble(cluster.zk)
    first_victim = by_id[ensemble[0]]
    first_victim.kill()
    bodies["second"] = rng.randbytes(6 * ENTRY_SIZE_BYTES)
    s3.put_object(Bucket=bucket, Key="second", Body=bodies["second"])
    changed = _writer_ledger_ensemble(cluster.zk)
    if first_victim.bookie_id in changed:  # a broken precondition is not the bug
        pytest.fail(f"the writer did not replace the dead bookie: {changed}")
    first_victim.start()
    second_victim = by_id[changed[1] if changed[1] != first_victim.bookie_id else changed[2]]
    second_victim.kill()
    bodies["third"] = rng.randbytes(6 * ENTRY_SIZE_BYTES)
    try:
        s3.put_object(Bucket=bucket, Key="third", Body=bodies["third"])
    except ClientError as e:
        raise AssertionError(
            f"PUT failed although {first_victim.bookie_id} is back and writable: {e}"
        ) from e
    for key, body in bodies.items():
        assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == body, key
