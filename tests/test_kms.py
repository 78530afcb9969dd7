"""The built-in key service (blobstore.kms.keys) against a real ZooKeeper, and
`blobstore admin kms key create|ls|rotate`: envelope data keys that open only for their
context, rotation that keeps older data keys readable, material that never lies in
ZooKeeper in the clear, and keys named by id, alias or ARN."""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from blobstore.kms.keys import (
    KEYS_PATH,
    KeyStore,
    KmsError,
    key_reference,
    open_material,
    parse_wrapped,
    unwrap,
    wrap,
)
from blobstore.runtime.sealing import ClusterKey, write_cluster_key_file
from blobstore.runtime.zk import ZooKeeperClient
from tests.admin.workload import admin

T = TypeVar("T")
CONTEXT = {"bucket": "b", "key": "photos/1.jpg"}


def test_keys_are_named_by_id_alias_or_arn() -> None:
    key_id = "0b6a2c57-8d7e-4d5b-9a55-2a4f7a1d9e01"
    assert key_reference(key_id) == ("id", key_id)
    assert key_reference("alias/backups") == ("alias", "backups")
    assert key_reference(f"arn:aws:kms:us-east-1:123456789012:key/{key_id}") == ("id", key_id)
    assert key_reference("arn:aws:kms:us-east-1:123456789012:alias/backups") == (
        "alias",
        "backups",
    )


def test_a_wrapped_data_key_opens_only_for_its_context() -> None:
    material, data_key = os.urandom(32), os.urandom(32)
    wrapped = wrap(material, "k", 3, data_key, CONTEXT)
    key_id, version, raw = parse_wrapped(wrapped)
    assert (key_id, version) == ("k", 3)
    assert unwrap(material, "k", 3, raw, dict(reversed(CONTEXT.items()))) == data_key
    for other in ({**CONTEXT, "key": "photos/2.jpg"}, {"bucket": "b"}):
        with pytest.raises(KmsError, match="does not open for this context"):
            unwrap(material, "k", 3, raw, other)
    with pytest.raises(KmsError):
        unwrap(material, "k", 2, raw, CONTEXT)  # another version
    for bad in ("", "v1:k:x:AAAA", "v2:k:1:AAAA", "v1:k:1:not base64!", "v1:k:1:AAAA"):
        with pytest.raises(KmsError):
            parse_wrapped(bad)


def _cluster_key(tmp_path: Path, name: str = "cluster.key") -> tuple[Path, ClusterKey]:
    path = tmp_path / name
    write_cluster_key_file(path)
    raw = base64.b64decode(path.read_text().strip())
    return path, ClusterKey(raw)


def _run(zk_connect: str, work: Callable[[ZooKeeperClient], Awaitable[T]]) -> T:
    async def session() -> T:
        zk = ZooKeeperClient(zk_connect)
        await zk.start(30)
        try:
            return await work(zk)
        finally:
            await zk.stop()

    return asyncio.run(asyncio.wait_for(session(), 120))


def test_rotation_keeps_older_data_keys_and_material_stays_sealed(
    zk_connect: str, tmp_path: Path
) -> None:
    _, cluster_key = _cluster_key(tmp_path)
    _, other_key = _cluster_key(tmp_path, "other.key")

    async def work(zk: ZooKeeperClient) -> dict[str, Any]:
        store = KeyStore(zk, cluster_key)
        key = await store.create("photos", "the photos bucket")
        plain_1, wrapped_1 = await store.generate_data_key("alias/photos", CONTEXT)
        rotated = await store.rotate(key.key_id)
        plain_2, wrapped_2 = await store.generate_data_key(key.key_id, CONTEXT)
        stored = (await zk.get(f"{KEYS_PATH}/{key.key_id}")).value
        materials = [open_material(cluster_key, rotated, v) for v in (1, 2)]
        with pytest.raises(KmsError, match="sealed under another cluster key"):
            await KeyStore(zk, other_key).decrypt_data_key(wrapped_1, CONTEXT)
        with pytest.raises(KmsError, match="needs the cluster key"):
            await KeyStore(zk, None).generate_data_key(key.key_id, CONTEXT)
        with pytest.raises(KmsError, match="no kms key"):
            await store.get("../../users")
        with pytest.raises(KmsError, match="names another key"):
            await store.create("photos")
        return {
            "key": key,
            "rotated": rotated,
            "plain": (plain_1, plain_2),
            "wrapped": (wrapped_1, wrapped_2),
            "opened": (
                await store.decrypt_data_key(wrapped_1, CONTEXT),
                await store.decrypt_data_key(wrapped_2, CONTEXT),
            ),
            "stored": stored,
            "materials": materials,
            "listed": [k.key_id for k in await store.list()],
        }

    got = _run(zk_connect, work)
    assert got["rotated"].primary == 2 and len(got["rotated"].versions) == 2
    assert [parse_wrapped(w)[1] for w in got["wrapped"]] == [1, 2]
    assert got["opened"] == got["plain"] and got["plain"][0] != got["plain"][1]
    assert got["listed"] == [got["key"].key_id]
    for material in got["materials"]:
        assert len(material) == 32
        assert base64.b64encode(material) not in got["stored"]
        assert material not in got["stored"]


def test_admin_kms_key_create_ls_rotate(zk_connect: str, tmp_path: Path) -> None:
    key_file, _ = _cluster_key(tmp_path)
    code, created = admin(
        zk_connect,
        "kms",
        "key",
        "create",
        "--alias",
        "backups",
        "--cluster-key-file",
        str(key_file),
    )
    assert code == 0, created
    key_id = created["key"]["key_id"]
    assert created["key"]["alias"] == "backups" and created["key"]["primary_version"] == 1
    code, rotated = admin(
        zk_connect, "kms", "key", "rotate", "alias/backups", "--cluster-key-file", str(key_file)
    )
    assert code == 0 and rotated["key"]["primary_version"] == 2, rotated
    code, listed = admin(zk_connect, "kms", "key", "ls")
    assert code == 0 and [(k["key_id"], k["versions"]) for k in listed] == [(key_id, 2)]
    table = subprocess.run(
        [sys.executable, "-m", "blobstore.cli", "admin", "--zk", zk_connect, "kms", "key", "ls"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert table.returncode == 0 and key_id in table.stdout and "alias/backups" in table.stdout
    # Without the cluster key, or for a key that does not exist: one line, exit 2.
    env = {k: v for k, v in os.environ.items() if not k.startswith("BLOBSTORE_CLUSTER_KEY")}
    for args in (
        ["kms", "key", "create"],
        ["kms", "key", "rotate", "alias/nothing", "--cluster-key-file", str(key_file)],
    ):
        result = subprocess.run(
            [sys.executable, "-m", "blobstore.cli", "admin", "--zk", zk_connect, *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env=env,
        )
        assert result.returncode == 2, result
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert "Traceback" not in result.stderr
