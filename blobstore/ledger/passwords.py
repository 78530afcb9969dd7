"""Object ledgers' passwords: one per ledger, derived from the cluster key.

A ledger is guarded by a password, as in BookKeeper: its metadata keeps a hash of it
(`ledger_metadata.password_hash`), and the bookies keep its master key,
SHA1("ledger" + password) (`wire.protocol.master_key`), refusing an add, a recovery
add or a fencing read under another key. One fixed password for every ledger would let
anything that knows it (it is in the source) write into or fence any object ledger, so:

- with a cluster key (`runtime.sealing`: BLOBSTORE_CLUSTER_KEY_FILE or
  BLOBSTORE_CLUSTER_KEY), ledger N's password is
  HMAC-SHA256(cluster key, "blobstore-ledger-password:" + N in decimal): 32 bytes, a
  different one for every ledger. The label keeps it apart from every other use of the
  key, and one ledger's password gives neither the key nor another ledger's password.
- without one, every object ledger gets the fixed `OBJECT_LEDGER_PASSWORD`: the weaker
  mode, for clusters that have no key yet.

Opening tries the passwords this process knows, in order: the derived one (with a
key), the fixed one (ledgers written before the cluster had a key), then any foreign
ones the caller adds (`blobstore admin decommission --password`), and takes the one
whose hash the metadata keeps. When none matches, the ledger was written under another
cluster key or by another application: the caller gets `LedgerUnauthorizedError`.
No password is ever logged or shown in an error.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from blobstore.ledger.config import OBJECT_LEDGER_PASSWORD
from blobstore.ledger.ledger_metadata import password_hash
from blobstore.runtime.sealing import ClusterKey, load_cluster_key

PASSWORD_LABEL = b"blobstore-ledger-password:"


def derive_ledger_password(cluster_key: ClusterKey, ledger_id: int) -> bytes:
    """Ledger `ledger_id`'s password under `cluster_key` (32 bytes)."""
    assert ledger_id >= 0, f"ledger_id={ledger_id}"
    message = PASSWORD_LABEL + str(ledger_id).encode("ascii")
    return hmac.new(cluster_key.key, message, hashlib.sha256).digest()


@dataclass(frozen=True, slots=True)
class LedgerPasswords:
    """The object ledger passwords a process knows: derived from `cluster_key` (None:
    the fixed password only), plus `foreign` ones to try when opening. Its repr shows
    the key's fingerprint only."""

    cluster_key: ClusterKey | None
    foreign: tuple[bytes, ...] = field(default=(), repr=False)

    @classmethod
    def from_env(
        cls, foreign: Iterable[bytes] = (), environ: Mapping[str, str] | None = None
    ) -> LedgerPasswords:
        """With the cluster key of the environment, if any; UsageError when one is
        named but missing or malformed (never the fixed password by mistake)."""
        return cls(load_cluster_key(environ=environ, required=False), tuple(foreign))

    @property
    def derived(self) -> bool:
        """Whether new ledgers get derived passwords (else the fixed one)."""
        return self.cluster_key is not None

    def for_new_ledger(self, ledger_id: int) -> bytes:
        """The password a new ledger `ledger_id` is created with."""
        if self.cluster_key is None:
            return OBJECT_LEDGER_PASSWORD
        return derive_ledger_password(self.cluster_key, ledger_id)

    def candidates(self, ledger_id: int) -> tuple[bytes, ...]:
        """What ledger `ledger_id` may have been created with, most likely first."""
        known = (OBJECT_LEDGER_PASSWORD, *self.foreign)
        if self.cluster_key is None:
            return known
        return (derive_ledger_password(self.cluster_key, ledger_id), *known)

    def matching(self, ledger_id: int, stored_hash: str) -> bytes | None:
        """The candidate whose hash is the metadata's `stored_hash`, or None."""
        for password in self.candidates(ledger_id):
            if hmac.compare_digest(password_hash(password), stored_hash):
                return password
        return None

    def describe(self) -> str:
        """What was tried, for an error message (names no password)."""
        tried = ["the fixed password"]
        if self.cluster_key is not None:
            tried.insert(0, f"the one derived from cluster key id {self.cluster_key.key_id}")
        if self.foreign:
            tried.append(f"{len(self.foreign)} given one(s)")
        return ", ".join(tried)
