"""The configuration of one member of a ZooKeeper ensemble (the suite's three hosts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from blobstore.cli.zookeeper_server import server_command, write_ensemble_config
from blobstore.runtime.errors import UsageError

HOSTS = ["10.77.1.10", "10.77.1.11", "10.77.1.12"]


def test_member_config_names_every_member_and_itself(tmp_path: Path) -> None:
    config = write_ensemble_config(tmp_path, 2, HOSTS, 2181)
    lines = config.read_text().splitlines()
    assert "clientPortAddress=10.77.1.11" in lines
    assert "clientPort=2181" in lines
    assert [line for line in lines if line.startswith("server.")] == [
        "server.1=10.77.1.10:2888:3888",
        "server.2=10.77.1.11:2888:3888",
        "server.3=10.77.1.12:2888:3888",
    ]
    assert (tmp_path / "data" / "myid").read_text() == "2\n"
    command = server_command(tmp_path, config, heap_mb=64)
    assert command[-2:] == ["org.apache.zookeeper.server.quorum.QuorumPeerMain", str(config)]
    assert "-Xmx64m" in command


def test_member_id_outside_the_ensemble_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        write_ensemble_config(tmp_path, 4, HOSTS, 2181)
    with pytest.raises(UsageError):
        write_ensemble_config(tmp_path, 0, HOSTS, 2181)
