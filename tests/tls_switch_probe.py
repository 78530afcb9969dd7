"""Run by tests/test_tls_switch.py with BLOBSTORE_TEST_TLS=1 (not collected by itself: its
name is not a test module's): the shared fixtures' cluster speaks mutual TLS only, and
the clients they give tests speak it too."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from kazoo.client import KazooClient

from blobstore.cli.zookeeper_server import ZooKeeperServer, is_serving
from blobstore.runtime.ledger_tls import LEDGER_TLS_DIR_ENV, ZK_TLS_DIR_ENV, LedgerTls
from blobstore.wire import protocol
from tests.cluster.gateway import GatewayProcess
from tests.cluster.processes import ProcessReaper
from tests.conftest import BookieFactory

TIMEOUT_S = 10.0


def _read_lac_frame() -> bytes:
    return protocol.encode_frame(protocol.Op.READ_LAC, 0, 1, protocol.ReadLacRequest(1).encode())


def _bookie_answer(port: int, tls: LedgerTls | None) -> bytes:
    """The first bytes a bookie answers to READ_LAC, over TLS with the session's
    certificate or over plain TCP; b"" when it answers nothing."""
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S) as raw:
        if tls is None:
            raw.sendall(_read_lac_frame())
            try:
                return raw.recv(64)
            except (ConnectionResetError, TimeoutError):
                return b""
        with tls.client_context().wrap_socket(raw) as wrapped:
            wrapped.sendall(_read_lac_frame())
            return wrapped.recv(64)


def test_the_fixtures_cluster_speaks_mutual_tls_only(
    cluster_tls: LedgerTls | None,
    zk_server: ZooKeeperServer,
    zk_client: KazooClient,
    zk_connect: str,
    bookies: BookieFactory,
    reaper: ProcessReaper,
    tmp_path: Path,
) -> None:
    assert cluster_tls is not None, "BLOBSTORE_TEST_TLS=1 gave no certificates"
    directory = str(cluster_tls.ca.parent)
    assert os.environ[LEDGER_TLS_DIR_ENV] == os.environ[ZK_TLS_DIR_ENV] == directory
    # ZooKeeper answers TLS with the session's certificate, nothing in clear; the kazoo
    # client the fixture gives speaks TLS.
    assert zk_server.tls == cluster_tls
    assert is_serving(zk_server.host, zk_server.port, cluster_tls)
    assert not is_serving(zk_server.host, zk_server.port)
    zk_client.ensure_path("/probe")
    # A bookie the fixture starts refuses a plain TCP client and answers the session's.
    started = bookies(3)
    assert _bookie_answer(started[0].port, None) == b""
    answer = _bookie_answer(started[0].port, cluster_tls)
    assert len(answer) > protocol.FRAME_LENGTH.size + protocol.FRAME_HEADER_BYTES, answer
    # A gateway started as the fixtures start them writes and reads ledgers over TLS.
    gateway = GatewayProcess("gateway", zk_connect, tmp_path / "gateway", reaper).start()
    s3 = gateway.client()
    s3.create_bucket(Bucket="probe")
    body = os.urandom(200_000)
    s3.put_object(Bucket="probe", Key="k", Body=body)
    assert s3.get_object(Bucket="probe", Key="k")["Body"].read() == body
