"""`blobstore admin public-access-block`: the cluster's block as an operator sets it, read
back from ZooKeeper as gateways read it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from blobstore.access.account import get_account_block
from blobstore.access.policy_public import PublicAccessBlock
from blobstore.runtime.sealing import write_cluster_key_file
from blobstore.runtime.zk import ZooKeeperClient
from tests.access.helpers import Admin

ALL_OFF = {
    "BlockPublicAcls": False,
    "IgnorePublicAcls": False,
    "BlockPublicPolicy": False,
    "RestrictPublicBuckets": False,
}


@pytest.fixture
def admin(zk_connect: str, tmp_path: Path) -> Admin:
    key_file = tmp_path / "cluster.key"
    write_cluster_key_file(key_file)
    return Admin(zk_connect, key_file)


def stored(zk_connect: str) -> PublicAccessBlock | None:
    async def read() -> PublicAccessBlock | None:
        zk = ZooKeeperClient(zk_connect)
        await zk.start()
        try:
            return await get_account_block(zk)
        finally:
            await zk.stop()

    return asyncio.run(read())


def test_set_show_and_remove_the_cluster_block(admin: Admin, zk_connect: str) -> None:
    assert admin.json("public-access-block") == ALL_OFF
    assert stored(zk_connect) is None

    shown = admin.json("public-access-block", "set", "--block-public-acls", "--ignore-public-acls")
    assert shown == {**ALL_OFF, "BlockPublicAcls": True, "IgnorePublicAcls": True}
    assert stored(zk_connect) == PublicAccessBlock(True, True, False, False)

    assert admin.json("public-access-block", "set", "--all") == dict.fromkeys(ALL_OFF, True)
    table = admin("public-access-block").stdout
    assert "RestrictPublicBuckets" in table and "on" in table

    assert admin.json("public-access-block", "rm") == ALL_OFF
    assert stored(zk_connect) is None


def test_settings_without_set_are_one_clear_line(admin: Admin, zk_connect: str) -> None:
    admin.refused("public-access-block", "--all", expected="the settings go with `set`")
    assert stored(zk_connect) is None
