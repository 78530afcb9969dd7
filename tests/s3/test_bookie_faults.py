"""A bookie killed (-9) while the gateway streams a PUT: the ledger client replaces it
(ensemble change), the PUT completes, and every acknowledged object reads back intact,
before and after the bookie returns."""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient

from tests.cluster.ledgers import ledger_states_of
from tests.cluster.processes import BookieProcess
from tests.cluster.tls import kazoo_client
from tests.s3.conftest import ENTRY_SIZE_BYTES, S3Cluster
from tests.waiting import wait_until


@pytest.fixture
def zk(s3_cluster: S3Cluster) -> Iterator[KazooClient]:
    client = kazoo_client(s3_cluster.zk, 15.0)
    client.start(timeout=15.0)
    yield client
    client.stop()
    client.close()


def test_bookie_killed_during_put(
    s3_cluster: S3Cluster, zk: KazooClient, bucket: str, rng: random.Random
) -> None:
    while len(s3_cluster.bookies) < 4:
        index = len(s3_cluster.bookies)
        bookie = BookieProcess(
            index=index,
            zk=s3_cluster.zk,
            root=s3_cluster.root / f"bookie-{index}",
            reaper=s3_cluster.reaper,
        )
        s3_cluster.bookies.append(bookie.start())
    # One writer ledger only, so the test knows which bookies the PUT writes to.
    before_ids = set(zk.get_children("/gateways"))
    gateway = s3_cluster.start_gateway(
        "gateway-bookie-fault", env={"BLOBSTORE_WRITER_LEDGERS_MAX": "1"}
    )
    (gateway_id,) = set(zk.get_children("/gateways")) - before_ids
    s3 = gateway.client()
    try:
        acknowledged = {
            f"before-{i}": rng.randbytes(rng.randrange(1, 6 * ENTRY_SIZE_BYTES)) for i in range(8)
        }
        for key, body in acknowledged.items():
            s3.put_object(Bucket=bucket, Key=key, Body=body)
        (ledger_id,) = ledger_states_of(zk, gateway_id)
        ensemble = _last_ensemble(zk, s3_cluster, ledger_id)
        victim = next(b for b in s3_cluster.bookies if b.bookie_id in ensemble)

        big = rng.randbytes(192 * ENTRY_SIZE_BYTES)
        outcome: dict[str, Any] = {}
        baseline = gateway.bytes_written()

        def upload() -> None:
            try:
                outcome["response"] = s3.put_object(Bucket=bucket, Key="big", Body=big)
            except Exception as e:  # noqa: BLE001 - examined below
                outcome["error"] = e

        thread = threading.Thread(target=upload)
        thread.start()
        # Kill the bookie once a quarter of the body is in the ledger.
        wait_until(
            lambda: gateway.bytes_written() >= baseline + len(big) // 4,
            60,
            message="the upload never reached the ledgers",
            interval_s=0.01,
        )
        victim.kill()
        thread.join(timeout=120)
        assert not thread.is_alive()
        assert "error" not in outcome, outcome.get("error")
        assert "ledger_ensemble_change" in gateway.log_text(), "the writer replaced the bookie"
        acknowledged["big"] = big
        try:
            for key, body in acknowledged.items():
                assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == body, key
        finally:
            victim.start()
        for key, body in acknowledged.items():
            assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == body, key
    finally:
        gateway.kill()


def _last_ensemble(zk: KazooClient, cluster: S3Cluster, ledger_id: int) -> list[str]:
    from blobstore.wire.zk_layout import ledger_path

    data, _ = zk.get(ledger_path(ledger_id))
    ensembles = json.loads(data)["ensembles"]
    last = ensembles[-1]
    return list(last[1] if isinstance(last, list) else last["bookies"])
