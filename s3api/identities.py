"""Who signed a request: the gateway's users, from its configuration and from ZooKeeper.

The users the gateway was started with (BLOBSTORE_ACCESS_KEY / BLOBSTORE_SECRET_KEY, a
users file) are its bootstrap users: they always work and hold the `admin` policy. The
users managed with `blobstore admin user ...` are read from ZooKeeper and kept current
by watches (`blobstore.access.directory`), their secrets opened with the cluster key
(BLOBSTORE_CLUSTER_KEY_FILE or BLOBSTORE_CLUSTER_KEY; without one only the bootstrap
users are served). A disabled user's keys, a removed user's, and a rotated key past its
grace period are unknown here: SigV4 answers InvalidAccessKeyId.

Lookups are synchronous (the signature check asks for a secret without awaiting) and
answered from memory.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from blobstore.access.directory import BootstrapUser, Directory, DirectoryEntry
from blobstore.access.sealing import load_cluster_key
from blobstore.runtime.zk import ZooKeeperClient
from s3api.config import User


@dataclass(frozen=True, slots=True, repr=False)
class Identity(User):
    """A user as the handlers see it (`name` owns buckets), with what authorization
    needs: its policies (its own, then its groups') and groups."""

    policies: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    bootstrap: bool = False

    def __repr__(self) -> str:  # never the secret
        return (
            f"Identity(name={self.name!r}, access_key={self.access_key!r}, "
            f"policies={self.policies!r}, groups={self.groups!r}, bootstrap={self.bootstrap})"
        )


class Identities:
    """The gateway's users. `directory` holds `config_users` as its bootstrap users
    (`for_gateway` builds both); the bootstrap users are served from the start, the
    stored ones once `start(zk)` has read them."""

    def __init__(self, config_users: Sequence[User], directory: Directory) -> None:
        for user in config_users:
            entry = directory.lookup(user.access_key)
            assert entry is not None and entry.bootstrap, f"{user.access_key} is not bootstrap"
        self.directory = directory

    @classmethod
    def for_gateway(
        cls, config_users: Sequence[User], environ: Mapping[str, str] | None = None
    ) -> Identities:
        """The gateway's users: `config_users`, and those kept in ZooKeeper (opened
        with the cluster key of the environment; UsageError when it is malformed)."""
        cluster_key = load_cluster_key(
            environ=os.environ if environ is None else environ, required=False
        )
        bootstrap = [BootstrapUser(u.access_key, u.secret_key, u.name) for u in config_users]
        return cls(config_users, Directory(cluster_key, bootstrap))

    async def start(self, zk: ZooKeeperClient | None) -> None:
        """Read the stored users on `zk` and follow their changes (None: bootstrap
        users only)."""
        await self.directory.start(zk)

    async def stop(self) -> None:
        await self.directory.stop()

    def _entry(self, access_key: str) -> DirectoryEntry | None:
        entry = self.directory.lookup(access_key)
        return entry if entry is not None and entry.enabled else None

    def lookup_secret(self, access_key: str) -> str | None:
        """The secret of an enabled user's key; None when unknown or disabled."""
        entry = self._entry(access_key)
        return None if entry is None else entry.secret

    def get(self, access_key: str) -> Identity | None:
        """The enabled user holding the key, or None."""
        entry = self._entry(access_key)
        return None if entry is None else _identity(entry)

    def user(self, access_key: str) -> Identity:
        """The user holding the key; KeyError for a key `lookup_secret` refuses."""
        entry = self._entry(access_key)
        if entry is None:
            raise KeyError(access_key)
        return _identity(entry)

    def policy_document(self, name: str) -> str | None:
        """An identity policy's text (for authorization), None when unknown."""
        return self.directory.policy_document(name)


def _identity(entry: DirectoryEntry) -> Identity:
    return Identity(
        access_key=entry.access_key,
        secret_key=entry.secret,
        name=entry.user,
        policies=entry.policies,
        groups=entry.groups,
        bootstrap=entry.bootstrap,
    )
