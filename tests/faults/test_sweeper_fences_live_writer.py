"""A gateway that is alive but paused past its ZooKeeper session (SIGSTOP: a long GC
pause, a frozen VM) loses its registration; another gateway's sweeper then recovers the
ledgers it was writing, which fences them. When the paused gateway resumes, its PUT in
flight must fail: a record pointing at entries beyond the recovered end would name
bytes that no longer exist. The previous version stays intact, and the gateway goes on
serving PUTs with new ledgers.
"""

from __future__ import annotations

import http.client
import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from kazoo.client import KazooClient

from tests.cluster.gateway import GatewayProcess
from tests.cluster.ledgers import wait_until_swept
from tests.cluster.tls import kazoo_client
from tests.faults.conftest import ENTRY_SIZE_BYTES, FaultCluster
from tests.faults.workload import Model, run_workers
from tests.waiting import wait_until

SWEEP_DEADLINE_S = 60.0
RESUME_DEADLINE_S = 60.0


@contextmanager
def _kazoo(hosts: str) -> Iterator[KazooClient]:
    zk = kazoo_client(hosts, 15.0)
    zk.start(timeout=15.0)
    try:
        yield zk
    finally:
        zk.stop()
        zk.close()


def _start_gateways(
    cluster: FaultCluster, zk: KazooClient, writer_ledgers_max: int
) -> tuple[GatewayProcess, GatewayProcess, str]:
    """The survivor, then the gateway to pause (writing to at most `writer_ledgers_max`
    ledgers at once) and its registration id."""
    survivor = cluster.start_gateway("survivor")
    before = set(zk.get_children("/gateways"))
    paused = cluster.start_gateway(
        "paused", env={"BLOBSTORE_WRITER_LEDGERS_MAX": str(writer_ledgers_max)}
    )
    (paused_id,) = set(zk.get_children("/gateways")) - before
    return survivor, paused, paused_id


@contextmanager
def _suspended(gateway: GatewayProcess) -> Iterator[None]:
    """The gateway stopped with SIGSTOP (a long GC pause, a frozen VM), resumed at exit."""
    assert gateway.managed is not None
    gateway.managed.suspend()
    try:
        yield
    finally:
        gateway.managed.resume()


def _start_put_halfway(
    paused: GatewayProcess, paused_s3: Any, bucket: str, body: bytes, written_before: int
) -> http.client.HTTPConnection:
    """A presigned PUT of `body` to `bucket`/k that has sent its first half, and whose
    first eight entries the gateway has written."""
    url = urlsplit(
        paused_s3.generate_presigned_url(
            "put_object", Params={"Bucket": bucket, "Key": "k"}, ExpiresIn=600
        )
    )
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=120)
    connection.putrequest("PUT", f"{url.path}?{url.query}", skip_accept_encoding=True)
    connection.putheader("Content-Length", str(len(body)))
    connection.endheaders()
    connection.send(body[: len(body) // 2])
    wait_until(
        lambda: paused.bytes_written() >= written_before + 8 * ENTRY_SIZE_BYTES,
        30,
        message="the PUT never reached the ledgers",
        interval_s=0.05,
    )
    return connection


def _finish_put(connection: http.client.HTTPConnection, body: bytes) -> int:
    """Send the second half; the response status, or -1 if the PUT broke off."""
    try:
        connection.send(body[len(body) // 2 :])
        status = connection.getresponse().status
    except (OSError, http.client.HTTPException) as e:
        status = -1
        print(f"the resumed PUT broke off: {e!r}")
    finally:
        connection.close()
    print(f"resumed PUT status={status}")
    return status


def _assert_one_whole_version(got: bytes, old: bytes, new: bytes, status: int) -> None:
    """Whatever the PUT answered, the key holds one whole version: never a record
    naming entries the recovery cut off."""
    assert got in (old, new), f"{len(got)} bytes, neither version"
    if status == 200:
        assert got == new
    else:
        assert got == old
    assert status != 200, "a PUT into a fenced ledger cannot have been acknowledged"


def _put_when_writable_again(paused_s3: Any, bucket: str, body: bytes) -> None:
    """The resumed gateway serves PUTs again (new ledgers, re-registered)."""

    def put() -> bool:
        try:
            paused_s3.put_object(Bucket=bucket, Key="k", Body=body)
        except Exception:  # noqa: BLE001 - until its session and ledgers are fresh
            return False
        return True

    wait_until(
        put, RESUME_DEADLINE_S, message="the resumed gateway never wrote again", interval_s=0.5
    )


def test_paused_gateway_put_fails_after_its_ledger_is_swept(
    cluster: FaultCluster, rng: random.Random
) -> None:
    cluster.add_bookies(3)
    with _kazoo(cluster.zk) as zk:
        survivor, paused, paused_id = _start_gateways(cluster, zk, writer_ledgers_max=1)
        paused_s3 = paused.client()
        survivor_s3 = survivor.client()
        bucket = "swept"
        paused_s3.create_bucket(Bucket=bucket)
        old = rng.randbytes(3 * ENTRY_SIZE_BYTES + 11)
        paused_s3.put_object(Bucket=bucket, Key="k", Body=old)
        new = rng.randbytes(48 * ENTRY_SIZE_BYTES)
        connection = _start_put_halfway(paused, paused_s3, bucket, new, written_before=len(old))

        with _suspended(paused):
            wait_until_swept(zk, paused_id, SWEEP_DEADLINE_S)
            # Nothing partial is visible meanwhile.
            assert survivor_s3.get_object(Bucket=bucket, Key="k")["Body"].read() == old
        status = _finish_put(connection, new)
        got = survivor_s3.get_object(Bucket=bucket, Key="k")["Body"].read()
        _assert_one_whole_version(got, old, new, status)

        latest = rng.randbytes(5 * ENTRY_SIZE_BYTES)
        _put_when_writable_again(paused_s3, bucket, latest)
        assert survivor_s3.get_object(Bucket=bucket, Key="k")["Body"].read() == latest
        assert paused_id in zk.get_children("/gateways"), "the gateway registered again"


def test_paused_gateway_under_load_acknowledges_only_durable_puts(
    cluster: FaultCluster, rng: random.Random
) -> None:
    """Many PUTs in every stage (streaming, waiting for acks, committing) when the
    gateway freezes past its session and its ledgers are swept: every PUT it
    acknowledges, before or after the pause, reads back identical through the other
    gateway."""
    cluster.add_bookies(3)
    with _kazoo(cluster.zk) as zk:
        survivor, paused, paused_id = _start_gateways(cluster, zk, writer_ledgers_max=4)
        bucket = "load"
        paused.client().create_bucket(Bucket=bucket)
        model = Model()
        stop = threading.Event()
        threads = run_workers(
            lambda: paused.client(read_timeout=120),
            bucket,
            model,
            rng,
            workers=4,
            keys=8,
            stop=stop,
            deadline_s=120.0,
            deletes=False,
        )
        try:
            time.sleep(rng.uniform(1.0, 2.0))
            with _suspended(paused):
                wait_until_swept(zk, paused_id, SWEEP_DEADLINE_S)
            time.sleep(3.0)  # PUTs go on after the pause, with fresh ledgers
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=120.0)
        assert not any(t.is_alive() for t in threads), "a PUT never returned"
        print(f"acknowledged_puts={model.acknowledged_puts} failed_ops={model.failed_ops}")
        model.check(survivor.client(), bucket)
