"""kill -9 the only gateway part way through a large PUT that overwrites a key, then
start it again: the old version is intact, nothing partial is listed or readable, and
the restarted process (a new writer id) sweeps the ledger its previous life left OPEN.

tests/s3/test_gateways.py covers the same cut with a second gateway alive to sweep;
here nobody is left, so closing the abandoned ledger falls to the restarted gateway.
The default run writes a few MiB in 16 KiB entries; the soak run ~200 MiB in 1 MiB
entries.
"""

from __future__ import annotations

import hashlib
import http.client
import random
from urllib.parse import urlsplit

import pytest
from kazoo.client import KazooClient

from tests.cluster.gateway import entry_size_env
from tests.cluster.ledgers import ledger_metadata, ledger_writer
from tests.cluster.tls import kazoo_client
from tests.faults.conftest import ENTRY_SIZE_BYTES, FaultCluster
from tests.waiting import wait_until

SWEEP_DEADLINE_S = 60.0
SEND_CHUNK_BYTES = 1 << 20


def _open_ledger_writers(zk: KazooClient) -> dict[int, str]:
    """ledger id -> writer, for every ledger not CLOSED."""
    return {
        ledger_id: ledger_writer(metadata)
        for ledger_id, metadata in ledger_metadata(zk).items()
        if metadata["state"] != "CLOSED"
    }


def _kill_mid_put(
    cluster: FaultCluster, rng: random.Random, total_bytes: int, entry_size_bytes: int
) -> None:
    cluster.add_bookies(3)
    gateway = cluster.start_gateway(
        "gateway",
        env=entry_size_env(entry_size_bytes),
    )
    s3 = gateway.client()
    bucket = "big"
    s3.create_bucket(Bucket=bucket)
    old = rng.randbytes(3 * entry_size_bytes + 17)
    s3.put_object(Bucket=bucket, Key="k", Body=old)
    zk = kazoo_client(cluster.zk, 15.0)
    zk.start(timeout=15.0)
    try:
        (first_id,) = zk.get_children("/gateways")
        url = urlsplit(
            s3.generate_presigned_url(
                "put_object", Params={"Bucket": bucket, "Key": "k"}, ExpiresIn=600
            )
        )
        connection = http.client.HTTPConnection(url.hostname, url.port, timeout=120)
        connection.putrequest("PUT", f"{url.path}?{url.query}", skip_accept_encoding=True)
        connection.putheader("Content-Length", str(total_bytes))
        connection.endheaders()
        chunk = rng.randbytes(SEND_CHUNK_BYTES)
        cut_at = rng.uniform(0.3, 0.9) * total_bytes
        sent = 0
        while sent < cut_at:
            connection.send(chunk)
            sent += len(chunk)
        # Kill once the gateway has appended a good part of what was sent.
        wait_until(
            lambda: gateway.bytes_written() >= len(old) + sent // 2,
            120,
            message="the PUT never reached the ledgers",
            interval_s=0.02,
        )
        gateway.kill()
        connection.close()
        assert first_id in {w for w in _open_ledger_writers(zk).values()}, "a ledger was left OPEN"

        gateway.start()
        s3 = gateway.client()
        head = s3.head_object(Bucket=bucket, Key="k")
        assert head["ContentLength"] == len(old)
        assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == old
        listed = s3.list_objects_v2(Bucket=bucket)["Contents"]
        assert [(o["Key"], o["Size"]) for o in listed] == [("k", len(old))]
        assert hashlib.md5(old).hexdigest() in listed[0]["ETag"]

        wait_until(
            lambda: first_id not in set(_open_ledger_writers(zk).values()),
            SWEEP_DEADLINE_S,
            message=lambda: f"never swept: {_open_ledger_writers(zk)}",
            interval_s=0.2,
        )
        assert "event=orphan_ledger_recovered" in gateway.log_text()
        assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == old
        # The key takes a new version normally afterwards.
        new = rng.randbytes(2 * entry_size_bytes + 3)
        s3.put_object(Bucket=bucket, Key="k", Body=new)
        assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == new
    finally:
        zk.stop()
        zk.close()


def test_gateway_kill9_mid_large_overwrite(cluster: FaultCluster, rng: random.Random) -> None:
    _kill_mid_put(cluster, rng, total_bytes=8 << 20, entry_size_bytes=ENTRY_SIZE_BYTES)


@pytest.mark.soak
def test_gateway_kill9_mid_200mib_overwrite(cluster: FaultCluster, rng: random.Random) -> None:
    _kill_mid_put(cluster, rng, total_bytes=200 << 20, entry_size_bytes=1 << 20)
