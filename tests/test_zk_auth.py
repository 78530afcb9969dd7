"""ZooKeeper digest authentication (blobstore.runtime.zk_auth): the credential file, a
real ZooKeeper that refuses sessions without it, znodes ACL'd to it (another password
reads nothing), the credential sent again after a reconnection, and `blobstore
standalone --zk-auth` serving S3 with every process (a maintenance run's Spark executors
too) authenticated."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, NoAuthError, SessionClosedRequireSaslError

from blobstore.cli.zookeeper_server import ZooKeeperServer, free_port, start_zookeeper
from blobstore.runtime.errors import UsageError
from blobstore.runtime.zk import ZooKeeperClient
from blobstore.runtime.zk_auth import (
    DIGEST_FILE_ENV,
    ZooKeeperDigest,
    digest_from_env,
    parse_digest,
    read_digest_file,
    write_digest_file,
)
from tests.cluster.processes import ProcessReaper
from tests.cluster.tls import kazoo_client, zk_tls
from tests.standalone.cluster import Standalone, blobstore_command

TIMEOUT_S = 60.0
DIGEST = ZooKeeperDigest("blobstore", "right-password")


def test_a_credential_is_one_line_user_colon_password() -> None:
    assert parse_digest(" svc:p@ss:word \n", "f") == ZooKeeperDigest("svc", "p@ss:word")
    for bad in ("", "nouser", ":pw", "user:", "us er:pw", "user:p\tw"):
        with pytest.raises(UsageError) as e:
            parse_digest(bad, "the file")
        assert str(e.value).startswith("the file: ")
        assert "pw" not in str(e.value) or bad == "nouser"
    assert "right-password" not in repr(DIGEST)


def test_the_credential_file_is_made_once_private_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "zk.digest"
    made = write_digest_file(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_digest_file(path) == made
    with pytest.raises(FileExistsError):
        write_digest_file(path)
    assert digest_from_env({}) is None
    assert digest_from_env({DIGEST_FILE_ENV: str(path)}) == made
    with pytest.raises(UsageError, match="No such file"):
        digest_from_env({DIGEST_FILE_ENV: str(tmp_path / "absent")})
    (tmp_path / "long").write_bytes(b"u:" + b"p" * 2000)
    with pytest.raises(UsageError, match="longer than"):
        read_digest_file(tmp_path / "long")


@pytest.fixture
def enforcing_server(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    server = start_zookeeper(
        tmp_path / "zk", free_port(), heap_mb=256, enforce_auth=True, tls=zk_tls()
    )
    try:
        yield server
    finally:
        server.stop()


def _kazoo(server: ZooKeeperServer, credential: str | None) -> KazooClient:
    auth = [("digest", credential)] if credential else None
    client = kazoo_client(server.connect_string, 15, auth_data=auth)
    client.start(timeout=15)
    return client


def test_znodes_are_the_credentials_alone_and_sessions_without_it_are_refused(
    enforcing_server: ZooKeeperServer, tmp_path: Path
) -> None:
    async def write_then_restart_then_read() -> None:
        zk = ZooKeeperClient(enforcing_server.connect_string, digest=DIGEST)
        await zk.start(TIMEOUT_S)
        try:
            await zk.create("/catalog/page", b"secret bytes", makepath=True)
            # The server restarts: the session reconnects and must authenticate again.
            enforcing_server.stop()
            restarted = start_zookeeper(
                enforcing_server.data_dir,
                enforcing_server.port,
                heap_mb=256,
                enforce_auth=True,
                tls=zk_tls(),
            )
            enforcing_server.process = restarted.process
            assert await _get_once_reconnected(zk, "/catalog/page") == b"secret bytes"
            await zk.create("/catalog/after", b"")
        finally:
            await zk.stop()

    asyncio.run(asyncio.wait_for(write_then_restart_then_read(), 4 * TIMEOUT_S))

    anonymous = _kazoo(enforcing_server, None)
    try:
        with pytest.raises(SessionClosedRequireSaslError):
            anonymous.get("/catalog/page")
    finally:
        anonymous.stop()
        anonymous.close()
    other = _kazoo(enforcing_server, "blobstore:another-password")
    try:
        for path in ("/catalog/page", "/catalog/after"):
            with pytest.raises(NoAuthError):
                other.get(path)
        with pytest.raises(NoAuthError):
            other.set("/catalog/page", b"changed")
        with pytest.raises(NoAuthError):
            other.create("/catalog/planted", b"")
    finally:
        other.stop()
        other.close()
    right = _kazoo(enforcing_server, "blobstore:right-password")
    try:
        assert right.get("/catalog/page")[0] == b"secret bytes"
    finally:
        right.stop()
        right.close()


async def _get_once_reconnected(zk: ZooKeeperClient, path: str) -> bytes:
    """The value at `path`, retried while requests sent before the restart fail."""
    deadline = asyncio.get_running_loop().time() + TIMEOUT_S
    while True:
        try:
            return (await zk.get(path)).value
        except ConnectionLoss:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.2)


def test_standalone_with_zk_auth_serves_and_its_znodes_are_closed(
    tmp_path: Path, reaper: ProcessReaper
) -> None:
    cluster = Standalone(tmp_path / "data", free_port(), reaper, ("--zk-auth",)).start()
    digest_file = tmp_path / "data" / "zk.digest"
    assert stat.S_IMODE(digest_file.stat().st_mode) == 0o600
    banner = cluster.managed.log_tail(80) if cluster.managed else ""
    assert f"{DIGEST_FILE_ENV}={digest_file}" in banner
    assert read_digest_file(digest_file).password not in banner

    s3 = cluster.s3()
    s3.create_bucket(Bucket="closed")
    s3.put_object(Bucket="closed", Key="k", Body=b"behind a digest")
    assert s3.get_object(Bucket="closed", Key="k")["Body"].read() == b"behind a digest"

    zk = str(cluster.ready["zk"])
    admin = blobstore_command("admin", "--zk", zk, "--json", "buckets")
    without = subprocess.run(admin, capture_output=True, text=True, timeout=120, check=False)
    assert without.returncode == 2, without.stderr
    assert f"set {DIGEST_FILE_ENV} to its file" in without.stderr
    env = {**os.environ, DIGEST_FILE_ENV: str(digest_file)}
    with_it = subprocess.run(
        admin, capture_output=True, text=True, timeout=120, check=False, env=env
    )
    assert with_it.returncode == 0, with_it.stderr
    assert "closed" in with_it.stdout
    # A maintenance run: its driver and its Spark executors authenticate too.
    maintain = blobstore_command("maintain", "--zk", zk, "--grace", "0", "--json")
    run = subprocess.run(
        maintain, capture_output=True, text=True, timeout=300, check=False, env=env
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout)["outcome"] == "ok", run.stdout[-3000:]

    stranger = kazoo_client(zk, 15, auth_data=[("digest", "blobstore:guess")])
    stranger.start(timeout=15)
    try:
        readable = [
            c for c in stranger.get_children("/") if c != "zookeeper" and _readable(stranger, c)
        ]
        assert readable == []
    finally:
        stranger.stop()
        stranger.close()
    # A start without --zk-auth keeps the credential the znodes are ACL'd to.
    assert cluster.terminate() == 0, cluster.log_tails()
    cluster.extra_args = ()
    cluster.start()
    assert cluster.s3().get_object(Bucket="closed", Key="k")["Body"].read() == b"behind a digest"
    assert cluster.terminate() == 0, cluster.log_tails()


def _readable(client: KazooClient, child: str) -> bool:
    try:
        client.get(f"/{child}")
    except NoAuthError:
        return False
    return True
