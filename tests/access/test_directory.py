"""A gateway's watched view of the users: every change an admin makes is seen within
seconds, by watches, without a restart; also after the session expired."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState

from blobstore.access.directory import BootstrapUser, Directory
from blobstore.access.user_records import ENABLED, USERS_PATH, AccessKey, UserRecord
from blobstore.access.users import UserStore, key_path, user_path
from blobstore.runtime.errors import UsageError
from blobstore.runtime.sealing import (
    CLUSTER_KEY_ENV,
    CLUSTER_KEY_FILE_ENV,
    ClusterKey,
    load_cluster_key,
    seal_secret,
    write_cluster_key_file,
)
from blobstore.runtime.zk import ZooKeeperClient
from s3api.config import User
from s3api.identities import Identities
from tests.access.helpers import new_cluster_key, session
from tests.waiting import wait_until, wait_until_async

SEEN_S = 5.0  # "within seconds"
POLICY = json.dumps({"Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]})


def _run_with_directory(
    zk_connect: str,
    cluster_key: ClusterKey | None,
    body: Callable[[Directory, UserStore], Awaitable[None]],
    bootstrap: tuple[BootstrapUser, ...] = (),
    session_timeout_s: float = 15.0,
) -> None:
    """`body(directory, store)`: the directory on its own session, the store on another
    (as a gateway and `blobstore admin`)."""

    async def main() -> None:
        gateway_zk = ZooKeeperClient(zk_connect, session_timeout_s=session_timeout_s)
        await gateway_zk.start()
        directory = Directory(cluster_key, bootstrap)
        try:
            async with session(zk_connect) as admin_zk:
                await directory.start(gateway_zk)
                await asyncio.wait_for(body(directory, UserStore(admin_zk, cluster_key)), 120)
        finally:
            await directory.stop()
            await gateway_zk.stop()

    asyncio.run(main())


async def _seen(predicate: Callable[[], object], what: str) -> None:
    await wait_until_async(predicate, SEEN_S, message=f"the directory saw {what}")


def test_users_added_changed_and_removed_are_seen_within_seconds(zk_connect: str) -> None:
    async def body(directory: Directory, store: UserStore) -> None:
        assert directory.lookup("BSNOBODY") is None  # started on an empty cluster
        alice = await store.add_user("alice", policies=["readonly"])
        await _seen(lambda: directory.lookup(alice.access_key), "a new user")
        entry = directory.lookup(alice.access_key)
        assert entry is not None
        assert (entry.user, entry.secret, entry.enabled) == ("alice", alice.secret_key, True)
        assert entry.policies == ("readonly",) and not entry.bootstrap

        await store.set_enabled("alice", False)
        await _seen(lambda: not directory.lookup(alice.access_key).enabled, "a disabled user")  # type: ignore[union-attr]
        await store.set_enabled("alice", True)
        await _seen(lambda: directory.lookup(alice.access_key).enabled, "an enabled user")  # type: ignore[union-attr]

        rotated = await store.rotate_key("alice")
        await _seen(lambda: directory.lookup(rotated.access_key), "a rotated key")
        assert directory.lookup(alice.access_key) is None
        assert directory.lookup(rotated.access_key).secret == rotated.secret_key  # type: ignore[union-attr]

        await store.remove_user("alice")
        await _seen(lambda: directory.lookup(rotated.access_key) is None, "a removed user")
        assert directory.user("alice") is None

    _run_with_directory(zk_connect, new_cluster_key(), body)


def test_a_key_in_its_grace_period_stops_at_its_time(zk_connect: str) -> None:
    now = [time.time()]

    async def body(directory: Directory, store: UserStore) -> None:
        directory.clock = lambda: now[0]
        old = await store.add_user("alice")
        new = await store.rotate_key("alice", grace_s=60)
        await _seen(lambda: directory.lookup(new.access_key), "the new key")
        entry = directory.lookup(old.access_key)
        assert entry is not None and entry.expires is not None
        now[0] = entry.expires
        assert directory.lookup(old.access_key) is None
        assert directory.lookup(new.access_key) is not None

    _run_with_directory(zk_connect, new_cluster_key(), body)


def test_group_and_policy_changes_are_seen(zk_connect: str) -> None:
    async def body(directory: Directory, store: UserStore) -> None:
        alice = await store.add_user("alice", policies=["readonly"])
        await store.put_policy("team-policy", POLICY)
        await store.add_group("team", ["team-policy"])
        await store.add_members("team", ["alice"])
        await _seen(
            lambda: directory.lookup(alice.access_key).policies == ("readonly", "team-policy"),  # type: ignore[union-attr]
            "the group's policy",
        )
        assert directory.lookup(alice.access_key).groups == ("team",)  # type: ignore[union-attr]
        assert directory.policy_document("team-policy") == POLICY
        await store.set_group_policies("team", added=["writeonly"])
        await _seen(
            lambda: "writeonly" in directory.lookup(alice.access_key).policies,  # type: ignore[union-attr]
            "a policy attached to the group",
        )
        replaced = POLICY.replace("s3:*", "s3:GetObject")
        await store.put_policy("team-policy", replaced)
        await _seen(
            lambda: directory.policy_document("team-policy") == replaced, "a replaced policy"
        )
        assert json.loads(directory.policy_document("readonly") or "")["Statement"]

    _run_with_directory(zk_connect, new_cluster_key(), body)


def test_bootstrap_users_are_admins_and_cannot_be_taken_over(zk_connect: str) -> None:
    bootstrap = (BootstrapUser("BOOTKEY", "boot-secret-123", "root"),)

    async def body(directory: Directory, store: UserStore) -> None:
        entry = directory.lookup("BOOTKEY")
        assert entry is not None and entry.bootstrap and entry.policies == ("admin",)
        assert entry.secret == "boot-secret-123" and entry.user == "root"
        # A stored user with the bootstrap user's name would own its buckets: not served.
        impostor = await store.add_user("root")
        other = await store.add_user("other")
        await _seen(lambda: directory.lookup(other.access_key), "another user")
        assert directory.lookup(impostor.access_key) is None
        # A stored key equal to a bootstrap key does not replace the bootstrap user.
        await store.add_user("shadow", "BOOTKEY", "shadow-secret-1")
        await _seen(lambda: directory.user("shadow"), "the shadow user")
        assert directory.lookup("BOOTKEY").user == "root"  # type: ignore[union-attr]

    _run_with_directory(zk_connect, new_cluster_key(), body, bootstrap)


def test_without_the_cluster_key_stored_users_are_not_served(
    zk_connect: str, caplog: pytest.LogCaptureFixture
) -> None:
    cluster_key = new_cluster_key()

    async def add(store: UserStore) -> str:
        return (await store.add_user("alice")).access_key

    async def setup() -> str:
        async with session(zk_connect) as zk:
            return await add(UserStore(zk, cluster_key))

    access_key = asyncio.run(setup())

    async def body(directory: Directory, store: UserStore) -> None:
        assert directory.user("alice") is not None
        assert directory.lookup(access_key) is None

    _run_with_directory(zk_connect, None, body)
    assert "event=access_no_cluster_key users=1" in caplog.text

    async def other_key(directory: Directory, store: UserStore) -> None:
        assert directory.lookup(access_key) is None  # sealed under another key

    _run_with_directory(zk_connect, new_cluster_key(), other_key)
    assert "event=access_secret_unopened user=alice" in caplog.text


def test_changes_made_while_the_session_expired_are_seen(
    zk_connect: str, zk_client: KazooClient
) -> None:
    """The gateway's process freezes past its session timeout; meanwhile a user is
    added. The expired session fires every watch: everything is read again."""
    cluster_key = new_cluster_key()

    async def body(directory: Directory, store: UserStore) -> None:
        alice = await store.add_user("alice")
        await _seen(lambda: directory.lookup(alice.access_key), "alice")
        assert directory.zk is not None
        states: list[KazooState] = []
        directory.zk.add_state_listener(states.append)
        await directory.zk.create("/gateway-alive", b"", ephemeral=True)
        record = UserRecord(
            "bob",
            ENABLED,
            (AccessKey("BSBOB", seal_secret(cluster_key, "bob-secret-1", "bob", "BSBOB"), 1.0),),
        )

        def add_bob_once_expired() -> None:
            # Another admin, once the server has expired the frozen session (its
            # ephemeral znode is gone): no watch event of this write can reach it.
            wait_until(
                lambda: zk_client.exists("/gateway-alive") is None,
                30,
                message="the server expired the frozen session",
            )
            zk_client.create(user_path("bob"), record.encode())
            zk_client.create(key_path("BSBOB"), b"bob")

        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            # The whole loop is frozen meanwhile: no pings, no watch events.
            pool.submit(add_bob_once_expired).result(timeout=60)
        await wait_until_async(
            lambda: directory.lookup("BSBOB"), SEEN_S + 15, message="bob, after the expiry"
        )
        assert KazooState.LOST in states, states  # the session did expire
        assert directory.lookup("BSBOB").secret == "bob-secret-1"  # type: ignore[union-attr]
        assert directory.lookup(alice.access_key) is not None

    _run_with_directory(zk_connect, cluster_key, body, session_timeout_s=4.0)


def test_the_gateways_identities_refuse_disabled_users_and_hide_secrets(zk_connect: str) -> None:
    config_users = [User("BOOTKEY", "boot-secret-123", "root")]
    cluster_key = new_cluster_key()

    async def main() -> None:
        identities = Identities(
            config_users,
            Directory(cluster_key, [BootstrapUser("BOOTKEY", "boot-secret-123", "root")]),
        )
        assert identities.lookup_secret("BOOTKEY") == "boot-secret-123"  # before start
        async with session(zk_connect) as gateway_zk, session(zk_connect) as admin_zk:
            await identities.start(gateway_zk)
            try:
                store = UserStore(admin_zk, cluster_key)
                alice = await store.add_user("alice", policies=["readonly"])
                await _seen(lambda: identities.lookup_secret(alice.access_key), "alice")
                user = identities.user(alice.access_key)
                assert isinstance(user, User) and user.name == "alice"
                assert user.policies == ("readonly",) and not user.bootstrap
                assert alice.secret_key not in repr(user)
                root = identities.user("BOOTKEY")
                assert root.bootstrap and root.policies == ("admin",) and root.name == "root"
                await store.set_enabled("alice", False)
                await _seen(lambda: identities.lookup_secret(alice.access_key) is None, "disabled")
                assert identities.get(alice.access_key) is None
                with pytest.raises(KeyError):
                    identities.user(alice.access_key)
                assert identities.lookup_secret("BSUNKNOWN") is None
            finally:
                await identities.stop()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_the_gateway_reads_its_cluster_key_from_the_environment(tmp_path: Path) -> None:
    users = [User("BOOTKEY", "boot-secret-123", "root")]
    assert Identities.for_gateway(users, {}).directory.cluster_key is None
    key_file = tmp_path / "cluster.key"
    write_cluster_key_file(key_file)
    identities = Identities.for_gateway(users, {CLUSTER_KEY_FILE_ENV: str(key_file)})
    assert identities.directory.cluster_key == load_cluster_key(key_file)
    with pytest.raises(UsageError, match="BLOBSTORE_CLUSTER_KEY"):
        Identities.for_gateway(users, {CLUSTER_KEY_ENV: "short"})


def test_a_directory_starting_on_many_users_reads_them_all(
    zk_connect: str, zk_client: KazooClient
) -> None:
    cluster_key = new_cluster_key()
    count = 150  # a few read batches
    zk_client.ensure_path(USERS_PATH)
    transaction = zk_client.transaction()
    for index in range(count):
        name, access_key = f"user{index:03d}", f"BSKEY{index:03d}"
        sealed = seal_secret(cluster_key, f"secret-{index:03d}", name, access_key)
        record = UserRecord(name, ENABLED, (AccessKey(access_key, sealed, 1.0),))
        transaction.create(user_path(name), record.encode())
    assert all(r is not False and not isinstance(r, Exception) for r in transaction.commit())

    async def body(directory: Directory, store: UserStore) -> None:
        for index in range(count):
            entry = directory.lookup(f"BSKEY{index:03d}")
            assert entry is not None and entry.secret == f"secret-{index:03d}", index

    _run_with_directory(zk_connect, cluster_key, body)
