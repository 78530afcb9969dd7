"""The user store against a real ZooKeeper: every change is one compare-and-set, keys are
unique across users, and nothing is left half done."""

from __future__ import annotations

import asyncio
import json

import pytest
from kazoo.client import KazooClient

from blobstore.access.user_records import (
    KEYS_PATH,
    AccessError,
    AccessKeyInUseError,
    EntityInUseError,
    GroupRecord,
    InvalidNameError,
    MalformedPolicyError,
    NoSuchGroupError,
    NoSuchPolicyError,
    NoSuchUserError,
    UserExistsError,
    UserRecord,
)
from blobstore.access.users import UserStore, key_path, user_path
from blobstore.runtime.sealing import open_secret
from tests.access.helpers import new_cluster_key, run_with_store, session

POLICY = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/*"}
        ],
    }
)


def _user(zk_client: KazooClient, name: str) -> UserRecord:
    return UserRecord.decode(zk_client.get(user_path(name))[0])


def test_add_list_and_remove_users(zk_connect: str, zk_client: KazooClient) -> None:
    cluster_key = new_cluster_key()

    async def body(store: UserStore) -> None:
        alice = await store.add_user("alice", policies=["readwrite"])
        bob = await store.add_user("bob", "bob-access-key", "bob-secret-key-123")
        assert bob.access_key == "bob-access-key"
        assert [u.name for u in await store.list_users()] == ["alice", "bob"]
        record, _ = await store.get_user("alice")
        assert record.enabled and record.policies == ("readwrite",)
        sealed = record.access_keys[0].sealed_secret
        assert alice.secret_key not in sealed
        assert open_secret(cluster_key, sealed, "alice", alice.access_key) == alice.secret_key
        with pytest.raises(UserExistsError):
            await store.add_user("alice")
        # A key another user holds: refused, and no user is left behind.
        with pytest.raises(AccessKeyInUseError):
            await store.add_user("carol", "bob-access-key", "another-secret-1")
        with pytest.raises(NoSuchUserError):
            await store.get_user("carol")
        await store.remove_user("bob")
        with pytest.raises(NoSuchUserError):
            await store.remove_user("bob")
        assert [u.name for u in await store.list_users()] == ["alice"]

    run_with_store(zk_connect, cluster_key, body)
    assert sorted(zk_client.get_children(KEYS_PATH)) == [
        _user(zk_client, "alice").access_keys[0].access_key
    ]
    assert (
        zk_client.get(key_path(_user(zk_client, "alice").access_keys[0].access_key))[0] == b"alice"
    )
    raw = zk_client.get(user_path("alice"))[0].decode()
    assert "secret_key" not in raw


def test_a_sealing_operation_needs_the_cluster_key(zk_connect: str) -> None:
    async def body(store: UserStore) -> None:
        with pytest.raises(AccessError, match="no cluster key"):
            await store.add_user("alice")

    run_with_store(zk_connect, None, body)


def test_bad_input_is_refused_before_anything_is_written(
    zk_connect: str, zk_client: KazooClient
) -> None:
    async def body(store: UserStore) -> None:
        with pytest.raises(InvalidNameError):
            await store.add_user("a/b")
        with pytest.raises(InvalidNameError, match="both"):
            await store.add_user("alice", access_key="only-the-key")
        with pytest.raises(NoSuchPolicyError):
            await store.add_user("alice", policies=["no-such-policy"])
        with pytest.raises(NoSuchGroupError):
            await store.add_user("alice", groups=["no-such-group"])

    run_with_store(zk_connect, new_cluster_key(), body)
    assert not zk_client.exists(user_path("alice"))
    assert zk_client.get_children(KEYS_PATH) == []


def test_rotation_replaces_the_key_at_once_or_after_a_grace(
    zk_connect: str, zk_client: KazooClient
) -> None:
    now = [1000.0]
    cluster_key = new_cluster_key()

    async def body(store: UserStore) -> tuple[str, str, str]:
        store.clock = lambda: now[0]
        first = await store.add_user("alice")
        second = await store.rotate_key("alice")  # the first key goes at once
        record, _ = await store.get_user("alice")
        assert [k.access_key for k in record.access_keys] == [second.access_key]
        third = await store.rotate_key("alice", grace_s=60)
        record, _ = await store.get_user("alice")
        assert [(k.access_key, k.expires) for k in record.access_keys] == [
            (second.access_key, 1060.0),
            (third.access_key, None),
        ]
        assert (
            open_secret(cluster_key, record.access_keys[1].sealed_secret, "alice", third.access_key)
            == third.secret_key
        )
        now[0] = 1061.0
        await store.set_enabled("alice", True)  # any change drops the expired key
        record, _ = await store.get_user("alice")
        assert [k.access_key for k in record.access_keys] == [third.access_key]
        return first.access_key, second.access_key, third.access_key

    first, second, third = run_with_store(zk_connect, cluster_key, body)
    assert zk_client.get_children(KEYS_PATH) == [third]


def test_disable_enable_attach_and_detach(zk_connect: str, zk_client: KazooClient) -> None:
    async def body(store: UserStore) -> None:
        await store.add_user("alice")
        await store.set_enabled("alice", False)
        assert not (await store.get_user("alice"))[0].enabled
        await store.set_enabled("alice", True)
        assert await store.put_policy("team-read", POLICY) is True
        assert await store.put_policy("team-read", POLICY) is False  # replaced
        await store.attach_user_policies("alice", ["readonly", "team-read"])
        await store.attach_user_policies("alice", ["readonly"])  # once only
        with pytest.raises(NoSuchPolicyError):
            await store.attach_user_policies("alice", ["nope"])
        assert (await store.get_user("alice"))[0].policies == ("readonly", "team-read")
        with pytest.raises(EntityInUseError, match="user alice"):
            await store.remove_policy("team-read")
        with pytest.raises(InvalidNameError, match="built in"):
            await store.remove_policy("readonly")
        with pytest.raises(InvalidNameError, match="built in"):
            await store.put_policy("admin", POLICY)
        with pytest.raises(MalformedPolicyError):
            await store.put_policy("broken", '{"Statement": "no"}')
        await store.detach_user_policies("alice", ["team-read"])
        with pytest.raises(NoSuchPolicyError, match="has no policy"):
            await store.detach_user_policies("alice", ["team-read"])
        await store.remove_policy("team-read")
        with pytest.raises(NoSuchPolicyError):
            await store.get_policy("team-read")
        assert json.loads(await store.get_policy("readwrite"))["Statement"][0]["Action"] == ["s3:*"]

    run_with_store(zk_connect, new_cluster_key(), body)
    assert _user(zk_client, "alice").policies == ("readonly",)


def test_groups_and_their_members(zk_connect: str) -> None:
    async def body(store: UserStore) -> None:
        await store.add_user("alice")
        await store.add_user("bob")
        await store.add_group("team", ["readonly"])
        await store.add_members("team", ["alice", "bob"])
        assert await store.group_members("team") == ["alice", "bob"]
        with pytest.raises(EntityInUseError, match="alice, bob"):
            await store.remove_group("team")
        await store.set_group_policies("team", added=["writeonly"], removed=["readonly"])
        assert (await store.get_group("team"))[0].policies == ("writeonly",)
        await store.remove_members("team", ["alice", "bob"])
        with pytest.raises(NoSuchGroupError, match="not in group"):
            await store.remove_members("team", ["alice"])
        await store.remove_group("team")
        with pytest.raises(NoSuchGroupError):
            await store.add_members("team", ["alice"])

    run_with_store(zk_connect, new_cluster_key(), body)


def test_two_admins_racing_lose_no_update(zk_connect: str) -> None:
    """Two sessions attach ten policies each to the same user at once: all twenty stay."""
    cluster_key = new_cluster_key()
    policies = [f"p{i:02d}" for i in range(20)]

    async def main() -> tuple[str, ...]:
        async with session(zk_connect) as zk_a, session(zk_connect) as zk_b:
            a, b = UserStore(zk_a, cluster_key), UserStore(zk_b, cluster_key)
            for name in policies:
                await a.put_policy(name, POLICY)
            await a.add_user("alice")

            async def attach(store: UserStore, names: list[str]) -> None:
                for name in names:
                    await store.attach_user_policies("alice", [name])

            await asyncio.gather(attach(a, policies[::2]), attach(b, policies[1::2]))
            return (await a.get_user("alice"))[0].policies

    attached = asyncio.run(asyncio.wait_for(main(), 120))
    assert sorted(attached) == policies


def test_two_admins_adding_one_name_make_one_user(zk_connect: str) -> None:
    cluster_key = new_cluster_key()

    async def main() -> list[object]:
        async with session(zk_connect) as zk_a, session(zk_connect) as zk_b:
            a, b = UserStore(zk_a, cluster_key), UserStore(zk_b, cluster_key)
            await a.ensure_layout()
            return list(
                await asyncio.gather(
                    a.add_user("alice"), b.add_user("alice"), return_exceptions=True
                )
            )

    outcomes = asyncio.run(asyncio.wait_for(main(), 60))
    assert sum(isinstance(o, UserExistsError) for o in outcomes) == 1, outcomes
    assert sum(not isinstance(o, BaseException) for o in outcomes) == 1, outcomes


class _RacingStore(UserStore):
    """A store whose scan for references lets another admin act right after it."""

    def __init__(self, *args: object, meanwhile: object) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.meanwhile = meanwhile
        self.scans = 0

    async def list_users(self) -> list[UserRecord]:
        users = await super().list_users()
        self.scans += 1
        if self.scans == 1:
            await self.meanwhile()  # type: ignore[operator]
        return users


def test_a_policy_attached_during_its_removal_is_not_removed(zk_connect: str) -> None:
    """1. Admin A scans for holders of `p`: none. 2. Admin B attaches `p` to alice (the
    attach bumps `p`'s version). 3. A's delete at the version it read fails; A scans
    again, finds alice, and refuses."""
    cluster_key = new_cluster_key()

    async def main() -> int:
        async with session(zk_connect) as zk_a, session(zk_connect) as zk_b:
            b = UserStore(zk_b, cluster_key)
            await b.put_policy("p", POLICY)
            await b.add_user("alice")
            a = _RacingStore(
                zk_a, cluster_key, meanwhile=lambda: b.attach_user_policies("alice", ["p"])
            )
            with pytest.raises(EntityInUseError, match="user alice"):
                await a.remove_policy("p")
            assert (await b.get_user("alice"))[0].policies == ("p",)
            assert await b.get_policy("p") == POLICY
            return a.scans

    assert asyncio.run(asyncio.wait_for(main(), 60)) == 2


def test_a_member_added_during_a_group_removal_keeps_the_group(zk_connect: str) -> None:
    cluster_key = new_cluster_key()

    async def main() -> GroupRecord:
        async with session(zk_connect) as zk_a, session(zk_connect) as zk_b:
            b = UserStore(zk_b, cluster_key)
            await b.add_group("team")
            await b.add_user("alice")
            a = _RacingStore(zk_a, cluster_key, meanwhile=lambda: b.add_members("team", ["alice"]))
            with pytest.raises(EntityInUseError, match="alice"):
                await a.remove_group("team")
            return (await b.get_group("team"))[0]

    assert asyncio.run(asyncio.wait_for(main(), 60)).name == "team"


def test_a_user_whose_key_znode_was_removed_by_hand_can_be_removed(
    zk_connect: str, zk_client: KazooClient
) -> None:
    cluster_key = new_cluster_key()
    pair = run_with_store(zk_connect, cluster_key, lambda store: store.add_user("alice"))
    zk_client.delete(key_path(pair.access_key))

    async def body(store: UserStore) -> None:
        await store.remove_user("alice")
        assert await store.list_users() == []

    run_with_store(zk_connect, cluster_key, body)
