"""kill -9 bookies while many S3 clients PUT, overwrite and DELETE small and multi-entry
objects (E3/WQ2/AQ2 on four bookies, so the writers can change ensembles): every
acknowledged write reads back identical, before and after the bookies come back, and
with one of the original bookies gone for good.

The single large PUT across an ensemble change is covered by
tests/s3/test_bookie_faults.py; here the point is many writers sharing ledgers (several
objects per ledger, adds of different PUTs pipelined together) when a bookie dies.
"""

from __future__ import annotations

import random
import threading
import time

from tests.faults.conftest import FaultCluster, bookies_writing
from tests.faults.workload import Model, run_workers

WORKERS = 4
KEYS_PER_WORKER = 12
PHASE_S = 3.0
WORKLOAD_DEADLINE_S = 120.0


def test_bookie_kill9_during_put_stream(cluster: FaultCluster, rng: random.Random) -> None:
    cluster.add_bookies(4)
    gateway = cluster.start_gateway("gateway", env={"BLOBSTORE_WRITER_LEDGERS_MAX": "3"})
    s3 = gateway.client()
    bucket = "faults"
    s3.create_bucket(Bucket=bucket)
    model = Model()
    stop = threading.Event()
    threads = run_workers(
        gateway.client,
        bucket,
        model,
        rng,
        workers=WORKERS,
        keys=KEYS_PER_WORKER,
        stop=stop,
        deadline_s=WORKLOAD_DEADLINE_S,
    )
    try:
        time.sleep(PHASE_S)
        writing = bookies_writing(cluster.zk)
        first = rng.choice([b for b in cluster.bookies if b.bookie_id in writing])
        first.kill()
        time.sleep(PHASE_S)
        first.start()  # back with its disk: a later kill must not lose what it holds
        time.sleep(PHASE_S / 2)
        writing = bookies_writing(cluster.zk) - {first.bookie_id}
        second = rng.choice([b for b in cluster.bookies if b.bookie_id in writing])
        second.kill()  # gone for good: every object stays readable from the others
        time.sleep(PHASE_S)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=WORKLOAD_DEADLINE_S)
    assert not any(t.is_alive() for t in threads), "a PUT never returned"
    print(f"acknowledged_puts={model.acknowledged_puts} failed_ops={model.failed_ops}")
    assert model.acknowledged_puts > 50, "the workload barely ran"
    assert "ledger_ensemble_change" in gateway.log_text(), "a writer replaced a dead bookie"
    model.check(s3, bucket)
    # A restarted gateway (fresh caches, fresh ledger handles) reads the same bytes.
    gateway.kill()
    gateway.start()
    model.check(gateway.client(), bucket)
