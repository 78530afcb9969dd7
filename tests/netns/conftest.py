"""A three-host-kinds cluster in network namespaces per test, removed after, pass or fail."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.processes import ProcessReaper
from tests.netns.cluster import NetnsCluster
from tests.netns.network import Network

DEFAULT_SEED = 20261128


@pytest.fixture
def seed() -> int:
    value = int(os.environ.get("BLOBSTORE_TEST_SEED", str(DEFAULT_SEED)))
    print(f"BLOBSTORE_TEST_SEED={value}")
    return value


@pytest.fixture
def network() -> Iterator[Network]:
    network = Network().create()
    try:
        yield network
    finally:
        network.close()


@pytest.fixture
def netns_cluster(
    network: Network, reaper: ProcessReaper, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[NetnsCluster]:
    cluster = NetnsCluster(network, tmp_path, reaper)
    try:
        yield cluster.start()
    finally:
        failed = any(
            getattr(getattr(request.node, f"rep_{when}", None), "failed", False)
            for when in ("setup", "call")
        )
        if failed:
            print(cluster.log_tails())
        network.heal()
        reaper.reap_all()
