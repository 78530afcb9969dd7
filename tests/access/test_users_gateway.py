"""Users managed with `blobstore admin user ...` against a running gateway: each change
(add, rotate, disable, enable, remove) is seen within seconds, without a restart, by
every worker; the users the gateway was started with keep working throughout."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from blobstore.runtime.sealing import CLUSTER_KEY_FILE_ENV, write_cluster_key_file
from tests.access.helpers import Admin
from tests.cluster.gateway import GatewayProcess
from tests.cluster.processes import ProcessReaper
from tests.conftest import BookieFactory
from tests.waiting import wait_until

SEEN_S = 10.0  # "within seconds"
REQUESTS_PER_CHECK = 8  # spread over the workers


@pytest.fixture
def cluster_key_file(tmp_path: Path) -> Path:
    path = tmp_path / "cluster.key"
    write_cluster_key_file(path)
    return path


@pytest.fixture
def gateway(
    zk_connect: str,
    bookies: BookieFactory,
    reaper: ProcessReaper,
    tmp_path: Path,
    cluster_key_file: Path,
) -> GatewayProcess:
    bookies(3)
    return GatewayProcess(
        name="gateway",
        zk=zk_connect,
        root=tmp_path / "gateway",
        reaper=reaper,
        env={CLUSTER_KEY_FILE_ENV: str(cluster_key_file)},
        extra_args=("--workers", "2"),
    ).start()


def _code(call: Callable[[], Any]) -> str:
    """The S3 error code of a call, or "OK"."""
    try:
        call()
    except ClientError as e:
        return str(e.response["Error"]["Code"])
    return "OK"


def _all_answer(gateway: GatewayProcess, keys: dict[str, str], expected: str) -> bool:
    client = gateway.client(keys["access_key"], keys["secret_key"])
    return all(_code(client.list_buckets) == expected for _ in range(REQUESTS_PER_CHECK))


def _becomes(gateway: GatewayProcess, keys: dict[str, str], expected: str, what: str) -> None:
    wait_until(
        lambda: _all_answer(gateway, keys, expected),
        SEEN_S,
        message=f"{what}: {keys['access_key']} answers {expected} on every worker",
        interval_s=0.2,
    )


def test_user_changes_reach_a_running_gateway_within_seconds(
    gateway: GatewayProcess, zk_connect: str, cluster_key_file: Path
) -> None:
    admin = Admin(zk_connect, cluster_key_file)
    bootstrap = gateway.client()
    bootstrap.create_bucket(Bucket="admins-bucket")

    alice = admin.json("user", "add", "alice", "--policy", "readwrite")
    _becomes(gateway, alice, "OK", "a new user")
    client = gateway.client(alice["access_key"], alice["secret_key"])
    client.create_bucket(Bucket="alice-bucket")
    client.put_object(Bucket="alice-bucket", Key="k", Body=b"alice's bytes")
    assert client.get_object(Bucket="alice-bucket", Key="k")["Body"].read() == b"alice's bytes"
    owners = {b["Name"] for b in client.list_buckets()["Buckets"]}
    assert "alice-bucket" in owners and "admins-bucket" not in owners

    rotated = admin.json("user", "rotate-key", "alice")  # the old key stops at once
    _becomes(gateway, rotated, "OK", "a rotated key")
    _becomes(gateway, alice, "InvalidAccessKeyId", "the key rotated away")
    client = gateway.client(rotated["access_key"], rotated["secret_key"])
    assert client.get_object(Bucket="alice-bucket", Key="k")["Body"].read() == b"alice's bytes"

    graced = admin.json("user", "rotate-key", "alice", "--grace", "600")
    _becomes(gateway, graced, "OK", "a key rotated with a grace period")
    assert _all_answer(gateway, rotated, "OK"), "the previous key works during its grace"

    admin("user", "disable", "alice")
    _becomes(gateway, graced, "InvalidAccessKeyId", "a disabled user")
    assert _all_answer(gateway, rotated, "InvalidAccessKeyId")
    admin("user", "enable", "alice")
    _becomes(gateway, graced, "OK", "an enabled user")

    admin("user", "rm", "alice")
    _becomes(gateway, graced, "InvalidAccessKeyId", "a removed user")
    assert _all_answer(gateway, rotated, "InvalidAccessKeyId")
    assert "admins-bucket" in {b["Name"] for b in bootstrap.list_buckets()["Buckets"]}


def test_a_gateway_started_later_serves_the_stored_users(
    gateway: GatewayProcess,
    zk_connect: str,
    cluster_key_file: Path,
    reaper: ProcessReaper,
    tmp_path: Path,
) -> None:
    """Users are data: a second gateway reads them at its start (no users file)."""
    admin = Admin(zk_connect, cluster_key_file)
    bob = admin.json("user", "add", "bob", "--policy", "readwrite")
    second = GatewayProcess(
        name="second",
        zk=zk_connect,
        root=tmp_path / "second",
        reaper=reaper,
        env={CLUSTER_KEY_FILE_ENV: str(cluster_key_file)},
    ).start()
    assert _all_answer(second, bob, "OK")
    # Without the cluster key a gateway cannot open the secrets: bob is unknown there.
    third = GatewayProcess(
        name="third", zk=zk_connect, root=tmp_path / "third", reaper=reaper
    ).start()
    assert _all_answer(third, bob, "InvalidAccessKeyId")
    assert "event=access_no_cluster_key" in third.log_text()
