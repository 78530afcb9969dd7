"""A session-wide cluster for S3 tests: one ZooKeeper chroot, three real bookies and a
real gateway (uvicorn subprocess), plus an HTTPS gateway on the same cluster. Tests get
their own buckets. Small entries (16 KiB) make every test cross entry boundaries.

Users: the gateway's bootstrap user (`s3`, an admin, as the first user of a cluster
is) and two users kept in ZooKeeper (`other_s3`, `third_s3`), ordinary users with no
policy: what they may do is what bucket policies and ACLs give them.
"""

from __future__ import annotations

import asyncio
import os
import random
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from blobstore.access.users import UserStore
from blobstore.cli.zookeeper_server import ZooKeeperServer
from blobstore.runtime.sealing import CLUSTER_KEY_FILE_ENV, load_cluster_key, write_cluster_key_file
from blobstore.runtime.zk import ZooKeeperClient
from tests.cluster.gateway import GatewayProcess, entry_size_env, make_self_signed_cert
from tests.cluster.processes import BookieProcess, ProcessReaper

OTHER_ACCESS_KEY = "other-access-key"
OTHER_SECRET_KEY = "other-secret-key-9876543210"
THIRD_ACCESS_KEY = "third-access-key"
THIRD_SECRET_KEY = "third-secret-key-0123456789"
STORED_USERS = (
    ("other", OTHER_ACCESS_KEY, OTHER_SECRET_KEY),
    ("third", THIRD_ACCESS_KEY, THIRD_SECRET_KEY),
)
ENTRY_SIZE_BYTES = 16 * 1024
PART_BYTES_MIN = 64 * 1024
GATEWAY_ENV = {
    **entry_size_env(ENTRY_SIZE_BYTES),
    "BLOBSTORE_PART_BYTES_MIN": str(PART_BYTES_MIN),
    "BLOBSTORE_SWEEP_INTERVAL_S": "1",
    "BLOBSTORE_ZK_SESSION_TIMEOUT_S": "4",
}


@pytest.fixture(scope="session")
def seed() -> int:
    value = int(os.environ.get("BLOBSTORE_TEST_SEED", "20261120"))
    print(f"BLOBSTORE_TEST_SEED={value}")
    return value


@pytest.fixture
def rng(seed: int, request: pytest.FixtureRequest) -> random.Random:
    return random.Random(f"{seed}:{request.node.nodeid}")


@dataclass
class S3Cluster:
    zk: str
    root: Path
    reaper: ProcessReaper
    bookies: list[BookieProcess] = field(default_factory=list)
    gateways: list[GatewayProcess] = field(default_factory=list)

    def start_gateway(
        self,
        name: str,
        *,
        tls: tuple[Path, Path] | None = None,
        env: dict[str, str] | None = None,
        extra_args: tuple[str, ...] = (),
    ) -> GatewayProcess:
        gateway = GatewayProcess(
            name=name,
            zk=self.zk,
            root=self.root / name,
            reaper=self.reaper,
            env={**GATEWAY_ENV, CLUSTER_KEY_FILE_ENV: str(self.key_file), **(env or {})},
            extra_args=extra_args,
            tls=tls,
        )
        self.gateways.append(gateway)
        return gateway.start()

    @property
    def key_file(self) -> Path:
        return self.root / "cluster.key"

    def add_stored_users(self) -> None:
        """The cluster key, and the users kept in ZooKeeper (`STORED_USERS`)."""
        write_cluster_key_file(self.key_file)
        cluster_key = load_cluster_key(self.key_file)

        async def add() -> None:
            zk = ZooKeeperClient(self.zk)
            await zk.start()
            try:
                store = UserStore(zk, cluster_key)
                for name, access_key, secret_key in STORED_USERS:
                    await store.add_user(name, access_key, secret_key)
            finally:
                await zk.stop()

        asyncio.run(add())


@pytest.fixture(scope="session")
def s3_cluster(
    zk_server: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[S3Cluster]:
    zk = zk_server.chroot(f"/s3-{uuid.uuid4().hex[:12]}", 15.0)
    root = tmp_path_factory.mktemp("s3-cluster")
    cluster = S3Cluster(zk=zk, root=root, reaper=ProcessReaper())
    try:
        for index in range(3):
            bookie = BookieProcess(
                index=index, zk=cluster.zk, root=root / f"bookie-{index}", reaper=cluster.reaper
            )
            cluster.bookies.append(bookie.start())
        cluster.add_stored_users()
        cluster.start_gateway("gateway-http")
        yield cluster
    except BaseException:
        print(cluster.reaper.log_tails())
        raise
    finally:
        cluster.reaper.reap_all()


@pytest.fixture(autouse=True)
def _gateway_logs_on_failure(
    request: pytest.FixtureRequest, s3_cluster: S3Cluster
) -> Iterator[None]:
    yield
    failed = any(
        getattr(getattr(request.node, f"rep_{when}", None), "failed", False)
        for when in ("setup", "call")
    )
    if failed:
        print(s3_cluster.reaper.log_tails())


@pytest.fixture(scope="session")
def gateway(s3_cluster: S3Cluster) -> GatewayProcess:
    return s3_cluster.gateways[0]


@pytest.fixture(scope="session")
def tls_gateway(s3_cluster: S3Cluster) -> GatewayProcess:
    cert = make_self_signed_cert(s3_cluster.root / "tls")
    return s3_cluster.start_gateway("gateway-https", tls=cert)


@pytest.fixture(scope="session")
def s3(gateway: GatewayProcess) -> Any:
    return gateway.client()


@pytest.fixture
def bucket_name() -> Callable[[], str]:
    def make() -> str:
        return f"b-{uuid.uuid4().hex[:16]}"

    return make


@pytest.fixture
def bucket(s3: Any, bucket_name: Callable[[], str]) -> str:
    name = bucket_name()
    s3.create_bucket(Bucket=name)
    return name


@pytest.fixture(scope="session")
def other_s3(gateway: GatewayProcess) -> Any:
    """A client of another user of the same gateway (no policy of its own)."""
    return gateway.client(OTHER_ACCESS_KEY, OTHER_SECRET_KEY)


@pytest.fixture(scope="session")
def third_s3(gateway: GatewayProcess) -> Any:
    """A client of a third user (no policy of its own)."""
    return gateway.client(THIRD_ACCESS_KEY, THIRD_SECRET_KEY)
