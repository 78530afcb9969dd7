"""A fresh cluster per fault test: real bookies (the `bookies` fixture), real gateways,
boto3 clients, and a model of what the S3 clients were told.

Each test gets its own ZooKeeper chroot, so killing and restarting processes never
disturbs other tests. Entries are small (16 KiB) so every object crosses entry
boundaries and a few MiB exercise many entries, ledgers and checkpoints.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.cluster.gateway import GatewayProcess, entry_size_env
from tests.cluster.ledgers import ledger_metadata as ledger_metadata_of
from tests.cluster.processes import BookieProcess, ProcessReaper
from tests.cluster.tls import kazoo_client
from tests.conftest import BookieFactory

ENTRY_SIZE_BYTES = 16 * 1024
GATEWAY_ENV = {
    **entry_size_env(ENTRY_SIZE_BYTES),
    "BLOBSTORE_SWEEP_INTERVAL_S": "1",
    "BLOBSTORE_ZK_SESSION_TIMEOUT_S": "4",
    # Fail fast enough that a fault test finishes in seconds, not minutes.
    "BLOBSTORE_LEDGER_ENSEMBLE_CHANGE_TIMEOUT_S": "10",
}
# Bookies checkpoint often, so kills land between checkpoint steps too.
BOOKIE_ARGS: tuple[str, ...] = (
    "--checkpoint-interval-s",
    "0.3",
    "--journal-file-bytes-max",
    str(256 * 1024),
    "--entry-log-bytes-max",
    str(12 * 1024 * 1024),
)
DEFAULT_SEED = 20261121


@pytest.fixture
def seed() -> int:
    value = int(os.environ.get("BLOBSTORE_TEST_SEED", str(DEFAULT_SEED)))
    print(f"BLOBSTORE_TEST_SEED={value}")
    return value


@pytest.fixture
def rng(seed: int, request: pytest.FixtureRequest) -> random.Random:
    return random.Random(f"{seed}:{request.node.nodeid}")


@dataclass
class FaultCluster:
    zk: str
    root: Path
    reaper: ProcessReaper
    start_bookies: BookieFactory
    bookies: list[BookieProcess] = field(default_factory=list)
    gateways: list[GatewayProcess] = field(default_factory=list)

    def add_bookies(self, count: int) -> list[BookieProcess]:
        new = self.start_bookies(count, extra_args=BOOKIE_ARGS)
        self.bookies.extend(new)
        return new

    def start_gateway(self, name: str, env: dict[str, str] | None = None) -> GatewayProcess:
        gateway = GatewayProcess(
            name=name,
            zk=self.zk,
            root=self.root / name,
            reaper=self.reaper,
            env={**GATEWAY_ENV, **(env or {})},
        )
        self.gateways.append(gateway)
        return gateway.start()


@pytest.fixture
def cluster(
    zk_connect: str, bookies: BookieFactory, reaper: ProcessReaper, tmp_path: Path
) -> Iterator[FaultCluster]:
    yield FaultCluster(zk=zk_connect, root=tmp_path, reaper=reaper, start_bookies=bookies)


def read_or_none(s3: Any, bucket: str, key: str) -> bytes | None:
    """The object's bytes, or None when the key does not exist."""
    try:
        return bytes(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    except ClientError as e:
        if e.response["Error"]["Code"] in ("NoSuchKey", "404"):
            return None
        raise


def ledger_metadata(zk_hosts: str) -> dict[int, dict[str, Any]]:
    """ledger id -> decoded metadata of every ledger (on a short-lived session)."""
    zk = kazoo_client(zk_hosts, 15.0)
    zk.start(timeout=15.0)
    try:
        return ledger_metadata_of(zk)
    finally:
        zk.stop()
        zk.close()


def last_ensemble(metadata: dict[str, Any]) -> list[str]:
    last = metadata["ensembles"][-1]
    return list(last[1] if isinstance(last, list) else last["bookies"])


def bookies_writing(zk_hosts: str) -> set[str]:
    """Bookie ids in the last ensemble of some OPEN ledger."""
    return {
        bookie_id
        for metadata in ledger_metadata(zk_hosts).values()
        if metadata["state"] == "OPEN"
        for bookie_id in last_ensemble(metadata)
    }
