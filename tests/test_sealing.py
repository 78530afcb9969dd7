"""Sealed secrets: they open only under their cluster key, for their user and access key,
and the cluster key is refused, in one clear line, when missing or malformed."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from blobstore.runtime.errors import UsageError
from blobstore.runtime.sealing import (
    CLUSTER_KEY_ENV,
    CLUSTER_KEY_FILE_ENV,
    ClusterKey,
    SealError,
    generate_cluster_key,
    load_cluster_key,
    open_secret,
    parse_cluster_key,
    seal_secret,
    write_cluster_key_file,
)

SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


def _key() -> ClusterKey:
    return parse_cluster_key(generate_cluster_key(), "test")


def test_a_sealed_secret_opens_for_its_user_and_key() -> None:
    key = _key()
    sealed = seal_secret(key, SECRET, "alice", "BSALICE")
    assert SECRET not in sealed
    assert open_secret(key, sealed, "alice", "BSALICE") == SECRET


def test_every_seal_uses_a_fresh_nonce() -> None:
    key = _key()
    sealed = {seal_secret(key, SECRET, "alice", "BSALICE") for _ in range(50)}
    assert len(sealed) == 50
    nonces = {base64.b64decode(s.split(":")[2])[:12] for s in sealed}
    assert len(nonces) == 50


def test_a_secret_sealed_under_another_cluster_key_does_not_open() -> None:
    sealed = seal_secret(_key(), SECRET, "alice", "BSALICE")
    with pytest.raises(SealError, match="another cluster key"):
        open_secret(_key(), sealed, "alice", "BSALICE")


def test_a_forged_key_id_does_not_help_another_key() -> None:
    """Same key id text, other key bytes: the tag check still fails."""
    real, other = _key(), _key()
    sealed = seal_secret(real, SECRET, "alice", "BSALICE")
    forged = ClusterKey(other.key, key_id=real.key_id)
    with pytest.raises(SealError, match="does not open"):
        open_secret(forged, sealed, "alice", "BSALICE")


@pytest.mark.parametrize(("user", "access_key"), [("bob", "BSALICE"), ("alice", "BSOTHER")])
def test_a_secret_moved_to_another_user_or_key_does_not_open(user: str, access_key: str) -> None:
    key = _key()
    sealed = seal_secret(key, SECRET, "alice", "BSALICE")
    with pytest.raises(SealError, match="does not open") as raised:
        open_secret(key, sealed, user, access_key)
    assert SECRET not in str(raised.value)


def test_every_flipped_byte_is_detected() -> None:
    key = _key()
    sealed = seal_secret(key, SECRET, "alice", "BSALICE")
    prefix, key_id, body = sealed.split(":")
    raw = base64.b64decode(body)
    for index in range(len(raw)):
        tampered = bytearray(raw)
        tampered[index] ^= 0x01
        text = f"{prefix}:{key_id}:{base64.b64encode(bytes(tampered)).decode()}"
        with pytest.raises(SealError):
            open_secret(key, text, "alice", "BSALICE")


@pytest.mark.parametrize(
    "sealed",
    ["", "plain-secret", "v2:abc:def", "v1:{id}:not base64!", "v1:{id}:" + "QUJD", "v1:{id}"],
)
def test_what_is_not_a_sealed_secret_is_refused(sealed: str) -> None:
    key = _key()
    with pytest.raises(SealError):
        open_secret(key, sealed.format(id=key.key_id), "alice", "BSALICE")


def test_the_key_never_shows_in_its_repr() -> None:
    key = _key()
    assert base64.b64encode(key.key).decode() not in repr(key)
    assert key.key.hex() not in repr(key)
    assert key.key_id in repr(key)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "is 0 bytes"),
        ("not base64 at all!", "not base64"),
        (base64.b64encode(b"x" * 16).decode(), "is 16 bytes; it must be 32"),
        (base64.b64encode(b"x" * 33).decode(), "is 33 bytes"),
        ("é" * 44, "not base64"),
    ],
)
def test_a_malformed_key_is_one_clear_error(text: str, expected: str) -> None:
    with pytest.raises(UsageError, match=expected) as raised:
        parse_cluster_key(text, CLUSTER_KEY_ENV)
    assert str(raised.value).startswith(CLUSTER_KEY_ENV)


def test_the_key_comes_from_a_file_or_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "cluster.key"
    write_cluster_key_file(path)
    assert os.stat(path).st_mode & 0o777 == 0o600
    from_file = load_cluster_key(environ={CLUSTER_KEY_FILE_ENV: str(path)})
    assert from_file is not None
    text = path.read_text()
    assert text.endswith("\n") and len(text.strip()) == 44
    from_env = load_cluster_key(environ={CLUSTER_KEY_ENV: text.strip()})
    assert from_env == from_file
    assert load_cluster_key(path, environ={}) == from_file  # an explicit path
    assert load_cluster_key(environ={}, required=False) is None
    with pytest.raises(FileExistsError):
        write_cluster_key_file(path)  # a key is never replaced
    assert load_cluster_key(path, environ={}) == from_file


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, "no cluster key: set BLOBSTORE_CLUSTER_KEY_FILE"),
        ({CLUSTER_KEY_FILE_ENV: "/no/such/cluster.key"}, "/no/such/cluster.key: No such file"),
        (
            {CLUSTER_KEY_FILE_ENV: "/x", CLUSTER_KEY_ENV: generate_cluster_key()},
            "give the cluster key one way",
        ),
        ({CLUSTER_KEY_ENV: "c2hvcnQ="}, "BLOBSTORE_CLUSTER_KEY: the cluster key is 5 bytes"),
    ],
)
def test_a_missing_or_ambiguous_key_is_one_clear_error(
    environ: dict[str, str], expected: str
) -> None:
    with pytest.raises(UsageError, match=expected):
        load_cluster_key(environ=environ)


def test_a_key_file_that_is_no_key_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "cluster.key"
    path.write_bytes(b"\xff\xfe" * 10)
    with pytest.raises(UsageError, match="cluster key file .* not base64"):
        load_cluster_key(path, environ={})
    path.write_bytes(b"A" * 10_000)
    with pytest.raises(UsageError, match=r"cluster key file .*: longer than \d+ bytes"):
        load_cluster_key(path, environ={})
