"""Mutual TLS between the ledger client and the bookies, and to ZooKeeper
(blobstore.runtime.ledger_tls): the files `blobstore standalone --ledger-tls --zk-tls`
makes, a cluster serving S3 over both (bookie kill and restart included), and bookies and
ZooKeeper refusing every client that does not present a certificate of the cluster's
CA: plain TCP, TLS without a certificate, and TLS with a certificate of another CA."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import stat
from pathlib import Path

import pytest

from blobstore.cli.zookeeper_server import free_port
from blobstore.runtime.errors import UsageError
from blobstore.runtime.ledger_tls import (
    CA_KEY_FILE,
    KEY_FILE,
    LEDGER_TLS_DIR_ENV,
    ZK_TLS_DIR_ENV,
    LedgerTls,
    ledger_tls_from_env,
    write_cluster_tls,
)
from blobstore.wire import protocol
from tests.cluster.processes import ProcessReaper
from tests.standalone.cluster import Standalone, group_members
from tests.waiting import wait_until

TIMEOUT_S = 10.0


def test_the_cluster_files_are_made_once_with_private_keys(tmp_path: Path) -> None:
    directory = tmp_path / "tls"
    write_cluster_tls(directory)
    for name in (KEY_FILE, CA_KEY_FILE):
        assert stat.S_IMODE((directory / name).stat().st_mode) == 0o600
    with pytest.raises(FileExistsError):
        write_cluster_tls(directory)
    tls = ledger_tls_from_env({LEDGER_TLS_DIR_ENV: str(directory)})
    assert tls is not None
    tls.server_context()
    tls.client_context()
    assert ledger_tls_from_env({}) is None
    (directory / KEY_FILE).unlink()
    with pytest.raises(UsageError, match="no tls.key there"):
        ledger_tls_from_env({LEDGER_TLS_DIR_ENV: str(directory)})


def _answer(port: int, context: ssl.SSLContext, request: bytes | None = None) -> bytes:
    """A TLS connection to a bookie, one request sent: the answer's first bytes, b"" when
    the bookie refuses (a TLS 1.3 server refuses a client certificate after the client's
    side of the handshake is over: an alert, or the connection closed)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S) as raw:
            with context.wrap_socket(raw) as tls:
                tls.sendall(request or _lac_request())
                return tls.recv(64)
    except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
        return b""


def _lac_request() -> bytes:
    body = protocol.ReadLacRequest(1).encode()
    return protocol.encode_frame(protocol.Op.READ_LAC, 0, 1, body)


def _plain_answer(port: int, request: bytes | None = None, timeout_s: float = TIMEOUT_S) -> bytes:
    """The first bytes answered to a request sent without TLS: b"" when the connection is
    closed, or when nothing comes back within `timeout_s` (a TLS server waiting for the
    rest of a handshake that never comes)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        sock.sendall(request or _lac_request())
        try:
            return sock.recv(64)
        except (ConnectionResetError, TimeoutError):
            return b""


def test_standalone_over_mutual_tls_serves_and_bookies_refuse_strangers(
    tmp_path: Path, reaper: ProcessReaper, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The files standalone makes itself, not the suite's (`make test-tls`).
    monkeypatch.delenv(LEDGER_TLS_DIR_ENV, raising=False)
    monkeypatch.delenv(ZK_TLS_DIR_ENV, raising=False)
    flags = ("--ledger-tls", "--zk-tls")
    cluster = Standalone(tmp_path / "data", free_port(), reaper, flags).start()
    tls_dir = tmp_path / "data" / "tls"
    banner = cluster.managed.log_tail(80) if cluster.managed else ""
    assert f"{LEDGER_TLS_DIR_ENV}={tls_dir}" in banner and f"{ZK_TLS_DIR_ENV}={tls_dir}" in banner
    s3 = cluster.s3()
    s3.create_bucket(Bucket="tls")
    bodies = {"small": b"s" * 100, "large": os.urandom(3 * 1024 * 1024 + 17)}
    for key, body in bodies.items():
        s3.put_object(Bucket="tls", Key=key, Body=body)
    bookie_port = int(cluster.layout()["bookie_ports"][0])

    # The cluster's own certificate is answered; nothing else gets an answer.
    cluster_tls = LedgerTls(tls_dir / "ca.crt", tls_dir / "tls.crt", tls_dir / "tls.key")
    answer = _answer(bookie_port, cluster_tls.client_context())
    assert len(answer) > protocol.FRAME_LENGTH.size + protocol.FRAME_HEADER_BYTES, answer
    assert _plain_answer(bookie_port) == b""
    no_certificate = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    no_certificate.check_hostname = False
    no_certificate.load_verify_locations(cafile=tls_dir / "ca.crt")
    assert _answer(bookie_port, no_certificate) == b""
    write_cluster_tls(tmp_path / "other")
    stranger = LedgerTls(*(tmp_path / "other" / n for n in ("ca.crt", "tls.crt", "tls.key")))
    assert _answer(bookie_port, stranger.client_context()) == b""
    # A client that trusts another CA does not take the bookie's certificate either.
    impostor_check = LedgerTls(tmp_path / "other" / "ca.crt", cluster_tls.cert, cluster_tls.key)
    assert _answer(bookie_port, impostor_check.client_context()) == b""

    # ZooKeeper's port speaks TLS only, to clients with a certificate of the CA.
    zk_port = int(cluster.layout()["zk_port"])
    assert _answer(zk_port, cluster_tls.client_context(), b"ruok") == b"imok"
    assert _plain_answer(zk_port, b"ruok", timeout_s=2.0) == b""
    assert _answer(zk_port, no_certificate, b"ruok") == b""
    assert _answer(zk_port, stranger.client_context(), b"ruok") == b""

    # A bookie killed -9 and restarted by the supervisor: the clients reconnect over TLS.
    port_arg = b"\0--port\0%d\0" % bookie_port
    (pid,) = [p for p in group_members(cluster.pgid) if port_arg in _cmdline(p)]
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not Path(f"/proc/{pid}").exists(), 30, message="bookie not killed")
    wait_until(
        lambda: any(port_arg in _cmdline(p) for p in group_members(cluster.pgid)),
        60,
        message="bookie not restarted",
    )
    wait_until(lambda: _listening(bookie_port), 60, message="restarted bookie not listening")
    s3.put_object(Bucket="tls", Key="after", Body=b"written after a restart")
    for key, body in {**bodies, "after": b"written after a restart"}.items():
        assert s3.get_object(Bucket="tls", Key=key)["Body"].read() == body, key
    assert cluster.terminate() == 0, cluster.log_tails()


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1", port)) == 0
