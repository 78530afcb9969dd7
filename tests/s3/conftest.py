"""A session-wide cluster for S3 tests: one ZooKeeper chroot, three real bookies and a
real gateway (uvicorn subprocess), plus an HTTPS gateway on the same cluster. Tests get
their own buckets. Small entries (16 KiB) make every test cross entry boundaries.
"""

from __future__ import annotations

import json
import os
import random
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from blobstore.cli.zookeeper_server import ZooKeeperServer
from tests.cluster.gateway import GatewayProcess, make_self_signed_cert
from tests.cluster.processes import BookieProcess, ProcessReaper

OTHER_ACCESS_KEY = "other-access-key"
OTHER_SECRET_KEY = "other-secret-key-9876543210"
ENTRY_SIZE_BYTES = 16 * 1024
PART_BYTES_MIN = 64 * 1024
GATEWAY_ENV = {
    "BLOBSTORE_ENTRY_SIZE_BYTES": str(ENTRY_SIZE_BYTES),
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
        users_file = self.root / "users.json"
        users_file.write_text(
            json.dumps(
                [{"access_key": OTHER_ACCESS_KEY, "secret_key": OTHER_SECRET_KEY, "user": "other"}]
            )
        )
        gateway = GatewayProcess(
            name=name,
            zk=self.zk,
            root=self.root / name,
            reaper=self.reaper,
            env={**GATEWAY_ENV, **(env or {})},
            extra_args=("--users-file", str(users_file), *extra_args),
            tls=tls,
        )
        self.gateways.append(gateway)
        return gateway.start()


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
    """A client of another user of the same gateway."""
    return gateway.client(OTHER_ACCESS_KEY, OTHER_SECRET_KEY)
