"""Several gateways on one cluster: read-after-write across gateways, and a gateway
killed (-9) in the middle of a large PUT: the previous version stays intact, nothing
partial becomes visible, and another gateway's sweeper closes the abandoned ledgers."""

from __future__ import annotations

import hashlib
import http.client
import os
import random
import signal
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from kazoo.client import KazooClient

from tests.cluster.gateway import GatewayProcess
from tests.cluster.ledgers import ledger_states_of
from tests.cluster.tls import kazoo_client
from tests.s3.conftest import ENTRY_SIZE_BYTES, S3Cluster
from tests.waiting import wait_until

SWEEP_DEADLINE_S = 60.0


@pytest.fixture
def second_gateway(
    s3_cluster: S3Cluster, request: pytest.FixtureRequest
) -> Iterator[GatewayProcess]:
    gateway = s3_cluster.start_gateway(f"gateway-{request.node.name[:40]}")
    yield gateway
    gateway.kill()


@pytest.fixture
def zk(s3_cluster: S3Cluster) -> Iterator[KazooClient]:
    client = kazoo_client(s3_cluster.zk, 15.0)
    client.start(timeout=15.0)
    yield client
    client.stop()
    client.close()


def test_write_through_one_gateway_is_visible_through_another(
    s3: Any, second_gateway: GatewayProcess, bucket: str, rng: random.Random
) -> None:
    other = second_gateway.client()
    for round_index in range(5):
        body = rng.randbytes(rng.randrange(1, 4 * ENTRY_SIZE_BYTES))
        key = f"key-{round_index}"
        writer, reader = (s3, other) if round_index % 2 else (other, s3)
        writer.put_object(Bucket=bucket, Key=key, Body=body)
        assert reader.get_object(Bucket=bucket, Key=key)["Body"].read() == body
        listed = [o["Key"] for o in reader.list_objects_v2(Bucket=bucket)["Contents"]]
        assert key in listed
        writer.delete_object(Bucket=bucket, Key=key)
        assert "Contents" not in reader.list_objects_v2(Bucket=bucket, Prefix=key)


def test_gateway_killed_mid_put_leaves_old_version_and_gets_swept(
    s3_cluster: S3Cluster,
    gateway: GatewayProcess,
    s3: Any,
    zk: KazooClient,
    bucket: str,
    rng: random.Random,
) -> None:
    before = set(zk.get_children("/gateways"))
    doomed = s3_cluster.start_gateway("gateway-doomed")
    doomed_ids = set(zk.get_children("/gateways")) - before
    assert len(doomed_ids) == 1, doomed_ids
    doomed_id = doomed_ids.pop()
    doomed_s3 = doomed.client()
    old = rng.randbytes(2 * ENTRY_SIZE_BYTES + 5)
    doomed_s3.put_object(Bucket=bucket, Key="k", Body=old)

    # A large PUT through a presigned URL, cut by kill -9 half way through the body.
    url = urlsplit(
        doomed_s3.generate_presigned_url(
            "put_object", Params={"Bucket": bucket, "Key": "k"}, ExpiresIn=300
        )
    )
    total = 64 * ENTRY_SIZE_BYTES
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    connection.putrequest("PUT", f"{url.path}?{url.query}", skip_accept_encoding=True)
    connection.putheader("Content-Length", str(total))
    connection.endheaders()
    sent = 0
    while sent < total // 2:
        chunk = rng.randbytes(ENTRY_SIZE_BYTES)
        connection.send(chunk)
        sent += len(chunk)
    # Wait until the doomed gateway has appended some of the new body's entries.
    wait_until(
        lambda: doomed.bytes_written() >= len(old) + 4 * ENTRY_SIZE_BYTES,
        30,
        message="the PUT never reached the ledgers",
        interval_s=0.05,
    )
    doomed.kill()
    connection.close()

    # The old version is intact and nothing partial is visible, through the survivor.
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == old
    listed = s3.list_objects_v2(Bucket=bucket)["Contents"]
    assert [(o["Key"], o["Size"]) for o in listed] == [("k", len(old))]
    assert hashlib.md5(old).hexdigest() in listed[0]["ETag"]

    # The survivor's sweeper notices the dead writer and closes its ledgers.
    def swept() -> bool:
        states = ledger_states_of(zk, doomed_id)
        assert states, "the doomed gateway created ledgers"
        return all(state == "CLOSED" for state in states.values())

    wait_until(
        swept,
        SWEEP_DEADLINE_S,
        message=lambda: f"ledgers of {doomed_id} still open: {ledger_states_of(zk, doomed_id)}",
        interval_s=0.2,
    )
    logs = "".join(g.log_text() for g in s3_cluster.gateways)
    assert "event=orphan_ledger_recovered" in logs and f"writer={doomed_id}" in logs
    # After recovery the old version still reads back whole.
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == old


def test_several_workers_share_the_port_and_metrics(
    s3_cluster: S3Cluster, rng: random.Random
) -> None:
    multi = s3_cluster.start_gateway("gateway-workers", extra_args=("--workers", "2"))
    try:
        client = multi.client()
        client.create_bucket(Bucket="workers-bucket")
        bodies = {f"k{i}": rng.randbytes(rng.randrange(1, 3 * ENTRY_SIZE_BYTES)) for i in range(12)}
        for key, body in bodies.items():
            client.put_object(Bucket="workers-bucket", Key=key, Body=body)
        for key, body in bodies.items():
            assert client.get_object(Bucket="workers-bucket", Key=key)["Body"].read() == body
        with urllib.request.urlopen(f"{multi.endpoint}/metrics", timeout=10) as response:
            text = response.read().decode()
        puts = [
            float(line.split()[-1])
            for line in text.splitlines()
            if line.startswith('s3_requests_total{operation="PutObject",status="200"}')
        ]
        assert puts == [12.0], "the metrics of both workers are aggregated"
        # One access line per request, from the gateway's access log (not uvicorn's too),
        # written once the workers are idle.
        put_lines = wait_until(
            lambda: _put_lines(multi, 12),
            10,
            message=lambda: repr(_put_lines(multi, 0)),
            interval_s=0.1,
        )
        assert len(put_lines) == 12, put_lines
        assert all(" INFO s3api.access: request_id=" in line for line in put_lines)
        assert "uvicorn.access" not in multi.log_text()
        # Each worker listens on its own SO_REUSEPORT socket: new connections reach both,
        # once both serve (the ready file is the first worker's; a worker joins the port's
        # group when its startup is done).
        wait_until(
            lambda: len(_host_ids(multi, 32)) >= 2,
            60,
            message="no new connection reached the second worker",
            interval_s=0.2,
        )
        # A worker killed with -9 is replaced; the gateway answers throughout.
        workers = _children(multi.managed.pid)  # type: ignore[union-attr]
        assert len(workers) == 2, workers
        os.kill(workers[0], signal.SIGKILL)

        def replaced() -> bool:
            assert client.head_object(Bucket="workers-bucket", Key="k0")["ContentLength"]
            children = _children(multi.managed.pid)  # type: ignore[union-attr]
            return (
                len(children) == 2 and workers[0] not in children and len(_host_ids(multi, 32)) == 2
            )

        wait_until(replaced, 60, message="the killed worker was not replaced", interval_s=0.2)
        assert "event=gateway_worker_died" in multi.log_text()
        # A supervisor killed with -9 takes its workers along (SIGTERM from the kernel:
        # they stop gracefully), so none keeps serving the port alone.
        workers = _children(multi.managed.pid)  # type: ignore[union-attr]
        os.kill(multi.managed.pid, signal.SIGKILL)  # type: ignore[union-attr]
        wait_until(
            lambda: not any(_running(pid) for pid in workers),
            60,
            message="workers outlived their supervisor",
            interval_s=0.2,
        )
        assert "event=gateway_worker_stopped" in multi.log_text()
    finally:
        multi.kill()


def _put_lines(gateway: GatewayProcess, count_min: int) -> list[str]:
    """The access lines of successful PutObjects; none while fewer than `count_min`."""
    lines = [
        line
        for line in gateway.log_text().splitlines()
        if "operation=PutObject" in line and "status=200" in line
    ]
    return lines if len(lines) >= count_min else []


def _children(pid: int) -> list[int]:
    """The worker processes of a gateway supervisor (not multiprocessing's helper)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [
        int(child)
        for child in children
        if b"resource_tracker" not in Path(f"/proc/{child}/cmdline").read_bytes()
    ]


def _running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's exit status waits for whoever adopts it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _host_ids(gateway: GatewayProcess, connections: int) -> set[str | None]:
    """The x-amz-id-2 values (one per worker process) seen over new connections."""
    address = urlsplit(gateway.endpoint)
    assert address.hostname is not None, gateway.endpoint
    ids = set()
    for _ in range(connections):
        connection = http.client.HTTPConnection(address.hostname, address.port, timeout=10)
        try:
            connection.request("GET", "/health")
            response = connection.getresponse()
            response.read()
            ids.add(response.getheader("x-amz-id-2"))
        finally:
            connection.close()
    return ids


def test_sigterm_closes_the_writer_ledgers(
    s3_cluster: S3Cluster, zk: KazooClient, rng: random.Random
) -> None:
    before = set(zk.get_children("/gateways"))
    leaving = s3_cluster.start_gateway("gateway-leaving")
    (gateway_id,) = set(zk.get_children("/gateways")) - before
    client = leaving.client()
    client.create_bucket(Bucket="leaving-bucket")
    body = rng.randbytes(3 * ENTRY_SIZE_BYTES)
    client.put_object(Bucket="leaving-bucket", Key="k", Body=body)
    assert set(ledger_states_of(zk, gateway_id).values()) == {"OPEN"}
    assert leaving.stop() == 0
    assert "event=gateway_worker_stopped" in leaving.log_text()
    assert set(ledger_states_of(zk, gateway_id).values()) == {"CLOSED"}
    assert gateway_id not in zk.get_children("/gateways")
    survivor = s3_cluster.gateways[0].client()
    assert survivor.get_object(Bucket="leaving-bucket", Key="k")["Body"].read() == body
