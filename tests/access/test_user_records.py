"""The pure pieces of user management: records, names, keys, rotation, policy checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from blobstore.access.user_records import (
    ACCESS_KEYS_PER_USER_MAX,
    BUILTIN_POLICIES,
    DISABLED,
    AccessKey,
    GroupRecord,
    InvalidNameError,
    MalformedPolicyError,
    UserRecord,
    check_access_key,
    check_name,
    check_policy_document,
    check_secret_key,
    new_access_key,
    new_secret_key,
    pruned_keys,
    rotated_keys,
    with_names,
)
from blobstore.cli.standalone import cluster_key_settings
from blobstore.runtime.errors import UsageError
from blobstore.runtime.sealing import CLUSTER_KEY_ENV, CLUSTER_KEY_FILE_ENV, load_cluster_key


def _key(name: str, created: float, expires: float | None = None) -> AccessKey:
    return AccessKey(name, f"sealed-{name}", created, expires)


def test_a_user_record_survives_its_encoding() -> None:
    record = UserRecord(
        "alice",
        DISABLED,
        (_key("BSOLD", 1.0, 100.0), _key("BSNEW", 2.0)),
        ("readonly", "team-policy"),
        ("team",),
        1.0,
    )
    assert UserRecord.decode(record.encode()) == record
    stored = json.loads(record.encode())
    assert stored["format_version"] == 1
    assert stored["access_keys"][0] == {
        "access_key": "BSOLD",
        "sealed_secret": "sealed-BSOLD",
        "created": 1.0,
        "expires": 100.0,
    }
    assert "expires" not in stored["access_keys"][1]
    group = GroupRecord("team", ("readwrite",), 3.0)
    assert GroupRecord.decode(group.encode()) == group


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"[]",
        json.dumps({"format_version": 2, "name": "a"}).encode(),
        json.dumps({"format_version": 1, "name": "a", "status": "enabled"}).encode(),
        json.dumps(
            {"format_version": 1, "name": "a", "status": "weird", "access_keys": []}
        ).encode(),
        json.dumps(
            {"format_version": 1, "name": "a", "status": "enabled", "access_keys": [{}]}
        ).encode(),
        json.dumps(
            {
                "format_version": 1,
                "name": "a",
                "status": "enabled",
                "access_keys": [],
                "policies": "readonly",
            }
        ).encode(),
    ],
)
def test_an_unreadable_user_record_is_a_value_error(raw: bytes) -> None:
    with pytest.raises(ValueError):
        UserRecord.decode(raw)


@pytest.mark.parametrize("name", ["alice", "a", "x" * 64, "svc+ci=1,a.b@c_d-e", "BSABC"])
def test_names_iam_allows_are_accepted(name: str) -> None:
    assert check_name("user", name) == name


@pytest.mark.parametrize("name", ["", "x" * 65, "a/b", "..", ".", "a b", "é", "a\0b", "a:b"])
def test_names_that_would_break_a_znode_path_are_refused(name: str) -> None:
    with pytest.raises(InvalidNameError, match="user name"):
        check_name("user", name)


@pytest.mark.parametrize("access_key", ["ab", "a/b", "x" * 129, "a b", ".."])
def test_bad_access_keys_are_refused(access_key: str) -> None:
    with pytest.raises(InvalidNameError, match="access key"):
        check_access_key(access_key)


@pytest.mark.parametrize("secret", ["short", "has space inside", "x" * 129, "tab\tinside"])
def test_bad_secret_keys_are_refused_without_echoing_them(secret: str) -> None:
    with pytest.raises(InvalidNameError) as raised:
        check_secret_key(secret)
    assert secret not in str(raised.value)


def test_generated_keys_have_the_documented_shape() -> None:
    keys = {new_access_key() for _ in range(200)}
    assert len(keys) == 200
    for key in keys:
        assert len(key) == 20 and key.startswith("BS") and key[2:].isalnum() and key.isupper()
        check_access_key(key)
    secret = new_secret_key()
    assert len(secret) == 40
    check_secret_key(secret)


def test_a_rotation_without_grace_drops_every_old_key() -> None:
    old = (_key("BSA", 1.0),)
    keys, dropped = rotated_keys(old, _key("BSB", 5.0), 5.0, 0.0)
    assert [k.access_key for k in keys] == ["BSB"]
    assert dropped == old


def test_a_rotation_with_grace_keeps_the_current_key_until_then() -> None:
    keys, dropped = rotated_keys((_key("BSA", 1.0),), _key("BSB", 5.0), 5.0, 60.0)
    assert [(k.access_key, k.expires) for k in keys] == [("BSA", 65.0), ("BSB", None)]
    assert dropped == ()
    # Rotating again: the key in its grace period goes, the current one gets the grace.
    again, dropped = rotated_keys(keys, _key("BSC", 10.0), 10.0, 600.0)
    assert [(k.access_key, k.expires) for k in again] == [("BSB", 610.0), ("BSC", None)]
    assert [k.access_key for k in dropped] == ["BSA"]
    assert len(again) <= ACCESS_KEYS_PER_USER_MAX


def test_a_grace_never_extends_a_key_already_expiring() -> None:
    keys, _ = rotated_keys((_key("BSA", 1.0, 20.0),), _key("BSB", 5.0), 5.0, 600.0)
    assert keys[0].expires == 20.0


def test_expired_keys_are_pruned() -> None:
    keys = (_key("BSA", 1.0, 10.0), _key("BSB", 2.0))
    assert pruned_keys(keys, 9.9) == (keys, ())
    assert pruned_keys(keys, 10.0) == ((keys[1],), (keys[0],))


@pytest.mark.parametrize(
    ("current", "added", "removed", "expected"),
    [
        (("a", "b"), ("c", "a"), (), ("a", "b", "c")),
        (("a", "b"), (), ("a",), ("b",)),
        ((), ("a", "a"), (), ("a",)),
        (("a",), ("b",), ("b",), ("a",)),
    ],
)
def test_name_lists_keep_order_and_uniqueness(
    current: tuple[str, ...],
    added: tuple[str, ...],
    removed: tuple[str, ...],
    expected: tuple[str, ...],
) -> None:
    assert with_names(current, added, removed) == expected


def test_a_single_statement_object_is_a_statement_list_of_one() -> None:
    check_policy_document(
        "p", '{"Statement": {"Effect": "Allow", "Action": "s3:*", "Resource": "*"}}'
    )


def test_the_builtin_policies_are_policy_documents() -> None:
    assert set(BUILTIN_POLICIES) == {"readwrite", "readonly", "writeonly", "admin"}
    for name, document in BUILTIN_POLICIES.items():
        check_policy_document(name, json.dumps(document))
    assert BUILTIN_POLICIES["readonly"]["Statement"][0]["Action"] == [
        "s3:GetBucketLocation",
        "s3:GetObject",
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{", "not JSON"),
        ("[]", "not a JSON object"),
        ('{"Version": "2012-10-17"}', "needs a Statement list"),
        ('{"Statement": []}', "needs a Statement list"),
        ('{"Statement": ["x"]}', "every statement is a JSON object"),
        ('{"Statement": [{}], "pad": "' + "x" * 30_000 + '"}', "at most"),
        (
            '{"Statement": [{"Effect": "Maybe", "Action": "s3:*", "Resource": "*"}]}',
            "Invalid effect",
        ),
        (
            '{"Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:*", '
            '"Resource": "*"}]}',
            "policy p: ",
        ),
        (
            '{"Statement": [{"Effect": "Allow", "Action": "s3:NoSuchAction", "Resource": "*"}]}',
            "action",
        ),
    ],
)
def test_malformed_policies_are_refused(text: str, expected: str) -> None:
    with pytest.raises(MalformedPolicyError, match=expected):
        check_policy_document("p", text)


def test_standalone_keeps_one_cluster_key_in_its_data_directory(tmp_path: Path) -> None:
    env, place = cluster_key_settings(tmp_path, {})
    path = tmp_path / "cluster.key"
    assert env == {CLUSTER_KEY_FILE_ENV: str(path)} and place == str(path)
    first = path.read_text()
    assert path.stat().st_mode & 0o777 == 0o600
    assert cluster_key_settings(tmp_path, {}) == (env, place)
    assert path.read_text() == first  # kept, never regenerated
    # A key the environment gives is used as it is (and no file is made).
    other = tmp_path / "other"
    other.mkdir()
    given = {CLUSTER_KEY_ENV: first.strip()}
    assert cluster_key_settings(other, given) == ({}, f"${CLUSTER_KEY_ENV}")
    assert not (other / "cluster.key").exists()
    assert load_cluster_key(environ=given) == load_cluster_key(path)
    path.write_text("broken\n")
    with pytest.raises(UsageError, match="cluster.key"):
        cluster_key_settings(tmp_path, {})
