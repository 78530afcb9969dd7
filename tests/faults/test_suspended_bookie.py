"""SIGSTOP a bookie (a hung disk or a long pause: connections stay open, nothing is
answered) while S3 clients PUT and GET: every request still completes, without retries,
within the client's read timeout (the writer changes ensemble after its request timeout,
readers ask another replica), and every acknowledged object reads back identical once
the bookie resumes.

The ledger-level variant (speculative reads against a suspended bookie) lives in
tests/ledger/test_ledger_faults.py; this one goes through the gateway end to end.
"""

from __future__ import annotations

import random

from tests.faults.conftest import ENTRY_SIZE_BYTES, FaultCluster

OPERATIONS = 12


def test_suspended_bookie_puts_and_gets_complete(cluster: FaultCluster, rng: random.Random) -> None:
    cluster.add_bookies(4)
    gateway = cluster.start_gateway(
        "gateway",
        env={
            "BLOBSTORE_WRITER_LEDGERS_MAX": "2",
            "BLOBSTORE_LEDGER_BOOKIE_REQUEST_TIMEOUT_S": "3",
        },
    )
    # No retries: each request must succeed on its first attempt.
    s3 = gateway.client(retries={"total_max_attempts": 1, "mode": "standard"}, read_timeout=60)
    bucket = "suspended"
    s3.create_bucket(Bucket=bucket)
    bodies = {}
    for index in range(OPERATIONS):
        bodies[f"before-{index}"] = rng.randbytes(rng.randrange(1, 5 * ENTRY_SIZE_BYTES))
        s3.put_object(Bucket=bucket, Key=f"before-{index}", Body=bodies[f"before-{index}"])

    stopped = rng.choice(cluster.bookies)
    stopped.suspend()
    try:
        for index in range(OPERATIONS):
            key = f"during-{index}"
            bodies[key] = rng.randbytes(rng.randrange(1, 5 * ENTRY_SIZE_BYTES))
            s3.put_object(Bucket=bucket, Key=key, Body=bodies[key])
            for read_key in rng.sample(sorted(bodies), 3):
                got = s3.get_object(Bucket=bucket, Key=read_key)["Body"].read()
                assert got == bodies[read_key], read_key
    finally:
        stopped.resume()
    for key, body in bodies.items():
        assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == body, key
