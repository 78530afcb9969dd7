"""Digest authentication to ZooKeeper, and the ACL every znode is created with.

Off by default (an ensemble on a private network, as today). On, every process of the
cluster (gateways, bookies, the maintenance job and its executors, admin commands)
reads one credential, `user:password`, from the file named by
`BLOBSTORE_ZK_DIGEST_FILE` (mode 0600; one line; a trailing newline is allowed), and:

- sends it as ZooKeeper `digest` authentication on every connection of its session,
  before any other request (a reconnection sends it again: ZooKeeper keeps it per
  connection);
- creates every znode with one ACL: all permissions for that digest identity
  (`digest:user:base64(sha1(user:password))`), none for anyone else. A client without
  the credential, or with another password, can read and change nothing blobstore
  wrote. An ensemble started with `enforce.auth.enabled=true` and
  `enforce.auth.schemes=digest` (as `blobstore standalone --zk-auth` starts its own)
  also refuses sessions that never authenticate.

The password is never logged and never shown in an error; `repr` hides it. znodes
created before the credential was set keep their open ACL.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kazoo.security import ACL, OPEN_ACL_UNSAFE, make_digest_acl

from blobstore.runtime.errors import UsageError
from blobstore.runtime.secret_files import read_small_file, write_new_file

DIGEST_FILE_ENV = "BLOBSTORE_ZK_DIGEST_FILE"
DIGEST_FILE_BYTES_MAX = 1024
DEFAULT_USER = "blobstore"
# The zoo.cfg lines of a server that refuses sessions without digest authentication.
ENFORCE_CONFIG_LINES = ("enforce.auth.enabled=true", "enforce.auth.schemes=digest")


@dataclass(frozen=True, slots=True)
class ZooKeeperDigest:
    """One `user:password` credential (ZooKeeper's digest scheme)."""

    user: str
    password: str = field(repr=False)

    @property
    def credential(self) -> bytes:
        """What the `digest` auth packet carries."""
        return f"{self.user}:{self.password}".encode()

    def acl(self) -> list[ACL]:
        """Every permission for this identity alone."""
        return [make_digest_acl(self.user, self.password, all=True)]


def parse_digest(text: str, source: str) -> ZooKeeperDigest:
    """`user:password` (whitespace around it ignored) -> ZooKeeperDigest; UsageError
    naming `source`, never the text, when it is not one."""
    user, sep, password = text.strip().partition(":")
    if not sep or not user or not password:
        raise UsageError(f"{source}: expected one line user:password")
    if any(c.isspace() or not c.isprintable() for c in user + password):
        raise UsageError(f"{source}: user and password must be printable, without spaces")
    return ZooKeeperDigest(user, password)


def digest_from_env(environ: Mapping[str, str] | None = None) -> ZooKeeperDigest | None:
    """The credential of BLOBSTORE_ZK_DIGEST_FILE; None when it is not set."""
    env = os.environ if environ is None else environ
    path = env.get(DIGEST_FILE_ENV)
    if not path:
        return None
    return read_digest_file(Path(path))


def read_digest_file(path: Path) -> ZooKeeperDigest:
    source = f"{DIGEST_FILE_ENV}={path}"
    raw = read_small_file(path, DIGEST_FILE_BYTES_MAX, source)
    try:
        return parse_digest(raw.decode("utf-8"), source)
    except UnicodeDecodeError:
        raise UsageError(f"{source}: not UTF-8 text") from None


def write_digest_file(path: Path, user: str = DEFAULT_USER) -> ZooKeeperDigest:
    """A new credential with a random password, in a new file (mode 0600, fsync'd);
    FileExistsError when there is one (znodes are ACL'd to it: never replaced)."""
    digest = ZooKeeperDigest(user, secrets.token_urlsafe(24))
    write_new_file(path, digest.credential + b"\n")
    return digest


def znode_acl(digest: ZooKeeperDigest | None) -> list[ACL]:
    """The ACL new znodes get: the digest identity's alone, or open without one."""
    return OPEN_ACL_UNSAFE if digest is None else digest.acl()
