"""`blobstore admin user|group|policy` as an operator runs them: the real command, its
JSON output, and one clear line (exit 2) for every mistake."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from blobstore.access.user_records import UserRecord
from blobstore.access.users import user_path
from blobstore.runtime.sealing import (
    CLUSTER_KEY_ENV,
    load_cluster_key,
    open_secret,
    write_cluster_key_file,
)
from tests.access.helpers import Admin
from tests.cluster.tls import tls_environment

POLICY = {
    "Version": "2012-10-17",
    "Statement": [
        {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": ["arn:aws:s3:::b/*"]}
    ],
}


@pytest.fixture
def admin(zk_connect: str, tmp_path: Path) -> Admin:
    key_file = tmp_path / "cluster.key"
    write_cluster_key_file(key_file)
    return Admin(zk_connect, key_file)


def test_user_add_json_prints_the_key_pair_sealed_in_zookeeper(
    admin: Admin, zk_client: KazooClient
) -> None:
    pair = admin.json("user", "add", "alice", "--policy", "readwrite")
    assert isinstance(pair, dict) and set(pair) == {"access_key", "secret_key"}
    assert pair["access_key"].startswith("BS") and len(pair["access_key"]) == 20
    assert len(pair["secret_key"]) == 40
    raw, _ = zk_client.get(user_path("alice"))
    assert pair["secret_key"].encode() not in raw
    record = UserRecord.decode(raw)
    cluster_key = load_cluster_key(admin.key_file)
    assert cluster_key is not None
    sealed = record.access_keys[0].sealed_secret
    assert open_secret(cluster_key, sealed, "alice", pair["access_key"]) == pair["secret_key"]

    listed = admin.json("user", "ls")
    assert isinstance(listed, list) and [u["name"] for u in listed] == ["alice"]
    assert listed[0]["status"] == "enabled" and listed[0]["policies"] == ["readwrite"]
    assert listed[0]["access_keys"][0]["access_key"] == pair["access_key"]
    text = admin("user", "ls").stdout
    assert "alice" in text and pair["access_key"] in text and "readwrite" in text
    for shown in (json.dumps(listed), text):
        assert pair["secret_key"] not in shown and sealed not in shown

    table = admin("user", "add", "bob", "--access-key", "bob-key", "--secret-key", "bob-secret-1")
    assert "bob-key" in table.stdout and "bob-secret-1" in table.stdout


def test_user_lifecycle_from_the_command_line(admin: Admin, zk_client: KazooClient) -> None:
    first = admin.json("user", "add", "alice")
    rotated = admin.json("user", "rotate-key", "alice", "--grace", "300")
    assert isinstance(first, dict) and isinstance(rotated, dict)
    assert set(rotated) == {"access_key", "secret_key"} and rotated != first
    keys = [k["access_key"] for k in admin.json("user", "ls")[0]["access_keys"]]
    assert keys == [first["access_key"], rotated["access_key"]]
    again = admin.json("user", "rotate-key", "alice")  # no grace: every old key goes
    keys = [k["access_key"] for k in admin.json("user", "ls")[0]["access_keys"]]
    assert keys == [again["access_key"]]

    assert admin.json("user", "disable", "alice") == {"ok": True, "message": "user alice disabled"}
    assert UserRecord.decode(zk_client.get(user_path("alice"))[0]).status == "disabled"
    admin("user", "enable", "alice")
    admin("user", "attach", "alice", "readonly", "writeonly")
    admin("user", "detach", "alice", "writeonly")
    assert admin.json("user", "ls")[0]["policies"] == ["readonly"]
    admin("user", "rm", "alice")
    assert admin.json("user", "ls") == []


def test_groups_and_policies_from_the_command_line(admin: Admin, tmp_path: Path) -> None:
    admin("user", "add", "alice")
    policy_file = tmp_path / "policy.json"
    policy_file.write_text(json.dumps(POLICY))
    admin("policy", "add", "read-b", str(policy_file))
    admin("policy", "add", "from-stdin", "-", stdin=json.dumps(POLICY))
    assert json.loads(admin("policy", "show", "read-b").stdout) == POLICY
    listed = admin.json("policy", "ls")
    assert {"name": "read-b", "builtin": False} in listed
    assert {"name": "admin", "builtin": True} in listed
    admin("group", "add", "team", "alice", "--policy", "read-b")
    assert admin.json("group", "members", "team") == ["alice"]
    groups = admin.json("group", "ls")
    assert groups == [
        {
            "name": "team",
            "policies": ["read-b"],
            "members": ["alice"],
            "created": groups[0]["created"],
        }
    ]
    admin.refused("policy", "rm", "read-b", expected="policy read-b is attached to group team")
    admin.refused("group", "rm", "team", expected="group team has members: alice")
    admin("group", "rm", "team", "alice")
    admin("group", "rm", "team")
    admin("policy", "rm", "read-b")
    assert admin.json("group", "ls") == []


def test_mistakes_are_one_clear_line(admin: Admin, tmp_path: Path) -> None:
    admin("user", "add", "alice")
    admin.refused("user", "add", "alice", expected="user alice exists already")
    admin.refused("user", "add", "bob", expected="no cluster key", key=False)
    admin.refused("user", "add", "a/b", expected="user name 'a/b'")
    admin.refused("user", "add", "bob", "--access-key", "k" * 5, expected="give both")
    admin.refused("user", "rm", "nobody", expected="no user named nobody")
    admin.refused("user", "attach", "alice", "nope", expected="no policy named nope")
    admin.refused("user", "rotate-key", "alice", "--grace", "-1", expected="--grace -1")
    admin.refused("user", expected="user needs an action")
    admin.refused("group", "members", "nope", expected="no group named nope")
    admin.refused("policy", "show", "nope", expected="no policy named nope")
    admin.refused("policy", "rm", "readonly", expected="built in")
    admin.refused("policy", "add", "p", str(tmp_path / "missing.json"), expected="missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"Statement": "x"}')
    admin.refused("policy", "add", "p", str(bad), expected="needs a Statement list")
    broken_key = tmp_path / "broken.key"
    broken_key.write_text("not a key\n")
    admin.refused(
        "user", "add", "bob", "--cluster-key-file", str(broken_key), expected="broken.key"
    )


def test_an_environment_key_works_as_well_as_a_file(admin: Admin, zk_connect: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BLOBSTORE_")}
    env.update({"BLOBSTORE_ZK": zk_connect, CLUSTER_KEY_ENV: admin.key_file.read_text().strip()})
    env.update(tls_environment())  # `make test-tls`
    result = subprocess.run(
        [sys.executable, "-m", "blobstore.cli", "admin", "user", "add", "carol", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert set(json.loads(result.stdout)) == {"access_key", "secret_key"}


def test_help_explains_each_command() -> None:
    for command, words in (
        ("user", ["rotate-key NAME [--grace SECONDS]", "InvalidAccessKeyId", "--json"]),
        ("group", ["members GROUP", "no members left"]),
        ("policy", ["readwrite", "writeonly", "- : stdin"]),
    ):
        result = subprocess.run(
            [sys.executable, "-m", "blobstore.cli", "admin", command, "--help"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result
        for word in words:
            assert word in result.stdout, (command, word, result.stdout)
