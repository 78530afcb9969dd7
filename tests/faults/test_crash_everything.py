"""kill -9 every bookie and the gateway at random moments of a mixed workload (PUT,
overwrite, DELETE, COPY; small and multi-entry objects, shared ledgers), restart them
all, and check that every acknowledged write reads back identical (an operation that
got no answer may have happened or not). Bookies checkpoint every 0.3 s and roll small
journal files, so kills land between checkpoint steps and journal deletions too.

After the last round, the restarted gateway's sweeper must close every ledger the dead
gateway processes left OPEN. The default run does a few rounds; `-m soak` many more.
"""

from __future__ import annotations

import os
import random
import threading
import time

import pytest
from kazoo.client import KazooClient

from tests.cluster.gateway import GatewayProcess
from tests.cluster.ledgers import ledger_metadata, ledger_writer
from tests.cluster.processes import BookieProcess
from tests.cluster.tls import kazoo_client
from tests.faults.conftest import FaultCluster
from tests.faults.workload import Model, run_workers
from tests.waiting import wait_until

WORKERS = 3
KEYS_PER_WORKER = 10
WORKLOAD_DEADLINE_S = 60.0
SWEEP_DEADLINE_S = 60.0


def _crash_rounds(cluster: FaultCluster, rng: random.Random, rounds: int) -> None:
    cluster.add_bookies(3)
    gateway = cluster.start_gateway("gateway")
    bucket = "crash"
    gateway.client().create_bucket(Bucket=bucket)
    model = Model()
    for round_index in range(rounds):
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
        time.sleep(rng.uniform(0.5, 2.5))
        # Mostly everything at once; sometimes only the gateway or only the bookies.
        mode = rng.choice(["all", "all", "gateway", "bookies"])
        choices: dict[str, list[BookieProcess | GatewayProcess]] = {
            "all": [*cluster.bookies, gateway],
            "gateway": [gateway],
            "bookies": list(cluster.bookies),
        }
        victims = choices[mode]
        rng.shuffle(victims)
        for victim in victims:
            victim.kill()
            time.sleep(rng.uniform(0.0, 0.05))
        stop.set()
        for thread in threads:
            thread.join(timeout=WORKLOAD_DEADLINE_S)
        assert not any(t.is_alive() for t in threads), "an S3 call never returned"
        for process in victims:
            process.start()
        print(
            f"round={round_index} mode={mode} acknowledged_puts={model.acknowledged_puts} "
            f"failed_ops={model.failed_ops}"
        )
        model.check(gateway.client(), bucket)
    assert model.acknowledged_puts >= rounds * 5, "the workload barely ran"
    _wait_for_orphans_closed(cluster)
    # Recovery must not have changed anything a client could read.
    model.check(gateway.client(), bucket)


def _wait_for_orphans_closed(cluster: FaultCluster) -> None:
    """Every object ledger whose writer is not a live gateway ends CLOSED (swept)."""
    zk = kazoo_client(cluster.zk, 15.0)
    zk.start(timeout=15.0)
    try:
        wait_until(
            lambda: not _open_orphans(zk),
            SWEEP_DEADLINE_S,
            message=lambda: f"ledgers of dead gateways still open: {_open_orphans(zk)}",
            interval_s=0.5,
        )
    finally:
        zk.stop()
        zk.close()


def _open_orphans(zk: KazooClient) -> dict[int, str]:
    """ledger id -> state, for the unclosed ledgers whose writer is not a live gateway."""
    live = set(zk.get_children("/gateways"))
    return {
        ledger_id: meta["state"]
        for ledger_id, meta in ledger_metadata(zk).items()
        if ledger_writer(meta) not in live and meta["state"] != "CLOSED"
    }


def test_crash_everything_during_workload(cluster: FaultCluster, rng: random.Random) -> None:
    _crash_rounds(cluster, rng, rounds=int(os.environ.get("BLOBSTORE_FAULT_ROUNDS", "3")))


@pytest.mark.soak
def test_crash_everything_soak(cluster: FaultCluster, rng: random.Random) -> None:
    _crash_rounds(cluster, rng, rounds=int(os.environ.get("BLOBSTORE_FAULT_ROUNDS", "25")))
