"""The bookie cookie: proof that these directories belong to this bookie of this cluster.

On-disk format
--------------
``<journal_dir>/COOKIE`` and ``<ledger_dir>/COOKIE`` hold the same JSON as the znode
``/ledgers/cookies/<bookie_id>``::

    {"format_version": 1, "bookie_id": "host:port", "instance_id": "<cluster uuid>",
     "journal_dir": "/abs/path", "ledger_dirs": ["/abs/path"]}

The cluster's instance id lives in ``/ledgers/INSTANCEID`` (created by the first bookie).

Faults tolerated
----------------
- A wiped or swapped disk (cookie in ZooKeeper, none or another in a dir), other
  directories, another cluster's disk (instance id differs), another bookie id: the
  bookie refuses to start with one line naming the mismatch.
- A crash during the very first start, after the local cookies were written but before
  the znode was: the znode is re-created when every local cookie agrees with this
  bookie and this cluster's instance id.
- Cookie files are written to a temporary name, fsync'd and renamed (never half-written).
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from dataclasses import dataclass
from typing import Self

from kazoo.exceptions import NodeExistsError, NoNodeError

from blobstore.runtime.zk import ZooKeeperClient
from blobstore.wire import zk_layout
from bookie.disk_io import fsync_directory

logger = logging.getLogger(__name__)

COOKIE_FILE = "COOKIE"
FORMAT_VERSION = 1


class CookieMismatchError(Exception):
    """These directories or this cluster do not belong to this bookie (one line)."""


@dataclass(frozen=True, slots=True)
class Cookie:
    bookie_id: str
    instance_id: str
    journal_dir: str
    ledger_dirs: tuple[str, ...]

    def encode(self) -> bytes:
        return json.dumps(
            {
                "format_version": FORMAT_VERSION,
                "bookie_id": self.bookie_id,
                "instance_id": self.instance_id,
                "journal_dir": self.journal_dir,
                "ledger_dirs": list(self.ledger_dirs),
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Self:
        try:
            value = json.loads(raw)
            if value.get("format_version") != FORMAT_VERSION:
                raise ValueError(f"format_version {value.get('format_version')!r}")
            return cls(
                str(value["bookie_id"]),
                str(value["instance_id"]),
                str(value["journal_dir"]),
                tuple(str(d) for d in value["ledger_dirs"]),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise CookieMismatchError(f"unreadable cookie: {e}") from None

    def differences(self, other: Cookie) -> list[str]:
        return [
            f"{name} is {getattr(other, name)!r} there, expected {getattr(self, name)!r}"
            for name in ("bookie_id", "instance_id", "journal_dir", "ledger_dirs")
            if getattr(self, name) != getattr(other, name)
        ]


def read_local(directory: str) -> Cookie | None:
    try:
        with open(os.path.join(directory, COOKIE_FILE), "rb") as f:
            return Cookie.decode(f.read())
    except FileNotFoundError:
        return None


def write_local(directory: str, cookie: Cookie) -> None:
    path = os.path.join(directory, COOKIE_FILE)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(cookie.encode())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_directory(directory)


async def instance_id(zk: ZooKeeperClient) -> str:
    """The cluster's instance id, created on first use."""
    try:
        return (await zk.get(zk_layout.INSTANCE_ID_PATH)).value.decode()
    except NoNodeError:
        pass
    try:
        await zk.create(zk_layout.INSTANCE_ID_PATH, uuid.uuid4().hex.encode(), makepath=True)
    except NodeExistsError:
        pass
    return (await zk.get(zk_layout.INSTANCE_ID_PATH)).value.decode()


async def verify_or_create(
    zk: ZooKeeperClient, bookie_id: str, journal_dir: str, ledger_dir: str
) -> Cookie:
    """Check the cookie in ZooKeeper and in every dir; create them on a first start."""
    journal_dir = os.path.abspath(journal_dir)
    ledger_dir = os.path.abspath(ledger_dir)
    expected = Cookie(bookie_id, await instance_id(zk), journal_dir, (ledger_dir,))
    path = zk_layout.cookie_path(bookie_id)
    try:
        remote: Cookie | None = Cookie.decode((await zk.get(path)).value)
    except NoNodeError:
        remote = None
    dirs = (journal_dir, ledger_dir)
    local = {d: read_local(d) for d in dirs}
    present = {d: c for d, c in local.items() if c is not None}
    if not present:
        if remote is not None:
            raise CookieMismatchError(
                f"cookie mismatch: bookie {bookie_id} is registered in ZooKeeper but "
                f"{journal_dir} and {ledger_dir} hold no cookie (wiped or wrong disk?)"
            )
        for d in dirs:
            write_local(d, expected)
        await zk.create(path, expected.encode(), makepath=True)
        logger.info("cookie created bookie_id=%s instance_id=%s", bookie_id, expected.instance_id)
        return expected
    for d in dirs:
        cookie = local[d]
        if cookie is None:
            raise CookieMismatchError(
                f"cookie mismatch: {d} holds no cookie while other dirs do (wiped or wrong disk?)"
            )
        diff = expected.differences(cookie)
        if diff:
            raise CookieMismatchError(f"cookie mismatch in {d}: {'; '.join(diff)}")
    if remote is None:
        logger.warning("cookie_recreated_in_zookeeper bookie_id=%s", bookie_id)
        await zk.create(path, expected.encode(), makepath=True)
    else:
        diff = expected.differences(remote)
        if diff:
            raise CookieMismatchError(f"cookie mismatch with ZooKeeper {path}: {'; '.join(diff)}")
    return expected
