"""Users, their access keys, groups and identity policies, kept in ZooKeeper (the
znode layout and records are in `user_records.py`).

Every change is one compare-and-set `multi` on the versions read, retried from a fresh
read when another change came first, so two administrators racing never lose an
update:

1. Admin A reads alice at version 4 to attach `readonly`; admin B reads it too to
   attach `writeonly`.
2. A's multi sets version 5; B's, naming version 4, fails with BadVersionError.
3. B reads version 5 (with `readonly`) and sets version 6 with both policies.

A multi also names every group and policy a change references, setting each to its own
value at the version read (a version bump): removing a group or a policy (which checks
that nothing references it, then deletes it at the version read) then fails, and looks
again, when a reference was added meanwhile. Creating a user creates its key znodes in
the same multi; removing it, or dropping a key, deletes them in the same multi.

Rotation (`rotate_key`) gives a user a new key pair. By default the old keys go at once;
with a grace period the current key keeps working until then (its record carries
`expires`; gateways stop accepting it at that time, and the next change of the user
drops it and its key znode). A user holds at most ACCESS_KEYS_PER_USER_MAX keys.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from blobstore.access.user_records import (
    BUILTIN_POLICIES,
    DISABLED,
    ENABLED,
    GRACE_S_MAX,
    GROUPS_MAX,
    GROUPS_PATH,
    GROUPS_PER_USER_MAX,
    KEYS_PATH,
    POLICIES_MAX,
    POLICIES_PATH,
    POLICIES_PER_ENTITY_MAX,
    USERS_MAX,
    USERS_PATH,
    AccessBusyError,
    AccessError,
    AccessKey,
    AccessKeyInUseError,
    EntityInUseError,
    GroupExistsError,
    GroupRecord,
    InvalidNameError,
    LimitExceededError,
    NoSuchGroupError,
    NoSuchPolicyError,
    NoSuchUserError,
    UserExistsError,
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
from blobstore.runtime.sealing import ClusterKey, seal_secret
from blobstore.runtime.zk import ZooKeeperClient

logger = logging.getLogger(__name__)

CAS_ATTEMPTS_MAX = 20
CAS_BACKOFF_S_MAX = 0.2
_JITTER = random.Random()

# ---------------------------------------------------------------------- the store


@dataclass(frozen=True, slots=True)
class Change:
    """What one compare-and-set writes: the record's new value and the operations that
    go with it in the same multi (key znodes, version bumps of what it references)."""

    value: bytes | None  # None: delete the record
    operations: tuple[tuple[str, tuple[Any, ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class NewKey:
    """A key pair just made: the secret is shown once, to whoever asked for it."""

    user: str
    access_key: str
    secret_key: str = field(repr=False)


def user_path(name: str) -> str:
    return f"{USERS_PATH}/{name}"


def group_path(name: str) -> str:
    return f"{GROUPS_PATH}/{name}"


def policy_path(name: str) -> str:
    return f"{POLICIES_PATH}/{name}"


def key_path(access_key: str) -> str:
    return f"{KEYS_PATH}/{access_key}"


class UserStore:
    """Users, groups and identity policies on one ZooKeeper session. `cluster_key` is
    needed by the operations that seal a secret (adding a user, rotating its key)."""

    def __init__(
        self,
        zk: ZooKeeperClient,
        cluster_key: ClusterKey | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.zk = zk
        self.cluster_key = cluster_key
        self.clock = clock
        self.sleep = sleep

    async def ensure_layout(self) -> None:
        for path in (USERS_PATH, GROUPS_PATH, POLICIES_PATH, KEYS_PATH):
            await self.zk.ensure_path(path)

    # ------------------------------------------------------------------ reads

    async def get_user(self, name: str) -> tuple[UserRecord, int]:
        check_name("user", name)
        try:
            versioned = await self.zk.get(user_path(name))
        except NoNodeError:
            raise NoSuchUserError(f"no user named {name}") from None
        return UserRecord.decode(versioned.value), versioned.version

    async def get_group(self, name: str) -> tuple[GroupRecord, int]:
        check_name("group", name)
        try:
            versioned = await self.zk.get(group_path(name))
        except NoNodeError:
            raise NoSuchGroupError(f"no group named {name}") from None
        return GroupRecord.decode(versioned.value), versioned.version

    async def get_policy(self, name: str) -> str:
        """The document's text (a built-in one as JSON)."""
        if name in BUILTIN_POLICIES:
            return json.dumps(BUILTIN_POLICIES[name], indent=2)
        check_name("policy", name)
        try:
            return (await self.zk.get(policy_path(name))).value.decode()
        except NoNodeError:
            raise NoSuchPolicyError(f"no policy named {name}") from None

    async def list_users(self) -> list[UserRecord]:
        return [r for _, r in await self._records(USERS_PATH, UserRecord.decode)]

    async def list_groups(self) -> list[GroupRecord]:
        return [r for _, r in await self._records(GROUPS_PATH, GroupRecord.decode)]

    async def list_policies(self) -> list[tuple[str, bool]]:
        """(name, built in) of every policy, sorted by name."""
        try:
            stored = await self.zk.get_children(POLICIES_PATH)
        except NoNodeError:
            stored = []
        names = [(n, True) for n in BUILTIN_POLICIES] + [(n, False) for n in stored]
        return sorted(names)

    async def group_members(self, group: str) -> list[str]:
        await self.get_group(group)
        return [u.name for u in await self.list_users() if group in u.groups]

    async def _records(self, parent: str, decode: Callable[[bytes], Any]) -> list[tuple[str, Any]]:
        try:
            names = await self.zk.get_children(parent)
        except NoNodeError:
            return []
        records = []
        for name in sorted(names):
            try:
                raw = (await self.zk.get(f"{parent}/{name}")).value
            except NoNodeError:
                continue  # removed meanwhile
            try:
                records.append((name, decode(raw)))
            except ValueError as e:
                logger.warning(
                    "event=access_record_unreadable path=%s/%s error=%s", parent, name, e
                )
        return records

    # ------------------------------------------------------------------ users

    async def add_user(
        self,
        name: str,
        access_key: str | None = None,
        secret_key: str | None = None,
        policies: Sequence[str] = (),
        groups: Sequence[str] = (),
    ) -> NewKey:
        """A new user with one key pair (generated unless given), enabled."""
        check_name("user", name)
        if (access_key is None) != (secret_key is None):
            raise InvalidNameError("give both the access key and the secret key, or neither")
        pair = NewKey(
            name,
            check_access_key(access_key) if access_key else new_access_key(),
            check_secret_key(secret_key) if secret_key else new_secret_key(),
        )
        policies, groups = tuple(dict.fromkeys(policies)), tuple(dict.fromkeys(groups))
        self._check_counts("user", policies, groups)
        await self.ensure_layout()
        if len(await self.zk.get_children(USERS_PATH)) >= USERS_MAX:
            raise LimitExceededError(f"the cluster holds {USERS_MAX} users already")
        for _ in range(CAS_ATTEMPTS_MAX):
            now = self.clock()
            key = AccessKey(pair.access_key, self._seal(pair, name), now)
            record = UserRecord(name, ENABLED, (key,), policies, groups, now)
            references = await self._references(policies, groups)
            operations = [
                ("create", (user_path(name), record.encode())),
                ("create", (key_path(pair.access_key), name.encode())),
                *references,
            ]
            try:
                await self.zk.multi(operations)
            except NodeExistsError as e:
                if getattr(e, "operation_index", 0) == 0:
                    raise UserExistsError(f"user {name} exists already") from None
                raise AccessKeyInUseError(f"access key {pair.access_key} is in use") from None
            except (BadVersionError, NoNodeError):
                await self._backoff()
                continue
            logger.info("event=access_user_added user=%s access_key=%s", name, pair.access_key)
            return pair
        raise AccessBusyError(f"user {name}: its groups or policies kept changing")

    async def remove_user(self, name: str) -> None:
        async def change(record: UserRecord) -> Change:
            # A key znode found missing (removed by hand) must not keep the user forever.
            deletes = [
                ("delete", (key_path(k.access_key), -1))
                for k in record.access_keys
                if await self.zk.exists(key_path(k.access_key)) is not None
            ]
            return Change(None, tuple(deletes))

        await self._update_user(name, change)
        logger.info("event=access_user_removed user=%s", name)

    async def rotate_key(self, name: str, grace_s: float = 0.0) -> NewKey:
        """A new key pair for the user; the old key goes at once, or with `grace_s` keeps
        working that long."""
        if not 0 <= grace_s <= GRACE_S_MAX:
            raise LimitExceededError(f"grace {grace_s:g} s: must be 0..{GRACE_S_MAX:g}")
        pair = NewKey(name, new_access_key(), new_secret_key())
        sealed = self._seal(pair, name)

        def change(record: UserRecord) -> Change:
            now = self.clock()
            live, expired = pruned_keys(record.access_keys, now)
            keys, dropped = rotated_keys(
                live, AccessKey(pair.access_key, sealed, now), now, grace_s
            )
            operations: list[tuple[str, tuple[Any, ...]]] = [
                ("create", (key_path(pair.access_key), name.encode()))
            ]
            operations += [("delete", (key_path(k.access_key), -1)) for k in (*expired, *dropped)]
            return Change(replace(record, access_keys=keys).encode(), tuple(operations))

        await self._update_user(name, change)
        logger.info(
            "event=access_key_rotated user=%s access_key=%s grace_s=%g",
            name,
            pair.access_key,
            grace_s,
        )
        return pair

    async def set_enabled(self, name: str, enabled: bool) -> None:
        status = ENABLED if enabled else DISABLED
        await self._update_user(name, lambda r: self._plain(replace(r, status=status)))
        logger.info("event=access_user_status user=%s status=%s", name, status)

    async def attach_user_policies(self, name: str, policies: Sequence[str]) -> None:
        async def change(record: UserRecord) -> Change:
            merged = with_names(record.policies, policies)
            self._check_counts("user", merged, record.groups)
            bumps = await self._references(policies, ())
            return self._plain(replace(record, policies=merged), bumps)

        await self._update_user(name, change)

    async def detach_user_policies(self, name: str, policies: Sequence[str]) -> None:
        def change(record: UserRecord) -> Change:
            missing = [p for p in policies if p not in record.policies]
            if missing:
                raise NoSuchPolicyError(f"user {name} has no policy {', '.join(missing)}")
            return self._plain(replace(record, policies=with_names(record.policies, (), policies)))

        await self._update_user(name, change)

    def _plain(self, record: UserRecord, operations: Sequence[Any] = ()) -> Change:
        """A change of a user that also drops its expired keys (and their znodes)."""
        live, expired = pruned_keys(record.access_keys, self.clock())
        deletes = [("delete", (key_path(k.access_key), -1)) for k in expired]
        return Change(replace(record, access_keys=live).encode(), (*operations, *deletes))

    async def _update_user(
        self, name: str, change: Callable[[UserRecord], Change | Awaitable[Change]]
    ) -> None:
        path = user_path(name)
        for _ in range(CAS_ATTEMPTS_MAX):
            record, version = await self.get_user(name)
            outcome = change(record)
            planned = await outcome if isinstance(outcome, Awaitable) else outcome
            if planned.value is None:
                first: tuple[str, tuple[Any, ...]] = ("delete", (path, version))
            else:
                first = ("set", (path, planned.value, version))
            try:
                await self.zk.multi([first, *planned.operations])
            except (BadVersionError, NoNodeError):
                await self._backoff()  # changed, or a reference went: look again
                continue
            except NodeExistsError:
                raise AccessKeyInUseError("the new access key is in use; try again") from None
            return
        raise AccessBusyError(f"user {name} kept changing")

    def _seal(self, pair: NewKey, name: str) -> str:
        if self.cluster_key is None:
            raise AccessError("no cluster key: secret keys are sealed under it")
        return seal_secret(self.cluster_key, pair.secret_key, name, pair.access_key)

    # ------------------------------------------------------------------ groups

    async def add_group(self, name: str, policies: Sequence[str] = ()) -> None:
        check_name("group", name)
        self._check_counts("group", policies, ())
        await self.ensure_layout()
        if len(await self.zk.get_children(GROUPS_PATH)) >= GROUPS_MAX:
            raise LimitExceededError(f"the cluster holds {GROUPS_MAX} groups already")
        record = GroupRecord(name, tuple(policies), self.clock())
        for _ in range(CAS_ATTEMPTS_MAX):
            references = await self._references(policies, ())
            try:
                await self.zk.multi([("create", (group_path(name), record.encode())), *references])
            except NodeExistsError:
                raise GroupExistsError(f"group {name} exists already") from None
            except (BadVersionError, NoNodeError):
                await self._backoff()
                continue
            logger.info("event=access_group_added group=%s", name)
            return
        raise AccessBusyError(f"group {name}: its policies kept changing")

    async def remove_group(self, name: str) -> None:
        """Remove a group that has no members (EntityInUseError names them)."""
        for _ in range(CAS_ATTEMPTS_MAX):
            _, version = await self.get_group(name)
            members = [u.name for u in await self.list_users() if name in u.groups]
            if members:
                raise EntityInUseError(f"group {name} has members: {', '.join(members)}")
            try:
                await self.zk.delete(group_path(name), version)
            except BadVersionError:
                await self._backoff()  # a member or a policy came meanwhile
                continue
            except NoNodeError:
                raise NoSuchGroupError(f"no group named {name}") from None
            logger.info("event=access_group_removed group=%s", name)
            return
        raise AccessBusyError(f"group {name} kept changing")

    async def add_members(self, group: str, users: Sequence[str]) -> None:
        for user in users:

            async def change(record: UserRecord) -> Change:
                merged = with_names(record.groups, (group,))
                self._check_counts("user", record.policies, merged)
                return self._plain(
                    replace(record, groups=merged), await self._references((), (group,))
                )

            await self._update_user(user, change)

    async def remove_members(self, group: str, users: Sequence[str]) -> None:
        await self.get_group(group)
        for user in users:

            def change(record: UserRecord, user: str = user) -> Change:
                if group not in record.groups:
                    raise NoSuchGroupError(f"user {user} is not in group {group}")
                return self._plain(replace(record, groups=with_names(record.groups, (), (group,))))

            await self._update_user(user, change)

    async def set_group_policies(
        self, name: str, added: Sequence[str] = (), removed: Sequence[str] = ()
    ) -> None:
        for _ in range(CAS_ATTEMPTS_MAX):
            record, version = await self.get_group(name)
            missing = [p for p in removed if p not in record.policies]
            if missing:
                raise NoSuchPolicyError(f"group {name} has no policy {', '.join(missing)}")
            policies = with_names(record.policies, added, removed)
            self._check_counts("group", policies, ())
            operations = [
                ("set", (group_path(name), replace(record, policies=policies).encode(), version)),
                *await self._references(added, ()),
            ]
            try:
                await self.zk.multi(operations)
            except (BadVersionError, NoNodeError):
                await self._backoff()
                continue
            return
        raise AccessBusyError(f"group {name} kept changing")

    # ------------------------------------------------------------------ policies

    async def put_policy(self, name: str, text: str) -> bool:
        """Store a policy document (created, or replaced: True when it was new)."""
        check_name("policy", name)
        if name in BUILTIN_POLICIES:
            raise InvalidNameError(f"policy {name} is built in: it cannot be changed")
        check_policy_document(name, text)
        await self.ensure_layout()
        try:
            await self.zk.set(policy_path(name), text.encode())
        except NoNodeError:
            pass
        else:
            logger.info("event=access_policy_replaced policy=%s", name)
            return False
        if len(await self.zk.get_children(POLICIES_PATH)) >= POLICIES_MAX:
            raise LimitExceededError(f"the cluster holds {POLICIES_MAX} policies already")
        try:
            await self.zk.create(policy_path(name), text.encode())
        except NodeExistsError:
            await self.zk.set(policy_path(name), text.encode())  # created meanwhile
            return False
        logger.info("event=access_policy_added policy=%s", name)
        return True

    async def remove_policy(self, name: str) -> None:
        """Remove a policy nothing references (EntityInUseError names who does)."""
        if name in BUILTIN_POLICIES:
            raise InvalidNameError(f"policy {name} is built in: it cannot be removed")
        check_name("policy", name)
        for _ in range(CAS_ATTEMPTS_MAX):
            try:
                version = (await self.zk.get(policy_path(name))).version
            except NoNodeError:
                raise NoSuchPolicyError(f"no policy named {name}") from None
            holders = [f"user {u.name}" for u in await self.list_users() if name in u.policies]
            holders += [f"group {g.name}" for g in await self.list_groups() if name in g.policies]
            if holders:
                raise EntityInUseError(f"policy {name} is attached to {', '.join(holders)}")
            try:
                await self.zk.delete(policy_path(name), version)
            except BadVersionError:
                await self._backoff()  # attached, or replaced, meanwhile
                continue
            except NoNodeError:
                raise NoSuchPolicyError(f"no policy named {name}") from None
            logger.info("event=access_policy_removed policy=%s", name)
            return
        raise AccessBusyError(f"policy {name} kept changing")

    # ------------------------------------------------------------------ plumbing

    @staticmethod
    def _check_counts(kind: str, policies: Sequence[str], groups: Sequence[str]) -> None:
        for policy in policies:
            if policy not in BUILTIN_POLICIES:
                check_name("policy", policy)
        for group in groups:
            check_name("group", group)
        if len(policies) > POLICIES_PER_ENTITY_MAX:
            raise LimitExceededError(f"a {kind} holds at most {POLICIES_PER_ENTITY_MAX} policies")
        if len(groups) > GROUPS_PER_USER_MAX:
            raise LimitExceededError(f"a user is in at most {GROUPS_PER_USER_MAX} groups")

    async def _references(
        self, policies: Iterable[str], groups: Iterable[str]
    ) -> list[tuple[str, tuple[Any, ...]]]:
        """Version bumps of the stored policies and groups named (see the module
        docstring); NoSuchPolicyError / NoSuchGroupError for one that does not exist."""
        bumps: list[tuple[str, tuple[Any, ...]]] = []
        for policy in dict.fromkeys(policies):
            if policy in BUILTIN_POLICIES:
                continue
            try:
                versioned = await self.zk.get(policy_path(policy))
            except NoNodeError:
                raise NoSuchPolicyError(f"no policy named {policy}") from None
            bumps.append(("set", (policy_path(policy), versioned.value, versioned.version)))
        for group in dict.fromkeys(groups):
            try:
                versioned = await self.zk.get(group_path(group))
            except NoNodeError:
                raise NoSuchGroupError(f"no group named {group}") from None
            bumps.append(("set", (group_path(group), versioned.value, versioned.version)))
        return bumps

    async def _backoff(self) -> None:
        await self.sleep(_JITTER.uniform(0, CAS_BACKOFF_S_MAX))
