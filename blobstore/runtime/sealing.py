"""Secret keys at rest: sealed with AES-256-GCM under the cluster key.

Users' secret keys are kept in ZooKeeper (`blobstore/access/users.py`), which anyone
with access to the ensemble, its snapshots or its backups can read. So a secret is
stored *sealed*: encrypted and authenticated under a 32-byte **cluster key** that lives
outside ZooKeeper, given by the operator to every gateway and admin command:

- `BLOBSTORE_CLUSTER_KEY_FILE`: a file holding the key (mode 0600, owned by the
  service's user), or an explicit path given by the caller; or
- `BLOBSTORE_CLUSTER_KEY`: the key itself in the environment.

Either way the key is written as standard base64 of its 32 bytes (44 characters, as
`openssl rand -base64 32` prints it); a file may end with a newline. Setting both
variables is refused: which one counts would be a guess.

A sealed secret is the text `v1:<key id>:<base64 of nonce + ciphertext + tag>`:

- a fresh random 96-bit nonce for every seal (GCM's nonce must never repeat under one
  key; 2^32 seals under one key keep the chance of a repeat below 2^-32);
- the associated data binds the secret to its user name and access key, so a sealed
  secret copied into another user's record, or beside another access key, does not
  open (the tag check fails);
- the key id is a fingerprint of the cluster key (an HMAC of a fixed label, not the key
  itself), so a secret sealed under another cluster key is told apart from a tampered
  one in the error.

Neither the key nor a secret is ever logged or shown in an error message.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from blobstore.runtime.errors import UsageError
from blobstore.runtime.secret_files import read_small_file, write_new_file

CLUSTER_KEY_ENV = "BLOBSTORE_CLUSTER_KEY"
CLUSTER_KEY_FILE_ENV = "BLOBSTORE_CLUSTER_KEY_FILE"
CLUSTER_KEY_BYTES = 32  # AES-256
NONCE_BYTES = 12  # GCM's 96-bit nonce
TAG_BYTES = 16
SECRET_BYTES_MAX = 1024  # a secret key is 40 characters; anything far longer is no secret
KEY_FILE_BYTES_MAX = 4096
SEALED_FORMAT = "v1"
_KEY_ID_LABEL = b"blobstore cluster key id v1"
_ASSOCIATED_DATA_LABEL = "blobstore/access/secret/v1"

assert CLUSTER_KEY_BYTES * 8 == 256, "AES-256"


class SealError(Exception):
    """A sealed secret that does not open: sealed under another cluster key, altered,
    moved to another user or access key, or not a sealed secret at all. The message
    never holds the secret or the key."""


@dataclass(frozen=True, slots=True)
class ClusterKey:
    """The cluster key and its fingerprint (`key_id`). Its repr shows the id only."""

    key: bytes = field(repr=False)
    key_id: str = ""

    def __post_init__(self) -> None:
        assert len(self.key) == CLUSTER_KEY_BYTES, len(self.key)
        if not self.key_id:
            digest = hmac.new(self.key, _KEY_ID_LABEL, hashlib.sha256).hexdigest()
            object.__setattr__(self, "key_id", digest[:16])


def generate_cluster_key() -> str:
    """A new cluster key, as written in a key file or BLOBSTORE_CLUSTER_KEY."""
    return base64.b64encode(secrets.token_bytes(CLUSTER_KEY_BYTES)).decode()


def parse_cluster_key(text: str, source: str) -> ClusterKey:
    """The key from its base64 text; UsageError naming `source` (never the text)."""
    stripped = text.strip()
    try:
        key = base64.b64decode(stripped.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error):
        raise UsageError(
            f"{source}: the cluster key is not base64 (expected {CLUSTER_KEY_BYTES} bytes "
            "in base64, e.g. from `openssl rand -base64 32`)"
        ) from None
    if len(key) != CLUSTER_KEY_BYTES:
        raise UsageError(
            f"{source}: the cluster key is {len(key)} bytes; it must be {CLUSTER_KEY_BYTES} "
            "(base64 of 32 random bytes, e.g. from `openssl rand -base64 32`)"
        )
    return ClusterKey(key)


def read_cluster_key_file(path: str | os.PathLike[str]) -> ClusterKey:
    """The key kept in a file; UsageError when it is missing, unreadable or malformed."""
    source = f"cluster key file {os.fspath(path)}"
    raw = read_small_file(path, KEY_FILE_BYTES_MAX, source)
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise UsageError(f"{source}: the cluster key is not base64 text") from None
    return parse_cluster_key(text, source)


def load_cluster_key(
    path: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    required: bool = True,
) -> ClusterKey | None:
    """The cluster key: from `path` when given, else BLOBSTORE_CLUSTER_KEY_FILE, else
    BLOBSTORE_CLUSTER_KEY. None when none is set and not `required`; UsageError when
    it is required and missing, or when a given key is malformed."""
    environ = os.environ if environ is None else environ
    if path:
        return read_cluster_key_file(path)
    key_file = environ.get(CLUSTER_KEY_FILE_ENV, "")
    key_text = environ.get(CLUSTER_KEY_ENV, "")
    if key_file and key_text:
        raise UsageError(
            f"both {CLUSTER_KEY_FILE_ENV} and {CLUSTER_KEY_ENV} are set: give the cluster key one way"
        )
    if key_file:
        return read_cluster_key_file(key_file)
    if key_text:
        return parse_cluster_key(key_text, CLUSTER_KEY_ENV)
    if required:
        raise UsageError(
            f"no cluster key: set {CLUSTER_KEY_FILE_ENV} to the key file (or "
            f"{CLUSTER_KEY_ENV} to the key); secret keys are sealed under it"
        )
    return None


def write_cluster_key_file(path: Path) -> None:
    """Create a key file with a new key (mode 0600, fsync'd with its directory);
    FileExistsError when there is one already (a key is never replaced by accident:
    every secret sealed under it would stop opening)."""
    write_new_file(path, (generate_cluster_key() + "\n").encode())


def _associated_data(user: str, access_key: str) -> bytes:
    # JSON: unambiguous whatever the names hold (no separator to smuggle in).
    return json.dumps([_ASSOCIATED_DATA_LABEL, user, access_key]).encode()


def seal_secret(cluster_key: ClusterKey, secret: str, user: str, access_key: str) -> str:
    """`secret` sealed for `user`'s `access_key` (a new random nonce each call)."""
    plain = secret.encode()
    assert 0 < len(plain) <= SECRET_BYTES_MAX, len(plain)
    nonce = secrets.token_bytes(NONCE_BYTES)
    sealed = AESGCM(cluster_key.key).encrypt(nonce, plain, _associated_data(user, access_key))
    body = base64.b64encode(nonce + sealed).decode()
    return f"{SEALED_FORMAT}:{cluster_key.key_id}:{body}"


def open_secret(cluster_key: ClusterKey, sealed: str, user: str, access_key: str) -> str:
    """The secret sealed by `seal_secret` for this user and access key; SealError when
    it does not open (see the class)."""
    parts = sealed.split(":")
    if len(parts) != 3 or parts[0] != SEALED_FORMAT:
        raise SealError(f"access key {access_key}: not a sealed secret of format {SEALED_FORMAT}")
    _, key_id, body = parts
    if key_id != cluster_key.key_id:
        raise SealError(
            f"access key {access_key}: sealed under another cluster key (id {key_id}; "
            f"this one is {cluster_key.key_id})"
        )
    try:
        raw = base64.b64decode(body.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error):
        raise SealError(f"access key {access_key}: the sealed secret is not base64") from None
    if len(raw) < NONCE_BYTES + TAG_BYTES + 1:
        raise SealError(f"access key {access_key}: the sealed secret is truncated")
    nonce, sealed_bytes = raw[:NONCE_BYTES], raw[NONCE_BYTES:]
    try:
        plain = AESGCM(cluster_key.key).decrypt(
            nonce, sealed_bytes, _associated_data(user, access_key)
        )
    except InvalidTag:
        raise SealError(
            f"access key {access_key}: the sealed secret does not open for user {user!r} "
            "(altered, or moved from another user or access key)"
        ) from None
    try:
        return plain.decode()
    except UnicodeDecodeError:
        raise SealError(f"access key {access_key}: the sealed secret is not text") from None
