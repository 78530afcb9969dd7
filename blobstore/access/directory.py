"""A gateway's view of users, groups and identity policies, kept current by watches.

Signature checks ask for a secret synchronously, once per request, so the view is held
in memory: every user, group and stored policy znode (`users.py`) is read once at
`start()` under a data watch, and the three parent znodes under child watches. A watch
that fires marks its znode to be read again (re-arming the watch in the same read), so
a change made by `blobstore admin` reaches every running gateway within one round trip
of its watch event. One task does the reading, so concurrent events coalesce; a read
that fails (ZooKeeper away) is retried with backoff, the view serving meanwhile as it
was. A lost session fires every watch at once, and everything is read again.

The view is bounded: at most USERS_MAX users, GROUPS_MAX groups, POLICIES_MAX
policies (`users.py` refuses more; past them, the rest are left out with a warning), a
user at most ACCESS_KEYS_PER_USER_MAX keys.

Secrets are opened with the cluster key when a user's record is read and kept only in
memory. Without a cluster key (or for a secret sealed under another one) a user's keys
are not served; a warning says so, naming no secret.

The *bootstrap users* are the ones the gateway was started with (BLOBSTORE_ACCESS_KEY /
BLOBSTORE_SECRET_KEY or a users file): they always work and hold the `admin` policy,
so the first user of a cluster (the credentials `blobstore standalone` prints) is its
administrator. A stored user whose access key or name is a bootstrap user's is not
served: it would take over that user's buckets.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kazoo.exceptions import KazooException, NoNodeError
from kazoo.protocol.states import WatchedEvent

from blobstore.access.user_records import (
    ADMIN_POLICY,
    BUILTIN_POLICIES,
    GROUPS_MAX,
    GROUPS_PATH,
    POLICIES_MAX,
    POLICIES_PATH,
    USERS_MAX,
    USERS_PATH,
    GroupRecord,
    UserRecord,
)
from blobstore.runtime.sealing import ClusterKey, SealError, open_secret
from blobstore.runtime.zk import ZooKeeperClient

logger = logging.getLogger(__name__)

READ_BATCH = 64  # znode reads in flight at once while reading the view
RETRY_S_MIN = 0.1
RETRY_S_MAX = 5.0
STOP_TIMEOUT_S = 5.0
LIMITS = {USERS_PATH: USERS_MAX, GROUPS_PATH: GROUPS_MAX, POLICIES_PATH: POLICIES_MAX}
PARENTS = tuple(LIMITS)
_BUILTIN_TEXTS = {name: json.dumps(document) for name, document in BUILTIN_POLICIES.items()}


@dataclass(frozen=True, slots=True)
class BootstrapUser:
    """A user the gateway was started with."""

    access_key: str
    secret: str = field(repr=False)
    name: str


@dataclass(frozen=True, slots=True)
class DirectoryEntry:
    """What the gateway knows of one access key."""

    user: str
    access_key: str
    secret: str = field(repr=False)
    enabled: bool
    policies: tuple[str, ...]  # attached to the user, then those of its groups
    groups: tuple[str, ...]
    bootstrap: bool = False
    expires: float | None = None


@dataclass(frozen=True, slots=True)
class _OpenedKey:
    user: str
    secret: str = field(repr=False)
    expires: float | None


class Directory:
    """The watched view: the bootstrap users from the start, the stored ones once
    `start(zk)` has read them."""

    def __init__(
        self,
        cluster_key: ClusterKey | None,
        bootstrap: Iterable[BootstrapUser] = (),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.zk: ZooKeeperClient | None = None
        self.cluster_key = cluster_key
        self.clock = clock
        self._bootstrap = {u.access_key: u for u in bootstrap}
        self._bootstrap_names = {u.name for u in self._bootstrap.values()}
        self._users: dict[str, UserRecord] = {}
        self._groups: dict[str, GroupRecord] = {}
        self._policies: dict[str, str] = {}
        self._keys: dict[str, _OpenedKey] = {}
        self._dirty: set[str] = set()
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self.generation = 0  # bumped by every change applied to the view

    # ------------------------------------------------------------------ lifecycle

    async def start(self, zk: ZooKeeperClient | None) -> None:
        """Read every record on `zk`, then follow their changes (raises kazoo's errors
        when ZooKeeper does not answer). `zk` None: the bootstrap users only."""
        assert self.zk is None, "started twice"
        if zk is None:
            return
        self.zk = zk
        self._wake = asyncio.Event()
        self._dirty.update(PARENTS)
        await self._refresh()
        if self._users and self.cluster_key is None:
            logger.warning(
                "event=access_no_cluster_key users=%d: the users kept in ZooKeeper are not "
                "served; give the gateway the cluster key (BLOBSTORE_CLUSTER_KEY_FILE)",
                len(self._users),
            )
        self._task = asyncio.create_task(self._refresher(), name="access-directory")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(task, STOP_TIMEOUT_S)

    # ------------------------------------------------------------------ lookups

    def lookup(self, access_key: str) -> DirectoryEntry | None:
        """The key's holder, disabled ones included; None for a key unknown, past its
        grace period, or whose secret did not open."""
        bootstrap = self._bootstrap.get(access_key)
        if bootstrap is not None:
            return DirectoryEntry(
                bootstrap.name,
                access_key,
                bootstrap.secret,
                enabled=True,
                policies=(ADMIN_POLICY,),
                groups=(),
                bootstrap=True,
            )
        opened = self._keys.get(access_key)
        if opened is None or (opened.expires is not None and self.clock() >= opened.expires):
            return None
        record = self._users.get(opened.user)
        if record is None:
            return None
        return DirectoryEntry(
            record.name,
            access_key,
            opened.secret,
            enabled=record.enabled,
            policies=self.policies_of(record),
            groups=record.groups,
            expires=opened.expires,
        )

    def user(self, name: str) -> UserRecord | None:
        return self._users.get(name)

    def group(self, name: str) -> GroupRecord | None:
        return self._groups.get(name)

    def policies_of(self, record: UserRecord) -> tuple[str, ...]:
        """The user's own policies, then its groups' (each once; groups not known to
        this view add nothing)."""
        names = dict.fromkeys(record.policies)
        for group_name in record.groups:
            group = self._groups.get(group_name)
            if group is not None:
                names.update(dict.fromkeys(group.policies))
        return tuple(names)

    def policy_document(self, name: str) -> str | None:
        """A policy's text (a built-in one's as JSON), or None when unknown."""
        if name in _BUILTIN_TEXTS:
            return _BUILTIN_TEXTS[name]
        return self._policies.get(name)

    # ------------------------------------------------------------------ watching

    def _watched(self, event: WatchedEvent) -> None:  # on the loop
        if event.path is None:  # the session expired: every watch is gone
            self._dirty.update(PARENTS)
            self._dirty.update(f"{USERS_PATH}/{n}" for n in self._users)
            self._dirty.update(f"{GROUPS_PATH}/{n}" for n in self._groups)
            self._dirty.update(f"{POLICIES_PATH}/{n}" for n in self._policies)
        else:
            self._dirty.add(event.path)
        if self._wake is not None:
            self._wake.set()

    async def _refresher(self) -> None:
        delay_s = RETRY_S_MIN
        assert self._wake is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self._refresh()
            except Exception as e:  # noqa: BLE001 - the view keeps serving; retried
                logger.warning(
                    "event=access_directory_retry pending=%d error=%r",
                    len(self._dirty),
                    e,
                    exc_info=not isinstance(e, KazooException | TimeoutError),
                )
                self._wake.set()
                await asyncio.sleep(delay_s)
                delay_s = min(RETRY_S_MAX, delay_s * 2)
            else:
                delay_s = RETRY_S_MIN

    async def _refresh(self) -> None:
        """Read every marked znode: parents first (they mark their new children), then
        the others, READ_BATCH at a time."""
        while self._dirty:
            parents = [p for p in PARENTS if p in self._dirty]
            if parents:
                self._dirty.discard(parents[0])
                try:
                    await self._read_children(parents[0])
                except BaseException:
                    self._dirty.add(parents[0])
                    raise
                continue
            batch = sorted(self._dirty)[:READ_BATCH]
            self._dirty.difference_update(batch)
            outcomes = await asyncio.gather(
                *(self._read_node(path) for path in batch), return_exceptions=True
            )
            failed = [
                (p, o) for p, o in zip(batch, outcomes, strict=True) if isinstance(o, BaseException)
            ]
            self._dirty.update(p for p, _ in failed)
            if failed:
                raise failed[0][1]

    async def _read_children(self, parent: str) -> None:
        assert self.zk is not None
        try:
            names = sorted(await self.zk.get_children(parent, watch=self._watched))
        except NoNodeError:
            # Nothing there yet: watch for its creation.
            if await self.zk.exists(parent, watch=self._watched) is not None:
                self._dirty.add(parent)
            names = []
        limit = LIMITS[parent]
        if len(names) > limit:
            logger.warning(
                "event=access_directory_full path=%s count=%d limit=%d", parent, len(names), limit
            )
            names = names[:limit]
        known = self._known(parent)
        wanted = set(names)
        for name in names:
            if name not in known:
                self._dirty.add(f"{parent}/{name}")
        for name in [n for n in known if n not in wanted]:
            self._apply(parent, name, None)

    async def _read_node(self, path: str) -> None:
        assert self.zk is not None
        parent, name = path.rsplit("/", 1)
        if parent not in LIMITS:
            return
        try:
            versioned = await self.zk.get(path, watch=self._watched)
        except NoNodeError:
            self._apply(parent, name, None)
            return
        self._apply(parent, name, versioned.value)

    def _known(self, parent: str) -> dict[str, Any]:
        if parent == USERS_PATH:
            return self._users
        if parent == GROUPS_PATH:
            return self._groups
        return self._policies

    # ------------------------------------------------------------------ applying

    def _apply(self, parent: str, name: str, raw: bytes | None) -> None:
        """Take in one znode's new value (None: gone)."""
        self.generation += 1
        try:
            if parent == USERS_PATH:
                self._set_user(name, None if raw is None else UserRecord.decode(raw))
            elif parent == GROUPS_PATH:
                self._set_group(name, None if raw is None else GroupRecord.decode(raw))
            elif raw is None:
                self._policies.pop(name, None)
            else:
                self._policies[name] = raw.decode()
        except (ValueError, UnicodeDecodeError) as e:
            logger.warning("event=access_record_unreadable path=%s/%s error=%s", parent, name, e)
            self._apply(parent, name, None)

    def _set_group(self, name: str, record: GroupRecord | None) -> None:
        if record is None:
            self._groups.pop(name, None)
        else:
            self._groups[name] = record

    def _set_user(self, name: str, record: UserRecord | None) -> None:
        old = self._users.pop(name, None)
        if old is not None:
            for key in old.access_keys:
                opened = self._keys.get(key.access_key)
                if opened is not None and opened.user == name:
                    del self._keys[key.access_key]
        if record is None:
            return
        if record.name != name or name in self._bootstrap_names:
            logger.warning(
                "event=access_user_refused user=%s reason=%s",
                name,
                "bootstrap user's name" if record.name == name else "record names another user",
            )
            return
        self._users[name] = record
        for key in record.access_keys:
            secret = self._opened(record, key.access_key, key.sealed_secret)
            if secret is not None:
                self._keys[key.access_key] = _OpenedKey(name, secret, key.expires)

    def _opened(self, record: UserRecord, access_key: str, sealed: str) -> str | None:
        if access_key in self._bootstrap or self.cluster_key is None:
            return None
        try:
            return open_secret(self.cluster_key, sealed, record.name, access_key)
        except SealError as e:
            logger.warning("event=access_secret_unopened user=%s error=%s", record.name, e)
            return None
